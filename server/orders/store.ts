/**
 * Orders and their states. An x402 order moves
 *   SETTLING -> PAID (the ledger shows a payment of exactly its amount under its key)
 *            PAID -> SUCCESS
 *                 -> PENDING (biller still working) -> SUCCESS | REFUNDING
 *                 -> REFUNDING -> REFUNDED
 *            SUCCESS -> REFUNDING (the biller reversed the bill after delivering it) -> REFUNDED
 *   SETTLING -> REFUSED (the facilitator refused, or the authorization is not yet valid:
 *               nothing moved, but it may still land until it expires)
 *            REFUSED -> PAYMENT_FAILED (expired, or its nonce went elsewhere: it can never land)
 *                    -> REFUNDING (it landed after all: the payer was told it did not settle)
 *   SETTLING -> PAYMENT_FAILED (expired unsettled)
 * and a pulled (agent-hub) order starts at PULLING instead of SETTLING:
 *   PULLING -> PAID (the ledger shows its Pulled event of exactly its amount) -> as above
 *   PULLING -> PAYMENT_FAILED (the pull reverted or never landed; nothing moved)
 * Whenever the chain shows something that does not fit (a payment of another amount under
 * the key, a nonce consumed with no payment after a settlement), the order stops at
 * NEEDS_REVIEW and nothing is sent or vended: an operator decides.
 * The payer sees SUCCESS, FAILED_VENDING (refunding or refunded; or, with `charged: false`,
 * not settled) or TIMEOUT (not finished yet; GET /api/orders/{request_id} tells the rest).
 */
import { assertMove, UNFINISHED_STATUSES, withdrawsUnsentAttempts, type OrderStatus } from "./lifecycle.ts";
import { onChainOrderId } from "../chain/order-id.ts";
import type { SignedRefund, SignedTransactions } from "../chain/operator.ts";
import type { SignedNonce } from "../chain/node-transactions.ts";
import { ServiceError } from "../errors.ts";
import { clearRefund, type RefundShares, type RefundWait } from "./refund-share.ts";
import { randomBytes, randomUUID } from "node:crypto";
import DataLoader from "dataloader";
import type { Hex } from "viem";
import { hashApiKey } from "../credentials.ts";
import type { VendPlan } from "../biller/catalogue/vend-plan.ts";
import type { PurchasedCode } from "../biller/upstream.ts";
import type { Db } from "../db.ts";

/**
 * A new order's id: `req_`, the UTC minute it was made (YYYYMMDDHHII) and 20 random hex
 * characters; BillPay's order id is derived from it. The biller's request ids are made per
 * pay attempt, when each is sent (orders/attempts.ts).
 */
export function newOrderIds(now = new Date()): { requestId: string } {
  const stamp = now.toISOString().slice(0, 16).replace(/[-T:]/g, "");
  return { requestId: `req_${stamp}${randomBytes(10).toString("hex")}` };
}

/** An order's states and the moves between them are decided in one table (lifecycle.ts). */
export type { OrderStatus } from "./lifecycle.ts";

/** How a refund's reason starts when the biller's number check said the number is wrong (counted per payer). */
export const VERIFICATION_FAILED = "verification failed";
/** The start of a refund reason for a bill the biller failed (orders/fulfil.ts), which orders/failing-payers.ts counts. */
export const BILLER_FAILED = "biller: ";

/**
 * Why an order was first refunded, where that is the payer's doing and counted against him: the
 * biller failed the bill ("biller", orders/failing-payers.ts), or its number check said the
 * number is wrong ("verification", biller/customer-check.ts). Kept in a column of its own, set
 * once by the move that first refunds the order: the reason text is written again by later
 * steps (an operator's refund of a held order), and a count read from it lost those bills.
 * Cleared by a move to SUCCESS: a bill delivered after all (a refund held, then served) is no
 * failed bill of its payer's.
 */
export type RefundCause = "biller" | "verification";

/** The cause a refund reason states, if it is one counted against the payer. */
export function refundCauseOf(reason: string): RefundCause | null {
  if (reason.startsWith(BILLER_FAILED)) return "biller";
  if (reason.startsWith(VERIFICATION_FAILED)) return "verification";
  return null;
}
/** How a paid order's reason starts while the biller cannot answer its number check (it waits, then is checked again). */
export const VERIFICATION_UNAVAILABLE = "verification unavailable";

/** Who claims an order for a piece of work on it (the lease says so). */
export type ClaimKind = "decision" | "webhook" | "work";

/**
 * Marks a lease taken by `claim` for work on the order (an operator's decision, the biller's
 * webhook, the payment watch): while it lasts nobody else claims the order, final or not.
 */
const HELD_LEASE = "held:";

/** States nothing automatic moves on from (NEEDS_REVIEW waits for an operator): a callback goes out on reaching one. */
export const FINAL_STATUSES: OrderStatus[] = ["SUCCESS", "REFUNDED", "PAYMENT_FAILED", "NEEDS_REVIEW"];

/**
 * States an order reaches only once the chain showed its payment, of exactly its amount under
 * its key (the ledger, or the node's receipt by the ledger's predicate): its transaction is the
 * payment's. A SETTLING or NEEDS_REVIEW order's may be a facilitator's unconfirmed hash, or a
 * payment that is not the order's; nothing is signed or answered as settled for it.
 */
const PAYMENT_CONFIRMED: ReadonlySet<OrderStatus> = new Set(["PAID", "PENDING", "SUCCESS", "REFUNDING", "REFUNDED"]);

/** Whether the order's transaction is its payment, as the chain showed it (PAYMENT_CONFIRMED). */
export function paymentConfirmed<T extends Pick<Order, "status" | "txHash">>(o: T): o is T & { txHash: string } {
  return o.txHash !== null && PAYMENT_CONFIRMED.has(o.status);
}

/**
 * Whether the order's payment paid for its bill: confirmed by the chain (paymentConfirmed),
 * and no late landing's refund. That one pays for no bill: the service refused the payment,
 * and the bill it carries is whoever offered it, who need not be its payer. Receipts and a
 * settlement's success are said only of this.
 */
export function paidForItsBill<T extends Pick<Order, "status" | "txHash" | "lateRefund">>(o: T): o is T & { txHash: string } {
  return paymentConfirmed(o) && !o.lateRefund;
}

/**
 * Wraps an `UPDATE bill_order ... RETURNING *` that moves orders to `finalParam` (a text
 * parameter): in the same statement, each order that became final with a callback_url
 * queues its callback; answers the moved rows. `before`: other CTEs of the statement.
 */
const queueingCallbacks = (update: string, finalParam: string, columns = COLUMNS, before: string[] = [], after: string[] = []) => `
  WITH ${[...before, `moved AS (${update})`, ...after].join(",\n")},
  queued AS (
    INSERT INTO callback_delivery (request_id, url, status)
    SELECT request_id, bill->>'callback_url', 'PENDING' FROM moved
    WHERE ${finalParam} = ANY('{${FINAL_STATUSES.join(",")}}'::text[]) AND bill->>'callback_url' IS NOT NULL
    -- A later final state (a served bill the biller reversed, then refunded) is told again.
    ON CONFLICT (request_id) DO UPDATE SET status = 'PENDING', attempts = 0, next_attempt_at = now(), delivered_at = NULL, last_status = NULL, last_error = NULL)
  SELECT ${columns} FROM moved`;

