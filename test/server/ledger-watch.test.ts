/**
 * The ledger's watch (lib/ledger-watch.ts) judged against a node and a ledger that answer as
 * told: a ledger that stops answering is `unreadable` within the stall bound and `stalled`
 * past it, so that whatever supervises it restarts a process that lives but says nothing,
 * as it restarts one that stands still.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LedgerWatch, ledgerHealthy, SILENT_STALLS } from "../../lib/ledger-watch.ts";

const CHAIN_ID = 42220;

describe("the ledger's watch", () => {
  let server: Server;
  let url: string;
  let head = 100n;
  /** What /ledger/readable answers: a block, or a status with no body. */
  let readable: { block: number } | { status: number } = { block: 100 };

  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.method === "POST") {
        // The node: JSON-RPC, eth_blockNumber only.
        let body = "";
        req.on("data", (c) => (body += c));
        req.on("end", () => {
          const { id } = JSON.parse(body) as { id: number };
          res.setHeader("content-type", "application/json");
          res.end(JSON.stringify({ jsonrpc: "2.0", id, result: `0x${head.toString(16)}` }));
        });
        return;
      }
      if ("status" in readable) return void res.writeHead(readable.status).end();
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ chains: [{ chainId: CHAIN_ID, block: readable.block }] }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  it("counts a ledger that stops answering as unreadable within its bound of silence, as stalled past it, and as current once it answers again", async () => {
    let t = 1_000_000;
    const watch = new LedgerWatch({ ledgerUrl: url, chains: [{ chain: "CELO", chainId: CHAIN_ID, rpcUrl: url }], bounds: { stallMs: 10_000, maxLagBlocks: 10 }, now: () => t });
    const look = async () => (await watch.check())[0]!;

    expect((await look()).state).toBe("current");
    readable = { status: 500 };
    const first = await look();
    expect(first.state).toBe("unreadable");
    expect(first.problem).toBe("the ledger could not be read: the ledger answered 500 for /ledger/readable");
    t += SILENT_STALLS * 10_000;
    expect((await look()).state).toBe("unreadable"); // at the bound, not past it
    t += 1_000;
    const past = await look();
    expect(past.state).toBe("stalled");
    expect(past.stillMs).toBe(SILENT_STALLS * 10_000 + 1_000);
    expect(past.problem).toBe(`ledger stalled: it could not be read for ${SILENT_STALLS * 10 + 1} s (the ledger answered 500 for /ledger/readable)`);
    expect(ledgerHealthy([past])).toBe(false);

    // Answering again ends it; the silence's clock starts over from the next silence.
    readable = { block: 100 };
    expect((await look()).state).toBe("current");
    readable = { status: 503 };
    t += 10 * SILENT_STALLS * 10_000;
    expect((await look()).state).toBe("unreadable");

    // A restarted ledger (reset) starts the clock afresh too.
    t += SILENT_STALLS * 10_000 + 1_000;
    expect((await look()).state).toBe("stalled");
    watch.reset();
    expect((await look()).state).toBe("unreadable");
    readable = { block: 100 };
  });

  it("still judges a ledger that answers by its progress against the head", async () => {
    let t = 2_000_000;
    const watch = new LedgerWatch({ ledgerUrl: url, chains: [{ chain: "CELO", chainId: CHAIN_ID, rpcUrl: url }], bounds: { stallMs: 10_000, maxLagBlocks: 10 }, now: () => t });
    readable = { block: 100 };
    head = 105n;
    expect((await watch.check())[0]!.state).toBe("current");
    t += 11_000;
    const still = (await watch.check())[0]!;
    expect(still.state).toBe("stalled");
    expect(still.problem).toBe("ledger stalled: block 100 for 11 s while CELO reached 105");
    head = 100n;
  });
});
