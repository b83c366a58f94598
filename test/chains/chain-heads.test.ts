/**
 * lib/chain-heads.ts, the service's watch on new blocks.
 *
 * Against a node whose WebSocket accepts the connection and never answers (a proxy or
 * firewall that swallows the upgrade): the node's HTTP side is a minimal JSON-RPC stand-in
 * answering the latest block as any node does, one block more on each read. A wait must still
 * be woken by a new head (read by polling), not left to run out its time, and the silent
 * socket must be given up.
 *
 * Against a real local node, through a proxy that cuts and mutes its WebSocket: a
 * subscription that goes quiet is polled beside and made again, a cut one is made again, and
 * a block replaced at the same height wakes the waiters.
 */
import { createServer as createHttpServer, type Server } from "node:http";
import { connect, createServer as createTcpServer, type Server as TcpServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { network } from "hardhat";
import { ChainHeads } from "../../lib/chain-heads.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import { startMuteWebSocket } from "../support/mute-websocket.ts";
import { startRpcProxy, type RpcProxy } from "../support/rpc-proxy.ts";
import { until } from "../support/until.ts";

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
        // eth_getBlockByNumber("latest") answers a block as a node does, the rest a quantity.
        const block = (n: number) => ({ number: `0x${n.toString(16)}`, hash: `0x${n.toString(16).padStart(64, "0")}`, parentHash: `0x${(n - 1).toString(16).padStart(64, "0")}`, timestamp: `0x${n.toString(16)}`, transactions: [] });
        const answer = (c: { id: number; method: string }) => ({
          jsonrpc: "2.0",
          id: c.id,
          result: c.method === "eth_chainId" ? "0xa4ec" : c.method === "eth_getBlockByNumber" ? block(head++) : `0x${(head++).toString(16)}`,
        });
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(Array.isArray(calls) ? calls.map(answer) : answer(calls)));
      });
    });
    silent = createTcpServer((socket) => {
      accepted.push(socket);
      socket.resume(); // read and drop what comes, so that the client's end is heard
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
      await expect.poll(() => accepted.length).toBeGreaterThanOrEqual(1);

      // A later wait past the give-up: still woken by a head, and the socket was let go, and tried again.
      const seen = heads.latest("CELO");
      await new Promise((r) => setTimeout(r, 700));
      await heads.after("CELO", seen, 30_000);
      expect(heads.latest("CELO")).toBeGreaterThan(seen);
      await expect.poll(() => closed.length, { timeout: 15_000 }).toBeGreaterThanOrEqual(1);
      // Each try given up at 500 ms and made again on the backoff (1 s, then 2 s, ...).
      await expect.poll(() => accepted.length, { timeout: 15_000 }).toBeGreaterThanOrEqual(3);
    } finally {
      heads.close();
    }
  });
});

describe("chain heads over a WebSocket that opens and then answers nothing, not even its closing", () => {
  it("gives the socket up at its deadline and subscribes again, though no close event ever comes", async () => {
    const mute = await startMuteWebSocket();
    const saved = process.env.CELO_WS_URL;
    process.env.CELO_WS_URL = mute.url;
    // No HTTP node at all: only the socket's own life is watched here.
    const heads = new ChainHeads(() => "http://127.0.0.1:1", { subscribeTimeoutMs: 300 });
    try {
      heads.latest("CELO"); // starts the watch, and its subscription
      await expect.poll(() => mute.connections.length, { timeout: 15_000 }).toBeGreaterThanOrEqual(2);
      // The upgrade was taken (the socket opened and asked for its subscription), so the retry
      // came from the give-up of an open socket, not from a failed handshake.
      expect(mute.framesAfterUpgrade()).toBeGreaterThanOrEqual(1);
      expect(heads.subscribed("CELO")).toBe(false);
      // Each given-up socket is cut at once: none is left open beside the newest.
      await expect.poll(() => mute.openConnections(), { timeout: 5_000 }).toBeLessThanOrEqual(1);
    } finally {
      heads.close();
      if (saved === undefined) delete process.env.CELO_WS_URL;
      else process.env.CELO_WS_URL = saved;
      await mute.close();
    }
  });
});

