/**
 * Where the NGN/USD rate comes from: a configured figure (the local default), or an HTTP
 * source answering JSON, fetched with a timeout and guarded by a band: one bad reading
 * would otherwise become a price honoured for a day.
 */
import { type Log, silentLog } from "../log.ts";
import { errorText } from "../log-safety.ts";
import type { Db } from "../db.ts";
import { RATE_SCALE } from "./price.ts";
import { toScaled } from "./decimal.ts";

export interface RateSource {
  /** NGN per USD, in thousandths. */
  ngnPerUsdMilli(): Promise<bigint>;
  /** Where the rate comes from, as a quote names it. */
  readonly source?: string;
}

export class ConfiguredRate implements RateSource {
  readonly source = "configured (NGN_PER_USD)";
  constructor(private readonly rateMilli: bigint) {}
  async ngnPerUsdMilli() {
    return this.rateMilli;
  }
}

/** GET `url`, read the decimal at `field` (a string or number) of the JSON answer: one raw reading. */
export async function readHttpRate(url: string, field: string, timeoutMs: number): Promise<bigint> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!res.ok) throw new Error(`rate source answered ${res.status}`);
  const body = (await res.json()) as Record<string, unknown>;
  const raw = body[field];
  const rate = typeof raw === "string" || typeof raw === "number" ? toScaled(raw, RATE_SCALE) : undefined;
  if (rate === undefined || rate <= 0n) throw new Error(`rate source gave no usable "${field}"`);
  return rate;
}

export interface RateBand {
  /** A reading further than this from the reference rate, in percent, is refused. */
  maxDeviationPct: number;
  /**
   * The reference is the good rate as it stood this long ago (the first good reading, while
   * the source is younger): the band is measured against it, not against the last reading,
   * so small steps cannot walk the rate further than the band within any such window.
   */
  referenceSeconds: number;
  /** How long the last good rate serves when no acceptable reading comes; past it quoting stops. */
  maxStalenessSeconds: number;
  /** The last good rate before the first reading is recorded (NGN_PER_USD). */
  anchorMilli: bigint;
}

/**
 * A raw source behind a band. Each reading (at most one per `cacheMs`, shared by concurrent
 * quotes) is compared with a slow reference: the good rate as it stood `referenceSeconds`
 * ago (good rates are kept in fx_rate, so every instance and every restart share them).
 * Within the band of the reference it becomes the new last good rate; outside it, or when
 * the source fails, the last good rate serves until it is `maxStalenessSeconds` old, and
 * then quoting stops (RATE_UNAVAILABLE, 503) until an operator looks. Measured against the
 * reference, a run of small steps moves the rate at most the band per window, and a source
 * that comes back to the true rate after a walk is believed again.
 *
 * A failed or refused reading is remembered like a good one: the last good rate then serves
 * for `cacheMs` (never past its staleness limit) before the source is asked again, so a
 * source that is down or hanging costs one timeout per interval, not one per 402.
 */
export class GuardedRate implements RateSource {
  /** What to answer without asking the source, until `until` (epoch ms): a rate, or quoting stopped. */
  private decided: { rate: bigint; until: number } | { stopped: Error; until: number } | undefined;
  private inFlight: Promise<bigint> | undefined;

  constructor(
    private readonly read: () => Promise<bigint>,
    private readonly db: Db,
    readonly source: string,
    private readonly band: RateBand,
    private readonly cacheMs: number,
    private readonly log: Log = silentLog,
  ) {}