/** OrderStore.transition on a connection of the caller's: within a transaction that writes something else with it. */
export async function transitionIn(db: Pick<Db, "query">, requestId: string, from: OrderStatus[], to: OrderStatus, fields: TransitionFields = {}): Promise<Order | undefined> {
  const [row] = await db.query<Row>(movingSql(COLUMNS, from, to), movingParams(requestId, from, to, fields));
  return row && toOrder(row);
}

/**
 * A write that goes with an order's move, in the same statement (orders/payment-watch.ts, the
 * watch on the payment that makes it PAID): it is made whether or not the move finds the
 * order in a state it moves from, as it was when it was a statement of its own.
 */
export interface AlongsideWrite {
  /** The statement, its parameters numbered from `$<first>`. */
  sql(first: number): string;
  params: unknown[];
}

/** An x402 order's secret: returned once to the payer, kept only as its SHA-256; it proves the payer to the order route. */
export function newOrderSecret(): { secret: string; hash: string } {
  const secret = `ors_${randomBytes(24).toString("base64url")}`;
  return { secret, hash: hashOrderSecret(secret) };
}

/** Kept as an api_key is (SHA-256: a high-entropy secret needs no slow hash). */
export const hashOrderSecret = hashApiKey;

export type Rail = "x402" | "pull";

export interface Order {
  requestId: string;
  rail: Rail;
  /** BillPay's order id (keccak256 of the request id): the key of a pull and of any refund. */
  onchainOrderId: string;
  batchId: string | null;
  scheduleId: string | null;
  idempotencyKey: string | null;
  bodyHash: string;
  bill: Record<string, unknown>;
  /** How the bill vends (decided when it was priced); null for orders made before plans were kept. */
  vend: VendPlan | null;
  chain: string;
  token: string;
  tokenAddress: string;
  payer: string;
  amount: bigint;
  /** x402 only: the EIP-3009 nonce and expiry, the signed payment and the requirements it was checked against. */
  authNonce: string | null;
  authValidBefore: bigint | null;
  payment: Record<string, unknown> | null;
  requirements: Record<string, unknown> | null;
  status: OrderStatus;
  txHash: string | null;
  purchasedCode: string | null;
  /** Every code the biller handed over (tokens, PINs and serials, vouchers), labelled. */
  purchasedCodes: PurchasedCode[] | null;
  units: string | null;
  failureReason: string | null;
  refundTxHash: string | null;
  /** What the biller said it charged (NGN), and a note for operators when that is not the bill's amount. */
  billerAmount: string | null;
  flag: string | null;
  /** SHA-256 of the order's secret (x402 orders). */
  secretHash: string | null;
  /** Its refund is of a payment landed after the service refused it (the payer's doing): it draws on the late slice (orders/refund-share.ts). */
  lateRefund: boolean;
  /**
   * Token units its refund keeps back to pay for the refund's gas: a refusal kept at intake
   * that landed anyway (orders/late-landing.ts, LATE_LANDING_FEE), else 0.
   */
  refundFee: bigint;
  createdAt: Date;
  /** When the order last changed (status, transaction, outcome; a lease is not a change). */
  updatedAt: Date;
  /** Since when it has been unfinished, without a stop in a final state or in review (lifecycle.ts unfinishedSince). */
  unfinishedSince: Date;
  /** Who holds the order's lease right now (whoever created or claimed it). */
  leaseToken: string | null;
}

interface Row {
  request_id: string;
  rail: Rail;
  onchain_order_id: string;
  batch_id: string | null;
  schedule_id: string | null;
  idempotency_key: string | null;
  created_at: Date;
  updated_at: Date;
  unfinished_since: Date;
  lease_token: string | null;
  body_hash: string;
  bill: Record<string, unknown>;
  vend: VendPlan | null;
  chain: string;
  token: string;
  token_address: string;
  payer: string;
  amount: string;
  auth_nonce: string | null;
  auth_valid_before: string | null;
  payment: Record<string, unknown> | null;
  requirements: Record<string, unknown> | null;
  status: OrderStatus;
  tx_hash: string | null;
  purchased_code: string | null;
  purchased_codes: PurchasedCode[] | null;
  units: string | null;
  failure_reason: string | null;
  refund_tx_hash: string | null;
  biller_amount: string | null;
  flag: string | null;
  secret_hash: string | null;
  late_refund: boolean;
  refund_fee: string;
}

/**
 * An orphan x402 payment an operator holds while refunding it by hand (review.ts): nothing of
 * the service's may refund it or let an order take it meanwhile, so the hand refund is the
 * only one (BillPay's withdraw does not mark a key refunded, so the chain would not stop a second).
 */
export const ORPHAN_HELD_FOR_HAND_REFUND = "REFUNDING_BY_HAND";

/** Since when an order has been unfinished: rows made before the column existed read their making (lifecycle.ts unfinishedSince). */
const UNFINISHED_SINCE = "coalesce(unfinished_since, created_at)";
const UNFINISHED_ARRAY = `'{${UNFINISHED_STATUSES.join(",")}}'::text[]`;

const COLUMNS = `request_id, lease_token, rail, onchain_order_id, batch_id, schedule_id, idempotency_key, created_at, updated_at, ${UNFINISHED_SINCE} AS unfinished_since, body_hash, bill, vend, chain, token, token_address, payer, amount::text AS amount,
  auth_nonce, auth_valid_before::text AS auth_valid_before, payment, requirements, status, tx_hash, purchased_code, purchased_codes, units, failure_reason, refund_tx_hash,
  biller_amount, flag, secret_hash, late_refund, refund_fee::text AS refund_fee`;

function toOrder(r: Row): Order {
  return {
    requestId: r.request_id,
    rail: r.rail,
    onchainOrderId: r.onchain_order_id,
    batchId: r.batch_id,
    scheduleId: r.schedule_id,
    idempotencyKey: r.idempotency_key,
    createdAt: new Date(r.created_at),
    bodyHash: r.body_hash,
    bill: r.bill,
    vend: r.vend,
    chain: r.chain,
    token: r.token,
    tokenAddress: r.token_address,
    payer: r.payer,
    amount: BigInt(r.amount),
    authNonce: r.auth_nonce,
    authValidBefore: r.auth_valid_before === null ? null : BigInt(r.auth_valid_before),
    payment: r.payment,
    requirements: r.requirements,
    secretHash: r.secret_hash,
    refundFee: BigInt(r.refund_fee),
    ...changingPart(r),
  };
}

/** The columns an order's life changes after it is created: no UPDATE of bill_order writes any other. */
const CHANGING_COLUMNS = `request_id, lease_token, updated_at, ${UNFINISHED_SINCE} AS unfinished_since, status, tx_hash, purchased_code, purchased_codes, units, failure_reason, refund_tx_hash, biller_amount, flag, late_refund`;

type ChangingPart = Pick<Order, "leaseToken" | "updatedAt" | "unfinishedSince" | "status" | "txHash" | "purchasedCode" | "purchasedCodes" | "units" | "failureReason" | "refundTxHash" | "billerAmount" | "flag" | "lateRefund">;

function changingPart(r: Pick<Row, "lease_token" | "updated_at" | "unfinished_since" | "status" | "tx_hash" | "purchased_code" | "purchased_codes" | "units" | "failure_reason" | "refund_tx_hash" | "biller_amount" | "flag" | "late_refund">): ChangingPart {
  return {
    leaseToken: r.lease_token,
    updatedAt: new Date(r.updated_at),
    unfinishedSince: new Date(r.unfinished_since),
    status: r.status,
    txHash: r.tx_hash,
    purchasedCode: r.purchased_code,
    purchasedCodes: r.purchased_codes,
    units: r.units,
    failureReason: r.failure_reason,
    refundTxHash: r.refund_tx_hash,
    billerAmount: r.biller_amount,
    flag: r.flag,
    lateRefund: r.late_refund,
  };
}

