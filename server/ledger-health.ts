/**
 * The service's watch on the ledger (lib/ledger-watch.ts): every LEDGER_WATCH_INTERVAL_MS it
 * holds the block the ledger has indexed against each chain's head. The service decides money
 * from the ledger, so a ledger that answers while it has stopped, or falls behind its bound,
 * is never silent here: it is an error line when it starts (and every minute while it lasts),
 * a failing item of /readyz, a Problem in the console and a metric with an alert
 * (ops/prometheus). Its return is an info line.
 */
import { deployedChains, requireChain, rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import { LedgerWatch, type ChainProgress, type LedgerBounds, type LedgerState } from "../lib/ledger-watch.ts";
import type { ChainKey } from "../lib/chains.ts";
import type { Log } from "./log.ts";

/** While a problem lasts, its error line is repeated this often. */
const REPEAT_EVERY_MS = 60_000;

export class LedgerHealth {
  private readonly watch: LedgerWatch;
  private readonly reported = new Map<ChainKey, { state: LedgerState; at: number }>();

  constructor(private readonly deps: { ledgerUrl: string; deployments: Deployments; bounds: LedgerBounds; log: Log }) {
    this.watch = new LedgerWatch({
      ledgerUrl: deps.ledgerUrl,
      bounds: deps.bounds,
      chains: deployedChains(deps.deployments).map((chain) => {
        const d = requireChain(deps.deployments, chain);
        return { chain, chainId: d.chainId, rpcUrl: rpcUrlFor(chain, d) };
      }),
    });
  }

  get bounds(): LedgerBounds {
    return this.watch.bounds;
  }

  /** Looks every `everyMs` until stopped. */
  start(everyMs: number): void {
    this.watch.start(everyMs, (progress) => this.report(progress));
  }

  stop(): void {
    this.watch.stop();
  }

  /** The last look (empty before the first). */
  latest(): ChainProgress[] {
    return this.watch.latest();
  }

  /** Looks now (shared with a look in progress), and reports it as the timer's looks are. */
  async check(): Promise<ChainProgress[]> {
    const progress = await this.watch.check();
    this.report(progress);
    return progress;
  }

  private report(progress: ChainProgress[]): void {
    const now = Date.now();
    for (const p of progress) {
      const before = this.reported.get(p.chain);
      const fields = { chain: p.chain, state: p.state, head: p.head?.toString(), indexed: p.indexed?.toString(), lag_blocks: p.lagBlocks, still_ms: p.stillMs };
      if (p.problem && (before?.state !== p.state || now - before.at >= REPEAT_EVERY_MS)) {
        this.deps.log.error(p.problem, fields);
        this.reported.set(p.chain, { state: p.state, at: now });
      } else if (!p.problem && before && before.state !== p.state) {
        this.deps.log.info(`ledger ${p.state} again on ${p.chain}`, fields);
        this.reported.set(p.chain, { state: p.state, at: now });
      } else if (!before) {
        this.reported.set(p.chain, { state: p.state, at: now });
      }
    }
  }
}
