/**
 * The audit's second half: the service's orders against the ledger's payments and refunds.
 *   - every served order (SUCCESS) has a payment of exactly its amount, payer and token;
 *   - every refunded order has a payment, and refunds no larger than it in total;
 *   - every ledger payment has an order, or an orphan record, that served, refunded or holds
 *     it for review; a payment under an order written off (PAYMENT_FAILED) is a discrepancy,
 *     and a transfer from its payer of exactly its amount that no payment accounts for is
 *     listed for an operator (it may be its payment, booked otherwise);
 *   - orders waiting for an operator (NEEDS_REVIEW, and orphan x402 payments) and orders
 *     unfinished for longer than `stuckAfterSeconds` are listed, not counted as discrepancies;
 *   - what operators decided (server/orders/review.ts: an order refunded, served or closed
 *     from review, an orphan payment closed) is listed as resolved, with who, when and why,
 *     not as open: a resolved order is then checked as any order in its new state is.
 * The orders come from the service's operators' route (server/ops.ts).
 */
import { chainInfo } from "../../lib/chains.ts";
import { MAX_PAGE, opsOrder, type OpsOrder } from "./order-record.ts";
import type { Orphans } from "../orders/ledger-pass.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND, type OrderStore } from "../orders/store.ts";
import type { ReviewDeps, ReviewRecord } from "../orders/review.ts";
import { unfinishedSince, UNFINISHED_STATUSES } from "../orders/lifecycle.ts";

const TIMEOUT_MS = 30_000;

/** A transfer into BillPay that no payment accounts for (not an x402 payment, not a pull): the ledger's "other inflow". */
export interface OtherInflow {
  chainId: number;
  token: string;
  from: string;
  amount: bigint;
  txHash: string;
  /** Its block's time, in seconds. */
  timestamp: bigint;
}

export interface LedgerMoney {
  id: string;
  chainId: number;
  rail: string;
  orderId: string | null;
  authorizationNonce: string | null;
  payer: string;
  token: string;
  amount: bigint;
}

type OrphanRow = Record<string, string | null>;
const field = (row: OrphanRow, name: string) => row[name] ?? null;

export interface ServiceRecords {
  orders: OpsOrder[];
  orphans: { pulls: OrphanRow[]; payments: OrphanRow[] };
  /** Operators' review actions (absent from a service older than them). */
  reviews?: ReviewRecord[];
}

export interface OrdersAudit {
  ordersChecked: number;
  /** Held for an operator: NEEDS_REVIEW orders and orphan x402 payments. */
  review: string[];
  /** Decided by an operator: orders resolved from review, orphan payments closed (who, when, why). */
  resolved: string[];
  /** Unfinished for longer than the limit. */
  stuck: string[];
  /**
   * Paid, served or refunded on a receipt while the audit ran, and not in the ledger it read
   * yet (server/chain/receipt-payment.ts, orders/fulfil.ts refund). Not a discrepancy: the
   * next audit finds them.
   */
  awaitingLedger: string[];
  discrepancies: string[];
}

/** Reads every order and orphan record from the service's /ops routes. */
export async function readServiceRecords(url: string, token?: string): Promise<ServiceRecords> {
  const get = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${url}${path}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    if (!res.ok) throw new Error(`the service answered ${res.status} for ${path.split("?")[0]}`);
    return (await res.json()) as T;
  };
  const orders: OpsOrder[] = [];
  let after: string | null = null;
  do {
    const page: { orders: OpsOrder[]; next: string | null } = await get(`/ops/orders?limit=500${after ? `&after=${after}` : ""}`);
    orders.push(...page.orders);
    after = page.next;
  } while (after);
  const orphans = await get<ServiceRecords["orphans"]>("/ops/orphans");
  // A service older than review actions has no such route: nothing was decided there.
  const reviews = await get<{ actions: ReviewRecord[] }>("/ops/reviews").then((r) => r.actions, (err: Error) => {
    if (/ 404 /.test(err.message)) return undefined;
    throw err;
  });
  return { orders, orphans, ...(reviews ? { reviews } : {}) };
}

const lower = (s: string | null | undefined) => (s ?? "").toLowerCase();
/** An x402 payment's key: EIP-3009 and Permit2 nonces are separate spaces, so the rail is part of it (absent: EIP-3009's, as before Permit2). */
const authKey = (chainId: number, rail: string | null | undefined, token: string, payer: string, nonce: string | null | undefined) =>
  `${rail ?? "authorization"}:${chainId}:${lower(token)}:${lower(payer)}:${lower(nonce)}`;
