/**
 * Pay attempts at the biller. Each pay is sent under a request id of its own, made when it
 * is recorded (the biller dates ids and refuses one not dated today), and recorded before it
 * is sent, a fresh order's first while its payment settles (orders/fulfil.ts
 * recordFirstAttempt): the attempt row is what lets a requery, a webhook or a restarted worker find the
 * order again, by the id the biller knows. An order's attempts are numbered; (order,
 * number) is unique, so one attempt is made once whoever tries. An id is never sent twice.
 * What the biller last said of each attempt, asked by that attempt's own id, is kept on it
 * (`outcome`): a delivery by an earlier attempt is seen beside the one that settled the order.
 */
import type { Db } from "../db.ts";
import { PAYMENT_ON_ITS_WAY } from "./lifecycle.ts";
import type { AlongsideWrite } from "./store.ts";
import type { PayRequest, VendResult } from "../biller/upstream.ts";

/** The pay an attempt sent, without its id (null for attempts recorded before pays were kept). */
export type AttemptPay = Omit<PayRequest, "requestId">;

/** What the biller last said of an attempt: delivered, failed, reversed, pending, or no record of it (unknown). */
export type AttemptOutcome = "delivered" | "failed" | "reversed" | "pending" | "unknown";

export interface BillerAttempt {
  billerRequestId: string;
  requestId: string;
  attempt: number;
  pay: AttemptPay | null;
  sentAt: Date;
  outcome: AttemptOutcome | null;
}

interface Row {
  biller_request_id: string;
  request_id: string;
  attempt: number;
  pay: AttemptPay | null;
  sent_at: Date;
  outcome: AttemptOutcome | null;
}

const toAttempt = (r: Row): BillerAttempt => ({
  billerRequestId: r.biller_request_id,
  requestId: r.request_id,
  attempt: r.attempt,
  pay: r.pay,
  sentAt: new Date(r.sent_at),
  outcome: r.outcome,
});

const ATTEMPT_COLUMNS = "biller_request_id, request_id, attempt, pay, sent_at, outcome";

/** What a biller answer says of the attempt it answers for. */
export function outcomeOf(result: VendResult): AttemptOutcome {
  if (result.state === "delivered") return "delivered";
  if (result.state === "failed") return result.reversed ? "reversed" : "failed";
  return result.unknownRequest ? "unknown" : "pending";
}

export class BillerAttempts {
  constructor(private readonly db: Db) {}

  /** Records attempt `attempt` of an order before it is sent; false when that attempt exists already. */
  async record(requestId: string, attempt: number, billerRequestId: string, pay: AttemptPay): Promise<boolean> {
    const rows = await this.db.query(
      `INSERT INTO biller_attempt (biller_request_id, request_id, attempt, pay) VALUES ($1, $2, $3, $4)
       ON CONFLICT DO NOTHING RETURNING attempt`,
      [billerRequestId, requestId, attempt, JSON.stringify(pay)],
    );
    return rows.length > 0;
  }

  /**
   * Records a fresh order's attempt 1 while its payment settles (orders/fulfil.ts
   * recordFirstAttempt), only while the order is still settling or pulling: one closed unpaid
   * meanwhile (its move withdrew what it had) gets none. False when it was not recorded.
   */
  async recordAhead(requestId: string, billerRequestId: string, pay: AttemptPay): Promise<boolean> {
    const rows = await this.db.query(
      `INSERT INTO biller_attempt (biller_request_id, request_id, attempt, pay)
       SELECT $1, $2, 1, $3 WHERE EXISTS (SELECT 1 FROM bill_order WHERE request_id = $2 AND status = ANY($4::text[]))
       ON CONFLICT DO NOTHING RETURNING attempt`,
      [billerRequestId, requestId, JSON.stringify(pay), PAYMENT_ON_ITS_WAY],
    );
    return rows.length > 0;
  }

  /**
   * Stamps an attempt recorded ahead as sent now, while the order's lease is still
   * `leaseToken`'s and the biller has not been asked of it; false otherwise (nothing changed).
   */
  async stampSending(billerRequestId: string, requestId: string, leaseToken: string | null): Promise<boolean> {
    const rows = await this.db.query(
      `UPDATE biller_attempt SET sent_at = now() WHERE biller_request_id = $1 AND request_id = $2 AND outcome IS NULL
         AND EXISTS (SELECT 1 FROM bill_order WHERE request_id = $2 AND lease_token = $3 AND lease_until > now())
       RETURNING 1`,
      [billerRequestId, requestId, leaseToken],
    );
    return rows.length > 0;
  }

  /**
   * Deletes an attempt that was recorded and never sent (orders/fulfil.ts withdrawFirstAttempt):
   * only its recorder sends it, and it has decided not to. One the biller was asked about
   * meanwhile (an outcome kept) stays.
   */
  async withdrawUnsent(billerRequestId: string): Promise<void> {
    await this.db.query(`DELETE FROM biller_attempt WHERE biller_request_id = $1 AND outcome IS NULL`, [billerRequestId]);
  }

  /** The order's latest attempt, if a pay was ever prepared for it. */
  async latest(requestId: string): Promise<BillerAttempt | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT ${ATTEMPT_COLUMNS} FROM biller_attempt WHERE request_id = $1 ORDER BY attempt DESC LIMIT 1`,
      [requestId],
    );
    return row && toAttempt(row);
  }

  /** Every attempt of an order, first first. */
  async of(requestId: string): Promise<BillerAttempt[]> {
    const rows = await this.db.query<Row>(
      `SELECT ${ATTEMPT_COLUMNS} FROM biller_attempt WHERE request_id = $1 ORDER BY attempt`,
      [requestId],
    );
    return rows.map(toAttempt);
  }

  /** Keeps what the biller said of an attempt (asked by its id, or answering its pay). */
  async recordOutcome(billerRequestId: string, result: VendResult): Promise<void> {
    const write = this.recordingOutcome(billerRequestId, result);
    await this.db.query(write.sql(1), write.params);
  }

  /**
   * `recordOutcome` as a write that goes with the order's move, in its statement
   * (OrderStore.advance). An answer that says nothing (pending: a requery that timed out or
   * lagged; no record) never takes the place of one that did (delivered, failed, reversed):
   * which attempt delivered a bill must not be forgotten because a later look went unanswered.
   */
  recordingOutcome(billerRequestId: string, result: VendResult): AlongsideWrite {
    const detail = result.state === "delivered" ? { transactionId: result.transactionId, codes: result.codes, units: result.units } : { reason: result.reason };
    return {
      sql: (n) =>
        `UPDATE biller_attempt SET outcome = $${n + 1}, outcome_detail = $${n + 2}, outcome_at = now() WHERE biller_request_id = $${n}
         AND (outcome IS NULL OR NOT ($${n + 1} IN ('pending', 'unknown') AND outcome IN ('delivered', 'failed', 'reversed')))`,
      params: [billerRequestId, outcomeOf(result), JSON.stringify(detail)],
    };
  }

  /** The attempt the biller knows by this id (a webhook's pointer). */
  async byBillerRequestId(billerRequestId: string): Promise<BillerAttempt | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT ${ATTEMPT_COLUMNS} FROM biller_attempt WHERE biller_request_id = $1`,
      [billerRequestId],
    );
    return row && toAttempt(row);
  }
}
