/**
 * Payments the service refused though they were good, and what happens when one lands anyway.
 *
 * An x402 payment the service refuses before any order exists (not yet valid, valid for too
 * long, expiring too soon, its nonce already spent) may still be submitted on chain by the
 * payer, a relayer or anyone holding it, and pay BillPay. Without the signed authorization the
 * service could not refund it (BillPay's refundAuthorization and refundPermit2 check the
 * payer's own signature), and the payer would wait for an operator. So a refusal whose
 * signature is the payer's, for exactly the bill's price to BillPay in the bill's token, is
 * kept here with that authorization; when the ledger shows it landed, it becomes an order
 * refunded on chain by the service (a late refund: orders/refund-share.ts).
 *
 * What bounds it:
 *   - only refusals that passed the signature check are kept, and one refused for its time
 *     window only while its payer holds the amount (a wallet of no funds signs for free);
 *     junk costs a signature check and counts against the caller's and payer's budgets of
 *     payments that settle nothing;
 *   - at most PER_PAYER unexpired records per payer and MAX_RECORDS in all: past either, the
 *     refusal is not kept (the payer is told), so a flood costs the service at most that much;
 *   - a record lives until its authorization has expired and a day has passed (a ledger may
 *     show a landing late), and a week at most, whatever the authorization's own window (one
 *     refused as valid for too long may run for years: without the cap, a wallet moving the
 *     same funds from address to address would fill MAX_RECORDS once and for all); then it is
 *     purged, and a payment landing after that is an orphan for an operator, as one landing
 *     unkept always was;
 *   - the refund is the ledger's: exactly the payment the ledger shows under the key, once
 *     (BillPay refunds a key once), within the late slice and the payer's share of the budget;
 *   - an orphan an operator already closed (refunded by hand, or kept) is never refunded again.
 */
import type { Db } from "../db.ts";

/** Unexpired records one payer may have. */
export const PER_PAYER = 5;
/** Records in all. */
export const MAX_RECORDS = 10_000;
/** How long after its authorization expired a record is kept. */
const KEPT_AFTER_EXPIRY_SECONDS = 86_400;
/** How long a record counts at most, from when it was kept, whatever its authorization's window. */
export const KEPT_AT_MOST_SECONDS = 7 * 86_400;
/** The moment a record stops counting (SQL, unix seconds): its authorization's expiry, or the cap. */
const LIVES_UNTIL = `LEAST(valid_before, floor(extract(epoch FROM created_at))::numeric + ${KEPT_AT_MOST_SECONDS})`;

export interface RefusedPayment {
  chain: string;
  rail: "authorization" | "permit2";
  token: string;
  tokenAddress: string;
  payer: string;
  nonce: string;
  amount: bigint;
  validBefore: bigint;
  bill: Record<string, unknown>;
  bodyHash: string;
  /** The signed payment, as an order stores it (x402-protocol/payment.ts StoredPayment). */
  payment: Record<string, unknown>;
  requirements: Record<string, unknown>;
  reason: string;
}

interface Row {
  chain: string;
  rail: "authorization" | "permit2";
  token: string;
  token_address: string;
  payer: string;
  auth_nonce: string;
  amount: string;
  valid_before: string;
  bill: Record<string, unknown>;
  body_hash: string;
  payment: Record<string, unknown>;
  requirements: Record<string, unknown>;
  reason: string;
}

const toRecord = (r: Row): RefusedPayment => ({
  chain: r.chain,
  rail: r.rail,
  token: r.token,
  tokenAddress: r.token_address,
  payer: r.payer,
  nonce: r.auth_nonce,
  amount: BigInt(r.amount),
  validBefore: BigInt(r.valid_before),
  bill: r.bill,
  bodyHash: r.body_hash,
  payment: r.payment,
  requirements: r.requirements,
  reason: r.reason,
});

export class RefusedPayments {
  constructor(private readonly db: Db) {}