const pullKey = (chainId: number, orderId: string | null | undefined) => `${chainId}:${lower(orderId)}`;
const UNFINISHED: ReadonlySet<string> = new Set(UNFINISHED_STATUSES);
/** Statuses an order holds before its payment is confirmed (a refused or written-off one's may land later). */
const NOT_PAID_YET: ReadonlySet<string> = new Set(["SETTLING", "PULLING", "REFUSED", "PAYMENT_FAILED"]);

/**
 * What the service's records said before the ledger was caught up to the chains' heads: each
 * order's status by request id, and each orphan pull's by `pull:<chain>:<order id>`.
 */
export type RecordsBefore = ReadonlyMap<string, string>;

const orphanPullRef = (o: OrphanRow) => `pull:${field(o, "chain") ?? ""}:${lower(field(o, "order_id"))}`;

/** The snapshot `auditOrders` takes as `before`. */
export function recordsBefore(records: ServiceRecords): RecordsBefore {
  return new Map([...records.orders.map((o) => [o.request_id, o.status] as const), ...records.orphans.pulls.map((o) => [orphanPullRef(o), field(o, "status") ?? ""] as const)]);
}

/**
 * `before` (recordsBefore): the records as they stood before the ledger was caught up to the
 * chains' heads. An order served or refunded by then has its payment and refund in a block the
 * ledger has indexed, so each must show in it. One that became so since, on its own receipt
 * (the service does not wait for the ledger), may not show yet: awaitingLedger, not a
 * discrepancy. Without it, every order is held to the ledger as it stands.
 */
