/**
 * lib/chain-heads.ts against a node whose WebSocket accepts the connection and never answers
 * (a proxy or firewall that swallows the upgrade). The node's HTTP side is a minimal JSON-RPC
 * stand-in answering eth_blockNumber as any node does (a hex quantity), one block more on each
 * read. A wait must still be woken by a new head (read by polling), not left to run out its
 * time, and the silent socket must be given up.
 */
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChainHeads } from "../../lib/chain-heads.ts";

describe("chain heads over a WebSocket that never answers", () => {
  let rpc: Server;
  let silent: TcpServer;
  let rpcUrl: string;
  let head = 100;
  const accepted: Socket[] = [];
  const closed: Socket[] = [];
  const saved = process.env.CELO_WS_URL;

  beforeAll(async () => {
    rpc = createHttpServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        const calls = JSON.parse(body) as { id: number; method: string } | Array<{ id: number; method: string }>;
        const answer = (c: { id: number; method: string }) => ({ jsonrpc: "2.0", id: c.id, result: c.method === "eth_chainId" ? "0xa4ec" : `0x${(head++).toString(16)}` });
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(Array.isArray(calls) ? calls.map(answer) : answer(calls)));
      });
    });
    silent = createTcpServer((socket) => {
      accepted.push(socket);
      socket.on("close", () => closed.push(socket));
      socket.on("error", () => {});
    });
    await new Promise<void>((r) => rpc.listen(0, "127.0.0.1", r));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    rpcUrl = `http://127.0.0.1:${(rpc.address() as AddressInfo).port}`;
    process.env.CELO_WS_URL = `ws://127.0.0.1:${(silent.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    if (saved === undefined) delete process.env.CELO_WS_URL;
    else process.env.CELO_WS_URL = saved;
    for (const s of accepted) s.destroy();
    await new Promise((r) => rpc.close(r));
    await new Promise((r) => silent.close(r));
  });

  it("polls the head until a subscription is confirmed, so a wait is woken by the next block; the silent socket is closed", async () => {
    const heads = new ChainHeads(() => rpcUrl, { subscribeTimeoutMs: 500, pollMs: 20 });
    try {
      // Seen: nothing yet. A generous wait: it must end on a head, not on its time.
      await heads.after("CELO", 0n, 30_000);
      expect(heads.latest("CELO")).toBeGreaterThan(0n);
      await expect.poll(() => accepted.length).toBe(1);

      // A later wait past the give-up: still woken by a head, and the socket was let go.
      const seen = heads.latest("CELO");
      await new Promise((r) => setTimeout(r, 700));
      await heads.after("CELO", seen, 30_000);
      expect(heads.latest("CELO")).toBeGreaterThan(seen);
      await expect.poll(() => closed.length, { timeout: 15_000 }).toBe(1);
    } finally {
      heads.close();
    }
  });
});
