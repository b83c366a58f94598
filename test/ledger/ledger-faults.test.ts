/**
 * The ledger under the faults a real network has, on the real local chains: the ledger
 * (Ponder, supervised as `npm start` supervises it) reaches CELO through a JSON-RPC proxy
 * that hangs, cuts, mutes and holds what passes (test/support/rpc-proxy.ts); the service
 * watches it from beside. Each case ends on the ledger indexing what the chain did meanwhile,
 * and on who noticed. Nothing here is timed: a case that does not heal fails on its waits.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createClient, eq } from "@ponder/client";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { runAudit } from "../../server/audit/ledger.ts";
import { LedgerNotCaughtUp, waitForLedgerBlock } from "../../server/ledger-client.ts";
import * as schema from "../../ponder/ponder.schema.ts";
import { superviseLedger, type SupervisedLedger } from "../../stack/ledger-supervisor.ts";
import { startServiceStack, type ServiceStack } from "../../stack/service-stack.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { runScript } from "../support/processes.ts";
import { startRpcProxy, type RpcProxy } from "../support/rpc-proxy.ts";
import { freshDatabase, startTestChains } from "../support/stack.ts";
import { until } from "../support/until.ts";

const payer = hardhatAccount(7);

describe("the ledger under faults, on the real local chains", () => {
  let chains: Awaited<ReturnType<typeof startTestChains>>;
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let proxy: RpcProxy;
  let ledger: SupervisedLedger;
  let service: ServiceStack;
  let celo: ChainActors;
  const supervisorLines: string[] = [];
  const logFile = () => join(chains.dir, "ledger.log");

  const rpc = (method: string, params: unknown[] = []) => celo.publicClient.request({ method: method as never, params: params as never }) as Promise<unknown>;
  const head = () => celo.publicClient.getBlockNumber();
  const sql = () => createClient(`${ledger.url}/sql`, { schema }).db;

  /** A transfer into BillPay (the treasury's "other inflow"), and its block. */
  async function transferIn(amount = 1_000n) {
    return celo.transfer(payer, "USDC", celo.billPay as Address, amount);
  }
  /** Whether the ledger holds the transfer made in `txHash`. */
  async function indexed(txHash: Hex): Promise<boolean> {
    const rows = await sql().select().from(schema.treasuryTransfer).where(eq(schema.treasuryTransfer.txHash, txHash));
    return rows.length === 1;
  }
  /** The ledger reaches the chain's head as it is now, and holds `txHash`. */
  async function caughtUpWith(txHash: Hex) {
    await waitForLedgerBlock(ledger.url, celo.deployment.chainId, await head(), 60_000);
    expect(await indexed(txHash)).toBe(true);
  }
  const ready = async () => {
    const res = await fetch(`${service.urls.service}/readyz`);
    return { status: res.status, body: (await res.json()) as { ok: boolean; ledger: Array<{ chain: string; state: string; problem?: string }> } };
  };

  beforeAll(async () => {
    chains = await startTestChains();
    celo = chainActors(chains.deployments, "CELO");
    proxy = await startRpcProxy(chains.rpcUrls.CELO);
    // On PostgreSQL, where a deployed ledger keeps its state: the faults here are the
    // network's, and a restarted ledger resumes from what it wrote (an in-memory PGlite
    // would start empty and index everything again, in a WASM Postgres built anew).
    database = await freshDatabase("ledger_faults");
    ledger = await superviseLedger({
      deploymentsFile: chains.deploymentsFile,
      databaseUrl: database.url,
      logTo: logFile(),
      env: { CELO_RPC_URL: proxy.url, CELO_WS_URL: proxy.wsUrl },
      // Long enough that a ten-second hang (and the checks made during it) is Ponder's own to heal, not a restart's.
      bounds: { stallMs: 60_000, maxLagBlocks: 10 },
      log: (line) => supervisorLines.push(line),
    });
    service = await startServiceStack({
      deployments: chains.deployments,
      env: { LEDGER_URL: ledger.url, LEDGER_STALL_SECONDS: "2", LEDGER_WATCH_INTERVAL_MS: "250", LOG_REQUESTS: "0" },
    });
    await waitForLedgerBlock(ledger.url, celo.deployment.chainId, await head(), 60_000);
    await until(async () => (await ready()).status === 200, "the service's readiness (its watch has looked since the ledger caught up)");
  });

  afterAll(async () => {
    await service?.close();
    await ledger?.stop();
    await proxy?.close();
    await chains?.close();
    await database?.drop();
  });

  it("an RPC that hangs for 10 s: /readyz and the console show the stall while it lasts, the audit cannot judge, and the ledger heals by itself", async () => {
    proxy.hang();
    const hungAt = Date.now();
    const during = await transferIn();

    // The service sees the ledger stand still while the chain moves.
    await expect.poll(async () => (await ready()).body.ledger.find((l) => l.chain === "CELO")?.state, { timeout: 30_000, interval: 250 }).toBe("stalled");
    const readiness = await ready();
    expect(readiness.status).toBe(503);
    expect(readiness.body.ok).toBe(false);
    expect(readiness.body.ledger.find((l) => l.chain === "CELO")?.problem).toMatch(/^ledger stalled: block \d+ for \d+ s while CELO reached \d+$/);
    expect(readiness.body.ledger.find((l) => l.chain === "BASE")?.state).toBe("current");
    const panel = await (await fetch(`${service.urls.service}/console?panel=chains`)).text();
    expect(panel).toMatch(/data-chain="CELO"[\s\S]*ledger stalled: block \d+/);
    const metrics = await (await fetch(`${service.urls.service}/metrics`)).text();
    expect(metrics).toMatch(/^billpay_ledger_stalled\{chain="CELO"\} 1$/m);
    expect(metrics).toMatch(/^billpay_ledger_stalled\{chain="BASE"\} 0$/m);

    // The audit waits, then says it cannot judge yet: in code, and from `npm run audit` in one line with exit 2.
    const judged = await runAudit({ ledgerUrl: ledger.url, deployments: chains.deployments, waitMs: 500 }).catch((e: unknown) => e);
    expect(judged).toBeInstanceOf(LedgerNotCaughtUp);
    expect((judged as LedgerNotCaughtUp).message).toMatch(/^the ledger did not reach block \d+ of chain 42220 in 1 s: it stood at block \d+$/);
    const audit = await runScript("scripts/audit.ts", ["--ledger-only", "--wait", "1"], { LEDGER_URL: ledger.url, DEPLOYMENTS_FILE: chains.deploymentsFile });
    expect(audit.code).toBe(2);
    expect(audit.out.trim().split("\n")).toHaveLength(1);
    expect(audit.out).toMatch(/^audit: cannot judge yet: the ledger did not reach block \d+ of chain 42220 in 1 s: it stood at block \d+/);

    // Ten seconds in all, then the node answers again: the ledger catches up with no restart.
    await new Promise((r) => setTimeout(r, Math.max(0, hungAt + 10_000 - Date.now())));
    proxy.release();
    await caughtUpWith(during.transactionHash);
    await expect.poll(async () => (await ready()).status, { timeout: 30_000, interval: 250 }).toBe(200);
    expect(ledger.restarts).toBe(0);
  });

  it("a WebSocket cut: Ponder subscribes again and indexes every block, with no restart", async () => {
    const before = proxy.subscribes();
    proxy.cutSockets();
    const after = await transferIn();
    await expect.poll(() => proxy.subscribes(), { timeout: 30_000 }).toBeGreaterThan(before);
    await caughtUpWith(after.transactionHash);
    expect(ledger.restarts).toBe(0);
  });

  it("a subscription that goes quiet with its socket open (as Hardhat's and real nodes' do): polled beside and made again, the ledger stays current", async () => {
    const before = proxy.subscribes();
    proxy.mute(true);
    try {
      const quiet = await transferIn();
      // Every subscription stays muted: only the poll beside it can carry the ledger on.
      await expect.poll(() => proxy.subscribes(), { timeout: 30_000 }).toBeGreaterThan(before);
      await caughtUpWith(quiet.transactionHash);
      const log = await readFile(logFile(), "utf8");
      expect(log).toContain("WebSocket subscription quiet while the chain moves; indexing the polled block");
      expect(log).toContain("Re-subscribing: the WebSocket subscription delivered no new block");
    } finally {
      proxy.mute(false);
    }
    expect(ledger.restarts).toBe(0);
  });

  it("the newest block reorganised between its head and its logs: the ledger drops it at once and indexes the new branch", async () => {
    // The chain stands still while the test reorganises it (interval mining off, automine on).
    await rpc("evm_setIntervalMining", [0]);
    try {
      // Caught up first: on a slow machine Ponder may still be asking for an earlier block's logs.
      await waitForLedgerBlock(ledger.url, celo.deployment.chainId, await head(), 60_000);
      const held = proxy.holdLogsByHash();
      const snapshot = await rpc("evm_snapshot");
      const gone = await transferIn(2_000n); // mined at once; Ponder hears of the block and asks for its logs
      const goneHash = (await celo.publicClient.getBlock({ blockNumber: gone.blockNumber })).hash;
      expect(await held).toBe(goneHash);
      await rpc("evm_revert", [snapshot]);
      const kept = await transferIn(3_000n); // the same height on the new branch
      expect(kept.blockNumber).toBe(gone.blockNumber);
      await celo.mine(3);
      proxy.release();

      await caughtUpWith(kept.transactionHash);
      expect(await indexed(gone.transactionHash)).toBe(false);
      await expect.poll(async () => (await readFile(logFile(), "utf8")).includes("Requested block is no longer on the chain; not retrying"), { timeout: 30_000 }).toBe(true);
    } finally {
      await rpc("evm_setIntervalMining", [1_000]);
    }
    expect(ledger.restarts).toBe(0);
  });

  it("a killed ledger process is restarted by its supervisor, on the same URL, and indexes again", async () => {
    const url = ledger.url;
    const killed = ledger.process;
    killed.kill("SIGKILL");
    await expect.poll(() => ledger.restarts, { timeout: 30_000 }).toBe(1);
    await expect.poll(() => ledger.process !== killed && ledger.process.exitCode === null, { timeout: 120_000 }).toBe(true);
    const after = await transferIn();
    await caughtUpWith(after.transactionHash);
    expect(ledger.url).toBe(url);
    expect(supervisorLines.join("\n")).toMatch(/ledger: restarting \(the ledger exited \(SIGKILL\)\); restart 1, in 1 s/);
    expect(supervisorLines.join("\n")).toContain("ledger: restarted and backfilled");
  }, 180_000); // a restart backfills from the start: its own polls allow for a slow machine, so must the test
});
