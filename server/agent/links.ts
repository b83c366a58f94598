/**
 * Linked wallets: who an api_key speaks for, and the PIN that must come with every paying
 * call. A new link mints a new key and retires the old one in the same statement; a retired
 * key is told apart from an unknown one so an agent knows to ask for the new key. Wrong
 * PINs are counted in the database (so every instance sees them) and lock the wallet's
 * paying tools for a while once they reach the limit.
 */
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import type { Db } from "../db.ts";
import { ServiceError } from "../errors.ts";
import { hashApiKey, sameDigest, verifyPin } from "./credentials.ts";

export interface Link {
  wallet: string;
  channel: string;
  approvedChain: ChainKey;
  approvedToken: TokenSymbol;
  linkedAt: Date;
}

interface LinkRow {
  wallet: string;
  api_key_hash: string;
  pin_hash: string;
  channel: string;
  approved_chain: ChainKey;
  approved_token: TokenSymbol;
  pin_failures: number;
  locked_until: Date | null;
  linked_at: Date;
}

const toLink = (r: LinkRow): Link => ({
  wallet: r.wallet,
  channel: r.channel,
  approvedChain: r.approved_chain,
  approvedToken: r.approved_token,
  linkedAt: new Date(r.linked_at),
});

export class LinkStore {
  constructor(
    private readonly db: Db,
    private readonly pinPolicy: { maxAttempts: number; lockSeconds: number },
  ) {}

  /** Spends a link signature: true the first time, false ever after. */
  async useSignature(signatureHash: string, wallet: string): Promise<boolean> {
    const rows = await this.db.query(
      `INSERT INTO link_signature (signature_hash, wallet) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING signature_hash`,
      [signatureHash, wallet.toLowerCase()],
    );
    return rows.length === 1;
  }

  /** Links (or re-links) a wallet: the new key hash replaces the old, which is retired, and its active schedules are cancelled. */
  async link(l: { wallet: string; apiKeyHash: string; pinHash: string; channel: string; chain: ChainKey; token: TokenSymbol }): Promise<void> {
    await this.db.query(
      `WITH retired AS (
         INSERT INTO retired_api_key (api_key_hash, wallet)
         SELECT api_key_hash, wallet FROM agent_link WHERE wallet = $1
         ON CONFLICT DO NOTHING),
       -- Schedules were authorised under the old key: a re-link (the way to shut out a
       -- leaked key) cancels them too.
       schedules AS (
         UPDATE bill_schedule SET status = 'CANCELLED', cancelled_at = now(), next_run_at = NULL
         WHERE wallet = $1 AND status = 'ACTIVE')
       INSERT INTO agent_link (wallet, api_key_hash, pin_hash, channel, approved_chain, approved_token)
       VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (wallet) DO UPDATE SET api_key_hash = EXCLUDED.api_key_hash, pin_hash = EXCLUDED.pin_hash,
         channel = EXCLUDED.channel, approved_chain = EXCLUDED.approved_chain, approved_token = EXCLUDED.approved_token,
         pin_failures = 0, locked_until = NULL, linked_at = now()`,
      [l.wallet.toLowerCase(), l.apiKeyHash, l.pinHash, l.channel, l.chain, l.token],
    );
  }

  /** The link an api_key speaks for; API_KEY_INVALID or API_KEY_RETIRED otherwise. */
  async authenticate(apiKey: string): Promise<Link> {
    const hash = hashApiKey(apiKey);
    const [row] = await this.db.query<LinkRow>(`SELECT * FROM agent_link WHERE api_key_hash = $1`, [hash]);
    if (row && sameDigest(row.api_key_hash, hash)) return toLink(row);
    const [retired] = await this.db.query(`SELECT 1 FROM retired_api_key WHERE api_key_hash = $1`, [hash]);
    if (retired) throw new ServiceError("API_KEY_RETIRED", "this api_key was replaced when the wallet linked again; use the newest key");
    throw new ServiceError("API_KEY_INVALID", "no linked wallet has this api_key; link the wallet with POST /api/agent/link");
  }

  async get(wallet: string): Promise<Link | undefined> {
    const [row] = await this.db.query<LinkRow>(`SELECT * FROM agent_link WHERE wallet = $1`, [wallet.toLowerCase()]);
    return row && toLink(row);
  }

  /**
   * Checks the PIN for a paying call: PIN_LOCKED while locked, PIN_INVALID (counted) when
   * wrong. Each attempt is counted before the slow hash is checked, in one statement that
   * also refuses while locked, so parallel guesses cannot outrun the limit; the attempt that
   * reaches it starts the lock. A right PIN then clears the count.
   */
  async checkPin(wallet: string, pin: string): Promise<void> {
    const [attempt] = await this.db.query<{ pin_hash: string; pin_failures: number; locked_until: Date | null }>(
      `UPDATE agent_link SET
         locked_until = CASE WHEN pin_failures + 1 >= $2 THEN now() + make_interval(secs => $3) ELSE locked_until END,
         pin_failures = CASE WHEN pin_failures + 1 >= $2 THEN 0 ELSE pin_failures + 1 END
       WHERE wallet = $1 AND (locked_until IS NULL OR locked_until <= now())
       RETURNING pin_hash, pin_failures, locked_until`,
      [wallet.toLowerCase(), this.pinPolicy.maxAttempts, this.pinPolicy.lockSeconds],
    );
    if (!attempt) {
      const [row] = await this.db.query<{ locked_until: Date | null }>(`SELECT locked_until FROM agent_link WHERE wallet = $1`, [wallet.toLowerCase()]);
      if (!row) throw new ServiceError("API_KEY_INVALID", "the wallet is no longer linked");
      throw locked(new Date(row.locked_until!));
    }
    if (await verifyPin(pin, attempt.pin_hash)) {
      await this.db.query(`UPDATE agent_link SET pin_failures = 0, locked_until = NULL WHERE wallet = $1`, [wallet.toLowerCase()]);
      return;
    }
    if (attempt.locked_until && new Date(attempt.locked_until).getTime() > Date.now()) throw locked(new Date(attempt.locked_until));
    const left = this.pinPolicy.maxAttempts - attempt.pin_failures;
    throw new ServiceError("PIN_INVALID", `wrong PIN; ${left} attempt(s) left before paying is locked`, { attempts_left: left });
  }
}

function locked(until: Date): ServiceError {
  return new ServiceError("PIN_LOCKED", `too many wrong PINs; paying tools are locked until ${until.toISOString()}`, {
    locked_until: until.toISOString(),
    retry_after_seconds: Math.max(1, Math.ceil((until.getTime() - Date.now()) / 1000)),
  });
}
