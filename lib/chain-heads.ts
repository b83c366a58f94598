/**
 * New blocks, as the service's own node announces them. Whoever waits on the chain (a
 * transaction's receipt, a payment's confirmation depth) waits for "the next block" and is
 * woken when it arrives, instead of sleeping a polling interval and answering up to an
 * interval late.
 *
 * Over WebSocket (eth_subscribe newHeads) where the node offers it: `<CHAIN>_WS_URL`, or a
 * local Hardhat node's own port (lib/chain-client.ts webSocketUrlFor). Otherwise the head is
 * polled every HEAD_POLL_MS, and only while someone waits: a few requests a second per
 * chain while a payment is in flight, none when idle.
 *
 * A subscription is never trusted blindly, because nodes drop them silently (the socket
 * stays open and no error comes: go-ethereum#23845, and Hardhat's five-minute expiry,
 * stack/subscription-keeper.ts):
 * - until it is confirmed, and whenever it has pushed nothing for `quietMs` while someone
 *   waits, the head is polled too, so a wait is woken by the next block either way;
 * - a poll that finds a block the subscription did not push, twice in a row, makes a new
 *   subscription;
 * - a socket not subscribed within WS_SUBSCRIBE_MS is given up, and one that is given up,
 *   refused, fails or closes is made again after a backoff (1 s, doubling to 30 s, back to
 *   1 s once heads arrive).
 * A block replaced at the same height (a reorganisation of the newest block) is a new head
 * too: waiters are woken to look again.
 */
import type { PublicClient } from "viem";
import WebSocket from "ws";
import { publicClientFor, webSocketUrlFor } from "./chain-client.ts";
import type { ChainKey } from "./chains.ts";

/** How often the head is read while someone waits and no subscription brings heads. */
export const HEAD_POLL_MS = 50;

/** How long a WebSocket may take to connect and confirm its subscription before it is given up. */
export const WS_SUBSCRIBE_MS = 5_000;

/** How long a confirmed subscription may push nothing before waiters poll beside it. */
export const QUIET_MS = 2_000;

const FIRST_RESUBSCRIBE_MS = 1_000;
const MAX_RESUBSCRIBE_MS = 30_000;
/** Polls in a row that find a block the subscription did not push before it is made again. */
const MISSED_BEFORE_RESUBSCRIBE = 2;

export interface HeadsOptions {
  /** Subscribe where the chain's node offers a WebSocket (else poll while waiting). Default true. */
  webSocket?: boolean;
  pollMs?: number;
  /** WS_SUBSCRIBE_MS unless set. */
  subscribeTimeoutMs?: number;
  /** QUIET_MS unless set. */
  quietMs?: number;
}

/** Heads whose time is kept, so a payment's block time needs no request of its own. */
const KEPT_HEADS = 64;

interface Watch {
  chain: ChainKey;
  /** The chain's node over HTTP (none for a chain this process does not reach). */
  client?: PublicClient;
  latest: bigint;
  /** The newest head's hash, where known: a different one at the same height is a replacement. */
  latestHash?: string;
  /** Recent heads by hash. */
  times: Map<string, bigint>;
  waiters: Set<() => void>;
  wsUrl?: string;
  /** Closes the current socket without making another. */
  stop?: () => void;
  /** The node has confirmed the newHeads subscription. */
  subscribed: boolean;
  /** When the subscription last pushed a head (or was confirmed). */
  pushedAt: number;
  /** Polls in a row that found a head the subscription did not push. */
  missed: number;
  resubscribeMs: number;
  resubscribeTimer?: NodeJS.Timeout;
  polling?: boolean;
}

interface Head {
  number?: string;
  hash?: string;
  timestamp?: string;
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

  /** The newest head's hash, where this instance has heard it (a replacement at the same height changes it). */
  latestHash(chain: ChainKey): string | undefined {
    return this.watch(chain).latestHash;
  }

