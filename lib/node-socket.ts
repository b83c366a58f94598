/**
 * The service's WebSocket to a chain's node, owned here from open to close: one per URL, held
 * by its readers (lib/chain-client.ts readNodesOverWebSocket) and closed by the last of them.
 * viem's socket client carries the JSON-RPC (its requests, their ids, timeouts and the
 * subscriptions' notifications); this module decides when a socket exists at all.
 *
 * Why not viem's own `webSocket` transport: it opens a socket on any request that finds none
 * in viem's cache, so a read after the close, or a read in the moment a socket is still
 * connecting, opened another that no one closed (an open socket holds a process alive); a
 * connect has no deadline of its own there (an upgrade never answered stalled every read for
 * the WebSocket's own timeouts, minutes); and its reconnect gives up for good after a few
 * tries, leaving a dead socket in the cache. Here: a socket is opened only while held, with a
 * deadline; a read is sent on it only while it is open, and over HTTP otherwise (the caller's
 * fallback); a socket found closed when a read looks, or that answers nothing, is let go and
 * opened again a little later.
 */
import { BaseError, custom, encodeEventTopics, SocketClosedError, TimeoutError, WebSocketRequestError, RpcRequestError, type AbiEvent, type Hex, type Transport } from "viem";
import { getSocketRpcClient, type GetSocketRpcClientParameters, type SocketRpcClient } from "viem/utils";
import WebSocket from "ws";

/** How long a socket may take to open; reads go over HTTP meanwhile. */
const CONNECT_MS = 5_000;
/** After a socket fails, how long before it is opened again; reads go over HTTP meanwhile. */
const REOPEN_MS = 5_000;
/** viem's socket options: a ping keeps idle proxies from closing it; reconnecting is this module's. */
const OPTIONS = { keepAlive: { interval: 30_000 }, reconnect: false } as const;
const OPEN = 1; // WebSocket.OPEN
/**
 * A socket the node has sent nothing on for this long (two pings unanswered, and no read or
 * notification) has gone quiet without closing: it is let go when a reader next looks.
 */
const QUIET_MS = 2.5 * OPTIONS.keepAlive.interval;

type Client = SocketRpcClient<WebSocket>;
type SocketHandlers = Parameters<GetSocketRpcClientParameters<WebSocket>["getSocket"]>[0];

/** A read the socket could not carry (not open, closed under it): the caller asks it over HTTP. */
export class NodeSocketUnavailable extends BaseError {
  constructor(url: string) {
    super(`the WebSocket to ${url} is not open`, { name: "NodeSocketUnavailable" });
  }
}

let opened = 0;

/** Where a socket's changes of state are told (the service's log); nothing is told without one. */
export interface NodeSocketLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
}

class NodeSocket {
  holders = 0;
  /** When the node last sent anything on the socket (ms): a read timed out on a socket silent since it was sent finds the socket dead. */
  heardAt = 0;
  private client?: Client;
  /** The socket being opened or open, so that a connect past its deadline, or at the close, can be cut. */
  private raw?: WebSocket;
  private opening = false;
  private timer?: NodeJS.Timeout;
  /** Whether reads have gone over HTTP since a failure was told (told once, until the socket opens again). */
  private down = false;

  constructor(
    readonly url: string,
    private readonly log?: NodeSocketLog,
  ) {}

  /** viem's client of the socket while it is open; a socket found closed is let go and opened again later. */
  get open(): Client | undefined {
    if (this.client && (this.client.socket.readyState !== OPEN || Date.now() - this.heardAt > QUIET_MS)) this.failed();
    return this.client;
  }

  start(): void {
    if (this.client || this.opening || this.holders === 0) return;
    this.opening = true;
    // A key of its own: viem keeps socket clients by key and URL, and this one is this object's alone.
    const attempt = getSocketRpcClient({ key: `node-socket-${++opened}`, url: this.url, ...OPTIONS, getSocket: (handlers) => this.connect(handlers) }) as Promise<Client>;
    // A connect still under way at the deadline is cut, and the attempt fails.
    const deadline = setTimeout(() => {
      if (this.opening && !this.client) this.raw?.terminate();
    }, CONNECT_MS);
    deadline.unref();
    attempt.then(
      (client) => {
        clearTimeout(deadline);
        this.opening = false;
        if (this.holders === 0) client.close();
        else {
          this.heardAt = Date.now();
          this.client = client;
          if (this.down) this.log?.info("reading the node over its WebSocket again", { url: this.url });
          this.down = false;
        }
      },
      (err: unknown) => {
        clearTimeout(deadline);
        this.opening = false;
        this.raw = undefined;
        this.later(); // before the log line: a log that throws must not stop the retries
        if (this.holders > 0) this.tellDown("could not open the node's WebSocket; reading the node over HTTP, and trying again every few seconds", err);
      },
    );
  }

