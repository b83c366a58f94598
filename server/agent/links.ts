/**
 * Linked wallets: who an api_key speaks for, and the PIN that must come with every paying
 * call. A new link mints a new key and retires the old one in the same statement; a retired
 * key is told apart from an unknown one so an agent knows to ask for the new key. Wrong
 * PINs are counted in the database (so every instance sees them) and lock the wallet's
 * paying tools for a while once they reach the limit.
 */
import { type Log, silentLog } from "../log.ts";
import { randomBytes } from "node:crypto";
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import type { Db } from "../db.ts";
import { ServiceError } from "../errors.ts";
import { hashApiKey, sameDigest, type PinHasher } from "../credentials.ts";

export interface Link {
  wallet: string;
  channel: string;
  approvedChain: ChainKey;
  approvedToken: TokenSymbol;
  linkedAt: Date;
  /** The key this link was reached with (a pull is sent only while it is still the wallet's). */
  apiKeyHash?: string;
  /** Set when a contract wallet linked: its signature was checked on this chain only, so it pays only here. */
  scopeChain?: ChainKey | null;
}

interface LinkRow {
  wallet: string;
  api_key_hash: string;
  pin_hash: string;
  channel: string;
  approved_chain: ChainKey;
  approved_token: TokenSymbol;
  scope_chain: ChainKey | null;
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
  apiKeyHash: r.api_key_hash,
  scopeChain: r.scope_chain,
});

export class LinkStore {
  /** The PIN hash each link was read with (never on the link itself, which travels further). */
  private readonly pinHashes = new WeakMap<Link, string>();

  constructor(
    private readonly db: Db,
    private readonly pinPolicy: { maxAttempts: number; lockSeconds: number; maxLockouts: number; pins: PinHasher },
    /** Lockouts are operators' events: logged with the wallet, never the PIN or key. */
    private readonly log: Log = silentLog,
  ) {}

  /** Wrong PINs a key allows in its life: the last retires it. */
  private get lifetime(): number {
    return this.pinPolicy.maxAttempts * this.pinPolicy.maxLockouts;
  }

  /** A PIN as a link stores it (under the server's pepper). */
  hashPin(pin: string): string {
    return this.pinPolicy.pins.hash(pin);
  }

  /** A fresh one-time nonce for a Sign-In with Ethereum link. */
  async issueNonce(): Promise<string> {
    const nonce = randomBytes(16).toString("hex");
    await this.db.query(`INSERT INTO link_nonce (nonce) VALUES ($1)`, [nonce]);
    return nonce;
  }

  /** Spends a nonce this service issued within the last `windowSeconds`: true once, false ever after (or if never issued). */
  async useNonce(nonce: string, windowSeconds: number): Promise<boolean> {
    const rows = await this.db.query(
      `UPDATE link_nonce SET used_at = now()
       WHERE nonce = $1 AND used_at IS NULL AND created_at > now() - make_interval(secs => $2) RETURNING nonce`,
      [nonce, windowSeconds],
    );
    return rows.length === 1;
  }

  /** Spends a link signature: true the first time, false ever after. */
  async useSignature(signatureHash: string, wallet: string): Promise<boolean> {
    const rows = await this.db.query(
      `INSERT INTO link_signature (signature_hash, wallet) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING signature_hash`,
      [signatureHash, wallet.toLowerCase()],
    );
    return rows.length === 1;
  }