describe("chain heads from a real local node that goes quiet, drops its socket or replaces its newest block", () => {
  let node: Awaited<ReturnType<typeof network.createServer>>;
  let proxy: RpcProxy;
  let heads: ChainHeads;
  const saved = process.env.CELO_WS_URL;
  let rpc: (method: string, params?: unknown[]) => Promise<unknown>;

  beforeAll(async () => {
    node = await network.createServer({ network: "celoLocal" }, "127.0.0.1", 0);
    const { port } = await node.listen();
    const client = publicClientFor("CELO", `http://127.0.0.1:${port}`);
    rpc = (method, params = []) => client.request({ method: method as never, params: params as never }) as Promise<unknown>;
    proxy = await startRpcProxy(`http://127.0.0.1:${port}`);
    process.env.CELO_WS_URL = proxy.wsUrl;
    heads = new ChainHeads(() => proxy.url, { quietMs: 1_500 });
    // Subscribed: a wait is woken by a pushed head.
    await heads.after("CELO", 0n, 30_000);
    await until(() => heads.subscribed("CELO"), "the subscription");
  });

  afterAll(async () => {
    heads?.close();
    if (saved === undefined) delete process.env.CELO_WS_URL;
    else process.env.CELO_WS_URL = saved;
    await proxy?.close();
    await node?.close();
  });

  it("a subscription that goes quiet with its socket open: waits are woken by polling, and it is made again", async () => {
    const before = proxy.subscribes();
    proxy.mute(true);
    try {
      // Several blocks come and go (a block a second); each wait ends on a head, found by polling.
      for (let i = 0; i < 4; i++) {
        const seen = heads.latest("CELO");
        await heads.after("CELO", seen, 120_000); // the test's own time runs out long before this
        expect(heads.latest("CELO")).toBeGreaterThan(seen);
      }
      await expect.poll(() => proxy.subscribes(), { timeout: 30_000 }).toBeGreaterThan(before);
    } finally {
      proxy.mute(false);
    }
    // Unmuted, the new subscription pushes again.
    await expect.poll(() => heads.subscribed("CELO"), { timeout: 15_000 }).toBe(true);
  });

  it("a socket cut by the network is subscribed again", async () => {
    const before = proxy.subscribes();
    proxy.cutSockets();
    await expect.poll(() => proxy.subscribes(), { timeout: 30_000 }).toBeGreaterThan(before);
    await expect.poll(() => heads.subscribed("CELO"), { timeout: 15_000 }).toBe(true);
    const seen = heads.latest("CELO");
    await heads.after("CELO", seen, 120_000);
    expect(heads.latest("CELO")).toBeGreaterThan(seen);
  });

  /**
   * The node's WebSocket port as a TCP relay to the node that can refuse connections (not
   * listening), swallow them (accepted, never answered) or pass them on.
   */
  async function lateSocket(): Promise<{ url: string; listen(): Promise<void>; swallowed(): number; relay(): void; close(): Promise<void> }> {
    const server = createTcpServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    await new Promise((r) => server.close(r)); // refused until listen()
    const nodePort = Number(new URL(proxy.url).port);
    const sockets: Socket[] = [];
    let relaying = false;
    let swallowed = 0;
    const relay = createTcpServer((inbound) => {
      sockets.push(inbound.on("error", () => {}));
      if (!relaying) return void (swallowed += 1); // the upgrade is never answered
      const outbound = connect(nodePort, "127.0.0.1").on("error", () => {});
      sockets.push(outbound);
      inbound.pipe(outbound).pipe(inbound);
    });
    return {
      url: `ws://127.0.0.1:${port}`,
      listen: () =>
        new Promise<void>((resolve, reject) => {
          relay.once("error", reject); // the port taken meanwhile by another process: said, not thrown later
          relay.listen(port, "127.0.0.1", resolve);
        }),
      swallowed: () => swallowed,
      relay: () => void (relaying = true),
      close: async () => {
        for (const s of sockets) s.destroy();
        if (relay.listening) await new Promise((r) => relay.close(r));
      },
    };
  }

  it("a WebSocket refused at first, then swallowed past its give-up, is subscribed once the node answers it", async () => {
    const late = await lateSocket();
    process.env.CELO_WS_URL = late.url;
    const heads = new ChainHeads(() => proxy.url, { subscribeTimeoutMs: 500 });
    try {
      await heads.after("CELO", 0n, 30_000); // heads by polling meanwhile
      // Refused (Node's WebSocket fires only "error" then, no "close"): tried again on a backoff.
      await new Promise((r) => setTimeout(r, 1_500));
      // Accepted and never answered: the next try reaches it, is given up at 500 ms (again only
      // "error" while it connects), and is tried again.
      await late.listen();
      await expect.poll(() => late.swallowed(), { timeout: 20_000 }).toBeGreaterThanOrEqual(1);
      await new Promise((r) => setTimeout(r, 700));
      expect(heads.subscribed("CELO")).toBe(false);
      late.relay();
      await expect.poll(() => heads.subscribed("CELO"), { timeout: 20_000 }).toBe(true);
      const seen = heads.latest("CELO");
      await heads.after("CELO", seen, 120_000);
      expect(heads.latest("CELO")).toBeGreaterThan(seen);
    } finally {
      heads.close();
      process.env.CELO_WS_URL = proxy.wsUrl;
      await late.close();
    }
  });

  it("the newest block replaced at the same height wakes the waiters", async () => {
    await rpc("evm_setIntervalMining", [0]);
    try {
      const snapshot = await rpc("evm_snapshot");
      await rpc("evm_mine");
      const first = (await rpc("eth_getBlockByNumber", ["latest", false])) as { number: string; hash: string; timestamp: string };
      await expect.poll(() => heads.latestHash("CELO"), { timeout: 15_000 }).toBe(first.hash);
      const seen = heads.latest("CELO");
      // Waiting on the newest height: only a replacement can wake this (the chain is held still).
      const woken = heads.after("CELO", seen, 120_000); // the test's own time runs out long before this
      await rpc("evm_revert", [snapshot]);
      await rpc("evm_mine", [Number(first.timestamp) + 7]); // the same height, another block
      await woken;
      expect(heads.latest("CELO")).toBe(seen);
      expect(heads.latestHash("CELO")).not.toBe(first.hash);
      expect(heads.latestHash("CELO")).toBe(((await rpc("eth_getBlockByNumber", ["latest", false])) as { hash: string }).hash);
    } finally {
      await rpc("evm_setIntervalMining", [1_000]);
    }
  });
});
