/**
 * Whether the ledger keeps up with its chains. Each chain's head, read over HTTP from the
 * chain's own node, is held against the block through which the ledger can answer
 * (`/ledger/readable`, Ponder's checkpoint). A ledger that answers while it has stopped
 * indexing is the one fault no other part of the service can see around, so every reader
 * that matters asks here: the stack's and `npm run ledger`'s supervisors (which restart or
 * exit), and the service (its log, `/readyz`, the console's Problems and the metrics).
 *
 * A chain is
 * - `current`: the ledger is within `maxLagBlocks` of the head and has moved (or stood at the
 *   head) within `stallMs`;
 * - `behind`: more than `maxLagBlocks` behind, but still moving (a backfill, a burst);
 * - `stalled`: behind the head and still for longer than `stallMs` while the chain moved, or
 *   unreadable for longer than SILENT_STALLS x `stallMs` (a process alive and silent is healed
 *   as a still one is; the longer bound lets a busy machine's slow answers pass);
 * - `unreadable`: the ledger could not be read (down, or not yet listening), for less than that;
 * - `unknown`: the chain's head could not be read (the chain's fault, not the ledger's).
 */
import { z } from "zod";
import { publicClientFor } from "./chain-client.ts";
import type { ChainKey } from "./chains.ts";

export type LedgerState = "current" | "behind" | "stalled" | "unreadable" | "unknown";

export interface LedgerBounds {
  /** How long the ledger may stand still behind a moving chain before it is stalled. */
  stallMs: number;
  /** How many blocks behind the head the ledger may be before it is behind. */
  maxLagBlocks: number;
}

/**
 * The bounds' settings, one definition for the service's configuration and the ledger's own
 * supervisors. The defaults are a few block times on the chains served here (a block a
 * second on Celo and locally, one every two seconds on Base).
 */
export const ledgerBoundsSettings = {
  /** How long the ledger may stand still behind a moving chain before it is stalled. */
  LEDGER_STALL_SECONDS: z.coerce.number().int().min(1).max(3_600).default(10),
  /** How many blocks behind a chain's head the ledger may be before it is behind. */
  LEDGER_MAX_LAG_BLOCKS: z.coerce.number().int().min(1).default(10),
};

export function ledgerBounds(settings: { LEDGER_STALL_SECONDS: number; LEDGER_MAX_LAG_BLOCKS: number }): LedgerBounds {
  return { stallMs: settings.LEDGER_STALL_SECONDS * 1_000, maxLagBlocks: settings.LEDGER_MAX_LAG_BLOCKS };
}

