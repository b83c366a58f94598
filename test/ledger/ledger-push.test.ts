/**
 * The ledger pushes new payments to the service (server/ledger-client.ts): Ponder's live
 * query, fed by the database's LISTEN/NOTIFY, on PGlite and on PostgreSQL. A waiter is woken
 * by the push and finds its own payment in it, exactly as indexed; with no ledger to push, it
 * still wakes, on the polling fallback, and finds nothing it was not shown. (A stream pushes
 * changes, not its first result: the flows read the API when a wake was a poll.)
 */
import { randomBytes } from "node:crypto";
import { createServer, request as httpRequest, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { toHex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LedgerClient, type LedgerPayment } from "../../server/ledger-client.ts";
import { freePort, startLedger, waitForLedgerBlock, type Ledger } from "../../stack/ledger-process.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { IN_MEMORY } from "../../lib/ledger-config.ts";
import { freshAccounts, freshDatabase, leaseSharedChains, POSTGRES_URL, STACK_ON_PGLITE, tempDir, uniqueSchema, type SharedChains } from "../support/stack.ts";

for (const db of ["PGlite", "PostgreSQL"] as const) {
  describe(`ledger pushes on ${db}`, () => {
    // Leased chains (test/support/shared-chains.ts). The set's own ledger is on the PostgreSQL
    // server (in memory with STACK_DB=pglite): the suite reads that one where its database is
    // the one under test, and starts a ledger of its own on the other, instead of a third
    // Ponder process indexing the set's whole history again.
    let stack: SharedChains;
    let ledgerUrl: string;
    let ownLedger: Ledger | undefined;
    let celo: ChainActors;
    let drop: (() => Promise<void>) | undefined;
    const accounts = freshAccounts();
    const payer = accounts(11);
    /** BillPay keys a pull by its order id for good, and the chains outlive this suite: ids of this run's own. */
    const newOrderId = () => toHex(randomBytes(32));

    beforeAll(async () => {
      stack = await leaseSharedChains();
      await accounts.fund(stack.deployments);
      if ((db === "PGlite") === STACK_ON_PGLITE) {
        ledgerUrl = stack.ledgerUrl;
      } else {
        const database = db === "PostgreSQL" ? await freshDatabase("ledger_push", POSTGRES_URL) : undefined;
        drop = database?.drop;
        ownLedger = await startLedger({
          deploymentsFile: stack.deploymentsFile,
          databaseUrl: database?.url,
          // In memory, as `npm start`'s ledger is by default.
          pgliteDir: database ? undefined : IN_MEMORY,
          schema: uniqueSchema("ledger_push"),
          viewsSchema: uniqueSchema("ledger_push_views"),
          logTo: join(await tempDir("ledger-push"), "ponder.log"),
        });
        ledgerUrl = ownLedger.url;
      }
      celo = chainActors(stack.deployments, "CELO");
      await celo.approveAndAllow(payer, "USDC", 10_000_000n);
    });
    afterAll(async () => {
      await ownLedger?.stop();
      await stack?.close();
      await drop?.();
    });

    /**
     * The ledger takes live queries once its backfill is done, and a stream pushes changes
     * only: pay until the first push arrives, so the stream is known to be open.
     */
    async function untilPushing(client: LedgerClient) {
      for (let warm = 1n; !client.pushingNow; warm++) {
        expect(warm).toBeLessThan(60n);
        await celo.pull(newOrderId(), payer.address, "USDC", 1n);
        const deadline = Date.now() + 500;
        while (!client.pushingNow && Date.now() < deadline) await client.nextPayment();
      }
    }

    it("wakes a waiter with the new payment in the push, exactly as indexed", async () => {
      const client = new LedgerClient(ledgerUrl);
      try {
        await untilPushing(client);
        const orderId = newOrderId();
        const ours = (p: LedgerPayment) => p.rail === "pull" && p.orderId === orderId;
        expect(client.pushed(ours)).toBeUndefined();
        // A waiter is waiting from before the pull is sent until the payment is in hand: the push
        // that carries it wakes one (on a busy machine it can come before the pull's own receipt).
        const woken: string[] = [];
        const waiting = (async () => {
          while (!client.pushed(ours)) {
            expect(woken.length).toBeLessThan(200);
            woken.push(await client.nextPayment());
          }
        })();
        await celo.pull(orderId, payer.address, "USDC", 1_234_567n);
        await waiting;
        expect(woken).toContain("pushed");
        expect(client.pushingNow).toBe(true);
        const pushed = client.pushed(ours)!;
        const read = (await client.order(orderId)).payments[0]!;
        expect(pushed).toMatchObject({ amount: "1234567", payer: payer.address.toLowerCase(), token: celo.tokenAddress("USDC").toLowerCase(), chainId: 42220 });
        expect(pushed).toEqual(expect.objectContaining({ id: read.id, txHash: read.txHash, blockNumber: String(read.blockNumber), timestamp: String(read.timestamp) }));
      } finally {
        client.close();
      }
    });

    it("a stream that drops shows nothing it pushed before: a payment the ledger has since removed (a reorganisation) could be in it", async () => {
      const proxy = await cuttableProxy(ledgerUrl);
      const client = new LedgerClient(proxy.url);
      try {
        await untilPushing(client);
        const orderId = newOrderId();
        const ours = (p: LedgerPayment) => p.rail === "pull" && p.orderId === orderId;
        await celo.pull(orderId, payer.address, "USDC", 7_654_321n);
        await expect.poll(async () => client.pushed(ours) ?? (await client.nextPayment(), undefined), { timeout: 20_000, interval: 10 }).toBeDefined();
        // The stream goes (the ledger restarted, the network between): what it pushed stands for nothing now.
        proxy.cut();
        await expect.poll(async () => client.pushingNow && (await client.nextPayment(), true), { timeout: 20_000, interval: 10 }).toBe(false);
        expect(client.pushed(ours)).toBeUndefined(); // on the code before: the payment as last pushed
        // The read API still shows it, as the ledger holds it.
        expect((await client.order(orderId)).payments).toHaveLength(1);
      } finally {
        client.close();
        await proxy.close();
      }
    });

    it("falls back to polling when nothing pushes, and shows nothing it was not pushed", async () => {
      const client = new LedgerClient(`http://127.0.0.1:${await freePort()}`);
      try {
        expect(await client.nextPayment()).toBe("poll");
        expect(client.pushingNow).toBe(false);
        expect(client.pushed(() => true)).toBeUndefined();
      } finally {
        client.close();
      }
      await waitForLedgerBlock(ledgerUrl, 42220, await celo.publicClient.getBlockNumber());
    });
  });
}

/** An HTTP proxy in front of the ledger whose open responses (its live queries' streams) can be cut at once. */
async function cuttableProxy(target: string) {
  const open = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    open.add(res);
    res.on("close", () => open.delete(res));
    const upstream = httpRequest(new URL(req.url ?? "/", target), { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    res.on("close", () => upstream.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut: () => {
      for (const res of open) res.destroy();
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
