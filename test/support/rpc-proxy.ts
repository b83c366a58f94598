/**
 * A JSON-RPC proxy in front of a real local node, for the faults a real network has: every
 * HTTP request held (an RPC that hangs), WebSockets cut, a subscription that goes quiet with
 * its socket open, a request for a block's logs held while the test reorganises that block
 * away, contract reads of one function answered with an error (alone or inside a batch, the
 * rest of which still reaches the node). Requests pass to the node unchanged otherwise, over
 * HTTP and WebSocket on one port, as a node serves them.
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
  /** While set, every eth_call whose data begins with this 4-byte selector is answered with a JSON-RPC error (undefined: none). */
  failCalls(selector: string | undefined): void;
  /** How many eth_subscribe requests have passed so far. */
  subscribes(): number;
  /** The WebSockets open through the proxy now. */
  openSockets(): number;
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
  let failing: string | undefined;

  const forward = async (body: string): Promise<string> => {
    const res = await fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body });
    return res.text();
  };
  /** The request with each eth_call of `selector` answered by an error, and the rest forwarded as it came (one batch). */
  type Call = { id?: unknown; method?: string; params?: Array<{ data?: string; input?: string }> };
  const forwardFailing = async (body: string, selector: string): Promise<string> => {
    const parsed = JSON.parse(body) as Call | Call[];
    const calls = Array.isArray(parsed) ? parsed : [parsed];
    const fails = (c: Call) => c.method === "eth_call" && (c.params?.[0]?.data ?? c.params?.[0]?.input ?? "").toLowerCase().startsWith(selector.toLowerCase());
    const passing = calls.filter((c) => !fails(c));
    const passed = passing.length === 0 ? [] : ([] as unknown[]).concat(JSON.parse(await forward(JSON.stringify(Array.isArray(parsed) ? passing : passing[0]))));
    const byId = new Map((passed as Array<{ id?: unknown }>).map((a) => [a.id, a]));
    const answers = calls.map((c) => (fails(c) ? { jsonrpc: "2.0", id: c.id, error: { code: -32603, message: "internal error (the test's proxy refused this call)" } } : byId.get(c.id)));
    return JSON.stringify(Array.isArray(parsed) ? answers : answers[0]);
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
        const answer = failing ? await forwardFailing(body, failing) : await forward(body);
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
    failCalls(selector) {
      failing = selector;
    },
    subscribes: () => subscribes,
    openSockets: () => sockets.size,
    async close() {
      release();
      for (const s of [...sockets]) s.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
