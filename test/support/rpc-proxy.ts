/**
 * A JSON-RPC proxy in front of a real local node, for the faults a real network has: every
 * HTTP request held (an RPC that hangs), WebSockets cut, a subscription that goes quiet with
 * its socket open, a request for a block's logs held while the test reorganises that block
 * away. Requests pass to the node unchanged otherwise, over HTTP and WebSocket on one port,
 * as a node serves them.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocket, WebSocketServer } from "ws";

interface Held {
  release: () => void;
}

export interface RpcProxy {
  url: string;
  wsUrl: string;
  /** Holds every HTTP request until `release` (or for `ms`, when given). */
  hang(ms?: number): void;
  /** Lets every held HTTP request through, and stops holding new ones. */
  release(): void;
  /** Holds eth_getLogs requests that name a block hash until `release`; resolves with the first hash held. */
  holdLogsByHash(): Promise<string>;
  /** Terminates every WebSocket (the client sees its socket close). */
  cutSockets(): void;
  /** While on, subscription notifications are dropped: the socket stays open and quiet. */
  mute(on: boolean): void;
  /** How many eth_subscribe requests have passed so far. */
  subscribes(): number;
  close(): Promise<void>;
}

export async function startRpcProxy(target: string): Promise<RpcProxy> {
  const targetWs = target.replace(/^http/, "ws");
  let hanging = false;
  let holdingLogs: ((hash: string) => void) | undefined;
  const held = new Set<Held>();
  const sockets = new Set<WebSocket>();
  let muted = false;
  let subscribes = 0;

  const forward = async (body: string): Promise<string> => {
    const res = await fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body });
    return res.text();
  };
  const hold = () => new Promise<void>((resolve) => held.add({ release: resolve }));

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", async () => {
      try {
        if (hanging) await hold();
        const call = JSON.parse(body) as { method?: string; params?: Array<{ blockHash?: string }> };
        const hash = call.method === "eth_getLogs" ? call.params?.[0]?.blockHash : undefined;
        if (hash && holdingLogs) {
          holdingLogs(hash);
          await hold();
        }
        const answer = await forward(body);
        res.writeHead(200, { "content-type": "application/json" }).end(answer);
      } catch {
        res.destroy(); // the client sees the connection fail, as with a node that went away
      }
    });
  });

  const wss = new WebSocketServer({ server });
  wss.on("connection", (client) => {
    const upstream = new WebSocket(targetWs);
    sockets.add(client);
    const pending: string[] = [];
    upstream.on("open", () => pending.splice(0).forEach((m) => upstream.send(m)));
    client.on("message", (data) => {
      const text = String(data);
      if (text.includes('"eth_subscribe"')) subscribes += 1;
      if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
      else pending.push(text);
    });
    upstream.on("message", (data) => {
      const text = String(data);
      if (muted && text.includes('"eth_subscription"')) return;
      if (client.readyState === WebSocket.OPEN) client.send(text);
    });
    const end = () => {
      sockets.delete(client);
      client.terminate();
      upstream.terminate();
    };
    client.on("close", end);
    client.on("error", end);
    upstream.on("close", end);
    upstream.on("error", end);
  });

  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  const release = () => {
    hanging = false;
    holdingLogs = undefined;
    for (const h of [...held]) {
      held.delete(h);
      h.release();
    }
  };
  return {
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}`,
    hang(ms) {
      hanging = true;
      if (ms !== undefined) setTimeout(release, ms);
    },
    release,
    holdLogsByHash() {
      return new Promise((resolve) => {
        holdingLogs = (hash) => {
          resolve(hash);
        };
      });
    },
    cutSockets() {
      for (const s of [...sockets]) s.terminate();
    },
    mute(on) {
      muted = on;
    },
    subscribes: () => subscribes,
    async close() {
      release();
      for (const s of [...sockets]) s.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
