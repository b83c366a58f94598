/**
 * Locked quotes: the price of a bill, per chain and token, fixed for the challenge's
 * lifetime and bound to the request body (by a hash of its canonical form). A repeated
 * challenge for the same bill within the lifetime gets the same price, whatever the rate
 * does meanwhile; the paid retry is checked against it.
 */
import { createHash } from "node:crypto";
import type { Db } from "../db.ts";

export interface LockedQuote {
  chain: string;
  token: string;
  amount: bigint;
  rateMilli: bigint;
  expiresAt: Date;
}

/** Hash of the fields that define the bill and who pays, in a fixed order. */
export function bodyHash(fields: Record<string, string>): string {
  const canonical = JSON.stringify(Object.keys(fields).sort().map((k) => [k, fields[k]]));
  return createHash("sha256").update(canonical).digest("hex");
}

/** Live quotes kept in memory: a quote never changes once written, so a copy is safe until it expires. */
const CACHE_LIMIT = 10_000;

export class QuoteStore {
  private readonly cache = new Map<string, LockedQuote>();

  constructor(
    private readonly db: Db,
    private readonly ttlSeconds: number,
  ) {}

  /**
   * The live quotes for `hash`, creating the missing ones from `price` (chain, token) and
   * the current rate. Concurrent challenges for one bill settle on the same row.
   */
  async lock(
    hash: string,
    options: Array<{ chain: string; token: string }>,
    price: (chain: string, token: string) => Promise<{ amount: bigint; rateMilli: bigint }>,
  ): Promise<LockedQuote[]> {
    const out: LockedQuote[] = [];
    for (const { chain, token } of options) {
      const live = await this.live(hash, chain, token);
      if (live) {
        out.push(live);
        continue;
      }
      const { amount, rateMilli } = await price(chain, token);
      await this.db.query(
        `INSERT INTO quote (body_hash, chain, token, amount, rate_milli, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
         ON CONFLICT DO NOTHING`,
        [hash, chain, token, amount.toString(), rateMilli.toString(), this.ttlSeconds],
      );
      out.push((await this.live(hash, chain, token))!);
    }
    return out;
  }

  /** The oldest unexpired quote: the one the first challenge showed. */
  async live(hash: string, chain: string, token: string): Promise<LockedQuote | undefined> {
    const key = `${hash}:${chain}:${token}`;
    const cached = this.cache.get(key);
    if (cached && cached.expiresAt.getTime() > Date.now()) return cached;
    this.cache.delete(key);
    const found = await this.read(hash, chain, token);
    if (found) {
      if (this.cache.size >= CACHE_LIMIT) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(key, found);
    }
    return found;
  }

  private async read(hash: string, chain: string, token: string): Promise<LockedQuote | undefined> {
    const [row] = await this.db.query<{ amount: string; rate_milli: string; expires_at: Date }>(
      `SELECT amount::text, rate_milli::text, expires_at FROM quote
       WHERE body_hash = $1 AND chain = $2 AND token = $3 AND expires_at > now()
       ORDER BY created_at, expires_at LIMIT 1`,
      [hash, chain, token],
    );
    return row && { chain, token, amount: BigInt(row.amount), rateMilli: BigInt(row.rate_milli), expiresAt: new Date(row.expires_at) };
  }
}