type TransitionFields = Partial<Pick<Order, "txHash" | "purchasedCode" | "purchasedCodes" | "units" | "failureReason" | "refundTxHash" | "billerAmount" | "flag" | "lateRefund">> & {
  /** Kept from the first move that gives one (RefundCause). */
  refundCause?: RefundCause | null;
};

/**
 * One order moved on from the states given ($2) to `to` ($3), answering `columns`; an order
 * that becomes final with a callback_url queues its callback in the same statement (a move to
 * a state that is not final has none to queue, and is a plain UPDATE).
 */
function movingSql(columns: string, from: readonly OrderStatus[], to: OrderStatus, alongside?: AlongsideWrite): string {
  const update = `UPDATE bill_order SET status = $3, updated_at = now(),
       unfinished_since = CASE WHEN $3 = ANY(${UNFINISHED_ARRAY}) AND NOT (status = ANY(${UNFINISHED_ARRAY})) THEN now() ELSE unfinished_since END,
       tx_hash = COALESCE($4, tx_hash), purchased_code = COALESCE($5, purchased_code), units = COALESCE($6, units),
       failure_reason = COALESCE($7, failure_reason), refund_tx_hash = COALESCE($8, refund_tx_hash),
       biller_amount = COALESCE($9, biller_amount),
       flag = CASE WHEN $10::text IS NULL OR position($10::text in coalesce(flag, '')) > 0 THEN flag WHEN flag IS NULL THEN $10::text ELSE flag || '; ' || $10::text END,
       purchased_codes = COALESCE($11::jsonb, purchased_codes),
       late_refund = late_refund OR $12::boolean,
       refund_cause = CASE WHEN $3 = 'SUCCESS' THEN NULL ELSE COALESCE(refund_cause, $13::text) END,
       ${REFUND_AFRESH}
     WHERE request_id = $1 AND status = ANY($2::text[])`;
  const before = alongside ? [`alongside AS (${alongside.sql(MOVING_PARAMS + 1)})`] : [];
  // Only if this statement moved it: an order another actor made PAID meanwhile keeps its attempt.
  const after = withdrawsUnsentAttempts(from, to) ? [WITHDRAWN_ATTEMPTS] : [];
  if (FINAL_STATUSES.includes(to)) return queueingCallbacks(`${update} RETURNING *`, "$3", columns, before, after);
  if (after.length > 0) return `WITH ${[...before, `moved AS (${update} RETURNING *)`, ...after].join(", ")} SELECT ${columns} FROM moved`;
  return `${before.length > 0 ? `WITH ${before.join(", ")} ` : ""}${update} RETURNING ${columns}`;
}

/**
 * A refund begun anew (any move into REFUNDING from another state: an operator's decision, a
 * served bill failing again, a payment landing again) starts its clocks afresh: the wait for
 * the refund budget and the reverts that held an earlier try for review were that try's, and
 * its first short wait would otherwise send it straight back (fulfil.ts deferRefund,
 * refundReverted). Its place in the payer's share and the late slice is decided afresh too
 * (refund-share.ts): a payment that landed again after a reorganisation took it and its
 * refund would otherwise be refunded again outside both, on the first clearing's mark. The
 * worker's own tries (REFUNDING to REFUNDING) keep all of them.
 */
const REFUND_AFRESH = `refund_waiting_since = CASE WHEN status <> 'REFUNDING' AND $3 = 'REFUNDING' THEN NULL ELSE refund_waiting_since END,
       refund_reverts = CASE WHEN status <> 'REFUNDING' AND $3 = 'REFUNDING' THEN 0 ELSE refund_reverts END,
       refund_cleared_at = CASE WHEN status <> 'REFUNDING' AND $3 = 'REFUNDING' THEN NULL ELSE refund_cleared_at END,
       refund_cleared_amount = CASE WHEN status <> 'REFUNDING' AND $3 = 'REFUNDING' THEN NULL ELSE refund_cleared_amount END`;

/** The pay attempts of an order moved out of the states before payment, never sent (lifecycle.ts withdrawsUnsentAttempts). */
const WITHDRAWN_ATTEMPTS = `withdrawn AS (DELETE FROM biller_attempt WHERE request_id IN (SELECT request_id FROM moved))`;

/** How many parameters movingSql's own statement takes ($1 to $13). */
const MOVING_PARAMS = 13;

function movingParams(requestId: string, from: OrderStatus[], to: OrderStatus, fields: TransitionFields, alongside?: AlongsideWrite): unknown[] {
  assertMove(from, to);
  return [
    requestId,
    from,
    to,
    fields.txHash ?? null,
    fields.purchasedCode ?? null,
    fields.units ?? null,
    fields.failureReason ?? null,
    fields.refundTxHash ?? null,
    fields.billerAmount ?? null,
    fields.flag ?? null,
    fields.purchasedCodes ? JSON.stringify(fields.purchasedCodes) : null,
    fields.lateRefund === true,
    fields.refundCause ?? null,
    ...(alongside?.params ?? []),
  ];
}

export type NewOrder = Omit<
  Order,
  | "status"
  | "txHash"
  | "purchasedCode"
  | "purchasedCodes"
  | "units"
  | "failureReason"
  | "refundTxHash"
  | "billerAmount"
  | "flag"
  | "rail"
  | "onchainOrderId"
  | "batchId"
  | "scheduleId"
  | "idempotencyKey"
  | "createdAt"
  | "updatedAt"
  | "unfinishedSince"
  | "leaseToken"
  | "lateRefund"
  | "refundFee"
>;

export type NewPullOrder = Omit<NewOrder, "authNonce" | "authValidBefore" | "payment" | "requirements" | "secretHash"> &
  Pick<Order, "batchId" | "scheduleId" | "idempotencyKey">;

/**
 * What must still hold when a pull is signed: the schedule that asked for it is not cancelled
 * and the key it was made under is still its wallet's (a re-link cancels a wallet's active
 * schedules, but not one whose last run is already under way), or the key that asked for it
 * is the wallet's current one.
 */
export type PullGuard = { scheduleId: string } | { apiKeyHash: string };

type TxHashRecord = { requestIds: string[]; txHash: string; guard?: PullGuard; previous?: string; under?: SignedNonce };

/** The first nine columns of every new order, in insert order (request_id ... amount). */
function billParams(o: Omit<NewPullOrder, "batchId" | "scheduleId" | "idempotencyKey">): unknown[] {
  return [
    o.requestId,
    o.vend === null ? null : JSON.stringify(o.vend),
    o.bodyHash,
    JSON.stringify(o.bill),
    o.chain,
    o.token,
    o.tokenAddress.toLowerCase(),
    o.payer.toLowerCase(),
    o.amount.toString(),
  ];
}

export class OrderStore {
  /**
   * @param instance this process's instance id (chain/key-lease.ts): every lease it takes is
   *                 `<instance>/<uuid>`, so a restarted instance can release what its crashed
   *                 predecessor held instead of waiting out ORDER_LEASE_SECONDS.
   */
  constructor(
    private readonly db: Db,
    private readonly instance = "unnamed",
  ) {}

  private leaseToken(kind = ""): string {
    return `${this.instance}/${kind}${randomUUID()}`;
  }