  /** Links (or re-links) a wallet: the new key hash replaces the old, which is retired, and its active schedules are cancelled. */
  async link(l: {
    wallet: string;
    apiKeyHash: string;
    pinHash: string;
    channel: string;
    chain: ChainKey;
    token: TokenSymbol;
    scopeChain?: ChainKey | null;
  }): Promise<{ cancelledSchedules: string[] }> {
    const [row] = await this.db.query<{ cancelled: string[] | null }>(
      `WITH retired AS (
         INSERT INTO retired_api_key (api_key_hash, wallet)
         SELECT api_key_hash, wallet FROM agent_link WHERE wallet = $1
         ON CONFLICT DO NOTHING),
       -- Schedules were authorised under the old key: a re-link (the way to shut out a
       -- leaked key) cancels them too.
       schedules AS (
         UPDATE bill_schedule SET status = 'CANCELLED', cancelled_at = now(), next_run_at = NULL
         WHERE wallet = $1 AND status = 'ACTIVE' RETURNING id)
       INSERT INTO agent_link (wallet, api_key_hash, pin_hash, channel, approved_chain, approved_token, scope_chain)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (wallet) DO UPDATE SET api_key_hash = EXCLUDED.api_key_hash, pin_hash = EXCLUDED.pin_hash,
         channel = EXCLUDED.channel, approved_chain = EXCLUDED.approved_chain, approved_token = EXCLUDED.approved_token,
         scope_chain = EXCLUDED.scope_chain,
         pin_failures = 0, pin_pending = 0, pin_lockouts = 0, pin_wrong_total = 0, locked_until = NULL, linked_at = now()
       RETURNING (SELECT array_agg(id ORDER BY id) FROM schedules) AS cancelled`,
      [l.wallet.toLowerCase(), l.apiKeyHash, l.pinHash, l.channel, l.chain, l.token, l.scopeChain ?? null],
    );
    return { cancelledSchedules: row?.cancelled ?? [] };
  }

  /**
   * Retires a link's key after too many lockouts: the wallet must link again with a fresh
   * signature. Its schedules, authorised under that key, are cancelled, as a re-link does.
   */
  private async retire(wallet: string, apiKeyHash: string): Promise<void> {
    await this.db.query(
      `WITH retired AS (INSERT INTO retired_api_key (api_key_hash, wallet) VALUES ($2, $1) ON CONFLICT DO NOTHING),
       schedules AS (
         UPDATE bill_schedule SET status = 'CANCELLED', cancelled_at = now(), next_run_at = NULL
         WHERE wallet = $1 AND status = 'ACTIVE')
       DELETE FROM agent_link WHERE wallet = $1 AND api_key_hash = $2`,
      [wallet, apiKeyHash],
    );
  }

  /** Retires a key that met its lifetime bound of wrong PINs; answers the refusal to throw. */
  private async retiredForWrongPins(wallet: string, apiKeyHash: string, wrongPins: number): Promise<ServiceError> {
    await this.retire(wallet, apiKeyHash);
    this.log.warn("pin lockout: key retired", { wallet, wrongPins });
    return new ServiceError("API_KEY_RETIRED", `too many wrong PINs (${wrongPins} in this key's life): this api_key is retired; link the wallet again with a fresh signature`);
  }

