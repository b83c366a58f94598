/**
 * Rate versions: what the service prices with (the NGN/USD rate and the fee schedule), one
 * row per change, live from `live_from` until superseded (`live_until`). A price is a pure
 * function of a bill and a version (price.ts), so the 402 writes nothing: it shows the price
 * under the current version. A payment is honoured if its amount is what a version live
 * within the challenge's lifetime priced for that very bill, recomputed here from the
 * stored version, never taken from the client.
 *
 * Each instance keeps the current version in memory and asks the database again only when
 * its rate source gives another figure, or after RECHECK_MS: so an instance may go on
 * showing a version for up to RECHECK_MS after another instance superseded it, and the
 * payment window allows for that.
 */
import type { Db } from "../db.ts";
import { ServiceError } from "../errors.ts";
import { CATEGORIES, type Category } from "./price.ts";
import type { RateSource } from "./rates.ts";

export interface RateVersion {
  id: string;
  /** NGN per USD, in thousandths. */
  rateMilli: bigint;
  /** The service fee per category, in micro-USD. */
  fees: Record<Category, bigint>;
  source: string;
  liveFrom: Date;
  liveUntil: Date | null;
}

/** How long an instance trusts its in-memory current version before asking the database again. */
export const RECHECK_MS = 5_000;

interface Row {
  id: string;
  rate_milli: string;
  fees: Record<string, string> | null;
  source: string;
  live_from: Date;
  live_until: Date | null;
}

const COLUMNS = `id::text AS id, rate_milli::text AS rate_milli, fees, source, live_from, live_until`;

function canonicalFees(fees: Record<Category, bigint>): Record<string, string> {
  return Object.fromEntries(CATEGORIES.map((c) => [c, fees[c].toString()]));
}

export class RateVersions {
  private cached: { version: RateVersion; checkedAt: number } | undefined;
  private inFlight: { fingerprint: string; promise: Promise<RateVersion> } | undefined;

  constructor(
    private readonly db: Db,
    private readonly rates: RateSource,
    /** The configured fee schedule: part of every version made here. */
    private readonly fees: Record<Category, bigint>,
  ) {}

  /** The version to price with now: from memory unless the rate moved or RECHECK_MS passed. */
  async current(): Promise<RateVersion> {
    const rate = await this.rates.ngnPerUsdMilli().catch((err: Error) => {
      throw new ServiceError("RATE_UNAVAILABLE", err.message);
    });
    const c = this.cached;
    if (c && c.version.rateMilli === rate && Date.now() - c.checkedAt < RECHECK_MS) return c.version;
    const fingerprint = `${rate}|${JSON.stringify(canonicalFees(this.fees))}`;
    // Concurrent requests that find the same change wait on one statement.
    if (this.inFlight?.fingerprint !== fingerprint) {
      const promise = this.open(fingerprint, rate).then((version) => {
        this.cached = { version, checkedAt: Date.now() };
        return version;
      });
      const entry = { fingerprint, promise };
      this.inFlight = entry;
      void promise.finally(() => {
        if (this.inFlight === entry) this.inFlight = undefined;
      }).catch(() => {});
    }
    return this.inFlight.promise;
  }

  /**
   * The open version with this fingerprint, or a new one superseding every other open
   * version. Written only when the rate (or fee schedule) changes: a restart, or another
   * instance, with the same figures finds the open row.
   */
  private async open(fingerprint: string, rate: bigint): Promise<RateVersion> {
    const [found] = await this.db.query<Row>(`SELECT ${COLUMNS} FROM rate_version WHERE live_until IS NULL AND fingerprint = $1`, [fingerprint]);
    if (found) return toVersion(found, this.fees);
    const [made] = await this.db.query<Row>(
      `WITH superseded AS (
         UPDATE rate_version SET live_until = now() WHERE live_until IS NULL AND fingerprint <> $1 RETURNING id)
       INSERT INTO rate_version (fingerprint, rate_milli, fees, source)
       VALUES ($1, $2, $3::jsonb, $4)
       ON CONFLICT (fingerprint) WHERE live_until IS NULL DO NOTHING
       RETURNING ${COLUMNS}`,
      [fingerprint, rate.toString(), JSON.stringify(canonicalFees(this.fees)), this.rates.source ?? "configured"],
    );
    if (made) return toVersion(made, this.fees);
    // Another instance opened the same version meanwhile.
    const [theirs] = await this.db.query<Row>(`SELECT ${COLUMNS} FROM rate_version WHERE live_until IS NULL AND fingerprint = $1`, [fingerprint]);
    if (!theirs) throw new Error("no open rate version after opening one");
    return toVersion(theirs, this.fees);
  }

  /** Every version live at some moment of the last `seconds` (and RECHECK_MS), newest first. */
  async liveWithin(seconds: number): Promise<RateVersion[]> {
    const rows = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM rate_version
       WHERE live_until IS NULL OR live_until >= now() - make_interval(secs => $1)
       ORDER BY live_from DESC, id DESC`,
      [seconds + RECHECK_MS / 1000],
    );
    return rows.map((r) => toVersion(r, this.fees));
  }
}

/** A row as a version; a version migrated from the quote table carries no fees: it was priced with the configured ones. */
function toVersion(r: Row, configuredFees: Record<Category, bigint>): RateVersion {
  const fees = r.fees
    ? (Object.fromEntries(CATEGORIES.map((c) => [c, BigInt(r.fees![c] ?? "0")])) as Record<Category, bigint>)
    : configuredFees;
  return {
    id: r.id,
    rateMilli: BigInt(r.rate_milli),
    fees,
    source: r.source,
    liveFrom: new Date(r.live_from),
    liveUntil: r.live_until ? new Date(r.live_until) : null,
  };
}