  /** The socket failed or was found closed: it is closed, and opened again after REOPEN_MS. */
  failed(): void {
    const client = this.client;
    this.client = undefined;
    this.raw = undefined;
    client?.close();
    this.later();
    if (client) this.tellDown("lost the node's WebSocket; reading the node over HTTP until it is open again");
  }

  /** Tells the first failure of a run of them (an unreachable socket retried every few seconds is not a line each time). */
  private tellDown(msg: string, err?: unknown): void {
    if (this.down) return;
    this.down = true;
    this.log?.warn(msg, { url: this.url, ...(err instanceof Error ? { error: err.message } : {}) });
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const { client, raw } = this;
    this.client = undefined;
    this.raw = undefined;
    client?.close();
    if (!client) raw?.terminate(); // one still connecting
  }

  private later(): void {
    if (this.holders === 0 || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.start();
    }, REOPEN_MS);
    this.timer.unref();
  }

  /**
   * The WebSocket, as viem's own transport makes it (utils/rpc/webSocket.ts), but held here so
   * that it can be cut while it connects. `ws`'s, not Node's own: a socket let go is cut at
   * once (`terminate()`), where Node's can only close() and wait for the node's closing
   * handshake with no timeout (a node gone mute kept one connection per try).
   */
  private async connect({ onClose, onError, onOpen, onResponse }: SocketHandlers) {
    // Released before viem asked for the socket: none is made.
    if (this.holders === 0) throw new NodeSocketUnavailable(this.url);
    const socket = new WebSocket(this.url);
    this.raw = socket;
    // Heard for the socket's whole life: `ws` throws an error nobody hears.
    socket.on("error", () => {});
    const closed = () => {
      socket.removeEventListener("close", closed);
      socket.removeEventListener("message", message);
      socket.removeEventListener("error", errored);
      socket.removeEventListener("open", onOpen);
      onClose();
    };
    /** The socket's error event as an Error: what viem, the connect's caller and the log are given. */
    const errorOf = (event: WebSocket.ErrorEvent) => (event.error instanceof Error ? event.error : new Error(event.message));
    const errored = (event: WebSocket.ErrorEvent) => onError(errorOf(event));
    const message = ({ data }: WebSocket.MessageEvent) => {
      this.heardAt = Date.now();
      if (typeof data === "string" && data.trim().length === 0) return;
      try {
        onResponse(JSON.parse(String(data)));
      } catch (err) {
        onError(err as Error);
      }
    };
    socket.addEventListener("close", closed);
    socket.addEventListener("message", message);
    socket.addEventListener("error", errored);
    socket.addEventListener("open", onOpen);
    if (socket.readyState === WebSocket.CONNECTING) {
      await new Promise((resolve, reject) => {
        socket.addEventListener("open", resolve, { once: true });
        socket.addEventListener("error", (event) => reject(errorOf(event)), { once: true });
      });
    }
    return Object.assign(socket, {
      close() {
        socket.terminate();
        closed();
      },
      ping() {
        if (socket.readyState === OPEN) socket.send(JSON.stringify({ jsonrpc: "2.0", id: null, method: "net_version", params: [] }));
      },
      request({ body }: { body: unknown }) {
        if (socket.readyState !== OPEN) throw new WebSocketRequestError({ body: body as never, url: socket.url, cause: new SocketClosedError({ url: socket.url }) });
        socket.send(JSON.stringify(body));
      },
    });
  }
}

const sockets = new Map<string, NodeSocket>();

/**
 * Holds the socket to `url` open (opening it now) until the returned release; the last release
 * closes it. `log` hears when the socket cannot be opened or is lost, and when it is open again
 * (the first holder's: the service passes its one log).
 */
export function holdNodeSocket(url: string, log?: NodeSocketLog): () => void {
  let socket = sockets.get(url);
  if (!socket) sockets.set(url, (socket = new NodeSocket(url, log)));
  socket.holders += 1;
  socket.start();
  let released = false;
  return () => {
    if (released) return;
    released = true;
    socket.holders -= 1;
    if (socket.holders > 0) return;
    socket.stop();
    if (sockets.get(url) === socket) sockets.delete(url);
  };
}

