/**
 * The service's reads of its node over the node's WebSocket (lib/chain-client.ts
 * readNodesOverWebSocket), against a real local node behind a proxy that can hold every HTTP
 * request and cut the sockets: while open, reads go over the socket; a socket that fails is
 * read past over HTTP and opened again; reads never wait for a socket that is not open; once
 * closed, no socket is left open (an open one holds the process alive) and a client made
 * before stays off it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer as createTcpServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { network } from "hardhat";
import { TimeoutError } from "viem";
import { openSocketUrlFor, readNodesOverWebSocket, sharedClientFor } from "../../lib/chain-client.ts";
import { holdNodeSocket, isNodeSocketFailure, nodeSocketOpen, nodeSocketTransport } from "../../lib/node-socket.ts";
import { startMuteWebSocket } from "../support/mute-websocket.ts";
import { startRpcProxy, type RpcProxy } from "../support/rpc-proxy.ts";

describe("the service's reads of its node over the node's WebSocket", () => {
  let node: Awaited<ReturnType<typeof network.createServer>>;
  let proxy: RpcProxy;
  const saved = process.env.CELO_WS_URL;

  beforeAll(async () => {
    node = await network.createServer({ network: "celoLocal" }, "127.0.0.1", 0);
    const { port } = await node.listen();
    proxy = await startRpcProxy(`http://127.0.0.1:${port}`);
    process.env.CELO_WS_URL = proxy.wsUrl;
  });

  afterAll(async () => {
    if (saved === undefined) delete process.env.CELO_WS_URL;
    else process.env.CELO_WS_URL = saved;
    await proxy?.close();
    await node?.close();
  });

  /** What the sockets told the service's log, as level and message. */
  const told: string[] = [];
  /** The `error` field of each warning. */
  const reasons: unknown[] = [];
  const log = {
    warn: (msg: string, fields?: Record<string, unknown>) => {
      told.push(`warn ${msg}`);
      reasons.push(fields?.error);
    },
    info: (msg: string) => told.push(`info ${msg}`),
  };

  it("reads over the socket while open, over HTTP when the socket fails, and leaves no socket open once closed", async () => {
    told.length = 0;
    const close = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }], log);
    let closed = false;
    try {
      const client = sharedClientFor("CELO", proxy.url);
      await expect.poll(() => openSocketUrlFor("CELO", proxy.url), { timeout: 10_000 }).toBe(proxy.wsUrl);
      // Every HTTP request held: only the socket can answer.
      proxy.hang();
      try {
        expect(await client.getChainId()).toBe(42220);
        expect(proxy.openSockets()).toBe(1);
        // The node's refusal is its answer: not asked again over HTTP (held, that would end in a timeout).
        const refusal = await client.request({ method: "eth_getBlockByNumber", params: ["not a block", false] } as never).catch((err: unknown) => err);
        expect(refusal).toBeInstanceOf(Error);
        expect(refusal).not.toBeInstanceOf(TimeoutError);
      } finally {
        proxy.release();
      }

      // The socket cut under it: the read is answered all the same, over HTTP, and the socket is opened again.
      expect(told).toEqual([]);
      proxy.cutSockets();
      expect(await client.getChainId()).toBe(42220);
      await expect.poll(() => openSocketUrlFor("CELO", proxy.url), { timeout: 15_000 }).toBe(proxy.wsUrl);
      // The operator hears of the loss, and of the socket open again.
      expect(told).toEqual(["warn lost the node's WebSocket; reading the node over HTTP until it is open again", "info reading the node over its WebSocket again"]);
      proxy.hang();
      try {
        expect(await client.getChainId()).toBe(42220);
      } finally {
        proxy.release();
      }

      // A second reader of the same node shares the socket; it stays open until the last closes.
      const second = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }]);
      second();
      expect(await sharedClientFor("CELO", proxy.url).getChainId()).toBe(42220);
      await expect.poll(() => proxy.openSockets(), { timeout: 10_000 }).toBe(1);

      close();
      closed = true;
      await expect.poll(() => proxy.openSockets(), { timeout: 10_000 }).toBe(0);
      // Made before the close or after it, a client reads over HTTP and opens no socket again.
      expect(await client.getChainId()).toBe(42220);
      expect(await sharedClientFor("CELO", proxy.url).getChainId()).toBe(42220);
      expect(proxy.openSockets()).toBe(0);
    } finally {
      if (!closed) close();
    }
  });

  it("a WebSocket that cannot be opened: every read goes over HTTP, none waits for it, and the operator is told once", async () => {
    // A port that takes each connection and drops it at once: no upgrade ever succeeds.
    let tries = 0;
    const dropping = createTcpServer((s) => {
      tries += 1;
      s.destroy();
    });
    await new Promise<void>((r) => dropping.listen(0, "127.0.0.1", r));
    process.env.CELO_WS_URL = `ws://127.0.0.1:${(dropping.address() as AddressInfo).port}`;
    told.length = 0;
    const close = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }], log);
    try {
      const reads = await Promise.all(Array.from({ length: 5 }, () => sharedClientFor("CELO", proxy.url).getChainId()));
      expect(reads).toEqual(Array(5).fill(42220));
      expect(openSocketUrlFor("CELO", proxy.url)).toBeUndefined();
      // Tried again (every 5 s), and said once, not once a try; the reason goes with it.
      await expect.poll(() => tries, { timeout: 20_000 }).toBeGreaterThanOrEqual(2);
      expect(told).toEqual(["warn could not open the node's WebSocket; reading the node over HTTP, and trying again every few seconds"]);
      expect(reasons.at(-1)).toBeTruthy();
    } finally {
      close();
      process.env.CELO_WS_URL = proxy.wsUrl;
      await new Promise((r) => dropping.close(r));
    }
  });

  it("a WebSocket whose upgrade is never answered: reads go over HTTP, and the close cuts the connect under way", async () => {
    const held = new Set<Socket>();
    let ended = 0;
    const tcp = createTcpServer((s) => {
      held.add(s);
      s.resume(); // reads and drops the upgrade request, so that the client's end is heard
      s.on("close", () => (ended += 1));
    });
    await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve));
    process.env.CELO_WS_URL = `ws://127.0.0.1:${(tcp.address() as AddressInfo).port}`;
    const close = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }]);
    try {
      expect(await sharedClientFor("CELO", proxy.url).getChainId()).toBe(42220);
      await expect.poll(() => held.size, { timeout: 10_000 }).toBe(1);
      close();
      // Left connecting, it would hold the process alive.
      await expect.poll(() => ended, { timeout: 10_000 }).toBe(1);
    } finally {
      close();
      for (const s of held) s.destroy();
      tcp.close();
      process.env.CELO_WS_URL = proxy.wsUrl;
    }
  });

  it("a socket the node has gone mute on is let go and cut at once, not left waiting on its closing handshake", async () => {
    const mute = await startMuteWebSocket();
    const release = holdNodeSocket(mute.url);
    try {
      await expect.poll(() => nodeSocketOpen(mute.url), { timeout: 10_000 }).toBe(true);
      // A read nothing answers, on a socket that answers no probe either: the socket's failure (asked again over HTTP by the caller).
      const { request } = nodeSocketTransport(mute.url, 300)({});
      const failure = await request({ method: "eth_chainId" }).catch((err: unknown) => err);
      expect(isNodeSocketFailure(failure)).toBe(true);
      expect(mute.framesAfterUpgrade()).toBeGreaterThanOrEqual(1);
      // Let go: its connection is cut now (a close would wait for the mute node forever).
      await expect.poll(() => mute.openConnections(), { timeout: 3_000 }).toBe(0);
    } finally {
      release();
      await mute.close();
    }
  });

  it("is not opened for a node that names no WebSocket (`<CHAIN>_WS_URL=none`): reads stay on HTTP", async () => {
    process.env.CELO_WS_URL = "none";
    const close = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }]);
    try {
      expect(await sharedClientFor("CELO", proxy.url).getChainId()).toBe(42220);
      expect(proxy.openSockets()).toBe(0);
    } finally {
      close();
      process.env.CELO_WS_URL = proxy.wsUrl;
    }
  });
});