  /** The link an api_key speaks for; API_KEY_INVALID or API_KEY_RETIRED otherwise. */
  async authenticate(apiKey: string): Promise<Link> {
    const hash = hashApiKey(apiKey);
    const [row] = await this.db.query<LinkRow>(`SELECT * FROM agent_link WHERE api_key_hash = $1`, [hash]);
    if (row && sameDigest(row.api_key_hash, hash)) {
      const link = toLink(row);
      this.pinHashes.set(link, row.pin_hash);
      return link;
    }
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
   * wrong. On the reserving path (a PIN still stored with scrypt, a wallet without its
   * link, or a one-statement check that no longer stands, below), a check is reserved
   * before the hash runs, and checks in flight count against
   * the attempts left (PIN_BUSY beyond them), so parallel guesses cannot outrun the limit
   * while parallel right PINs never lock anyone out. Only a confirmed wrong PIN counts as a
   * failure; the one that reaches the limit starts the lock. A right PIN clears the failures
   * toward the next lock, never the key's lifetime count (pin_wrong_total), whose bound
   * retires the key.
   *
   * `as`: a link as `authenticate` answered it (checked against that key), or a wallet. For a
   * link whose PIN hash is quick to check, the check is one statement: the PIN is checked
   * against the hash the link was read with, and the outcome written only while that hash, the
   * key and the limits still stand (a wrong PIN counted in the same statement that finds
   * attempts left, so guesses at once cannot outrun the limit either). When they no longer
   * stand, nothing was written, and the check is made as above, which answers why.
   */
  async checkPin(as: Link | string, pin: string): Promise<void> {
    const w = (typeof as === "string" ? as : as.wallet).toLowerCase();
    // Checked against the link of the key that asked: a guess under a key retired meanwhile
    // neither counts against the new link nor can retire it.
    const key = typeof as === "string" ? null : (as.apiKeyHash ?? null);
    const lifetime = this.lifetime;
    const seen = typeof as === "string" ? undefined : this.pinHashes.get(as);
    if (key && seen && this.pinPolicy.pins.quick(seen)) {
      const { ok } = await this.pinPolicy.pins.verify(pin, seen);
      const standing = `wallet = $1 AND api_key_hash = $2 AND pin_hash = $3 AND ${attemptsLeft("$4", "$5")}`;
      const stands = [w, key, seen, this.pinPolicy.maxAttempts, lifetime];
      if (ok) {
        if ((await this.db.query(`UPDATE agent_link SET pin_failures = 0 WHERE ${standing} RETURNING 1`, stands)).length > 0) return;
      } else {
        const [after] = await this.db.query<WrongCounted>(
          `UPDATE agent_link SET ${countWrong("$4", "$6")} WHERE ${standing} RETURNING ${WRONG_COUNTED}`,
          [...stands, this.pinPolicy.lockSeconds],
        );
        if (after) throw await this.refusedWrong(w, after);
      }
    }
    const [reserved] = await this.db.query<{ pin_hash: string }>(
      `UPDATE agent_link SET pin_pending = ${PENDING} + 1, pin_attempt_at = now()
       WHERE wallet = $1 AND ($3::text IS NULL OR api_key_hash = $3) AND ${attemptsLeft("$2", "$4")}
       RETURNING pin_hash`,
      [w, this.pinPolicy.maxAttempts, key, lifetime],
    );
    if (!reserved) {
      const [row] = await this.db.query<{ locked_until: Date | null; locked: boolean; api_key_hash: string; pin_wrong_total: number }>(
        `SELECT locked_until, (locked_until IS NOT NULL AND locked_until > now()) AS locked, api_key_hash, pin_wrong_total FROM agent_link WHERE wallet = $1`,
        [w],
      );
      if (!row) throw new ServiceError("API_KEY_INVALID", "the wallet is no longer linked");
      if (key && row.api_key_hash !== key) throw new ServiceError("API_KEY_RETIRED", "this api_key was replaced when the wallet linked again; use the newest key");
      // At its bound already, and not retired (its retirement failed): retired now.
      if (row.pin_wrong_total >= lifetime) throw await this.retiredForWrongPins(w, row.api_key_hash, row.pin_wrong_total);
      if (row.locked) throw locked(new Date(row.locked_until!));
      throw new ServiceError("PIN_BUSY", "other PIN checks for this wallet are under way; retry in a moment", { retry_after_seconds: 1 });
    }
    let right: boolean;
    let upgrade: string | undefined;
    try {
      ({ ok: right, upgrade } = await this.pinPolicy.pins.verify(pin, reserved.pin_hash));
    } catch (err) {
      await this.db.query(`UPDATE agent_link SET pin_pending = GREATEST(pin_pending - 1, 0) WHERE wallet = $1`, [w]);
      throw err;
    }
    if (right) {
      // An old scrypt hash is rewritten under the pepper, unless the PIN changed meanwhile (a re-link).
      await this.db.query(
        `UPDATE agent_link SET pin_pending = GREATEST(pin_pending - 1, 0), pin_failures = 0,
           pin_hash = CASE WHEN $2::text IS NOT NULL AND pin_hash = $3 THEN $2 ELSE pin_hash END
         WHERE wallet = $1`,
        [w, upgrade ?? null, reserved.pin_hash],
      );
      return;
    }
    const [after] = await this.db.query<WrongCounted>(
      `UPDATE agent_link SET pin_pending = GREATEST(pin_pending - 1, 0), ${countWrong("$2", "$3")}
       WHERE wallet = $1 AND ($4::text IS NULL OR api_key_hash = $4) RETURNING ${WRONG_COUNTED}`,
      [w, this.pinPolicy.maxAttempts, this.pinPolicy.lockSeconds, key],
    );
    if (!after) throw new ServiceError("API_KEY_RETIRED", "this api_key was replaced while its PIN was checked; use the newest key");
    throw await this.refusedWrong(w, after);
  }

  /** The refusal for a wrong PIN just counted: retired at the key's lifetime bound, locked when it started a lockout, else invalid with the attempts left. */
  private async refusedWrong(w: string, after: WrongCounted): Promise<ServiceError> {
    const lifetime = this.lifetime;
    if (after.pin_wrong_total >= lifetime) return await this.retiredForWrongPins(w, after.api_key_hash, after.pin_wrong_total);
    if (after.locked_until && new Date(after.locked_until).getTime() > Date.now()) {
      const lockouts = after.pin_lockouts;
      // Reached before the lifetime bound only by a key whose wrong PINs before the lifetime
      // count was kept were not counted in it.
      if (lockouts >= this.pinPolicy.maxLockouts) {
        await this.retire(w, after.api_key_hash);
        this.log.warn("pin lockout: key retired", { wallet: w, lockouts });
        return new ServiceError("API_KEY_RETIRED", `too many wrong PINs (${lockouts} lockouts): this api_key is retired; link the wallet again with a fresh signature`);
      }
      this.log.warn("pin lockout", { wallet: w, lockouts, lockedUntil: new Date(after.locked_until).toISOString() });
      return locked(new Date(after.locked_until));
    }
    const left = Math.min(this.pinPolicy.maxAttempts - after.pin_failures, lifetime - after.pin_wrong_total);
    return new ServiceError("PIN_INVALID", `wrong PIN; ${left} attempt(s) left before paying is locked`, { attempts_left: left });
  }
}

/** PIN checks in flight on a link (reserved, not yet answered); a reservation older than a minute was a crash's. */
const PENDING = `(CASE WHEN pin_attempt_at < now() - interval '60 seconds' THEN 0 ELSE pin_pending END)`;

/** A link that may have a PIN checked now: not locked, and attempts left toward the lock and the key's lifetime, counting those in flight. */
const attemptsLeft = (maxAttempts: string, lifetime: string) =>
  `(locked_until IS NULL OR locked_until <= now()) AND pin_failures + ${PENDING} < ${maxAttempts} AND pin_wrong_total + ${PENDING} < ${lifetime}`;

/**
 * The SET of a wrong PIN, `maxAttempts` and `lockSeconds` the parameters holding them. The
 * failure that reaches the limit starts a lockout, each twice as long as the last
 * (PIN_LOCK_SECONDS, then 2x, 4x, ...). Neither lockouts nor wrong PINs are forgiven by a
 * right PIN (the key's own agent may be paying between a guesser's tries), so a key allows
 * at most maxAttempts x maxLockouts wrong PINs in its life: the last retires it.
 */
const countWrong = (maxAttempts: string, lockSeconds: string) => `
         pin_wrong_total = pin_wrong_total + 1,
         locked_until = CASE WHEN pin_failures + 1 >= ${maxAttempts}
           THEN now() + make_interval(secs => ${lockSeconds}::double precision * power(2, LEAST(pin_lockouts, 20))) ELSE locked_until END,
         pin_lockouts = CASE WHEN pin_failures + 1 >= ${maxAttempts} THEN pin_lockouts + 1 ELSE pin_lockouts END,
         pin_failures = CASE WHEN pin_failures + 1 >= ${maxAttempts} THEN 0 ELSE pin_failures + 1 END`;

const WRONG_COUNTED = "pin_failures, locked_until, pin_lockouts, pin_wrong_total, api_key_hash";
interface WrongCounted {
  pin_failures: number;
  locked_until: Date | null;
  pin_lockouts: number;
  pin_wrong_total: number;
  api_key_hash: string;
}

function locked(until: Date): ServiceError {
  return new ServiceError("PIN_LOCKED", `too many wrong PINs; paying tools are locked until ${until.toISOString()}`, {
    locked_until: until.toISOString(),
    retry_after_seconds: Math.max(1, Math.ceil((until.getTime() - Date.now()) / 1000)),
  });
}