  async ngnPerUsdMilli(): Promise<bigint> {
    const d = this.decided;
    if (d && Date.now() < d.until) {
      if ("stopped" in d) throw d.stopped;
      return d.rate;
    }
    this.inFlight ??= this.decide().finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  private async lastGood(): Promise<{ rate: bigint; readAt: Date } | undefined> {
    const [row] = await this.db.query<{ rate_milli: string; read_at: Date }>(
      `SELECT rate_milli::text AS rate_milli, read_at FROM fx_rate WHERE source = $1 ORDER BY read_at DESC, seq DESC LIMIT 1`,
      [this.source],
    );
    return row && { rate: BigInt(row.rate_milli), readAt: new Date(row.read_at) };
  }

  /** The good rate as it stood `referenceSeconds` ago; the first good one while the source is younger; else the configured anchor. */
  private async reference(): Promise<bigint> {
    const [row] = await this.db.query<{ rate_milli: string }>(
      `(SELECT rate_milli::text AS rate_milli, 0 AS pick FROM fx_rate WHERE source = $1 AND read_at <= now() - make_interval(secs => $2) ORDER BY read_at DESC, seq DESC LIMIT 1)
       UNION ALL
       (SELECT rate_milli::text AS rate_milli, 1 AS pick FROM fx_rate WHERE source = $1 ORDER BY read_at ASC, seq ASC LIMIT 1)
       ORDER BY pick LIMIT 1`,
      [this.source, this.band.referenceSeconds],
    );
    return row ? BigInt(row.rate_milli) : this.band.anchorMilli;
  }

  private async decide(): Promise<bigint> {
    const last = await this.lastGood();
    const anchor = await this.reference();
    const askAgainAt = Date.now() + this.cacheMs;
    let why: string;
    try {
      const reading = await this.read();
      if (withinBand(reading, anchor, this.band.maxDeviationPct)) {
        await this.db.query(`INSERT INTO fx_rate (rate_milli, source) VALUES ($1, $2)`, [reading.toString(), this.source]);
        this.decided = { rate: reading, until: askAgainAt };
        return reading;
      }
      why = `the source read ${reading} (thousandths of NGN per USD), more than ${this.band.maxDeviationPct}% from the reference ${anchor} (the good rate ${this.band.referenceSeconds} s ago)`;
      this.log.warn("rate reading refused: outside the band", { reading: reading.toString(), reference: anchor.toString() });
    } catch (err) {
      const error = errorText(err);
      why = `the rate source failed: ${error}`;
      this.log.warn("rate source failed", { error });
    }
    const staleAt = last && last.readAt.getTime() + this.band.maxStalenessSeconds * 1000;
    if (last && staleAt && Date.now() <= staleAt) {
      // The last good rate serves until the source is asked again, never past its staleness limit.
      this.decided = { rate: last.rate, until: Math.min(askAgainAt, staleAt) };
      return last.rate;
    }
    const stopped = new Error(`${why}; no good rate within the last ${this.band.maxStalenessSeconds} s, so quoting is stopped`);
    this.decided = { stopped, until: askAgainAt };
    throw stopped;
  }
}

/** Whether `reading` is within `pct` percent of `anchor` (integer arithmetic: basis points). */
export function withinBand(reading: bigint, anchor: bigint, pct: number): boolean {
  const diff = reading > anchor ? reading - anchor : anchor - reading;
  return diff * 10_000n <= anchor * BigInt(Math.round(pct * 100));
}

/** The rate source the configuration names: the guarded HTTP source when RATE_SOURCE_URL is set, else the configured figure. */
export function rateSourceFor(
  config: {
    RATE_SOURCE_URL?: string;
    RATE_SOURCE_FIELD: string;
    RATE_TIMEOUT_MS: number;
    RATE_CACHE_MS: number;
    RATE_MAX_DEVIATION_PCT: number;
    RATE_REFERENCE_SECONDS: number;
    RATE_MAX_STALENESS_SECONDS: number;
    NGN_PER_USD: bigint;
  },
  db: Db,
  log?: Log,
): RateSource {
  const url = config.RATE_SOURCE_URL;
  if (!url) return new ConfiguredRate(config.NGN_PER_USD);
  return new GuardedRate(
    () => readHttpRate(url, config.RATE_SOURCE_FIELD, config.RATE_TIMEOUT_MS),
    db,
    url,
    { maxDeviationPct: config.RATE_MAX_DEVIATION_PCT, referenceSeconds: config.RATE_REFERENCE_SECONDS, maxStalenessSeconds: config.RATE_MAX_STALENESS_SECONDS, anchorMilli: config.NGN_PER_USD },
    config.RATE_CACHE_MS,
    log,
  );
}