  /**
   * Resolves once a block after `seen` has been announced (or the newest block was replaced),
   * or after `timeoutMs`: the caller then looks again at what it waits for either way. A block
   * announced before the call (after `seen`) resolves at once, so no block is missed between
   * a look and the wait.
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
      if (!w.polling) void this.poll(w);
    });
  }

  /** The time of block `hash` when it arrived as a head of `chain` lately; undefined otherwise (ask the node). */
  timeOf(chain: ChainKey, hash: string): bigint | undefined {
    return this.watches.get(chain)?.times.get(hash.toLowerCase());
  }

  /** Whether close() was called: every wait on these heads then answers at once, so loops that wait on them end. */
  isClosed(): boolean {
    return this.closed;
  }

  /** Whether `chain`'s heads arrive by a confirmed subscription now. */
  subscribed(chain: ChainKey): boolean {
    return this.watches.get(chain)?.subscribed ?? false;
  }

  /** Closes the subscriptions (shutdown); waiters are released. */
  close(): void {
    this.closed = true;
    for (const w of this.watches.values()) {
      clearTimeout(w.resubscribeTimer);
      w.stop?.();
      for (const wake of [...w.waiters]) wake();
    }
    this.watches.clear();
  }

  private watch(chain: ChainKey): Watch {
    let w = this.watches.get(chain);
    if (w) return w;
    const rpcUrl = this.rpcUrlOf(chain);
    const wsUrl = rpcUrl && this.options.webSocket !== false ? webSocketUrlFor(chain, rpcUrl) : undefined;
    w = { chain, client: rpcUrl ? publicClientFor(chain, rpcUrl) : undefined, latest: 0n, times: new Map(), waiters: new Set(), wsUrl, subscribed: false, pushedAt: 0, missed: 0, resubscribeMs: FIRST_RESUBSCRIBE_MS };
    this.watches.set(chain, w);
    if (wsUrl && !this.closed) this.subscribe(w, wsUrl);
    return w;
  }

  /** Whether heads are to be read over HTTP now: no confirmed subscription, or one that has gone quiet. */
  private pollNeeded(w: Watch): boolean {
    return !w.subscribed || Date.now() - w.pushedAt > (this.options.quietMs ?? QUIET_MS);
  }