/** The bounds from the environment (for a process without the service's configuration); a bad value throws, naming it. */
export function ledgerBoundsFromEnv(env: Record<string, string | undefined> = process.env): LedgerBounds {
  const parsed = z.object(ledgerBoundsSettings).safeParse(env);
  if (!parsed.success) throw new Error(parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  return ledgerBounds(parsed.data);
}

export const DEFAULT_LEDGER_BOUNDS: LedgerBounds = ledgerBoundsFromEnv({});

export interface ChainProgress {
  chain: ChainKey;
  chainId: number;
  head: bigint | null;
  indexed: bigint | null;
  lagBlocks: number | null;
  /** How long the ledger has stood still behind the head (0 while it moves or is at the head). */
  stillMs: number;
  state: LedgerState;
  /** One line for a log, a console or a readiness answer; undefined while current. */
  problem?: string;
}

export interface WatchedChain {
  chain: ChainKey;
  chainId: number;
  rpcUrl: string;
}

const READ_TIMEOUT_MS = 3_000;
/** How many stall bounds a ledger may stay unreadable before it is stalled (a minute by default). */
export const SILENT_STALLS = 6;

/** Reads each chain's indexed block from the ledger's `/ledger/readable`. */
export async function readIndexedBlocks(ledgerUrl: string, timeoutMs = READ_TIMEOUT_MS): Promise<Map<number, bigint>> {
  const res = await fetch(`${ledgerUrl}/ledger/readable`, { signal: AbortSignal.timeout(timeoutMs) });
  if (!res.ok) throw new Error(`the ledger answered ${res.status} for /ledger/readable`);
  const { chains } = (await res.json()) as { chains: Array<{ chainId: number; block: number }> };
  return new Map(chains.filter((c) => c.block > 0).map((c) => [c.chainId, BigInt(c.block)]));
}

export class LedgerWatch {
  /** Per chain: the ledger's block at the last look, and when it last moved or stood at the head. */
  private readonly moved = new Map<number, { indexed: bigint | null; at: number }>();
  /** When the ledger last stopped answering, while it still does not. */
  private unreadableSince?: number;
  private readonly clients;
  private last: ChainProgress[] = [];
  private timer?: NodeJS.Timeout;
  private running?: Promise<ChainProgress[]>;

  constructor(
    private readonly options: {
      ledgerUrl: string;
      chains: WatchedChain[];
      bounds?: LedgerBounds;
      now?: () => number;
    },
  ) {
    this.clients = options.chains.map((c) => publicClientFor(c.chain, c.rpcUrl));
  }

  get bounds(): LedgerBounds {
    return this.options.bounds ?? DEFAULT_LEDGER_BOUNDS;
  }

  /** The last look's answer (empty before the first). */
  latest(): ChainProgress[] {
    return this.last;
  }

  /** Looks once: each chain's head and the ledger's block, judged against the bounds. Never throws. */
  check(): Promise<ChainProgress[]> {
    // Overlapping looks (a slow read, a caller beside the timer) share one.
    this.running ??= this.look().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Looks every `everyMs`; `onLook` hears each answer (a log of changes, a restart). */
  start(everyMs: number, onLook: (progress: ChainProgress[]) => void | Promise<void>): void {
    this.stop();
    const tick = async () => {
      await onLook(await this.check());
      if (this.timer) this.timer = setTimeout(tick, everyMs).unref();
    };
    this.timer = setTimeout(tick, 0).unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Forgets what the ledger did before (a restarted ledger starts its stall clock afresh). */
  reset(): void {
    this.moved.clear();
    this.unreadableSince = undefined;
  }

  private async look(): Promise<ChainProgress[]> {
    const now = this.options.now ?? Date.now;
    const [indexed, heads] = await Promise.all([
      readIndexedBlocks(this.options.ledgerUrl).catch((err: Error) => err),
      Promise.all(this.clients.map((client) => client.getBlockNumber().catch(() => null))),
    ]);
    const t = now();
    if (indexed instanceof Error) this.unreadableSince ??= t;
    else this.unreadableSince = undefined;
    this.last = this.options.chains.map((c, i) => this.judge(c, heads[i]!, indexed, t));
    return this.last;
  }

  private judge(c: WatchedChain, head: bigint | null, indexed: Map<number, bigint> | Error, t: number): ChainProgress {
    const base = { chain: c.chain, chainId: c.chainId, head, indexed: null, lagBlocks: null, stillMs: 0 };
    if (indexed instanceof Error) {
      // A ledger process that lives but no longer answers (a blocked loop, a wedged database
      // pool) would otherwise never be restarted: past the stall bound it is stalled.
      const silentMs = t - this.unreadableSince!;
      if (silentMs > SILENT_STALLS * this.bounds.stallMs) {
        return { ...base, stillMs: silentMs, state: "stalled", problem: `ledger stalled: it could not be read for ${Math.round(silentMs / 1000)} s (${indexed.message})` };
      }
      return { ...base, state: "unreadable", problem: `the ledger could not be read: ${indexed.message}` };
    }
    const block = indexed.get(c.chainId) ?? null;
    const seen = this.moved.get(c.chainId);
    // The stall clock runs only while the ledger is behind a head it has not moved towards.
    if (!seen || seen.indexed !== block || (head !== null && block !== null && block >= head)) {
      this.moved.set(c.chainId, { indexed: block, at: t });
    }
    const since = this.moved.get(c.chainId)!.at;
    if (head === null) {
      return { ...base, indexed: block, state: "unknown", problem: `${c.chain}'s head could not be read from its node` };
    }
    const lagBlocks = block === null ? Number(head) : Math.max(0, Number(head - block));
    const stillMs = lagBlocks > 0 ? t - since : 0;
    const progress = { ...base, indexed: block, lagBlocks, stillMs };
    const at = block === null ? "no block yet" : `block ${block}`;
    if (lagBlocks > 0 && stillMs > this.bounds.stallMs) {
      return { ...progress, state: "stalled", problem: `ledger stalled: ${at} for ${Math.round(stillMs / 1000)} s while ${c.chain} reached ${head}` };
    }
    if (lagBlocks > this.bounds.maxLagBlocks) {
      return { ...progress, state: "behind", problem: `ledger behind: ${at}, ${lagBlocks} blocks under ${c.chain}'s head ${head} (bound ${this.bounds.maxLagBlocks})` };
    }
    return { ...progress, state: "current" };
  }
}

/**
 * A look's reader that writes one line each time a chain's state changes (a stall, falling
 * behind, the ledger unreadable, and its return), for a supervisor's log.
 */
export function stateChangeLines(write: (line: string) => void): (progress: ChainProgress[]) => void {
  const said = new Map<ChainKey, LedgerState>();
  return (progress) => {
    for (const p of progress) {
      if (said.get(p.chain) === p.state || (!said.has(p.chain) && p.state === "current")) continue;
      write(p.problem ? `ledger: ${p.chain}: ${p.problem}` : `ledger: ${p.chain} ${p.state} again at block ${p.indexed}`);
      said.set(p.chain, p.state);
    }
  };
}

/** Whether a look found the ledger healthy on every chain it could judge. */
export function ledgerHealthy(progress: ChainProgress[]): boolean {
  return progress.every((p) => p.state === "current" || p.state === "unknown");
}
