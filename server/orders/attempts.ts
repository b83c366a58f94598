/**
 * Pay attempts at the biller. Each pay is sent under a request id of its own, made when it
 * is sent (the biller dates ids and refuses one not dated today), and recorded before it is
 * sent: the attempt row is what lets a requery, a webhook or a restarted worker find the
 * order again, by the id the biller knows. An order's attempts are numbered; (order,
 * number) is unique, so one attempt is made once whoever tries. An id is never sent twice.
 */
import type { Db } from "../db.ts";
import type { PayRequest } from "../biller/upstream.ts";

/** The pay an attempt sent, without its id (null for attempts recorded before pays were kept). */
export type AttemptPay = Omit<PayRequest, "requestId">;

export interface BillerAttempt {
  billerRequestId: string;
  requestId: string;
  attempt: number;
  pay: AttemptPay | null;
  sentAt: Date;
}

interface Row {
  biller_request_id: string;
  request_id: string;
  attempt: number;
  pay: AttemptPay | null;
  sent_at: Date;
}

const toAttempt = (r: Row): BillerAttempt => ({
  billerRequestId: r.biller_request_id,
  requestId: r.request_id,
  attempt: r.attempt,
  pay: r.pay,
  sentAt: new Date(r.sent_at),
});

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

  /** The order's latest attempt, if a pay was ever prepared for it. */
  async latest(requestId: string): Promise<BillerAttempt | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT biller_request_id, request_id, attempt, pay, sent_at FROM biller_attempt WHERE request_id = $1 ORDER BY attempt DESC LIMIT 1`,
      [requestId],
    );
    return row && toAttempt(row);
  }

  /** Every attempt of an order, first first. */
  async of(requestId: string): Promise<BillerAttempt[]> {
    const rows = await this.db.query<Row>(
      `SELECT biller_request_id, request_id, attempt, pay, sent_at FROM biller_attempt WHERE request_id = $1 ORDER BY attempt`,
      [requestId],
    );
    return rows.map(toAttempt);
  }

  /** The attempt the biller knows by this id (a webhook's pointer). */
  async byBillerRequestId(billerRequestId: string): Promise<BillerAttempt | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT biller_request_id, request_id, attempt, pay, sent_at FROM biller_attempt WHERE biller_request_id = $1`,
      [billerRequestId],
    );
    return row && toAttempt(row);
  }
}