  /** Releases every lease `instance` holds (it is known dead); returns how many orders it held. */
  async releaseInstance(instance: string): Promise<number> {
    const rows = await this.db.query(
      `UPDATE bill_order SET lease_until = NULL WHERE lease_until > now() AND starts_with(lease_token, $1) RETURNING request_id`,
      [`${instance}/`],
    );
    return rows.length;
  }

  /**
   * Takes the once-only lock on the payment and creates the order in SETTLING. When the
   * payment was seen before, returns that order instead (`created: false`).
   */
  /**
   * `idempotencyKey`: the client's id for the payment (orders/payment-id.ts), unique per payer
   * with the pull orders' keys. When another order holds it (a concurrent request under the
   * same id), nothing is created and that order is returned (`created: false`).
   */
  async lockPayment(o: NewOrder & { idempotencyKey?: string | null }, leaseSeconds: number): Promise<{ order: Order; created: boolean }> {
    // An orphan an operator closed, or holds while refunding it by hand, makes no order; an
    // open one is claimed only by the order this statement creates (none on a conflict).
    // The request that creates the order holds its lease while it works on it: the worker
    // only takes orders whose lease has run out (their request died or gave up).
    // Two unique keys can refuse it, (chain, token, payer, nonce) and (payer, idempotency key): either returns the order that holds it.
    // A payment that reached BillPay before its order (an orphan record, orders/ledger-pass.ts:
    // landed after the intake read its nonce unspent, as one spent by then is refused there)
    // is claimed by it in the same statement while open, so an operator can no longer refund it
    // by hand (review.ts closes only NEEDS_REVIEW); one an operator already closed (refunded by
    // hand, or kept) makes no order at all: it pays for nothing.
    const rail = (o.payment as { method?: string } | null)?.method === "permit2" ? "permit2" : "authorization";
    const inserted = await this.db.query<Row>(
      // The orphan's row is locked and read as it stands now (FOR UPDATE reads the newest
      // version), not as the statement's snapshot has it: a hold committed meanwhile counts.
      `WITH orphan AS (
         SELECT status FROM orphan_payment WHERE chain = $5 AND token_address = $7 AND payer = $8 AND auth_nonce = $10 AND rail = $19 FOR UPDATE
       ), closed AS (
         SELECT 1 FROM orphan WHERE status IN ('REFUNDED', 'RESOLVED', '${ORPHAN_HELD_FOR_HAND_REFUND}')
       ), inserted AS (
         INSERT INTO bill_order (request_id, vend, body_hash, bill, chain, token, token_address, payer, amount,
                                 auth_nonce, payment, requirements, status, lease_until, rail, onchain_order_id, lease_token,
                                 auth_valid_before, secret_hash, idempotency_key)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'SETTLING', now() + make_interval(secs => $13), 'x402', $14, $15, $16, $17, $18
          WHERE NOT EXISTS (SELECT 1 FROM closed)
         ON CONFLICT DO NOTHING
         RETURNING ${COLUMNS}
       ), claimed AS (
         UPDATE orphan_payment SET status = 'CLAIMED'
          WHERE chain = $5 AND token_address = $7 AND payer = $8 AND auth_nonce = $10 AND rail = $19 AND status = 'NEEDS_REVIEW'
            AND EXISTS (SELECT 1 FROM inserted)
       )
       SELECT * FROM inserted`,
      [
        ...billParams(o),
        o.authNonce!.toLowerCase(),
        JSON.stringify(o.payment),
        JSON.stringify(o.requirements),
        leaseSeconds,
        onChainOrderId(o.requestId),
        this.leaseToken(),
        o.authValidBefore!.toString(),
        o.secretHash,
        o.idempotencyKey ?? null,
        rail,
      ],
    );
    if (inserted[0]) return { order: toOrder(inserted[0]), created: true };
    const byPayment = await this.findByPayment(o.chain, o.tokenAddress, o.payer, o.authNonce!);
    if (byPayment) return { order: byPayment, created: false };
    const [byKey] = o.idempotencyKey ? await this.findByIdempotencyKeys(o.payer, [o.idempotencyKey]) : [];
    if (byKey) return { order: byKey, created: false };
    const [closed] = await this.db.query(
      `SELECT 1 FROM orphan_payment WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4 AND status IN ('REFUNDED', 'RESOLVED', '${ORPHAN_HELD_FOR_HAND_REFUND}')`,
      [o.chain, o.tokenAddress.toLowerCase(), o.payer.toLowerCase(), o.authNonce!.toLowerCase()],
    );
    if (closed) throw new ServiceError("PAYMENT_NONCE_SPENT", "this authorization already reached BillPay on its own, outside any order, and an operator has settled it (refunded by hand, or kept) or is refunding it by hand: it pays for no bill", { charged: false });
    throw new Error("the order could not be created and no order holds its keys"); // a key deleted in between: the caller retries
  }

  /**
   * Creates pulled orders in PULLING, leased to the caller, before any pull is sent: the
   * chain never holds a pull the table does not know. With an idempotency key already used
   * by the payer, nothing is created and that order is returned instead (`created: false`).
   */
  async createPullOrders(orders: NewPullOrder[], leaseSeconds: number): Promise<{ orders: Order[]; created: boolean }> {
    if (orders.length === 0) return { orders: [], created: true };
    const params: unknown[] = [leaseSeconds, this.leaseToken()];
    const values = orders.map((o) => {
      const base = params.length;
      params.push(
        ...billParams(o),
        onChainOrderId(o.requestId),
        o.batchId,
        o.scheduleId,
        o.idempotencyKey,
      );
      const p = (i: number) => `$${base + i}`;
      return `(${[1, 2, 3, 4, 5, 6, 7, 8, 9].map(p).join(", ")}, 'PULLING', now() + make_interval(secs => $1), $2, 'pull', ${p(10)}, ${p(11)}, ${p(12)}, ${p(13)})`;
    });
    // One statement: a batch is created whole or not at all.
    const inserted = await this.db.query<Row>(
      `INSERT INTO bill_order (request_id, vend, body_hash, bill, chain, token, token_address, payer, amount,
                               status, lease_until, lease_token, rail, onchain_order_id, batch_id, schedule_id, idempotency_key)
       VALUES ${values.join(", ")}
       ON CONFLICT (payer, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
       RETURNING ${COLUMNS}`,
      params,
    );
    const byId = new Map(inserted.map((r) => [r.request_id, toOrder(r)]));
    if (inserted.length === orders.length) return { orders: orders.map((o) => byId.get(o.requestId)!), created: true };
    // A concurrent call with the same key won: its orders are the answer. (One statement
    // inserts a batch whole, so a racing batch finds all of its keys taken, never some.)
    if (inserted.length > 0) {
      // Part of this batch's keys were taken by another call with the same key (a batch of
      // another size): take back the rest, which no pull was signed for, and refuse.
      await this.withdrawUnsent(inserted.map((r) => r.request_id));
      return { orders: await this.findByIdempotencyKeys(orders[0]!.payer, orders.map((o) => o.idempotencyKey!)), created: false };
    }
    const keys = orders.map((o) => o.idempotencyKey).filter((k): k is string => k !== null);
    return { orders: await this.findByIdempotencyKeys(orders[0]!.payer, keys), created: false };
  }