/** Whether a socket to `url` is held (reads may go over it once it is open). */
export function nodeSocketHeld(url: string): boolean {
  return sockets.has(url);
}

/** Whether the socket to `url` is open now. */
export function nodeSocketOpen(url: string): boolean {
  return sockets.get(url)?.open !== undefined;
}

/** Errors of the socket itself, after which the same read is asked over HTTP; the node's own answers are not. */
export function isNodeSocketFailure(err: unknown): boolean {
  if (err instanceof SlowNodeAnswer) return false;
  return err instanceof NodeSocketUnavailable || err instanceof SocketClosedError || err instanceof WebSocketRequestError || err instanceof TimeoutError;
}

/**
 * A viem transport over the held socket to `url`: each request a message of its own, answered
 * within `timeoutMs`. While no socket is open it fails at once (NodeSocketUnavailable), as it
 * does when the socket closes under a request, and the caller's fallback asks HTTP instead. A
 * request that times out on a socket that still answers (anything heard since it was sent, or
 * a short probe answered) was the node's slowness: SlowNodeAnswer, not asked again, so one
 * read waits `timeoutMs` at most, as over HTTP. Only a socket that answers nothing is let go.
 */
export function nodeSocketTransport(url: string, timeoutMs: number): Transport {
  return custom(
    {
      async request({ method, params }: { method: string; params?: unknown }) {
        const socket = sockets.get(url);
        const client = socket?.open;
        if (!socket || !client) throw new NodeSocketUnavailable(url);
        const body = { method, params };
        const sentAt = Date.now();
        let answer;
        try {
          answer = await client.requestAsync({ body, timeout: timeoutMs });
        } catch (err) {
          if (err instanceof TimeoutError && (socket.heardAt >= sentAt || (await answersProbe(client)))) throw new SlowNodeAnswer(body, url);
          socket.failed();
          throw err instanceof BaseError ? err : new NodeSocketUnavailable(url);
        }
        if (answer.error) throw new RpcRequestError({ body, error: answer.error, url });
        return answer.result;
      },
    },
    { key: "nodeSocket", name: "the node's WebSocket", retryCount: 0 },
  );
}

/** How long a socket silent through a timed-out read has to answer a probe before it is let go. */
const PROBE_MS = 2_000;

/** Whether the node answers a cheap request on this socket within PROBE_MS. */
function answersProbe(client: Client): Promise<boolean> {
  return client.requestAsync({ body: { method: "net_version" }, timeout: PROBE_MS }).then(
    () => true,
    () => false,
  );
}

/** A read the node did not answer in time on a socket that still answers: its answer, not the socket's failure. */
export class SlowNodeAnswer extends TimeoutError {
  constructor(body: { method: string; params?: unknown }, url: string) {
    super({ body, url });
  }
}

/**
 * Asks the node, over the open socket to `url`, to push the logs of `event` at `address` that
 * `args` select (`eth_subscribe("logs")`), each to `onLog` as the node sends it. Undefined when
 * no socket is open (the caller searches instead); else the unsubscribe. A subscription the
 * node refuses, or that its socket loses, pushes nothing more.
 */
export function pushLogs(
  url: string,
  filter: { address: Hex; event: AbiEvent; args: Record<string, unknown> },
  onLog: (log: { transactionHash?: Hex | null; removed?: boolean }) => void,
): (() => void) | undefined {
  const client = sockets.get(url)?.open;
  if (!client) return undefined;
  let topics;
  try {
    topics = encodeEventTopics({ abi: [filter.event], eventName: filter.event.name, args: filter.args } as Parameters<typeof encodeEventTopics>[0]);
  } catch {
    return undefined; // a key that cannot be a topic: the caller searches, which refuses it as well
  }
  let id: string | undefined;
  let ended = false;
  const unsubscribe = () => {
    if (id) client.request({ body: { method: "eth_unsubscribe", params: [id] }, onResponse: () => {}, onError: () => {} });
  };
  client.request({
    body: { method: "eth_subscribe", params: ["logs", { address: filter.address, topics }] },
    onResponse: (message) => {
      const m = message as { method?: string; params?: { result?: { transactionHash?: Hex | null; removed?: boolean } }; result?: unknown };
      if (m.method === "eth_subscription") {
        if (!ended && m.params?.result) onLog(m.params.result);
        return;
      }
      if (typeof m.result === "string") {
        id = m.result;
        if (ended) unsubscribe();
      }
    },
    onError: () => {},
  });
  return () => {
    ended = true;
    unsubscribe();
  };
}
