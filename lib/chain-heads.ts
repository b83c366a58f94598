/**
 * New blocks, as the service's own node announces them. Whoever waits on the chain (a
 * transaction's receipt, a payment's confirmation depth) waits for "the next block" and is
 * woken when it arrives, instead of sleeping a polling interval and answering up to an
 * interval late.
 *
 * Over WebSocket (eth_subscribe newHeads) where the node offers it: `<CHAIN>_WS_URL`, or a
 * local Hardhat node's own port (lib/chain-client.ts webSocketUrlFor). Otherwise the head is
 * polled every HEAD_POLL_MS, and only while someone waits: a few requests a second per
 * chain while a payment is in flight, none when idle. Until the subscription is confirmed
 * the head is polled too, and a socket not subscribed within WS_SUBSCRIBE_MS is given up
 * (a node that accepts the connection and never answers must not leave every wait to run
 * out its time).
 */
import { publicClientFor, webSocketUrlFor } from "./chain-client.ts";
import type { ChainKey } from "./chains.ts";

/** How often the head is read while someone waits, where there is no WebSocket. */
export const HEAD_POLL_MS = 50;

/** How long a WebSocket may take to connect and confirm its subscription before it is given up. */
export const WS_SUBSCRIBE_MS = 5_000;

export interface HeadsOptions {
  /** Subscribe where the chain's node offers a WebSocket (else poll while waiting). Default true. */
  webSocket?: boolean;
  pollMs?: number;
  /** WS_SUBSCRIBE_MS unless set. */
  subscribeTimeoutMs?: number;
}

/** Heads whose time is kept, so a payment's block time needs no request of its own. */
const KEPT_HEADS = 64;

interface Watch {
  chain: ChainKey;
  latest: bigint;
  /** Recent heads by hash (WebSocket only: newHeads carries each header). */
  times: Map<string, bigint>;
  waiters: Set<() => void>;
  stop?: () => void;
  /** The node has confirmed the newHeads subscription: heads arrive without asking. */
  subscribed?: boolean;
  polling?: boolean;
}

export class ChainHeads {
  private readonly watches = new Map<ChainKey, Watch>();
  private closed = false;

  /** `rpcUrlOf`: the chain's node, or undefined for a chain this process does not reach. */
  constructor(
    private readonly rpcUrlOf: (chain: ChainKey) => string | undefined,
    private readonly options: HeadsOptions = {},
  ) {}

  /** The newest block this instance has heard of (0 before the first). */
  latest(chain: ChainKey): bigint {
    return this.watch(chain).latest;
  }

  /**
   * Resolves once a block after `seen` has been announced, or after `timeoutMs`: the caller
   * then looks again at what it waits for either way. A block announced before the call
   * (after `seen`) resolves at once, so no block is missed between a look and the wait.
   */
  after(chain: ChainKey, seen: bigint, timeoutMs: number): Promise<void> {
    const w = this.watch(chain);
    if (w.latest > seen || this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        w.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      w.waiters.add(done);
      if (!w.subscribed && !w.polling) void this.poll(chain, w);
    });
  }

  /** The time of block `hash` when it arrived as a head of `chain` lately; undefined otherwise (ask the node). */
  timeOf(chain: ChainKey, hash: string): bigint | undefined {
    return this.watches.get(chain)?.times.get(hash.toLowerCase());
  }

  /** Closes the subscriptions (shutdown); waiters are released. */
  close(): void {
    this.closed = true;
    for (const w of this.watches.values()) {
      w.stop?.();
      for (const wake of [...w.waiters]) wake();
    }
    this.watches.clear();
  }

  private watch(chain: ChainKey): Watch {
    let w = this.watches.get(chain);
    if (w) return w;
    w = { chain, latest: 0n, times: new Map(), waiters: new Set() };
    this.watches.set(chain, w);
    const rpcUrl = this.rpcUrlOf(chain);
    const ws = rpcUrl && this.options.webSocket !== false ? webSocketUrlFor(chain, rpcUrl) : undefined;
    if (ws && !this.closed) this.subscribe(w, ws);
    return w;
  }

  /**
   * newHeads over the node's WebSocket (a plain JSON-RPC subscription: viem shares one socket
   * per URL across the process, which one instance could not close without closing another's).
   * A socket that fails or closes leaves the chain to polling, as if it had none.
   */
  private subscribe(w: Watch, url: string): void {
    const socket = new WebSocket(url);
    const giveUp = setTimeout(() => socket.close(), this.options.subscribeTimeoutMs ?? WS_SUBSCRIBE_MS);
    giveUp.unref(); // a connect in progress must not keep a finished process alive
    const fallBack = () => {
      clearTimeout(giveUp);
      w.stop = undefined;
      w.subscribed = false;
      if (w.waiters.size > 0 && !w.polling) void this.poll(w.chain, w);
    };
    w.stop = () => {
      clearTimeout(giveUp);
      socket.onclose = null;
      socket.close();
    };
    socket.onopen = () => socket.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] }));
    socket.onmessage = (event) => {
      try {
        const msg = JSON.parse(String(event.data)) as { id?: number; result?: unknown; method?: string; params?: { result?: { number?: string; hash?: string; timestamp?: string } } };
        if (msg.id === 1) {
          if (typeof msg.result !== "string") return socket.close(); // refused: poll instead
          clearTimeout(giveUp);
          w.subscribed = true;
          // A block mined between the last poll and the subscription is announced by neither.
          void this.readHead(w);
          return;
        }
        const head = msg.method === "eth_subscription" ? msg.params?.result : undefined;
        if (!head?.number) return;
        if (head.hash && head.timestamp) {
          w.times.set(head.hash.toLowerCase(), BigInt(head.timestamp));
          if (w.times.size > KEPT_HEADS) w.times.delete(w.times.keys().next().value!);
        }
        this.announce(w, BigInt(head.number));
      } catch {
        // not a head: ignored
      }
    };
    // An error is always followed by a close event (WHATWG WebSocket), which falls back; closing
    // here would recurse while the socket is still connecting (close fails it with an error).
    socket.onerror = () => {};
    socket.onclose = fallBack;
  }

  private announce(w: Watch, n: bigint): void {
    if (n <= w.latest) return;
    w.latest = n;
    for (const wake of [...w.waiters]) wake();
  }

  /** Reads the head once and announces it (a failed read is left to the next look). */
  private async readHead(w: Watch): Promise<void> {
    const rpcUrl = this.rpcUrlOf(w.chain);
    if (!rpcUrl) return;
    const n = await publicClientFor(w.chain, rpcUrl).getBlockNumber().catch(() => undefined);
    if (n !== undefined) this.announce(w, n);
  }

  /** Reads the head every HEAD_POLL_MS while anyone waits and no subscription brings heads. */
  private async poll(chain: ChainKey, w: Watch): Promise<void> {
    if (w.polling || !this.rpcUrlOf(chain)) return;
    w.polling = true;
    try {
      while (w.waiters.size > 0 && !this.closed && !w.subscribed) {
        await this.readHead(w);
        if (w.waiters.size > 0) await new Promise((r) => setTimeout(r, this.options.pollMs ?? HEAD_POLL_MS));
      }
    } finally {
      w.polling = false;
    }
  }
}