  /**
   * newHeads over the node's WebSocket (a plain JSON-RPC subscription: viem shares one socket
   * per URL across the process, which one instance could not close without closing another's).
   * A socket that fails or closes leaves the chain to polling, and is made again after a backoff.
   */
  private subscribe(w: Watch, url: string): void {
    // `ws`, not Node's own WebSocket: a socket given up must be cut at once, and Node's has no
    // way to (its close() waits for the node's closing handshake, with no timeout, so a node
    // that has gone mute kept one connection per try), nor any "close" for a socket that never
    // opened. `terminate()` ends the connection whatever state it is in.
    const socket = new WebSocket(url);
    // The socket's errors are heard here for its whole life: `ws` throws one nobody hears.
    socket.on("error", () => {});
    const giveUp = setTimeout(() => lost(), this.options.subscribeTimeoutMs ?? WS_SUBSCRIBE_MS);
    giveUp.unref(); // a connect in progress must not keep a finished process alive
    // Ends this socket once, for good: its events are heard no more after it.
    let ended = false;
    const end = () => {
      ended = true;
      clearTimeout(giveUp);
      socket.onopen = socket.onmessage = socket.onerror = socket.onclose = null;
      socket.terminate();
    };
    const stop = () => {
      end();
      w.subscribed = false;
    };
    w.stop = stop;
    socket.onopen = () => socket.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] }));
    socket.onmessage = (event) => {
      try {
        const msg = JSON.parse(String(event.data)) as { id?: number; result?: unknown; method?: string; params?: { result?: Head } };
        if (msg.id === 1) {
          if (typeof msg.result !== "string") return lost(); // refused: poll instead
          clearTimeout(giveUp);
          w.subscribed = true;
          w.pushedAt = Date.now();
          w.missed = 0; // an earlier subscription's misses are not this one's
          // A block mined between the last poll and the subscription is announced by neither.
          void this.readHead(w);
          return;
        }
        const head = msg.method === "eth_subscription" ? msg.params?.result : undefined;
        if (!head?.number) return;
        w.pushedAt = Date.now();
        w.missed = 0;
        w.resubscribeMs = FIRST_RESUBSCRIBE_MS;
        this.announce(w, head);
      } catch {
        // not a head: ignored
      }
    };
    // Lost (an error, a close, a refusal or the give-up, whichever comes first): the chain
    // falls back to polling, and the socket is made again after a backoff.
    const lost = () => {
      if (ended) return;
      end();
      if (w.stop === stop) w.stop = undefined;
      w.subscribed = false;
      if (w.waiters.size > 0 && !w.polling) void this.poll(w);
      this.resubscribeLater(w, url);
    };
    socket.onerror = lost;
    socket.onclose = lost;
  }

  private resubscribeLater(w: Watch, url: string): void {
    if (this.closed) return;
    clearTimeout(w.resubscribeTimer);
    w.resubscribeTimer = setTimeout(() => {
      if (!this.closed && !w.stop) this.subscribe(w, url);
    }, w.resubscribeMs);
    w.resubscribeTimer.unref();
    w.resubscribeMs = Math.min(w.resubscribeMs * 2, MAX_RESUBSCRIBE_MS);
  }

  /** Takes a head in: a higher block, or another block at the newest height, wakes the waiters. Returns whether it was new. */
  private announce(w: Watch, head: Head): boolean {
    const n = BigInt(head.number!);
    const hash = head.hash?.toLowerCase();
    if (hash && head.timestamp) {
      w.times.set(hash, BigInt(head.timestamp));
      if (w.times.size > KEPT_HEADS) w.times.delete(w.times.keys().next().value!);
    }
    const replaced = n === w.latest && hash !== undefined && w.latestHash !== undefined && hash !== w.latestHash;
    if (n < w.latest || (n === w.latest && !replaced)) return false;
    w.latest = n;
    w.latestHash = hash;
    for (const wake of [...w.waiters]) wake();
    return true;
  }

  /** Reads the head once and announces it; returns whether it was new (a failed read is left to the next look). */
  private async readHead(w: Watch): Promise<boolean> {
    const block = await w.client?.getBlock({ blockTag: "latest" }).catch(() => undefined);
    if (!block) return false;
    return this.announce(w, { number: `0x${block.number.toString(16)}`, hash: block.hash ?? undefined, timestamp: `0x${block.timestamp.toString(16)}` });
  }

  /**
   * While anyone waits: reads the head every HEAD_POLL_MS whenever no subscription brings
   * heads, or the one there is has gone quiet. A quiet subscription that misses blocks the
   * poll finds is made again.
   */
  private async poll(w: Watch): Promise<void> {
    if (w.polling || !w.client) return;
    w.polling = true;
    try {
      while (w.waiters.size > 0 && !this.closed) {
        if (this.pollNeeded(w)) {
          const quietSubscription = w.subscribed;
          const found = await this.readHead(w);
          // Still the same confirmed subscription after the read (one lost meanwhile is being made again already).
          if (quietSubscription && w.subscribed && found && ++w.missed >= MISSED_BEFORE_RESUBSCRIBE && w.wsUrl) {
            // Open, confirmed, and silent while the chain moves: make it again.
            w.missed = 0;
            w.stop?.();
            w.stop = undefined;
            w.resubscribeMs = FIRST_RESUBSCRIBE_MS;
            this.subscribe(w, w.wsUrl);
          }
        }
        if (w.waiters.size > 0) await new Promise((r) => setTimeout(r, this.options.pollMs ?? HEAD_POLL_MS));
      }
    } finally {
      w.polling = false;
    }
  }
}
