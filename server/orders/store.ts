/**
 * Orders and their states. An x402 order moves
 *   SETTLING -> PAID -> SUCCESS
 *                    -> PENDING (biller still working) -> SUCCESS | REFUNDING
 *                    -> REFUNDING -> REFUNDED
 *   SETTLING -> PAYMENT_FAILED (nothing moved)
 * and the payer sees SUCCESS, FAILED_VENDING (refunding or refunded) or TIMEOUT (not
 * finished yet; GET /api/orders/{request_id} tells the rest).
 */
import type { Db } from "../db.ts";

export type OrderStatus = "SETTLING" | "PAYMENT_FAILED" | "PAID" | "PENDING" | "SUCCESS" | "REFUNDING" | "REFUNDED";

export interface Order {
  requestId: string;
  billerRequestId: string;
  bodyHash: string;
  bill: Record<string, unknown>;
  chain: string;
  token: string;
  tokenAddress: string;
  payer: string;
  amount: bigint;
  authNonce: string;
  payment: Record<string, unknown>;
  requirements: Record<string, unknown>;
  status: OrderStatus;
  txHash: string | null;
  purchasedCode: string | null;
  units: string | null;
  failureReason: string | null;
  refundTxHash: string | null;
}

interface Row {
  request_id: string;
  biller_request_id: string;
  body_hash: string;
  bill: Record<string, unknown>;
  chain: string;
  token: string;
  token_address: string;
  payer: string;
  amount: string;
  auth_nonce: string;
  payment: Record<string, unknown>;
  requirements: Record<string, unknown>;
  status: OrderStatus;
  tx_hash: string | null;
  purchased_code: string | null;
  units: string | null;
  failure_reason: string | null;
  refund_tx_hash: string | null;
}

const COLUMNS = `request_id, biller_request_id, body_hash, bill, chain, token, token_address, payer, amount::text AS amount,
  auth_nonce, payment, requirements, status, tx_hash, purchased_code, units, failure_reason, refund_tx_hash`;

function toOrder(r: Row): Order {
  return {
    requestId: r.request_id,
    billerRequestId: r.biller_request_id,
    bodyHash: r.body_hash,
    bill: r.bill,
    chain: r.chain,
    token: r.token,
    tokenAddress: r.token_address,
    payer: r.payer,
    amount: BigInt(r.amount),
    authNonce: r.auth_nonce,
    payment: r.payment,
    requirements: r.requirements,
    status: r.status,
    txHash: r.tx_hash,
    purchasedCode: r.purchased_code,
    units: r.units,
    failureReason: r.failure_reason,
    refundTxHash: r.refund_tx_hash,
  };
}

export type NewOrder = Omit<Order, "status" | "txHash" | "purchasedCode" | "units" | "failureReason" | "refundTxHash">;

export class OrderStore {
  constructor(private readonly db: Db) {}

  /**
   * Takes the once-only lock on the payment and creates the order in SETTLING. When the
   * payment was seen before, returns that order instead (`created: false`).
   */
  async lockPayment(o: NewOrder, leaseSeconds: number): Promise<{ order: Order; created: boolean }> {
    // The request that creates the order holds its lease while it works on it: the worker
    // only takes orders whose lease has run out (their request died or gave up).
    const inserted = await this.db.query<Row>(
      `INSERT INTO bill_order (request_id, biller_request_id, body_hash, bill, chain, token, token_address, payer, amount,
                               auth_nonce, payment, requirements, status, lease_until)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'SETTLING', now() + make_interval(secs => $13))
       ON CONFLICT (chain, token_address, payer, auth_nonce) DO NOTHING
       RETURNING ${COLUMNS}`,
      [
        o.requestId,
        o.billerRequestId,
        o.bodyHash,
        JSON.stringify(o.bill),
        o.chain,
        o.token,
        o.tokenAddress.toLowerCase(),
        o.payer.toLowerCase(),
        o.amount.toString(),
        o.authNonce.toLowerCase(),
        JSON.stringify(o.payment),
        JSON.stringify(o.requirements),
        leaseSeconds,
      ],
    );
    if (inserted[0]) return { order: toOrder(inserted[0]), created: true };
    return { order: (await this.findByPayment(o.chain, o.tokenAddress, o.payer, o.authNonce))!, created: false };
  }

  /** The order an x402 payment paid for, if any: its lock key is (chain, token, payer, nonce). */
  async findByPayment(chain: string, tokenAddress: string, payer: string, nonce: string): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4`,
      [chain, tokenAddress.toLowerCase(), payer.toLowerCase(), nonce.toLowerCase()],
    );
    return row && toOrder(row);
  }

  /** Gives up the lease: the worker may take the order at once if it is unfinished. */
  async release(requestId: string): Promise<void> {
    await this.db.query(`UPDATE bill_order SET lease_until = NULL WHERE request_id = $1`, [requestId]);
  }

  async get(requestId: string): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(`SELECT ${COLUMNS} FROM bill_order WHERE request_id = $1`, [requestId]);
    return row && toOrder(row);
  }

  /** Moves an order on, only from the states given: a stale actor cannot undo a later step. */
  async transition(
    requestId: string,
    from: OrderStatus[],
    to: OrderStatus,
    fields: Partial<Pick<Order, "txHash" | "purchasedCode" | "units" | "failureReason" | "refundTxHash">> = {},
  ): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `UPDATE bill_order SET status = $3, updated_at = now(),
         tx_hash = COALESCE($4, tx_hash), purchased_code = COALESCE($5, purchased_code), units = COALESCE($6, units),
         failure_reason = COALESCE($7, failure_reason), refund_tx_hash = COALESCE($8, refund_tx_hash)
       WHERE request_id = $1 AND status = ANY($2::text[])
       RETURNING ${COLUMNS}`,
      [
        requestId,
        from,
        to,
        fields.txHash ?? null,
        fields.purchasedCode ?? null,
        fields.units ?? null,
        fields.failureReason ?? null,
        fields.refundTxHash ?? null,
      ],
    );
    return row && toOrder(row);
  }

  /**
   * Claims one unfinished order for background work, leasing it so that several
   * instances never work the same order at once.
   */
  async claimUnfinished(
    statuses: OrderStatus[],
    olderThanSeconds: number,
    leaseSeconds: number,
    skip: string[] = [],
  ): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `UPDATE bill_order SET lease_until = now() + make_interval(secs => $3)
       WHERE request_id = (
         SELECT request_id FROM bill_order
         WHERE status = ANY($1::text[]) AND (lease_until IS NULL OR lease_until < now())
           AND updated_at <= now() - make_interval(secs => $2) AND NOT (request_id = ANY($4::text[]))
         ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING ${COLUMNS}`,
      [statuses, olderThanSeconds, leaseSeconds, skip],
    );
    return row && toOrder(row);
  }
}