  /**
   * Keeps a refusal, within the bounds. When it is kept (or was already), the unix second
   * until which its record counts (a landing before it is refunded by the service); null when
   * it is not kept. One statement: the counts and the insert cannot be raced past the bounds
   * by concurrent refusals of one payer beyond a row or two.
   */
  async record(r: RefusedPayment, nowSeconds: bigint): Promise<bigint | null> {
    const rows = await this.db.query<{ until: string }>(
      `WITH existing AS (
         SELECT ${LIVES_UNTIL} AS until FROM refused_payment WHERE chain = $1 AND rail = $2 AND token_address = $3 AND payer = $4 AND auth_nonce = $5
       ), inserted AS (
         INSERT INTO refused_payment (chain, rail, token_address, payer, auth_nonce, amount, valid_before, token, bill, body_hash, payment, requirements, reason)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
          WHERE NOT EXISTS (SELECT 1 FROM existing)
            AND (SELECT count(*) FROM refused_payment WHERE payer = $4 AND ${LIVES_UNTIL} > $14) < $15
            AND (SELECT count(*) FROM refused_payment) < $16
         ON CONFLICT DO NOTHING
         RETURNING ${LIVES_UNTIL} AS until
       )
       SELECT until::text AS until FROM existing UNION ALL SELECT until::text AS until FROM inserted`,
      [
        r.chain,
        r.rail,
        r.tokenAddress.toLowerCase(),
        r.payer.toLowerCase(),
        r.nonce.toLowerCase(),
        r.amount.toString(),
        r.validBefore.toString(),
        r.token,
        JSON.stringify(r.bill),
        r.bodyHash,
        JSON.stringify(r.payment),
        JSON.stringify(r.requirements),
        r.reason,
        nowSeconds.toString(),
        PER_PAYER,
        MAX_RECORDS,
      ],
    );
    return rows[0] ? BigInt(rows[0].until) : null;
  }

  /** The refusal kept under a payment's key, if any. */
  async find(chain: string, rail: string, tokenAddress: string, payer: string, nonce: string): Promise<RefusedPayment | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT chain, rail, token, token_address, payer, auth_nonce, amount::text AS amount, valid_before::text AS valid_before, bill, body_hash, payment, requirements, reason
       FROM refused_payment WHERE chain = $1 AND rail = $2 AND token_address = $3 AND payer = $4 AND auth_nonce = $5`,
      [chain, rail, tokenAddress.toLowerCase(), payer.toLowerCase(), nonce.toLowerCase()],
    );
    return row && toRecord(row);
  }

  /**
   * Open orphan payments (no order holds them, nobody closed them) that a kept refusal
   * accounts for: a payment landed before its refusal was kept (the payer submitted it
   * himself, then offered it), or while the service was down.
   */
  async landedOrphans(limit = 50): Promise<Array<{ record: RefusedPayment; txHash: string; amount: bigint }>> {
    const rows = await this.db.query<Row & { tx_hash: string; orphan_amount: string }>(
      `SELECT r.chain, r.rail, r.token, r.token_address, r.payer, r.auth_nonce, r.amount::text AS amount, r.valid_before::text AS valid_before, r.bill, r.body_hash,
              r.payment, r.requirements, r.reason, o.tx_hash, o.amount::text AS orphan_amount
       FROM refused_payment r JOIN orphan_payment o
         ON o.chain = r.chain AND o.rail = r.rail AND o.token_address = r.token_address AND o.payer = r.payer AND o.auth_nonce = r.auth_nonce
       WHERE o.status = 'NEEDS_REVIEW' AND o.amount = r.amount
       LIMIT $1`,
      [limit],
    );
    return rows.map((r) => ({ record: toRecord(r), txHash: r.tx_hash, amount: BigInt(r.orphan_amount) }));
  }

  /** The status of the orphan record under a payment's key (NEEDS_REVIEW while open), or undefined when there is none. */
  async orphanStatus(k: { chain: string; rail: string; tokenAddress: string; payer: string; nonce: string }): Promise<string | undefined> {
    const [row] = await this.db.query<{ status: string }>(
      `SELECT status FROM orphan_payment WHERE chain = $1 AND rail = $2 AND token_address = $3 AND payer = $4 AND auth_nonce = $5`,
      [k.chain, k.rail, k.tokenAddress.toLowerCase(), k.payer.toLowerCase(), k.nonce.toLowerCase()],
    );
    return row?.status;
  }

  /** Forgets records that stopped counting (their authorization expired, or the cap passed) more than a day ago. */
  async purge(nowSeconds: bigint): Promise<number> {
    const rows = await this.db.query(`DELETE FROM refused_payment WHERE ${LIVES_UNTIL} < $1 RETURNING 1`, [(nowSeconds - BigInt(KEPT_AFTER_EXPIRY_SECONDS)).toString()]);
    return rows.length;
  }
}
