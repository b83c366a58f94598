/**
 * The agent hub's quotes, locked. get_quote keeps the rate version its price was made under,
 * by the bill's identity (billHash: the bill, the wallet, the chain and the token), until the
 * quote expires; pay_bill for the same bill then prices under that version, so it charges
 * exactly what get_quote showed, however the rate moved since (every version stays within
 * the band of the day before: RATE_MAX_DEVIATION_PCT). The latest quote of a bill is the one
 * kept. The x402 rail needs none of this: its payment names its amount, which is held to the
 * versions live within the challenge's lifetime (quote.ts acceptedQuote).
 *
 * A row a quote; expired rows are purged with the other bookkeeping (storage-purge.ts).
 */
import type { Db } from "../db.ts";
import type { Quote } from "./quote.ts";

export class QuoteLocks {
  constructor(private readonly db: Pick<Db, "query">) {}

  /** Keeps `quote`'s rate version for the bill until the quote expires. */
  async lock(bodyHash: string, quote: Quote): Promise<void> {
    await this.db.query(
      `INSERT INTO quote_lock (body_hash, version_id, expires_at) VALUES ($1, $2, $3)
       ON CONFLICT (body_hash) DO UPDATE SET version_id = EXCLUDED.version_id, expires_at = EXCLUDED.expires_at`,
      [bodyHash, quote.version.id, quote.expiresAt],
    );
  }

  /** The rate version a live quote of the bill was made under, if there is one. */
  async locked(bodyHash: string): Promise<{ versionId: string; expiresAt: Date } | undefined> {
    const [row] = await this.db.query<{ version_id: string; expires_at: Date }>(`SELECT version_id::text AS version_id, expires_at FROM quote_lock WHERE body_hash = $1 AND expires_at > now()`, [bodyHash]);
    return row && { versionId: row.version_id, expiresAt: new Date(row.expires_at) };
  }
}
