/**
 * A payer's pulls held across instances. ChainOperator never has two transactions carrying
 * one payer's pulls in flight at once (its gas estimate runs at the latest block, so the
 * second would pass against the same allowance and revert at BillPay's gas). Within one
 * instance that is a map of promises; between instances sharing one PostgreSQL it is this
 * table: an instance takes a payer's hold before estimating his pull, renews it while the
 * transaction is in flight, and gives it back once it is mined or has failed.
 *
 * Another instance's hold is void once
 *   - its holder's key lease stops beating (chain/key-lease.ts: the instance died). Its last
 *     transaction may still be mined, so a pull of that payer from another instance may then
 *     revert, once: a death the payer cannot bring about, unlike the race this closes;
 *   - it was not renewed for `seconds` (a release lost while the instance lives on).
 * One statement takes any number of payers, in one order (so two takes never deadlock), one
 * renews them, one gives them back. On PGlite one process owns the database, so there is no
 * other instance to hold against (services.ts passes none).
 */
import type { ChainKey } from "../../lib/chains.ts";
import type { Db } from "../db.ts";
import { DEAD_AFTER_MS } from "./key-lease.ts";

export interface PayerHolds {
  /** How long a hold lasts unrenewed; a pull waits at most this long for another instance's. */
  readonly seconds: number;
  /** Holds on `chain` as many of `payers` as no other live instance holds; answers those held (lower case). */
  take(chain: ChainKey, payers: readonly string[]): Promise<Set<string>>;
  /** Extends this instance's holds on `payers` by `seconds` from now. */
  renew(chain: ChainKey, payers: readonly string[]): Promise<void>;
  /** Gives back this instance's holds on `payers`. */
  release(chain: ChainKey, payers: readonly string[]): Promise<void>;
}

/** PostgreSQL's "deadlock detected": one statement of two gave way, and holds nothing. */
const DEADLOCK = "40P01";

const sortedLower = (payers: readonly string[]) => [...new Set(payers.map((p) => p.toLowerCase()))].sort();

export class DbPayerHolds implements PayerHolds {
  constructor(
    private readonly db: Pick<Db, "query">,
    /** This instance's operator key: its lease in key_lease says whether the instance lives. */
    private readonly holder: string,
    readonly seconds = 60,
  ) {}

  async take(chain: ChainKey, payers: readonly string[]): Promise<Set<string>> {
    const unique = sortedLower(payers);
    if (unique.length === 0) return new Set();
    // A row another instance holds is taken over only when its hold is void; the conflicting
    // row is locked, so two instances racing for one payer cannot both come back with it.
    // Rows are locked in the payers' order, the same in every take and release.
    const rows = await this.db
      .query<{ payer: string }>(
        `INSERT INTO payer_pull_hold (chain, payer, holder, until)
         SELECT $1, p, $2, now() + make_interval(secs => $3) FROM unnest($4::text[]) AS p ORDER BY p
         ON CONFLICT (chain, payer) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
         WHERE payer_pull_hold.holder = EXCLUDED.holder
            OR payer_pull_hold.until < now()
            OR NOT EXISTS (SELECT 1 FROM key_lease k WHERE k.address = payer_pull_hold.holder
                            AND k.heartbeat_at > now() - make_interval(secs => $5))
         RETURNING payer`,
        [chain, this.holder.toLowerCase(), this.seconds, unique, DEAD_AFTER_MS / 1000],
      )
      .catch((err: unknown) => {
        // Should a release's locks still cross a take's, nothing is held now: the caller tries again after a block.
        if ((err as { code?: string }).code === DEADLOCK) return [];
        throw err;
      });
    return new Set(rows.map((r) => r.payer));
  }

  async renew(chain: ChainKey, payers: readonly string[]): Promise<void> {
    const unique = sortedLower(payers);
    if (unique.length === 0) return;
    await this.db.query(
      `UPDATE payer_pull_hold SET until = now() + make_interval(secs => $4) WHERE chain = $1 AND payer = ANY($2::text[]) AND holder = $3`,
      [chain, unique, this.holder.toLowerCase(), this.seconds],
    );
  }

  async release(chain: ChainKey, payers: readonly string[]): Promise<void> {
    const unique = sortedLower(payers);
    if (unique.length === 0) return;
    // Locked in the payers' order first, as a take locks them.
    await this.db.query(
      `DELETE FROM payer_pull_hold h USING (
         SELECT chain, payer FROM payer_pull_hold WHERE chain = $1 AND payer = ANY($2::text[]) AND holder = $3 ORDER BY payer FOR UPDATE
       ) mine WHERE h.chain = mine.chain AND h.payer = mine.payer AND h.holder = $3`,
      [chain, unique, this.holder.toLowerCase()],
    );
  }
}

/**
 * Runs `send` while this instance holds `held` on `chain`: renewed every third of the hold's
 * length (a send may outlast it: replacements, a batch's pulls sent again one by one), and
 * given back when it ends, mined or failed. A release lost (the database unreachable a moment)
 * leaves the hold to lapse unrenewed.
 */
export async function whileHeld<T>(holds: PayerHolds | undefined, chain: ChainKey, held: Set<string>, send: () => Promise<T>): Promise<T> {
  if (!holds || held.size === 0) return send();
  const payers = [...held];
  const renewing = setInterval(() => void holds.renew(chain, payers).catch(() => {}), (holds.seconds * 1000) / 3);
  renewing.unref();
  try {
    return await send();
  } finally {
    clearInterval(renewing);
    await holds.release(chain, payers).catch(() => {});
  }
}