  /**
   * Records a refund transaction signed for the order, before it is sent, with the signer's
   * nonce and fees it was signed under when given: one statement. With `whileStatus`, only
   * while the order stands in it (a refund is sent only for an order still REFUNDING: one an
   * operator served meanwhile must not be paid back too): whether it was recorded.
   */
  async refundSigned(requestId: string, hash: string, signed?: Omit<SignedRefund, "hash">, whileStatus?: OrderStatus): Promise<boolean> {
    if (!signed) {
      const rows = await this.db.query(
        `UPDATE bill_order SET refund_signed = array_append(coalesce(refund_signed, '{}'), $2) WHERE request_id = $1 AND ($3::text IS NULL OR status = $3) RETURNING request_id`,
        [requestId, hash.toLowerCase(), whileStatus ?? null],
      );
      return rows.length > 0;
    }
    const [row] = await this.db.query<{ recorded: string }>(
      `WITH o AS (UPDATE bill_order SET refund_signed = array_append(coalesce(refund_signed, '{}'), $2) WHERE request_id = $1 AND ($7::text IS NULL OR status = $7) RETURNING request_id),
       n AS (INSERT INTO refund_nonce (request_id, signer, nonce, max_fee_per_gas, max_priority_fee_per_gas) SELECT request_id, $3, $4, $5, $6 FROM o
         ON CONFLICT (request_id, signer, nonce) DO UPDATE SET
           max_fee_per_gas = GREATEST(refund_nonce.max_fee_per_gas, EXCLUDED.max_fee_per_gas),
           max_priority_fee_per_gas = GREATEST(refund_nonce.max_priority_fee_per_gas, EXCLUDED.max_priority_fee_per_gas))
       SELECT count(*) AS recorded FROM o`,
      [requestId, hash.toLowerCase(), signed.signer.toLowerCase(), signed.nonce, signed.maxFeePerGas.toString(), signed.maxPriorityFeePerGas.toString(), whileStatus ?? null],
    );
    return Number(row?.recorded ?? 0) > 0;
  }

  /** Every refund transaction signed for the order, mined or not, and the one it records as its refund: each once. */
  async signedRefunds(requestId: string): Promise<Hex[]> {
    return (await this.signedRefundRecord(requestId)).hashes;
  }

  /**
   * signedRefunds, and each signer's nonce they were signed under with the highest fees signed
   * under it (none for refunds signed before nonces were kept).
   */
  async signedRefundRecord(requestId: string): Promise<SignedTransactions> {
    const [row] = await this.db.query<{ refund_signed: string[] | null; refund_tx_hash: string | null; nonces: Array<{ signer: Hex; nonce: number; max_fee: string; max_priority_fee: string }> }>(
      `SELECT refund_signed, refund_tx_hash,
              coalesce((SELECT json_agg(json_build_object('signer', signer, 'nonce', nonce, 'max_fee', max_fee_per_gas::text, 'max_priority_fee', max_priority_fee_per_gas::text))
                          FROM refund_nonce n WHERE n.request_id = o.request_id), '[]') AS nonces
         FROM bill_order o WHERE request_id = $1`,
      [requestId],
    );
    const hashes = [...new Set([...(row?.refund_signed ?? []), ...(row?.refund_tx_hash ? [row.refund_tx_hash.toLowerCase()] : [])])] as Hex[];
    const nonces = (row?.nonces ?? []).map((n) => ({ signer: n.signer, nonce: Number(n.nonce), maxFeePerGas: BigInt(n.max_fee), maxPriorityFeePerGas: BigInt(n.max_priority_fee) }));
    return { hashes, nonces };
  }

  /** Every pull transaction signed for the order, each once, the one it names now included (orders made before the record: that one alone). */
  async signedPulls(requestId: string): Promise<Hex[]> {
    return (await this.signedPullRecord(requestId)).hashes;
  }

  /**
   * signedPulls, and the operator key's nonce the newest was signed under with the highest fees
   * signed under it (its replacements share it; an earlier one, in another transaction, was
   * mined or never sent). None for pulls signed before nonces were kept, or without one.
   */
  async signedPullRecord(requestId: string): Promise<SignedTransactions> {
    const [row] = await this.db.query<{ pull_signed: string[] | null; tx_hash: string | null; pull_signer: string | null; pull_nonce: string | null; pull_max_fee: string | null; pull_max_priority_fee: string | null }>(
      `SELECT pull_signed, tx_hash, pull_signer, pull_nonce::text, pull_max_fee::text, pull_max_priority_fee::text FROM bill_order WHERE request_id = $1`,
      [requestId],
    );
    const hashes = [...new Set([...(row?.pull_signed ?? []), ...(row?.tx_hash ? [row.tx_hash] : [])].map((h) => h.toLowerCase()))] as Hex[];
    const nonces =
      row?.pull_signer && row.pull_nonce !== null
        ? [{ signer: row.pull_signer as Hex, nonce: Number(row.pull_nonce), maxFeePerGas: BigInt(row.pull_max_fee ?? 0), maxPriorityFeePerGas: BigInt(row.pull_max_priority_fee ?? 0) }]
        : [];
    return { hashes, nonces };
  }

  /** Takes back pull orders no pull was signed for (PULLING, no transaction): as if never made. */
  async withdrawUnsent(requestIds: string[]): Promise<void> {
    await this.db.query(`DELETE FROM bill_order WHERE request_id = ANY($1::text[]) AND status = 'PULLING' AND tx_hash IS NULL`, [requestIds]);
  }

  async findByIdempotencyKeys(payer: string, keys: string[]): Promise<Order[]> {
    const rows = await this.db.query<Row>(`SELECT ${COLUMNS} FROM bill_order WHERE payer = $1 AND idempotency_key = ANY($2::text[])`, [
      payer.toLowerCase(),
      keys,
    ]);
    return rows.map(toOrder);
  }

  /** Orders by BillPay order id (lower-case hex). */
  async findByOnchainIds(ids: string[]): Promise<Order[]> {
    if (ids.length === 0) return [];
    const rows = await this.db.query<Row>(`SELECT ${COLUMNS} FROM bill_order WHERE onchain_order_id = ANY($1::text[])`, [
      ids.map((i) => i.toLowerCase()),
    ]);
    return rows.map(toOrder);
  }

  async byBatch(batchId: string): Promise<Order[]> {
    const rows = await this.db.query<Row>(`SELECT ${COLUMNS} FROM bill_order WHERE batch_id = $1 ORDER BY request_id`, [batchId]);
    return rows.map(toOrder);
  }