export function auditOrders(
  records: ServiceRecords,
  payments: LedgerMoney[],
  refunds: LedgerMoney[],
  nowMs: number,
  stuckAfterSeconds: number,
  before?: RecordsBefore,
  otherInflows: readonly OtherInflow[] = [],
): OrdersAudit {
  const out: OrdersAudit = { ordersChecked: records.orders.length, review: [], resolved: [], stuck: [], awaitingLedger: [], discrepancies: [] };
  // Each order's and orphan payment's last decision that was taken (not refused, not cut short).
  const decided = new Map<string, ReviewRecord>();
  for (const r of records.reviews ?? []) {
    if (r.outcome === "REFUSED" || r.outcome === "PENDING") continue;
    decided.set(r.request_id ?? `orphan:${lower(r.orphan_key)}`, r);
  }
  // Permit2 orders held for a refund by hand of their payer's transfer into BillPay (orders/review.ts).
  const handRefundHolds = new Set((records.reviews ?? []).filter((r) => r.hand_refund_inflow && r.request_id).map((r) => r.request_id!));
  const decision = (r: ReviewRecord) => `${r.action} by ${r.operator} at ${r.created_at} (${r.reason}): ${r.outcome}${r.detail ? `, ${r.detail}` : ""}`;
  // Each inflow is named for one order at most.
  const inflowsLeft = [...otherInflows];
  const unclaimed = (o: OpsOrder): OtherInflow | undefined => {
    const chainId = chainInfo(o.chain).chainId;
    const made = Date.parse(o.created_at) / 1000 - 60; // a clock a minute off
    const i = inflowsLeft.findIndex((f) => f.chainId === chainId && lower(f.token) === lower(o.token_address) && lower(f.from) === lower(o.payer) && f.amount === BigInt(o.amount) && Number(f.timestamp) >= made);
    return i < 0 ? undefined : inflowsLeft.splice(i, 1)[0];
  };
  const keyOf = (m: LedgerMoney) => (m.rail === "pull" ? `pull:${pullKey(m.chainId, m.orderId)}` : `auth:${authKey(m.chainId, m.rail, m.token, m.payer, m.authorizationNonce)}`);
  const paymentByKey = new Map(payments.map((p) => [keyOf(p), p]));
  const refundedByKey = new Map<string, bigint>();
  for (const r of refunds) refundedByKey.set(keyOf(r), (refundedByKey.get(keyOf(r)) ?? 0n) + r.amount);
  // The transactions of those refunds (a ledger row's id is "<chainId>-<txHash>-<logIndex>").
  const refundTxsByKey = new Map<string, Set<string>>();
  for (const r of refunds) refundTxsByKey.set(keyOf(r), (refundTxsByKey.get(keyOf(r)) ?? new Set()).add(lower(r.id.split("-")[1] ?? "")));
  const accounted = new Set<string>();

  // Became `status` after the snapshot: its chain events may lie past the blocks the ledger was caught up to.
  const since = (ref: string, status: string) => before !== undefined && before.get(ref) !== status;
  // Its payment confirmed after the snapshot: unknown then, or not paid yet. One paid by then must show.
  const paidSince = (ref: string) => before !== undefined && (!before.has(ref) || NOT_PAID_YET.has(before.get(ref)!));
  for (const o of records.orders) {
    const chainId = chainInfo(o.chain).chainId;
    const key = o.rail === "pull" ? `pull:${pullKey(chainId, o.onchain_order_id)}` : `auth:${authKey(chainId, o.payment_rail, o.token_address, o.payer, o.auth_nonce)}`;
    const paid = paymentByKey.get(key);
    const refunded = refundedByKey.get(key) ?? 0n;
    const what = `order ${o.request_id} (${o.rail}, ${o.status}, ${o.amount})`;
    if (paid) accounted.add(key);
    const exact = paid && BigInt(paid.amount) === BigInt(o.amount) && lower(paid.payer) === lower(o.payer) && lower(paid.token) === lower(o.token_address);

    if (paid && refunded > paid.amount) out.discrepancies.push(`${what}: refunds total ${refunded}, more than its payment of ${paid.amount}`);
    if (!paid && refunded > 0n) out.discrepancies.push(`${what}: refunded ${refunded} without a payment`);
    switch (o.status) {
      case "SUCCESS":
        if (!paid && paidSince(o.request_id)) out.awaitingLedger.push(`${what} was served on its receipt while the audit ran`);
        else if (!exact) out.discrepancies.push(`${what} was served, but the ledger shows ${paid ? `a payment of ${paid.amount} by ${paid.payer}` : "no payment"}`);
        if (refunded > 0n) out.discrepancies.push(`${what} was served and also refunded ${refunded}`);
        if (o.flag) out.review.push(`${what}: ${o.flag}`);
        break;
      case "REFUNDED": {
        // A Permit2 order an operator held and closed as refunded by hand gave back its payer's
        // transfer into BillPay that no payment accounts for (orders/review.ts): nothing is booked under its key.
        const last = decided.get(o.request_id);
        const byHand = handRefundHolds.has(o.request_id) && last?.action === "close" && last.outcome === "DONE" && last.tx_hash;
        // What its refund owed: the payment, less what it kept back for its gas (a kept refusal's
        // landing; a service from before the fee names none).
        const owed = paid ? paid.amount - BigInt(o.refund_fee ?? 0) : 0n;
        if (!byHand && (paid ? refunded < owed && since(o.request_id, "REFUNDED") : paidSince(o.request_id))) {
          out.awaitingLedger.push(`${what} was refunded on its receipt while the audit ran`);
        } else if (!paid) {
          if (!byHand) out.discrepancies.push(`${what} is marked refunded, but the ledger shows no payment`);
          else if (lower(o.refund_tx_hash) !== lower(last.tx_hash)) out.discrepancies.push(`${what} was closed as refunded by hand with ${last.tx_hash}, but names ${o.refund_tx_hash ?? "no"} refund`);
        } else if (refunded === 0n) out.discrepancies.push(`${what} is marked refunded, but the ledger shows no refund`);
        // Short of the payment (a leaked refunder key's refund, closed as refunded all the same): the rest is owed.
        else if (refunded < owed) out.discrepancies.push(`${what} is marked refunded, but the ledger shows ${refunded} refunded of the ${owed} owed of its payment of ${paid.amount}`);
        // A refunded order the biller delivered after all (fulfil.ts lateDelivery): the biller was paid, for an operator to take up.
        if (o.flag) out.review.push(`${what}: ${o.flag}`);
        break;
      }
      case "PAYMENT_FAILED": {
        if (paid && refunded < paid.amount) out.discrepancies.push(`${what} was written off, but the ledger shows a payment of ${paid.amount} not refunded`);
        // Closed as not charged on the ledger's word that no payment came under its key. A
        // transfer of exactly its amount from its payer that no payment accounts for (made
        // after the order) may be its payment, booked otherwise: an operator looks.
        const inflow = o.rail !== "pull" && !paid ? unclaimed(o) : undefined;
        if (inflow) out.review.push(`${what} was closed as not charged, but the ledger shows a transfer of exactly its amount from its payer into BillPay that no payment accounts for (${inflow.txHash}): refund it by hand if it was this bill's`);
        break;
      }
      case "NEEDS_REVIEW":
        out.review.push(`${what}: ${o.failure_reason ?? "held for review"}`);
        break;
    }
    const last = decided.get(o.request_id);
    if (last && o.status !== "NEEDS_REVIEW") out.resolved.push(`${what}: ${decision(last)}`);
    // Held for a refund by hand of its payer's transfer: that refund is the only way it closes.
    if (handRefundHolds.has(o.request_id) && o.status !== "NEEDS_REVIEW" && o.status !== "REFUNDED") out.discrepancies.push(`${what} was held for a refund by hand of its payer's transfer, but left review as ${o.status}`);
    if (UNFINISHED.has(o.status)) {
      // A service older than `unfinished_since` (mid-deploy) gives only its making.
      const since = unfinishedSince({ status: o.status, unfinishedSinceMs: Date.parse(o.unfinished_since ?? o.created_at), authValidBefore: o.auth_valid_before ? BigInt(o.auth_valid_before) : null });
      if (nowMs - since > stuckAfterSeconds * 1000) out.stuck.push(`${what} since ${new Date(since).toISOString()}`);
    }
  }

  for (const o of records.orphans.pulls) {
    const key = `pull:${pullKey(chainInfo(o.chain ?? "").chainId, field(o, "order_id"))}`;
    accounted.add(key);
    if (o.status === "DROPPED") {
      // Reorganised off the chain before its refund (or with it): nothing is owed while the
      // ledger shows no such pull; the ledger pass revives the record should it land again.
      if (payments.some((p) => keyOf(p) === key)) out.discrepancies.push(`orphan pull ${o.order_id} on ${o.chain} is marked dropped from the chain, but the ledger shows it`);
      continue;
    }
    if (o.status !== "REFUNDED") out.stuck.push(`orphan pull ${o.order_id} on ${o.chain} (${o.amount}) is not refunded yet`);
    else if (!refundedByKey.get(key) && since(orphanPullRef(o), "REFUNDED")) out.awaitingLedger.push(`orphan pull ${o.order_id} on ${o.chain} was refunded on its receipt while the audit ran`);
    else if (!refundedByKey.get(key)) out.discrepancies.push(`orphan pull ${o.order_id} on ${o.chain} is marked refunded, but the ledger shows no refund`);
  }
  for (const o of records.orphans.payments) {
    const key = `auth:${authKey(chainInfo(o.chain ?? "").chainId, o.rail, o.token_address!, o.payer!, field(o, "auth_nonce"))}`;
    accounted.add(key);
    const about = `x402 payment ${o.tx_hash} on ${o.chain} (${o.amount} from ${o.payer}) has no order`;
    if (o.status === "NEEDS_REVIEW" || o.status === ORPHAN_HELD_FOR_HAND_REFUND) {
      out.review.push(`${about}: ${o.status}`);
      continue;
    }
    const last = decided.get(`orphan:${[o.chain, o.token_address, o.payer, o.auth_nonce].map(lower).join(":")}`);
    out.resolved.push(`${about}: ${o.status}${last ? `, ${decision(last)}` : ""}`);
    // Closed by an operator while a refund through BillPay went back under its key too (one
    // the hand refund was not itself): paid back twice, or kept and paid back.
    const viaBillPay = refundTxsByKey.get(key);
    const handTx = last?.tx_hash ? lower(last.tx_hash) : undefined;
    if (viaBillPay && o.status === "REFUNDED" && !(handTx && viaBillPay.has(handTx))) {
      out.discrepancies.push(`${about}: it was refunded by hand${handTx ? ` (${handTx})` : ""}, and the ledger also shows a refund through BillPay under its key (${[...viaBillPay].join(", ")}): paid back twice`);
    }
    if (viaBillPay && o.status === "RESOLVED") out.discrepancies.push(`${about}: it was closed as kept, but the ledger shows a refund through BillPay under its key (${[...viaBillPay].join(", ")})`);
  }
  for (const p of payments) {
    if (!accounted.has(keyOf(p))) out.discrepancies.push(`payment ${p.id} (${p.rail}, ${p.amount} from ${p.payer}) has no order or orphan record`);
  }
  return out;
}

/** Every order, orphan record and review action as the /ops routes serve them, read in this process (the console's audit). */
export async function opsRecords(orders: OrderStore, orphans: Orphans, reviews?: ReviewDeps["reviews"]): Promise<ServiceRecords> {
  const all: ReturnType<typeof opsOrder>[] = [];
  for (let after: string | undefined; ; ) {
    const page = await orders.page(MAX_PAGE, after);
    all.push(...page.map(opsOrder));
    if (page.length < MAX_PAGE) break;
    after = page[page.length - 1]!.requestId;
  }
  // Through JSON, as the routes send them: the audit reads exactly what /ops/orders, /ops/orphans and /ops/reviews serve.
  return JSON.parse(JSON.stringify({ orders: all, orphans: await orphans.all(), ...(reviews ? { reviews: await reviews.all() } : {}) })) as ServiceRecords;
}
