/**
 * A payer's pulls held across instances. ChainOperator never has two transactions carrying
 * one payer's pulls in flight at once (its gas estimate runs at the latest block, so the
 * second would pass against the same allowance and revert at BillPay's gas). Within one
 * instance that is a map of promises; between instances sharing one PostgreSQL it is this
 * table: an instance takes a payer's hold before estimating his pull and gives it back once
 * the transaction is mined or has failed. Another instance's hold is void once
 *   - its holder's key lease stops beating (chain/key-lease.ts: the instance died), or
 *   - it outlives the longest a send can take (`until`), should a release be lost.
 * One statement to take any number of payers, one to give them back. On PGlite one process
 * owns the database, so there is no other instance to hold against (services.ts passes none).
 */
import type { ChainKey } from "../../lib/chains.ts";
import type { Db } from "../db.ts";
import { DEAD_AFTER_MS } from "./key-lease.ts";

export interface PayerHolds {
  /** Holds on `chain` as many of `payers` as no other live instance holds, for at most `seconds`; answers those held (lower case). */
  take(chain: ChainKey, payers: readonly string[], seconds: number): Promise<Set<string>>;
  /** Gives back this instance's holds on `payers`. */
  release(chain: ChainKey, payers: readonly string[]): Promise<void>;
}

export class DbPayerHolds implements PayerHolds {
  constructor(
    private readonly db: Pick<Db, "query">,
    /** This instance's operator key (lower case or not): its lease in key_lease says whether the instance lives. */
    private readonly holder: string,
  ) {}

  async take(chain: ChainKey, payers: readonly string[], seconds: number): Promise<Set<string>> {
    const unique = [...new Set(payers.map((p) => p.toLowerCase()))];
    if (unique.length === 0) return new Set();
    // A row another instance holds is taken over only when its hold is void; the conflicting
    // row is locked, so two instances racing for one payer cannot both come back with it.
    const rows = await this.db.query<{ payer: string }>(
      `INSERT INTO payer_pull_hold (chain, payer, holder, until)
       SELECT $1, p, $2, now() + make_interval(secs => $3) FROM unnest($4::text[]) AS p
       ON CONFLICT (chain, payer) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
       WHERE payer_pull_hold.holder = EXCLUDED.holder
          OR payer_pull_hold.until < now()
          OR NOT EXISTS (SELECT 1 FROM key_lease k WHERE k.address = payer_pull_hold.holder
                          AND k.heartbeat_at > now() - make_interval(secs => $5))
       RETURNING payer`,
      [chain, this.holder.toLowerCase(), seconds, unique, DEAD_AFTER_MS / 1000],
    );
    return new Set(rows.map((r) => r.payer));
  }

  async release(chain: ChainKey, payers: readonly string[]): Promise<void> {
    const unique = [...new Set(payers.map((p) => p.toLowerCase()))];
    if (unique.length === 0) return;
    await this.db.query(`DELETE FROM payer_pull_hold WHERE chain = $1 AND payer = ANY($2::text[]) AND holder = $3`, [chain, unique, this.holder.toLowerCase()]);
  }
}