  /** A payer's orders, newest first; after `afterRequestId` (the last one of the previous page) when given. */
  async history(payer: string, limit: number, afterRequestId?: string): Promise<Order[]> {
    // The cursor is compared by the database's own timestamp (microseconds), looked up by id.
    const rows = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order
       WHERE payer = $1 AND ($2::text IS NULL OR (created_at, request_id) <
         (SELECT created_at, request_id FROM bill_order WHERE request_id = $2 AND payer = $1))
       ORDER BY created_at DESC, request_id DESC LIMIT $3`,
      [payer.toLowerCase(), afterRequestId ?? null, limit],
    );
    return rows.map(toOrder);
  }

  /** How many orders stand in each of `statuses` (the worker's start: what it will resume). */
  async countByStatus(statuses: OrderStatus[]): Promise<Record<string, number>> {
    const rows = await this.db.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM bill_order WHERE status = ANY($1::text[]) GROUP BY status`,
      [statuses],
    );
    return Object.fromEntries(rows.map((r) => [r.status, r.n]));
  }

  /** The payer's x402 order for this very bill (its hash) whose settlement is still undecided, if any. */
  async settlingForBill(payer: string, bodyHash: string): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order WHERE payer = $1 AND body_hash = $2 AND status = 'SETTLING' AND rail = 'x402' ORDER BY created_at DESC LIMIT 1`,
      [payer.toLowerCase(), bodyHash],
    );
    return row && toOrder(row);
  }

  /**
   * A refused payment that landed anyway (orders/late-landing.ts): made an order in REFUNDING,
   * a late refund, holding its key. In the same statement its orphan record, when there is one,
   * is claimed, and only while no operator has closed or held it: an orphan refunded by hand,
   * kept, or held for a refund by hand is never refunded by the service, and an operator cannot
   * decide one this claims (review.ts moves only NEEDS_REVIEW and held ones). Undefined when an order already holds the key or an operator closed it.
   */
  async createLandedRefund(
    r: { chain: string; rail: string; token: string; tokenAddress: string; payer: string; nonce: string; amount: bigint; validBefore: bigint; bill: Record<string, unknown>; bodyHash: string; payment: Record<string, unknown>; requirements: Record<string, unknown>; reason: string },
    txHash: string,
    refundFee: bigint,
  ): Promise<Order | undefined> {
    const { requestId } = newOrderIds();
    const key = [r.chain, r.tokenAddress.toLowerCase(), r.payer.toLowerCase(), r.nonce.toLowerCase(), r.rail];
    // The orphan's row is locked first (an operator holding it meanwhile is waited for, and its
    // status read as it then stands); it is claimed only when the order was made: an order
    // already holding the key (on the other rail: its nonce of the same value) leaves it as it was.
    const rows = await this.db.query<Row>(
      `WITH orphan AS (
         SELECT status FROM orphan_payment WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4 AND rail = $5 FOR UPDATE
       ), made AS (
         INSERT INTO bill_order (request_id, vend, body_hash, bill, chain, token, token_address, payer, amount, auth_nonce, payment, requirements,
                                 status, rail, onchain_order_id, auth_valid_before, tx_hash, failure_reason, late_refund, refund_fee)
         SELECT $6, NULL, $7, $8, $1, $9, $2, $3, $10, $4, $11, $12, 'REFUNDING', 'x402', $13, $14, $15, $16, true, $17
          WHERE NOT EXISTS (SELECT 1 FROM orphan WHERE status <> 'NEEDS_REVIEW')
         ON CONFLICT DO NOTHING
         RETURNING ${COLUMNS}
       ), claimed AS (
         UPDATE orphan_payment SET status = 'CLAIMED' WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4 AND rail = $5 AND status = 'NEEDS_REVIEW'
            AND EXISTS (SELECT 1 FROM made) RETURNING 1
       )
       SELECT * FROM made`,
      [
        ...key,
        requestId,
        r.bodyHash,
        JSON.stringify(r.bill),
        r.token,
        r.amount.toString(),
        JSON.stringify(r.payment),
        JSON.stringify(r.requirements),
        onChainOrderId(requestId),
        r.validBefore.toString(),
        txHash,
        `the payment landed on chain after the service had refused it (${r.reason})`,
        refundFee.toString(),
      ],
    );
    return rows[0] && toOrder(rows[0]);
  }

  /** The order an x402 payment paid for, if any: its lock key is (chain, token, payer, nonce). */
  async findByPayment(chain: string, tokenAddress: string, payer: string, nonce: string): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4`,
      [chain, tokenAddress.toLowerCase(), payer.toLowerCase(), nonce.toLowerCase()],
    );
    return row && toOrder(row);
  }

  /** The orders under these payment keys on one chain, in one read (the ledger pass's page). */
  async findByPayments(chain: string, keys: Array<{ token: string; payer: string; nonce: string }>): Promise<Order[]> {
    if (keys.length === 0) return [];
    const rows = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order WHERE chain = $1
       AND (token_address, payer, auth_nonce) IN (SELECT * FROM unnest($2::text[], $3::text[], $4::text[]))`,
      [chain, keys.map((k) => k.token.toLowerCase()), keys.map((k) => k.payer.toLowerCase()), keys.map((k) => k.nonce.toLowerCase())],
    );
    return rows.map(toOrder);
  }

  /**
   * Records the signed pull for these orders, before it is sent: the last moment before
   * money moves. Returns false (so it is never sent) unless every order is still PULLING
   * without one (the worker may have written an order off meanwhile) and the guard still
   * holds: the schedule is not cancelled and its key still the wallet's, or the key is still the wallet's. The guard's row
   * is locked by the same statement, so a cancel or a re-link either lands first (nothing
   * is sent) or waits for this one. A pull signed again in another transaction (a smaller
   * group, or alone after its batch was refused) names the hash it takes the place of, and
   * is recorded under the same guard.
   */
  async setTxHash(requestIds: string[], txHash: string, guard?: PullGuard, previous?: string, under?: SignedNonce): Promise<boolean> {
    return this.hashRecords.load({ requestIds, txHash, guard, previous, under });
  }

  /**
   * The members of a gathered pullBatch record their hash at once: the records asked for in
   * one tick go out together (on embedded PostgreSQL, one statement instead of one per
   * member is most of a gathered send's time). Each row keeps its own guard and each record
   * its own outcome, as if each were its own statement.
   */
  private readonly hashRecords = new DataLoader<TxHashRecord, boolean>((records) => this.recordTxHashes(records), { cache: false });

  private async recordTxHashes(records: readonly TxHashRecord[]): Promise<boolean[]> {
    const outcomes = records.map(() => false);
    // One statement per kind of guard, so that none holds a schedule's lock while waiting for a
    // link's (a re-link takes the link's, then its schedules': the other order could deadlock).
    const bySchedule = records.map((r, i) => [r, i] as const).filter(([r]) => r.guard && "scheduleId" in r.guard);
    const byKey = records.map((r, i) => [r, i] as const).filter(([r]) => !r.guard || !("scheduleId" in r.guard));
    for (const group of [bySchedule, byKey]) {
      if (group.length === 0) continue;
      const rows = group.flatMap(([r, i]) =>
        r.requestIds.map((id) => [
          i,
          id,
          r.txHash,
          r.guard && "scheduleId" in r.guard ? r.guard.scheduleId : null,
          r.guard && "apiKeyHash" in r.guard ? r.guard.apiKeyHash : null,
          r.previous ?? null,
          r.under?.signer.toLowerCase() ?? null,
          r.under?.nonce ?? null,
          r.under?.maxFeePerGas.toString() ?? null,
          r.under?.maxPriorityFeePerGas.toString() ?? null,
        ]),
      );
      const column = (c: number) => rows.map((row) => row[c]);
      const recorded = await this.db.query<{ record: number }>(
        `WITH rec AS (SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::numeric[], $10::numeric[])
                      AS r(record, request_id, tx_hash, schedule_id, api_key_hash, previous, signer, nonce, max_fee, max_priority_fee)),
              schedule AS (SELECT s.id FROM bill_schedule s WHERE s.id IN (SELECT schedule_id FROM rec) AND s.status <> 'CANCELLED'
                AND (s.api_key_hash IS NULL OR EXISTS (SELECT 1 FROM agent_link l WHERE l.wallet = s.wallet AND l.api_key_hash = s.api_key_hash)) FOR SHARE OF s),
              link AS (SELECT wallet, api_key_hash FROM agent_link WHERE api_key_hash IN (SELECT api_key_hash FROM rec) FOR SHARE)
         UPDATE bill_order SET tx_hash = rec.tx_hash, pull_signed = array_append(coalesce(pull_signed, '{}'), rec.tx_hash), updated_at = now(),
                pull_signer = rec.signer, pull_nonce = rec.nonce, pull_max_fee = rec.max_fee, pull_max_priority_fee = rec.max_priority_fee
         FROM rec
         WHERE bill_order.request_id = rec.request_id AND bill_order.status = 'PULLING' AND bill_order.tx_hash IS NOT DISTINCT FROM rec.previous
           AND (rec.schedule_id IS NULL OR EXISTS (SELECT 1 FROM schedule WHERE schedule.id = rec.schedule_id))
           AND (rec.api_key_hash IS NULL OR EXISTS (SELECT 1 FROM link WHERE link.api_key_hash = rec.api_key_hash AND link.wallet = bill_order.payer))
         RETURNING rec.record`,
        [column(0), column(1), column(2), column(3), column(4), column(5), column(6), column(7), column(8), column(9)],
      );
      // A record holds only if every one of its orders took the hash under it (an order named
      // twice in one tick takes it once, so only one of the two records can hold).
      const taken = new Map<number, number>();
      for (const { record } of recorded) taken.set(record, (taken.get(record) ?? 0) + 1);
      for (const [r, i] of group) outcomes[i] = taken.get(i) === r.requestIds.length;
    }
    return outcomes;
  }

  /** The order's payment is now in transaction `txHash` (collected again after a reorganisation); its state is unchanged. */
  async paymentMovedTo(requestId: string, txHash: string): Promise<void> {
    await this.db.query(`UPDATE bill_order SET tx_hash = $2, updated_at = now() WHERE request_id = $1`, [requestId, txHash]);
  }

  /**
   * The pull recorded as `previous` goes out again at a higher fee: recorded, so sent, only
   * while every one of the orders is still PULLING under it, all or none (one the worker
   * wrote off meanwhile is not pushed onto the chain faster; should the first land anyway,
   * the ledger pass refunds it). `whatever`: recorded whatever the state (`next` is the one
   * the chain took, or the one already sent, put back). True when recorded.
   */
  async replaceTxHash(requestIds: string[], previous: string, next: string, whatever = false, fees?: { maxFeePerGas?: bigint; maxPriorityFeePerGas?: bigint; gasPrice?: bigint }): Promise<boolean> {
    // The status is asked of each row itself too: a write-off committed while this waited on
    // its row lock is seen there (PostgreSQL re-checks only the row's own conditions). A
    // replacement shares its first's nonce; its fees, higher, are what a void must outbid.
    const cap = fees?.maxFeePerGas ?? fees?.gasPrice;
    const tip = fees?.maxPriorityFeePerGas ?? cap;
    const rows = await this.db.query(
      `UPDATE bill_order SET tx_hash = $3, pull_signed = array_append(coalesce(pull_signed, '{}'), $3), updated_at = now(),
              pull_max_fee = GREATEST(pull_max_fee, $5::numeric), pull_max_priority_fee = GREATEST(pull_max_priority_fee, $6::numeric)
       WHERE request_id = ANY($1::text[]) AND tx_hash = $2 AND ($4 OR status = 'PULLING')
         AND ($4 OR NOT EXISTS (SELECT 1 FROM bill_order o WHERE o.request_id = ANY($1::text[]) AND (o.status <> 'PULLING' OR o.tx_hash IS DISTINCT FROM $2)))
       RETURNING request_id`,
      [requestIds, previous, next, whatever, cap?.toString() ?? null, tip?.toString() ?? null],
    );
    return rows.length === requestIds.length;
  }

  /**
   * PULLING -> PAYMENT_FAILED for an order no pull was ever signed for, or none since
   * `inert`: a transaction the caller knows moved no money (never sent, refused at its
   * estimate, or mined and reverted); undefined if one was signed meanwhile.
   */
  async writeOffUnsent(requestId: string, inert?: string): Promise<Order | undefined> {
    assertMove(["PULLING"], "PAYMENT_FAILED");
    const [row] = await this.db.query<Row>(
      queueingCallbacks(
        `UPDATE bill_order SET status = 'PAYMENT_FAILED', failure_reason = 'no pull was sent', updated_at = now()
         WHERE request_id = $1 AND status = 'PULLING' AND tx_hash IS NOT DISTINCT FROM $2 RETURNING *`,
        "'PAYMENT_FAILED'",
        COLUMNS,
        [],
        [WITHDRAWN_ATTEMPTS],
      ),
      [requestId, inert ?? null],
    );
    return row && toOrder(row);
  }

  /**
   * Takes the order's lease for a piece of work on it (an operator's decision, the biller's
   * webhook, the payment watch): if nobody holds it, or if the order is final and its lease is
   * the one the request or worker that finished it kept only nominally. A lease taken here is
   * real while it lasts: a second claim is refused (two operators' decisions, or a decision
   * and a webhook, never run on one order at once; one refused would otherwise release the
   * lease the other works under, and let the worker run beside it). Undefined when someone
   * is working on it.
   */
  async claim(requestId: string, leaseSeconds: number, by: ClaimKind = "work"): Promise<Order | undefined> {
    // Copies of one webhook keep each other out too: one refused is answered 503 and the biller
    // sends it again (orders/biller-webhook.ts), and none can release the lease another works under.
    const [row] = await this.db.query<Row>(
      `UPDATE bill_order SET lease_until = now() + make_interval(secs => $2), lease_token = $3
       WHERE request_id = $1 AND (lease_until IS NULL OR lease_until < now()
         OR (status = ANY($4::text[]) AND position($5::text IN coalesce(lease_token, '')) = 0))
       RETURNING ${COLUMNS}`,
      [requestId, leaseSeconds, this.leaseToken(`${HELD_LEASE}${by}:`), FINAL_STATUSES, `/${HELD_LEASE}`],
    );
    return row && toOrder(row);
  }

  /** Gives up the lease: the worker may take the order at once if it is unfinished. */
  /**
   * A REFUNDING order waits `seconds` before the worker tries it again (its refund cannot be
   * sent now). Answers since when it has been waiting, and whether this is its first wait.
   */
  async deferRefund(requestId: string, seconds: number): Promise<{ waitingSince: Date; first: boolean } | undefined> {
    const [row] = await this.db.query<{ since: Date; first: boolean }>(
      `UPDATE bill_order o SET not_before = now() + make_interval(secs => $2), refund_waiting_since = coalesce(o.refund_waiting_since, now())
       FROM bill_order old WHERE o.request_id = $1 AND old.request_id = o.request_id AND o.status = 'REFUNDING'
       RETURNING o.refund_waiting_since AS since, old.refund_waiting_since IS NULL AS first`,
      [requestId, seconds],
    );
    return row && { waitingSince: new Date(row.since), first: row.first };
  }

  /**
   * A REFUNDING order's refund was mined and reverted: counted, and the order not taken again
   * for `seconds`. The count so far; undefined when the order is no longer REFUNDING.
   */
  async refundReverted(requestId: string, seconds: number): Promise<number | undefined> {
    const [row] = await this.db.query<{ reverts: number }>(
      `UPDATE bill_order SET refund_reverts = refund_reverts + 1, not_before = now() + make_interval(secs => $2)
       WHERE request_id = $1 AND status = 'REFUNDING' RETURNING refund_reverts AS reverts`,
      [requestId, seconds],
    );
    return row?.reverts;
  }

  /**
   * A PAID order waits `seconds` before the worker takes it again (the biller could not
   * answer its number check), with the reason; undefined when it is no longer PAID.
   */
  async deferPaid(requestId: string, seconds: number, reason: string): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `UPDATE bill_order SET not_before = now() + make_interval(secs => $2), failure_reason = $3
       WHERE request_id = $1 AND status = 'PAID' RETURNING ${COLUMNS}`,
      [requestId, seconds, reason],
    );
    return row && toOrder(row);
  }

  /** Clears the order's refund of `amount` against its payer's share and the late slice, or says why it waits (orders/refund-share.ts). */
  clearRefund(o: Order, amount: bigint, budget: { limit: bigint; period: bigint }, shares: RefundShares): Promise<RefundWait> {
    return clearRefund(this.db, o, amount, budget, shares);
  }

  /**
   * The refund an operator approved for this order from review (orders/review.ts), if any:
   * the amount the ledger showed paid under the order's key when they approved it. The refund
   * path still sends it only while the ledger shows exactly that payment.
   */
  async approvedRefund(requestId: string): Promise<bigint | null> {
    const [row] = await this.db.query<{ amount: string }>(
      `SELECT amount::text AS amount FROM review_action
       WHERE request_id = $1 AND action = 'refund' AND amount IS NOT NULL AND outcome <> 'REFUSED'
       ORDER BY id DESC LIMIT 1`,
      [requestId],
    );
    return row ? BigInt(row.amount) : null;
  }

  /**
   * Which of these ledger transfers into BillPay (their row ids) an operator has taken to give
   * back by hand, holding a Permit2 order for them (orders/review.ts): each is taken once.
   */
  async inflowsTakenForHandRefunds(ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rows = await this.db.query<{ hand_refund_inflow: string }>(`SELECT hand_refund_inflow FROM review_action WHERE hand_refund_inflow = ANY($1::text[])`, [ids]);
    return new Set(rows.map((r) => r.hand_refund_inflow));
  }

  /** The transfer an operator's hold of this order took to give back by hand (its ledger row id), if any. */
  async handRefundInflow(requestId: string): Promise<string | null> {
    const [row] = await this.db.query<{ hand_refund_inflow: string }>(
      `SELECT hand_refund_inflow FROM review_action WHERE request_id = $1 AND hand_refund_inflow IS NOT NULL`,
      [requestId],
    );
    return row?.hand_refund_inflow ?? null;
  }

  /** How many of `payer`'s bills failed the biller's number check over the last `seconds`. */
  async failedVerifications(payer: string, seconds: number): Promise<number> {
    const [row] = await this.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM bill_order
       WHERE payer = $1 AND created_at > now() - make_interval(secs => $2) AND refund_cause = 'verification'`,
      [payer.toLowerCase(), seconds],
    );
    return row?.n ?? 0;
  }

  /** When a payer's newest `limit` bills the biller failed within `seconds` were made, newest first. */
  async failedVends(payer: string, seconds: number, limit: number): Promise<Date[]> {
    const rows = await this.db.query<{ created_at: Date }>(
      `SELECT created_at FROM bill_order
       WHERE payer = $1 AND created_at > now() - make_interval(secs => $2) AND refund_cause = 'biller'
       ORDER BY created_at DESC LIMIT $3`,
      [payer.toLowerCase(), seconds, limit],
    );
    return rows.map((r) => new Date(r.created_at));
  }

  async release(requestId: string, leaseToken: string | null): Promise<void> {
    await this.db.query(`UPDATE bill_order SET lease_until = NULL WHERE request_id = $1 AND lease_token = $2`, [requestId, leaseToken]);
  }

  async get(requestId: string): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(`SELECT ${COLUMNS} FROM bill_order WHERE request_id = $1`, [requestId]);
    return row && toOrder(row);
  }

  /** Moves an order on, only from the states given: a stale actor cannot undo a later step. */
  async transition(requestId: string, from: OrderStatus[], to: OrderStatus, fields: TransitionFields = {}): Promise<Order | undefined> {
    return transitionIn(this.db, requestId, from, to, fields);
  }

  /**
   * `transition` for an order the caller holds: the same statement, answering only the
   * columns an order's life changes (CHANGING_COLUMNS), laid over the caller's copy. What an
   * order was created with (the bill, its plan, the signed payment and its requirements) is
   * never written again, so it is not read back and parsed on every step of its life.
   * `alongside`: a write made in the same statement (AlongsideWrite).
   */
  async advance(order: Order, from: OrderStatus[], to: OrderStatus, fields: TransitionFields = {}, alongside?: AlongsideWrite): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(movingSql(CHANGING_COLUMNS, from, to, alongside), movingParams(order.requestId, from, to, fields, alongside));
    return row && { ...order, ...changingPart(row) };
  }

  /** Refused x402 orders whose authorization expired by `nowSeconds`: they can be closed once the chain agrees. */
  async refusedExpired(nowSeconds: bigint, limit: number): Promise<Order[]> {
    const rows = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order WHERE status = 'REFUSED' AND auth_valid_before <= $1 ORDER BY auth_valid_before LIMIT $2`,
      [nowSeconds.toString(), limit],
    );
    return rows.map(toOrder);
  }

  /** Every order, oldest first, a page at a time (for the audit): after `afterRequestId` when given. */
  async page(limit: number, afterRequestId?: string): Promise<Order[]> {
    const rows = await this.db.query<Row>(
      `SELECT ${COLUMNS} FROM bill_order WHERE $1::text IS NULL OR request_id > $1 ORDER BY request_id LIMIT $2`,
      [afterRequestId ?? null, limit],
    );
    return rows.map(toOrder);
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
      `UPDATE bill_order SET lease_until = now() + make_interval(secs => $3), lease_token = $5
       WHERE request_id = (
         SELECT request_id FROM bill_order
         WHERE status = ANY($1::text[]) AND (lease_until IS NULL OR lease_until < now())
           AND updated_at <= now() - make_interval(secs => $2) AND NOT (request_id = ANY($4::text[]))
           AND (not_before IS NULL OR not_before <= now())
         ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING ${COLUMNS}`,
      [statuses, olderThanSeconds, leaseSeconds, skip, this.leaseToken()],
    );
    return row && toOrder(row);
  }

  /**
   * Claims a delivered bill (SUCCESS) whose next ask of the biller is due: its first,
   * `afterSeconds[0]` after its making (if made within `windowSeconds`), or a later one at the
   * time its last ask set. The ask is counted as it is claimed, once, and sets when the next is
   * due (none past the schedule's last entry).
   */
  async claimReversalCheck(afterSeconds: readonly number[], windowSeconds: number, leaseSeconds: number, skip: string[] = []): Promise<Order | undefined> {
    const [row] = await this.db.query<Row>(
      `UPDATE bill_order SET lease_until = now() + make_interval(secs => $3), lease_token = $5,
              reversal_checks = reversal_checks + 1,
              reversal_due_at = CASE WHEN reversal_checks + 1 < cardinality($1::int[]) THEN now() + make_interval(secs => ($1::int[])[reversal_checks + 2]) END
       WHERE request_id = (
         SELECT request_id FROM bill_order
         WHERE status = 'SUCCESS' AND reversal_checks < cardinality($1::int[])
           AND ((reversal_checks = 0 AND created_at <= now() - make_interval(secs => ($1::int[])[1]) AND created_at > now() - make_interval(secs => $2))
                OR reversal_due_at <= now())
           -- A final order's lease is nominal unless one holding it said so (claim).
           AND (lease_until IS NULL OR lease_until < now() OR position($6::text IN coalesce(lease_token, '')) = 0)
           AND NOT (request_id = ANY($4::text[]))
         ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING ${COLUMNS}`,
      [afterSeconds, windowSeconds, leaseSeconds, skip, this.leaseToken(`${HELD_LEASE}work:`), `/${HELD_LEASE}`],
    );
    return row && toOrder(row);
  }
}
