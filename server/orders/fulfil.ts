/**
 * What every order does once it is paid, whichever rail paid it: the post-settlement number
 * check where the product has one, then pay attempts at the biller (each under a request id
 * of its own, made when it is recorded: orders/attempts.ts), requeried while pending, and an
 * on-chain refund when the bill fails or the biller later reverses it. How the bill vends
 * was decided when it was priced (its vend plan, biller/catalogue/vend-plan.ts). Each step
 * is a state transition in the order table, so the worker can finish whatever a crash or a
 * slow biller left behind. A refund is sent only for what the ledger shows was paid for the
 * order, exactly.
 */
import { type Log } from "../log.ts";
import type { Hex } from "viem";
import { sharedClientFor } from "../../lib/chain-client.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import type { FacilitatorClient } from "@x402/core/server";
import type { Catalogue } from "../biller/catalogue/catalogue.ts";
import type { CustomerChecks } from "../biller/customer-check.ts";
import { legacyPlan } from "../biller/catalogue/plans.ts";
import { completePlan, type CompletedPlan, type VendPlan } from "../biller/catalogue/vend-plan.ts";
import { formatKobo } from "../biller/catalogue/amounts.ts";
import { purchasedCodeText, type BillerApi, type BillerCharge, type VendResult } from "../biller/upstream.ts";
import type { Metrics } from "../metrics.ts";
import { ContractRefused, RefundSentElsewhere, RefundWithdrawn, REVERTED_ON_CHAIN, type ChainOperator, type RefundRecord, type SignedRefund } from "../chain/operator.ts";
import type { ChainHeads } from "../../lib/chain-heads.ts";
import { errorText } from "../log-safety.ts";
import { isPaymentOf, orderKeyOf, paymentMismatch, x402RailOf, type LedgerClient, type LedgerPayment } from "../ledger-client.ts";
import type { LedgerHealth } from "../ledger-health.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { StoredPayment } from "../x402-protocol/payment.ts";
import type { AttemptPay, BillerAttempt, BillerAttempts } from "./attempts.ts";
import { deepEnough, type PaymentWatches } from "./payment-watch.ts";
import { RefundIdTaken, type RefundOnChain } from "../chain/refund-on-node.ts";
import { refundOrderIdOnceTaken } from "../chain/order-id.ts";
import { ledgerUnderKey } from "./ledger-view.ts";
import { refundFound, type RefundWatches } from "./refund-watch.ts";
import type { RefundBudgets } from "../chain/refund-budget.ts";
import type { RefundWait } from "./refund-share.ts";
import type { RefusedPayments } from "./refused-payments.ts";
import { FINAL_STATUSES, BILLER_FAILED, VERIFICATION_FAILED, VERIFICATION_UNAVAILABLE, refundCauseOf, type AlongsideWrite, type Order, type OrderStatus, type OrderStore } from "./store.ts";

/** Moves the order on (with `alongside` in the same statement); when another actor moved it first, returns it as it now stands. */
export async function move(deps: Pick<FlowDeps, "orders">, order: Order, from: OrderStatus[], to: OrderStatus, fields: Parameters<OrderStore["transition"]>[3] = {}, alongside?: AlongsideWrite) {
  return (await deps.orders.advance(order, from, to, fields, alongside)) ?? (await deps.orders.get(order.requestId)) ?? order;
}

export interface FlowDeps {
  orders: OrderStore;
  /** Pay attempts at the biller, by the request id each was sent under. */
  attempts: BillerAttempts;
  deployments: Deployments;
  /** How long whoever works an order (a request or the worker) holds it: longer than its worst case. */
  leaseSeconds: number;
  facilitators: Partial<Record<ChainKey, FacilitatorClient>>;
  biller: BillerApi;
  /** The biller's products and plans, cached: every bill is checked against it before it is priced. */
  catalogue: Catalogue;
  /** The biller's number check before payment: verify_customer, and upfront for payers whose bills failed it. */
  customerChecks: CustomerChecks;
  /** The hot keys' transactions on BillPay: pulls (operator) and refunds (refunder). */
  operator: ChainOperator;
  /** BillPay's refund budget per token, read from the chain (chain/refund-budget.ts). */
  refundBudgets: RefundBudgets;
  /** New blocks from the service's own node: receipt and depth waits wake on them (lib/chain-heads.ts). */
  heads: ChainHeads;
  /** Where an order's payment and refund are read from. */
  ledger: LedgerClient;
  /** Good payments the service refused, kept so that one landing anyway is refunded (orders/late-landing.ts). */
  refused: RefusedPayments;
  /** Whether the ledger keeps up with each chain (server/ledger-health.ts): /readyz, the console, the metrics. */
  ledgerHealth: LedgerHealth;
  /** How long a pay waits for the ledger to show its payment (pull or x402) before answering TIMEOUT. */
  ledgerWaitMs: number;
  /** Blocks the ledger must have indexed on top of a payment's before its bill is vended, per chain. */
  confirmations: Partial<Record<ChainKey, number>>;
  /** Confirmed payments, watched for reorganisations until past the ledger's depth (orders/payment-watch.ts). */
  watches: PaymentWatches;
  /** Refunds sent, watched for reorganisations until past the ledger's depth (orders/refund-watch.ts). */
  refundWatches: RefundWatches;
  /** How long a served bill whose payment was reorganised away may stay uncollected before it goes to an operator. */
  recollectReviewSeconds: number;
  /** How long a request waits for the biller before answering TIMEOUT. */
  vendDeadlineMs: number;
  requeryIntervalMs: number;
  /** How long a pay the biller has no record of may still appear, before another attempt is sent. */
  unknownRequestGraceMs: number;
  /** Pay attempts one order may make before it waits for an operator. */
  maxPayAttempts: number;
  /** The phone sent with products that are not themselves a phone number. */
  defaultPhone: string;
  /** The e-mail the biller's international pay call requires. */
  defaultEmail: string;
  /** How long after payment a number check the biller cannot answer is still retried (then the bill is refunded), and how often. */
  verifyUnavailableDeadlineSeconds: number;
  verifyRetrySeconds: number;
  /** One payer's most of a token's refund budget per period, as a percentage of its limit. */
  refundPayerSharePercent: number;
  /** What refunds of late landings may take together per period, as a percentage of the limit (orders/refund-share.ts). */
  refundLateSlicePercent: number;
  /** What a kept refusal's refund keeps back for its gas, a decimal of the token (LATE_LANDING_FEE, orders/late-landing.ts). */
  lateLandingFee: string;
  /** How long a refund waits for the budget before it goes to an operator. */
  refundWaitReviewSeconds: number;
  /** Vend latency, refunds and upstream calls, for /metrics. */
  metrics: Metrics;
  log: Log;
}

/**
 * What a refund touches, and nothing else: the order store, the ledger it reads the payment
 * from (and how long it waits for it), BillPay's refund budget and the shares of it, the
 * refunder's key (`operator`), the watch its refund is recorded in, the service's node (to
 * find a refund BillPay holds already: `deployments`), its log and metrics.
 */
export type RefundDeps = Pick<
  FlowDeps,
  | "orders"
  | "ledger"
  | "ledgerWaitMs"
  | "refundBudgets"
  | "refundPayerSharePercent"
  | "refundLateSlicePercent"
  | "refundWaitReviewSeconds"
  | "operator"
  | "refundWatches"
  | "confirmations"
  | "deployments"
  | "metrics"
  | "log"
>;

/**
 * What vending a paid order touches: the biller (its pay, requery and number checks, and the
 * attempts made of it), the order store, and, for a bill that fails, the refund's own
 * dependencies. It reads no facilitator and settles nothing.
 */
export type VendDeps = RefundDeps &
  Pick<
    FlowDeps,
    | "biller"
    | "catalogue"
    | "attempts"
    | "customerChecks"
    | "vendDeadlineMs"
    | "requeryIntervalMs"
    | "unknownRequestGraceMs"
    | "maxPayAttempts"
    | "defaultPhone"
    | "defaultEmail"
    | "verifyUnavailableDeadlineSeconds"
    | "verifyRetrySeconds"
    | "leaseSeconds"
  >;

/** States nothing automatic moves on from (NEEDS_REVIEW waits for an operator). */
export const FINISHED = new Set<OrderStatus>(FINAL_STATUSES);

/** The order's vend plan: the one stored when it was priced, or, for an older order, its bill's fields. */
export function planOf(o: Order): VendPlan {
  return o.vend ?? legacyPlan(o.bill as unknown as PaymentRequest);
}

/**
 * A delivery answered to the pay just sent, whose outcome is not yet kept on its attempt: it
 * is written with the order's move to SUCCESS, in the same statement (applyVendResult).
 */
type Delivered = Extract<VendResult, { state: "delivered" }> & { unrecordedAttempt: string };

/** What one look at the biller came to: its answer, a stop for an operator, or the order already moved (refunded before any pay). */
type Step = VendResult | Delivered | { review: string } | { order: Order };

/**
 * Vends a paid order: the number check where the product has one, then a pay attempt,
 * requeried until the deadline. An order whose pay was already prepared (a crash, or the
 * worker resuming it) is followed up instead, by the id it was sent under: a pay is never
 * sent twice under one id, and a new attempt only once the biller has no record of the last.
 * `fresh`: the request that made the order is vending it, so no attempt can exist yet.
 */
export async function fulfil(deps: VendDeps, order: Order, options: { fresh?: boolean; first?: RecordedAttempt } = {}): Promise<Order> {
  const timer = deps.metrics.vendSeconds.startTimer();
  const last = options.fresh ? undefined : await deps.attempts.latest(order.requestId);
  let step: Step = last ? await followUp(deps, order, last) : options.first ? await sendFirst(deps, order, options.first) : await firstPay(deps, order);
  const deadline = Date.now() + deps.vendDeadlineMs;
  while ("state" in step && step.state === "pending" && Date.now() + deps.requeryIntervalMs < deadline) {
    await new Promise((r) => setTimeout(r, deps.requeryIntervalMs));
    step = await followUp(deps, order, undefined, options.first !== undefined);
  }
  if ("order" in step) return step.order;
  timer({ outcome: "state" in step ? step.state : "review" });
  return applyVendResult(deps, order, step);
}

/** A fresh order's first pay attempt, recorded while its payment settles (recordFirstAttempt). */
export interface RecordedAttempt {
  billerRequestId: string;
  pay: AttemptPay;
  /** When it was recorded (epoch ms): its `sent_at`. */
  recordedAt: number;
  /** The lease of the request that recorded it, under which alone it is sent. */
  leaseToken: string | null;
  /** Until when (epoch ms, this process's clock against the database's making of the order) that lease holds, less a margin. */
  leaseSurelyUntil: number;
}

/** How far short of the lease's end, by this process's clock, the request still holds it for sendFirst. */
const LEASE_MARGIN_MS = 2_000;

/**
 * Sends a first attempt recorded ahead. As it is while it was recorded within a tenth of the
 * biller's grace for an id it has no record of (BILLER_UNKNOWN_GRACE_MS, 2 min by default:
 * 12 s) and the request still holds the order's lease by this process's clock, less a
 * margin. Its `sent_at` is when it was recorded, and whoever else follows it up sends another
 * only once the biller has had no record of it for the whole grace from then: nine tenths of
 * it after this pay went, whatever became of the lease. Otherwise (a slow settlement, a slow
 * check, a short grace) it is stamped sent now first, and only while the lease is still the
 * request's; when it is not, a worker that took the order over may have asked the biller by
 * its id and, finding no record of it, sent another: the order is left to that worker, and
 * nothing is sent from here.
 */
async function sendFirst(deps: VendDeps, order: Order, first: RecordedAttempt): Promise<Step> {
  const now = Date.now();
  const asRecorded = now - first.recordedAt <= deps.unknownRequestGraceMs / 10 && now < first.leaseSurelyUntil;
  if (!asRecorded && !(await deps.attempts.stampSending(first.billerRequestId, order.requestId, first.leaseToken))) {
    deps.log.warn("a first pay attempt recorded ahead was not sent: the order's lease passed on meanwhile, and its holder follows the attempt up", { requestId: order.requestId, billerRequestId: first.billerRequestId });
    return { order: (await deps.orders.get(order.requestId)) ?? order };
  }
  return sendRecorded(deps, order, first.pay, 1, first.billerRequestId);
}

/**
 * Records a fresh order's first pay attempt while its payment is still settling, so that the
 * write is off the path between the payment's block and the biller's pay (fulfil sends it
 * once the order is PAID). Only a pay the payment changes nothing of: no number check, or
 * one already asked and passed (the checks' cache: it is not asked for a bill not yet paid
 * for), and nothing to flag. Anything else (a check not asked yet, one that refused or could
 * not answer, a flag) is left to the first pay after PAID, which decides as before. Never
 * throws: undefined leaves it there.
 *
 * An attempt is sent only by whoever recorded it, and otherwise only followed up by its id
 * (a requery that finds no record of it lets a new attempt go out: fulfil's followUp), so
 * recording it early sends nothing twice. One this request does not send, because the order
 * did not become PAID here, is withdrawn (withdrawFirstAttempt); one a crash leaves behind is
 * the crash between recording and sending that followUp already handles. Its `sent_at` is a
 * settlement earlier than its pay, which sendFirst bounds.
 */
export async function recordFirstAttempt(deps: VendDeps, order: Order): Promise<RecordedAttempt | undefined> {
  try {
    const plan = planOf(order);
    // Only a check already asked (before payment, or by the same bill lately): the biller is
    // not asked for a bill not yet paid for. A check that could not answer is the paid path's.
    const verified = plan.verify ? await deps.customerChecks.asked({ ...plan, verify: plan.verify })?.catch(() => undefined) : undefined;
    if (verified !== undefined && !verified.ok) return undefined;
    if (plan.verify && verified === undefined) return undefined;
    const completed = completedWith(deps, plan, verified);
    if ("refuse" in completed || completed.flag) return undefined;
    const billerRequestId = deps.biller.newRequestId();
    const recordedAt = Date.now();
    return (await deps.attempts.recordAhead(order.requestId, billerRequestId, completed.pay)) ? { billerRequestId, pay: completed.pay, recordedAt, leaseToken: order.leaseToken, leaseSurelyUntil: order.createdAt.getTime() + deps.leaseSeconds * 1000 - LEASE_MARGIN_MS } : undefined;
  } catch (err) {
    deps.log.warn("could not record a fresh order's first pay attempt ahead; it is recorded once the order is paid", { requestId: order.requestId, error: errorText(err) });
    return undefined;
  }
}

/**
 * The first attempts a request records ahead for its fresh orders (recordFirstAttempt), from
 * the moment its payment is sent: `take` hands fulfil an order's once it is PAID (only fulfil
 * sends it), and `withdrawUntaken`, when the request ends, deletes those never taken.
 */
export class FirstAttempts {
  private readonly recorded: Map<string, Promise<RecordedAttempt | undefined>>;
  private readonly taken = new Set<string>();

  constructor(
    private readonly deps: VendDeps,
    orders: readonly Order[],
  ) {
    this.recorded = new Map(orders.map((o) => [o.requestId, recordFirstAttempt(deps, o)]));
  }

  /** The order's first attempt, for fulfil to send; marked taken at once, so it is never withdrawn after. */
  take(order: Order): Promise<RecordedAttempt | undefined> {
    this.taken.add(order.requestId);
    return this.recorded.get(order.requestId) ?? Promise.resolve(undefined);
  }

  async withdrawUntaken(): Promise<void> {
    for (const [requestId, first] of this.recorded) if (!this.taken.has(requestId)) await withdrawFirstAttempt(this.deps, await first);
  }
}

/** Withdraws a first attempt recorded ahead that was never sent (its order did not become PAID in the request that recorded it). */
async function withdrawFirstAttempt(deps: Pick<VendDeps, "attempts" | "log">, first: RecordedAttempt | undefined): Promise<void> {
  if (!first) return;
  await deps.attempts.withdrawUnsent(first.billerRequestId).catch((err: unknown) => {
    // Left, it is followed up as a crash's would be if the order is paid later (a requery, then
    // a new attempt); on an order closed unpaid it only holds a late landing for an operator.
    deps.log.warn("could not withdraw an unsent pay attempt", { billerRequestId: first.billerRequestId, error: errorText(err) });
  });
}

/**
 * The pay an order comes to: its plan, completed by the number check (a meter's type, a
 * cable renewal's amount). A wrong number, or a plan the check shows cannot be paid,
 * refunds the order. A check the biller cannot answer (down, throttling, timing out) is not
 * a wrong number: the order stays PAID and is checked again every VERIFY_RETRY_SECONDS,
 * and refunded only if the biller still cannot answer VERIFY_UNAVAILABLE_DEADLINE_SECONDS
 * after the payment.
 */
async function preparePay(deps: VendDeps, order: Order): Promise<Exclude<CompletedPlan, { refuse: string }> | { order: Order }> {
  const plan = planOf(order);
  let verified;
  if (plan.verify) {
    try {
      // Through the checks' cache: a bill checked before payment is not asked again.
      const answer = await deps.customerChecks.ask({ ...plan, verify: plan.verify });
      if (!answer.ok) return { order: await refund(deps, order, `${VERIFICATION_FAILED}: ${answer.reason}`) };
      verified = answer;
    } catch (err) {
      return { order: await verificationUnavailable(deps, order, errorText(err)) };
    }
  }
  const completed = completedWith(deps, plan, verified);
  // Only the check's answer refuses a plan (vend-plan.ts refusedByCheck): a failed check of the payer's, counted as a wrong number is.
  if ("refuse" in completed) return { order: await refund(deps, order, `${VERIFICATION_FAILED}: ${completed.refuse}`) };
  return completed;
}

/** The plan completed by its check's answer, with the service's contact defaults. */
const completedWith = (deps: Pick<VendDeps, "defaultPhone" | "defaultEmail">, plan: VendPlan, verified: Parameters<typeof completePlan>[1]) =>
  completePlan(plan, verified, { phone: deps.defaultPhone, email: deps.defaultEmail });

async function verificationUnavailable(deps: VendDeps, order: Order, error: string): Promise<Order> {
  const waited = Math.floor((Date.now() - order.createdAt.getTime()) / 1000);
  if (waited >= deps.verifyUnavailableDeadlineSeconds) {
    deps.log.error("the biller could not check a paid bill's number until the deadline; refunding", { requestId: order.requestId, waitedSeconds: waited, error });
    return refund(deps, order, `${VERIFICATION_UNAVAILABLE} for ${waited} s: ${error}`);
  }
  // Logged once per order, not on every retry.
  if (!order.failureReason?.startsWith(VERIFICATION_UNAVAILABLE)) {
    deps.log.warn("the biller could not check a paid bill's number; it waits and is checked again", { requestId: order.requestId, retryInSeconds: deps.verifyRetrySeconds, error });
  }
  return (await deps.orders.deferPaid(order.requestId, deps.verifyRetrySeconds, `${VERIFICATION_UNAVAILABLE}: ${error}`)) ?? (await deps.orders.get(order.requestId)) ?? order;
}

async function firstPay(deps: VendDeps, order: Order): Promise<Step> {
  const prepared = await preparePay(deps, order);
  if ("order" in prepared) return prepared;
  if (prepared.flag) await deps.orders.transition(order.requestId, ["PAID", "PENDING"], order.status, { flag: prepared.flag });
  return sendAttempt(deps, order, prepared.pay, 1);
}

/**
 * Sends attempt `n` under a new request id, recorded before it is sent. An id the biller
 * refuses for its date (085: a pay that crossed Lagos midnight) processed nothing, so one
 * more attempt goes out at once under a fresh id; a second refusal is final.
 */
async function sendAttempt(deps: VendDeps, order: Order, pay: AttemptPay, n: number, idRefusedBefore = false): Promise<Step> {
  if (n > deps.maxPayAttempts) {
    return { review: `${deps.maxPayAttempts} pay attempts reached the biller with no record of any; nothing more is sent until an operator decides` };
  }
  const id = deps.biller.newRequestId();
  if (!(await deps.attempts.record(order.requestId, n, id, pay))) return { state: "pending", reason: "another worker made this pay attempt" };
  return sendRecorded(deps, order, pay, n, id, idRefusedBefore);
}

/** Sends attempt `n`, already recorded under the biller request id `id`. */
async function sendRecorded(deps: VendDeps, order: Order, pay: AttemptPay, n: number, id: string, idRefusedBefore = false): Promise<Step> {
  const result = await deps.biller.pay({ ...pay, requestId: id });
  if (result.state === "delivered") return { ...result, unrecordedAttempt: id };
  await deps.attempts.recordOutcome(id, result);
  if (result.state === "failed" && result.requestIdRefused && !idRefusedBefore) {
    deps.log.warn("the biller refused a pay's request id (its date rule); sending it again under a fresh one", { requestId: order.requestId, billerRequestId: id });
    return sendAttempt(deps, order, pay, n + 1, true);
  }
  return result;
}

/** Asks the biller how one attempt stands, by that attempt's own id, and keeps what it said on it. */
async function askAttempt(deps: VendDeps, attempt: BillerAttempt): Promise<VendResult> {
  const result = await deps.biller.requery(attempt.billerRequestId);
  await deps.attempts.recordOutcome(attempt.billerRequestId, result);
  return result;
}

/**
 * Before a new attempt goes out, or a failed bill is refunded: every other attempt of the order
 * is asked again, by its own id. One the biller delivered after all is the order's delivery
 * (its answer was only late); one the biller still holds pending may yet be delivered, so
 * nothing new is sent and nothing refunded while it is. Undefined when none did anything.
 */
async function otherAttemptsSay(deps: VendDeps, order: Order, except: string): Promise<VendResult | undefined> {
  const attempts = await deps.attempts.of(order.requestId);
  const { delivered, pending } = await otherAttemptsNow(deps, attempts, attempts.find((a) => a.billerRequestId === except));
  if (delivered?.said.state === "delivered") {
    deps.log.warn("an earlier pay attempt was delivered after all", { requestId: order.requestId, billerRequestId: delivered.attempt.billerRequestId, attempt: delivered.attempt.attempt });
    return delivered.said;
  }
  // A delivery the biller answered once and has no record of now: neither sent again nor refunded; the order waits (and counts as stuck).
  if (delivered) return { state: "pending", reason: `pay attempt ${delivered.attempt.attempt} was delivered, and the biller now has no record of it` };
  return pending?.said;
}

/**
 * Asks the biller how the order's latest attempt stands, by the id it was sent under. When
 * the biller has no record of it for longer than the grace (it never arrived, or was never
 * sent: a crash between recording and sending), and no earlier attempt was delivered or is
 * still pending, the next attempt goes out under a new id.
 */
export async function followUp(deps: VendDeps, order: Order, last?: BillerAttempt, sentAhead = false): Promise<Step> {
  const attempt = last ?? (await deps.attempts.latest(order.requestId));
  // A first attempt recorded ahead was sent (or went to whoever holds the lease): its record
  // gone means something removed what may have been sent; nothing more goes out unasked.
  if (!attempt && sentAhead) return { review: "its first pay attempt was sent, and its record is gone: nothing more is sent until an operator decides" };
  if (!attempt) return firstPay(deps, order);
  const result = await askAttempt(deps, attempt);
  if (!(result.state === "pending" && result.unknownRequest)) return result;
  if (Date.now() - attempt.sentAt.getTime() < deps.unknownRequestGraceMs) return result;
  const earlier = await otherAttemptsSay(deps, order, attempt.billerRequestId);
  if (earlier) return earlier;
  if (attempt.pay) return sendAttempt(deps, order, attempt.pay, attempt.attempt + 1);
  // An attempt recorded before pays were kept: its pay is prepared again.
  const prepared = await preparePay(deps, order);
  if ("order" in prepared) return prepared;
  return sendAttempt(deps, order, prepared.pay, attempt.attempt + 1);
}

/** Notes for operators when the biller charged other than the bill (a plan repriced since the quote, a fee it added). */
function chargeFlags(order: Order, charge: BillerCharge): { flag?: string; repriced: boolean } {
  const priced = BigInt(planOf(order).chargeKobo);
  const flags: string[] = [];
  const repriced = charge.amountKobo !== null && charge.amountKobo !== priced;
  if (repriced) flags.push(`the biller charged ${formatKobo(charge.amountKobo!)} NGN; the bill was priced at ${formatKobo(priced)} NGN`);
  if (charge.feeKobo !== null && charge.feeKobo > 0n) flags.push(`the biller added a convenience fee of ${formatKobo(charge.feeKobo)} NGN`);
  else if (charge.totalKobo !== null && charge.amountKobo !== null && charge.totalKobo > charge.amountKobo) {
    flags.push(`the biller debited ${formatKobo(charge.totalKobo)} NGN for a ${formatKobo(charge.amountKobo)} NGN bill`);
  }
  return { ...(flags.length > 0 ? { flag: flags.join("; ") } : {}), repriced };
}

export async function applyVendResult(deps: VendDeps, order: Order, result: VendResult | Delivered | { review: string }): Promise<Order> {
  if ("review" in result) {
    deps.log.error("bill held for an operator", { requestId: order.requestId, reason: result.review });
    return move(deps, order, ["PAID", "PENDING"], "NEEDS_REVIEW", { failureReason: result.review });
  }
  switch (result.state) {
    case "delivered": {
      const { flag, repriced } = chargeFlags(order, result.charge);
      if (flag) deps.log.warn("biller charge differs from the bill; flagged for operators", { requestId: order.requestId, flag });
      // Charged otherwise, the plan was most likely repriced since its list was read: the next
      // bill reads the product's plans afresh, not the cached list for up to CATALOGUE_TTL_MS.
      if (repriced) deps.catalogue.forgetPlansOf(planOf(order));
      deps.log.info("bill delivered", { requestId: order.requestId, rail: order.rail, serviceID: (order.bill as { serviceID?: string }).serviceID });
      const outcome = "unrecordedAttempt" in result ? deps.attempts.recordingOutcome(result.unrecordedAttempt, result) : undefined;
      return move(
        deps,
        order,
        ["PAID", "PENDING"],
        "SUCCESS",
        {
          purchasedCode: purchasedCodeText(result.codes) ?? undefined,
          purchasedCodes: result.codes.length > 0 ? result.codes : undefined,
          units: result.units ?? undefined,
          billerAmount: result.charge.amountKobo === null ? undefined : formatKobo(result.charge.amountKobo),
          flag,
        },
        outcome,
      );
    }
    case "failed": {
      // Refunded only when no other attempt of the order was delivered or is still pending.
      const latest = await deps.attempts.latest(order.requestId);
      const other = latest && latest.attempt > 1 ? await otherAttemptsSay(deps, order, latest.billerRequestId) : undefined;
      if (other) return applyVendResult(deps, order, other);
      // Only a failure of the bill itself counts against its payer (orders/failing-payers.ts): not the merchant's account or the biller's state.
      return refund(deps, order, result.merchantSide ? `the biller refused the service, not the bill: ${result.reason}` : `${BILLER_FAILED}${result.reason}`);
    }
    default:
      return move(deps, order, ["PAID", "PENDING"], "PENDING", { failureReason: result.reason });
  }
}

/**
 * What the biller now says of an order it was paid for, acted on: a pending order is
 * finished (served or refunded), and a served one the biller reversed is refunded, once
 * (SUCCESS -> REFUNDING is one transition), unless another of its attempts, asked again,
 * still stands delivered (the biller took back one of two deliveries). A served order the
 * biller still calls delivered, or a final one, is left as it is. Used by the worker, and by
 * the biller's webhook, which only points at an attempt (`named`): that very attempt is
 * requeried by its own id, not the order's latest; what happened is always read from a
 * requery, never from the webhook's body.
 * A delivery the biller reports for an attempt that did not settle the order (an earlier one,
 * late) is recorded on the order, alerted and its codes given to the payer (lateDelivery).
 */
/** A served order's delivering attempt, by what was last seen of each (actOnBillerState). */
const deliveringAttempt = (attempts: readonly BillerAttempt[]): BillerAttempt | undefined =>
  attempts.find((a) => a.outcome === "delivered") ?? attempts.find((a) => a.outcome === "reversed") ?? attempts.at(-1);

export async function actOnBillerState(deps: VendDeps, order: Order, named?: BillerAttempt): Promise<Order> {
  const attempts = await deps.attempts.of(order.requestId);
  const latest = attempts.at(-1);
  const asked = named && named.billerRequestId !== latest?.billerRequestId ? named : undefined;
  // The attempt that delivered a served order: the one last seen delivered; else one last seen
  // reversed (its reversal was recorded, by askAttempt, by a run that died before acting on
  // it: it is the delivery that went); else the latest, for orders older than outcomes.
  const delivering = deliveringAttempt(attempts);
  const deliverer = delivering?.billerRequestId;
  const before = new Map(attempts.map((a) => [a.billerRequestId, a.outcome]));
  switch (order.status) {
    case "PAID":
    case "PENDING": {
      if (asked) {
        const said = await askAttempt(deps, asked);
        if (said.state === "delivered") {
          deps.log.warn("an earlier pay attempt was delivered after all", { requestId: order.requestId, billerRequestId: asked.billerRequestId, attempt: asked.attempt });
          return applyVendResult(deps, order, said);
        }
      }
      const step = await followUp(deps, order);
      return "order" in step ? step.order : applyVendResult(deps, order, step);
    }
    case "SUCCESS": {
      // Unnamed (the scheduled ask), the delivery in question: the attempt that delivered it.
      const target = named ?? delivering;
      if (!target) return order;
      const now = await askAttempt(deps, target);
      const wasDelivered = target.billerRequestId === deliverer || before.get(target.billerRequestId) === "delivered";
      if (!wasDelivered) return now.state === "delivered" ? lateDelivery(deps, order, target, now) : order;
      if (now.state !== "failed" || !now.reversed) return order;
      // The biller paid twice and took one back: the bill stands while another delivery does.
      const others = await otherAttemptsNow(deps, attempts, target);
      if (others.delivered) {
        deps.log.warn("the biller reversed one delivery of a bill another attempt still delivers; nothing is refunded", { requestId: order.requestId, reversed: target.billerRequestId, standing: others.delivered.attempt.billerRequestId });
        return order;
      }
      if (others.pending) {
        // It may yet deliver the bill: neither refunded nor served until an operator decides.
        const { attempt: waiting } = others.pending;
        deps.log.error("the biller reversed a delivered bill while another attempt of it is still pending; held for an operator", { requestId: order.requestId, reversed: target.billerRequestId, pending: waiting.billerRequestId });
        return move(deps, order, ["SUCCESS"], "NEEDS_REVIEW", {
          failureReason: `the biller reversed pay attempt ${target.attempt} (${target.billerRequestId}) after delivering it, while attempt ${waiting.attempt} (${waiting.billerRequestId}) is still pending at the biller; nothing is refunded until an operator decides`,
        });
      }
      deps.log.warn("the biller reversed a delivered bill; refunding the payer", { requestId: order.requestId, billerRequestId: target.billerRequestId });
      return refund(deps, order, `the biller reversed the bill after delivering it (${now.reason})`, ["SUCCESS"]);
    }
    case "REFUNDING":
    case "REFUNDED":
    case "NEEDS_REVIEW": {
      if (!named) return order;
      const now = await askAttempt(deps, named);
      if (now.state !== "delivered" || before.get(named.billerRequestId) === "delivered") return order;
      const flagged = await lateDelivery(deps, order, named, now);
      if (flagged.status !== "REFUNDING") return flagged;
      // Delivered while its refund was still to go (or to be confirmed: a run that sent it may
      // have died first): the payer holds the bill, so an operator decides, from the ledger.
      return move(deps, flagged, ["REFUNDING"], "NEEDS_REVIEW", {
        failureReason: `${flagged.failureReason ?? "refund"}; the biller then delivered pay attempt ${named.attempt} (${named.billerRequestId}) while the refund was not yet done: held for an operator (the ledger shows whether a refund went)`,
      });
    }
    default:
      return order;
  }
}

/**
 * Every other attempt of the order, asked again by its own id, before a new attempt, a failed
 * bill's refund (otherAttemptsSay), a reversal's refund or an operator's: one the biller calls
 * delivered (the bill stands), else one it still holds pending (it may yet deliver). An attempt
 * it has no record of counts as neither, unless it once answered delivered: that delivery stands.
 */
export async function otherAttemptsNow(deps: VendDeps, attempts: BillerAttempt[], except?: BillerAttempt): Promise<{ delivered?: AttemptSaid; pending?: AttemptSaid }> {
  let pending: AttemptSaid | undefined;
  for (const a of attempts) {
    if (a.billerRequestId === except?.billerRequestId) continue;
    const said = await askAttempt(deps, a);
    if (said.state === "delivered") return { delivered: { attempt: a, said } };
    // A delivery the biller answered once stands though it now has no record of the attempt (the safe reading).
    if (said.state === "pending" && said.unknownRequest && a.outcome === "delivered") return { delivered: { attempt: a, said } };
    if (said.state === "pending" && !said.unknownRequest) pending ??= { attempt: a, said };
  }
  return { pending };
}

/** An attempt, and what the biller said of it just now. */
interface AttemptSaid {
  attempt: BillerAttempt;
  said: VendResult;
}

/**
 * The biller delivered an attempt that did not settle the order: a second delivery beside the
 * one that served it, or a delivery of a bill already failed and refunded. The biller was paid
 * for it either way, and the payer holds what it delivered: its codes are added to the order's
 * (the payer reads them as any code), the order is flagged for operators with what happened,
 * and it is alerted (an error line and billpay_biller_late_deliveries_total). Money does not
 * move here: a refund already sent stays sent, and what to ask of the biller is an operator's.
 */
async function lateDelivery(deps: VendDeps, order: Order, attempt: BillerAttempt, result: Extract<VendResult, { state: "delivered" }>): Promise<Order> {
  const when = order.status === "SUCCESS" ? "beside the attempt that served the order" : `after the order was ${order.status === "NEEDS_REVIEW" ? "held for review" : "failed and refunded"}`;
  const flag = `the biller delivered pay attempt ${attempt.attempt} (${attempt.billerRequestId}) ${when}: the biller was paid for it too`;
  const codes = result.codes.map((c) => ({ ...c, label: `${c.label ?? "Code"} (attempt ${attempt.attempt})` }));
  deps.log.error("the biller delivered an attempt that did not settle the order; recorded on the order for an operator", { requestId: order.requestId, billerRequestId: attempt.billerRequestId, status: order.status });
  deps.metrics.lateDeliveries.inc({ status: order.status });
  const merged = [...(order.purchasedCodes ?? []), ...codes];
  return (
    (await deps.orders.transition(order.requestId, [order.status], order.status, {
      flag,
      ...(codes.length > 0 ? { purchasedCodes: merged, purchasedCode: order.purchasedCode ?? purchasedCodeText(result.codes) ?? undefined } : {}),
    })) ?? order
  );
}

/**
 * Whether the biller delivered, or may yet have delivered, the order's bill: a code was given,
 * or an attempt was never seen failed or reversed (pending, unknown, or sent before outcomes
 * were kept). A payment landing for such an order after it was written off is held for an
 * operator to serve, never refunded by itself (x402-flow.ts landedAfterRefusal, ledger-pass.ts).
 */
export async function mayHaveBeenVended(deps: Pick<VendDeps, "attempts">, o: Order): Promise<boolean> {
  return o.purchasedCode !== null || (await deps.attempts.of(o.requestId)).some((a) => a.outcome !== "failed" && a.outcome !== "reversed");
}

/** The ledger's record of what was paid for an order: its pull, or its x402 payment. */
export async function ledgerPaymentFor(deps: Pick<FlowDeps, "ledger">, o: Order): Promise<LedgerPayment | null> {
  return (await ledgerUnderKey(deps, o)).payment;
}

/** The same event of the ledger's: its id, transaction and block (a payment mined again elsewhere is another). */
const sameLedgerPayment = (again: LedgerPayment | null, was: LedgerPayment) => again !== null && again.id === was.id && again.txHash === was.txHash && again.blockNumber === was.blockNumber;

/**
 * The order's payment once the ledger shows it, or null after LEDGER_WAIT_MS: a payment
 * confirmed from its receipt (chain/receipt-payment.ts) may reach the ledger a moment after a
 * bill that failed at once, and its refund waits for the ledger. A ledger that could not be
 * read at all in that time is an error naming why (the refund's caller logs it and the worker
 * retries), not a quiet "no payment yet".
 */
async function awaitLedgerPaymentFor(deps: Pick<FlowDeps, "ledger" | "ledgerWaitMs">, o: Order): Promise<LedgerPayment | null> {
  let readError: unknown;
  const paid = await deps.ledger.awaitPayment(isPaymentOf(o), () => ledgerPaymentFor(deps, o), deps.ledgerWaitMs, (err) => (readError = err));
  if (!paid && readError !== undefined) throw new Error(`the ledger could not be read: ${errorText(readError).split("\n")[0]}`);
  return paid;
}

/**
 * Where the ledger stands short of the block the order's payment is in on the service's own
 * node (its transaction's receipt), if it does; undefined when it has indexed that block (so
 * it does not show the payment), or the receipt or the ledger cannot be read.
 */
async function ledgerShortOfPayment(deps: Pick<FlowDeps, "ledger" | "deployments">, o: Order): Promise<{ paymentBlock: string; indexed: string } | undefined> {
  const d = deps.deployments.chains[o.chain as ChainKey];
  if (!d || !o.txHash) return undefined;
  const receipt = await sharedClientFor(o.chain as ChainKey, rpcUrlFor(o.chain as ChainKey, d))
    .getTransactionReceipt({ hash: o.txHash as Hex })
    .catch(() => null);
  const indexed = receipt && (await deps.ledger.indexedBlock(chainInfo(o.chain).chainId).catch(() => null));
  return receipt && indexed !== null && indexed !== undefined && indexed < receipt.blockNumber ? { paymentBlock: receipt.blockNumber.toString(), indexed: indexed.toString() } : undefined;
}

/**
 * Refunds the payer on chain: REFUNDING first (so a crash is retried), REFUNDED once the
 * chain has it. Only when the ledger shows the order's payment, of exactly its amount: a
 * refund never exceeds what the chain shows was paid. (The one exception is an operator's:
 * an order held for review whose payment is of another amount is refunded, when an operator
 * decides so, by exactly what the ledger shows paid under its key; refundAmount.) A late
 * landing's, only once its payment is as deep as a bill is vended on (CONFIRMATIONS_<CHAIN>).
 * A pulled order is refunded by its order id, an x402 one with the payer's own authorization
 * (or its own Permit2 permit); BillPay refunds each once.
 * A refund the budget cannot take now, or that would take the payer past its share of it,
 * waits (refundWait) instead of being sent; one that has waited past the deadline goes to
 * an operator.
 */
export async function refund(deps: RefundDeps, order: Order, reason: string, from: OrderStatus[] = ["PAID", "PENDING", "REFUNDING"]): Promise<Order> {
  // Only the actor whose transition moves the order refunds it (a served order's reversal
  // moves it from SUCCESS once; the worker retries from REFUNDING).
  const refunding = await deps.orders.transition(order.requestId, from, "REFUNDING", { failureReason: reason, refundCause: refundCauseOf(reason) });
  if (!refunding) return (await deps.orders.get(order.requestId)) ?? order;
  const chain = refunding.chain as ChainKey;
  try {
    const paid = await awaitLedgerPaymentFor(deps, refunding);
    if (!paid) {
      // The ledger short of the payment's block has not judged yet: the refund waits, and is no failure.
      const behind = await ledgerShortOfPayment(deps, refunding);
      if (behind) {
        deps.log.info("refund waits for the ledger to index its payment", { requestId: refunding.requestId, ...behind });
        deps.metrics.refundsAwaitingLedger.inc({ chain: refunding.chain });
        return refunding;
      }
      throw new Error("the ledger does not show the order's payment (yet); nothing is refunded until it does");
    }
    // A late landing's, as deep as a bill is vended on: a payment the ledger pass found a block
    // after it landed may yet be replaced by its nonce's cancellation, and BillPay's refund of
    // an authorization checks only that its nonce is used. The worker tries again. (Any other
    // order's payment reached that depth before it was PAID; a pull's refund needs BillPay's
    // own record of the pull, which goes with it.)
    if (refunding.lateRefund && !(await deepEnough(deps, chain, paid))) {
      deps.log.info("refund waits for its payment's confirmations", { requestId: refunding.requestId, block: paid.blockNumber });
      return refunding;
    }
    // Deep enough, and still there: read again once the depth is seen, as a bill's payment is
    // (payment-watch.ts awaitConfirmations), so a payment replaced meanwhile is not refunded.
    if (refunding.lateRefund && !sameLedgerPayment(await ledgerPaymentFor(deps, refunding), paid)) {
      deps.log.info("refund waits: its payment is no longer where the ledger showed it", { requestId: refunding.requestId, block: paid.blockNumber });
      return refunding;
    }
    const amount = await refundAmount(deps, refunding, paid);
    if (typeof amount === "string") {
      deps.log.error("refund held for review: the ledger's payment is not the order's", { requestId: refunding.requestId, mismatch: amount });
      return move(deps, refunding, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: `refund held: ${amount}` });
    }
    const wait = await refundWait(deps, refunding, amount);
    if (wait) return deferRefund(deps, refunding, wait);
    const sent = await sendRefund(deps, refunding, amount, BigInt(paid.blockNumber));
    if (sent.amount !== amount) {
      // A refund the service did not send (a leaked refunder key's) gave back another amount, and BillPay refunds a key once: an operator decides.
      deps.log.error("refund held for review: BillPay holds the payment refunded by another amount", { requestId: refunding.requestId, txHash: sent.txHash, refunded: sent.amount.toString(), owed: amount.toString() });
      return move(deps, refunding, ["REFUNDING"], "NEEDS_REVIEW", {
        failureReason: `${reason}; its payment was refunded on chain by a refund the service did not send (transaction ${sent.txHash}) of ${sent.amount}, not the ${amount} owed, and BillPay refunds it once`,
      });
    }
    deps.log.info("refunded on chain", { requestId: refunding.requestId, rail: refunding.rail, amount: amount.toString(), txHash: sent.txHash, reason, ...(sent.gasWei === undefined ? { found: "already refunded" } : {}) });
    deps.metrics.refunds.inc({ chain: refunding.chain, token: refunding.token, rail: refunding.rail });
    deps.metrics.refundedUnits.inc({ chain: refunding.chain, token: refunding.token }, Number(amount));
    if (sent.gasWei !== undefined) deps.metrics.refundGasWei.inc({ chain: refunding.chain }, Number(sent.gasWei));
    // Watched from the statement that makes it REFUNDED (orders/refund-watch.ts).
    return move(deps, refunding, ["REFUNDING"], "REFUNDED", { refundTxHash: sent.txHash }, deps.refundWatches.recording(refunding, sent.txHash, sent.block, ["REFUNDING"]));
  } catch (err) {
    if (err instanceof RefundWithdrawn) {
      // Moved on while the refund was being signed (an operator served it, a late delivery held it): nothing was sent.
      deps.log.warn("refund not sent: the order moved on before it was signed", { requestId: refunding.requestId });
      return (await deps.orders.get(refunding.requestId)) ?? refunding;
    }
    if (err instanceof RefundSentElsewhere) {
      // Another instance's refund of it is on its way: no failure. Waited for as a refund short
      // of budget is, and held for an operator past the same deadline (that instance may have
      // died with it stuck below the market, where only its key can raise it).
      return deferRefund(deps, refunding, { seconds: 60, why: err.message, first: "refund waiting for another instance's transaction of it" });
    }
    deps.metrics.refundFailures.inc({ chain: refunding.chain, token: refunding.token });
    if (err instanceof ContractRefused && err.errorName === "RefundBudgetExceeded") {
      // The budget moved between the read and the send (another instance, the admin): wait as for a short budget.
      deps.refundBudgets.forget(chain, refunding.tokenAddress);
      return deferRefund(deps, refunding, { seconds: 60, why: "BillPay's refund budget could not take it when sent" });
    }
    if (err instanceof RefundIdTaken) {
      // Both its order ids are taken (a leaked operator or refunder key, twice): an operator decides.
      deps.log.error("refund held for review: BillPay's order ids for it are taken, and the payment is not refunded", { requestId: refunding.requestId });
      return move(deps, refunding, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: `${reason}; BillPay refuses the refund: its order ids are taken, and the payment is not refunded (OrderExists)` });
    }
    if (err instanceof ContractRefused && err.errorName === REVERTED_ON_CHAIN) return refundReverted(deps, refunding, reason, err);
    if (err instanceof ContractRefused && REFUND_NEVER.has(err.errorName)) {
      // Retrying cannot change BillPay's answer: an operator decides.
      deps.log.error("refund refused by BillPay; held for review", { requestId: refunding.requestId, error: err.errorName });
      return move(deps, refunding, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: `${reason}; BillPay refused the refund: ${err.errorName}` });
    }
    deps.log.error("refund failed; the worker will retry", { requestId: refunding.requestId, error: errorText(err) });
    return refunding;
  }
}

/**
 * refund() for a caller holding no lease on the order (the ledger pass, a payment landed after
 * its refusal): the order is claimed first, so that a worker of another instance, finding it
 * REFUNDING and unleased, does not send the same refund beside this one (BillPay pays it once;
 * the other reverts at the refunder's gas). Held elsewhere, it is left to its holder; the
 * worker retries a REFUNDING order it finds unleased.
 */
export async function refundUnheld(deps: RefundDeps & Pick<FlowDeps, "leaseSeconds">, order: Order, reason: string): Promise<Order> {
  const held = await deps.orders.claim(order.requestId, deps.leaseSeconds);
  if (!held) return order;
  try {
    return await refund(deps, held, reason);
  } finally {
    await deps.orders.release(held.requestId, held.leaseToken).catch(() => {});
  }
}

/**
 * Sends the order's refund of `amount`, and answers the refund that gives its payment back:
 * the one sent (with its gas), or, when BillPay answers that it holds it refunded already (a
 * run that died after sending, or another actor), the one found on chain, recorded and watched
 * as one sent here (refund-watch.ts refundFound). An x402 refund whose order id someone else
 * took (OrderExists, the payment's key not refunded) goes once more under another id: it is
 * bounded by the payment's key, which BillPay refunds once, whatever the id.
 */
async function sendRefund(deps: RefundDeps, o: Order, amount: bigint, paidIn: bigint): Promise<RefundOnChain & { gasWei?: bigint }> {
  const chain = o.chain as ChainKey;
  const found = async (refusal: string) => refundFound(deps, chain, orderKeyOf(o), (await ledgerUnderKey(deps, o)).refunds, paidIn, refusal);
  const outcome = o.rail === "pull" ? await refundPull(deps, o, amount) : await refundX402(deps, o, amount);
  deps.refundBudgets.forget(chain, o.tokenAddress);
  if ("block" in outcome) return { ...outcome, amount };
  try {
    return await found(outcome.errorName);
  } catch (err) {
    if (!(err instanceof RefundIdTaken) || o.rail === "pull") throw err;
    deps.log.warn("an x402 refund's order id is taken, and its payment not refunded: sent under another id", { requestId: o.requestId });
    const again = await refundX402(deps, o, amount, refundOrderIdOnceTaken(o.requestId));
    deps.refundBudgets.forget(chain, o.tokenAddress);
    return "block" in again ? { ...again, amount } : found(again.errorName);
  }
}

/**
 * What the order's refund sends: its amount when the ledger's payment is exactly the order's
 * (paymentMismatch), less what it keeps back for its gas (refundFee: a late landing's,
 * orders/late-landing.ts). Otherwise only a refund an operator approved from review, and only while
 * the ledger's payment is exactly what they approved, by the order's payer in its token
 * (orders/review.ts); else why not (the mismatch), and nothing is sent.
 */
export async function refundAmount(deps: Pick<FlowDeps, "orders">, o: Order, paid: LedgerPayment): Promise<bigint | string> {
  const mismatch = paymentMismatch(o, paid);
  if (!mismatch) return o.amount - o.refundFee;
  const approved = await deps.orders.approvedRefund(o.requestId);
  if (approved !== null && approved > 0n && paymentMismatch({ ...o, amount: approved }, paid) === null) return approved;
  return mismatch;
}

/** Why and how long a refund of `amount` (the order's, unless an operator approved another) must wait before it is sent, or undefined when it can go now. */
export async function refundWait(deps: Pick<FlowDeps, "orders" | "refundBudgets" | "refundPayerSharePercent" | "refundLateSlicePercent">, o: Order, amount: bigint = o.amount): Promise<RefundWait> {
  const chain = o.chain as ChainKey;
  const budget = await deps.refundBudgets.read(chain, o.tokenAddress);
  if (budget.limit === 0n || budget.period === 0n || amount > budget.limit) {
    // Never refillable to this amount: only the admin can change that. Checked hourly.
    return { seconds: 3600, why: `BillPay's ${o.token} refund budget (limit ${budget.limit}) cannot hold ${amount}` };
  }
  if (amount > budget.available) {
    // The budget refills continuously at limit per period: wait until it holds this refund.
    const seconds = Number(((amount - budget.available) * budget.period + budget.limit - 1n) / budget.limit) + 1;
    return { seconds, why: `BillPay's ${o.token} refund budget has ${budget.available} of ${budget.limit} available; this refund needs ${amount}` };
  }
  // The payer's share from the first refund, and the late slice for a late landing (refund-share.ts).
  return deps.orders.clearRefund(o, amount, budget, { payerPercent: deps.refundPayerSharePercent, latePercent: deps.refundLateSlicePercent });
}

/**
 * The refund waits: not tried again for `wait.seconds`, an alert (error log, metric) the
 * first time, and to an operator once it has waited past REFUND_WAIT_REVIEW_SECONDS.
 */
async function deferRefund(
  deps: Pick<FlowDeps, "orders" | "refundWaitReviewSeconds" | "metrics" | "log">,
  o: Order,
  wait: { seconds: number; why: string; first?: string },
): Promise<Order> {
  const waited = await deps.orders.deferRefund(o.requestId, Math.min(wait.seconds, deps.refundWaitReviewSeconds));
  if (!waited) return (await deps.orders.get(o.requestId)) ?? o;
  deps.metrics.refundsWaiting.inc({ chain: o.chain, token: o.token });
  const line = { requestId: o.requestId, payer: o.payer, amount: o.amount.toString(), retryInSeconds: wait.seconds, why: wait.why };
  if (waited.first) deps.log.error(wait.first ?? "refund waiting for the refund budget; an operator may need to raise it", line);
  if (Date.now() - waited.waitingSince.getTime() >= deps.refundWaitReviewSeconds * 1000) {
    deps.log.error("refund waited past its deadline; held for an operator", line);
    return move(deps, o, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: `${o.failureReason ?? "refund"}; the refund waited past ${deps.refundWaitReviewSeconds} s: ${wait.why}` });
  }
  return (await deps.orders.get(o.requestId)) ?? o;
}

/**
 * Refunds of one order mined and reverted (its estimate passed) before an operator decides,
 * and the wait after each. A revert's cause is not read from the chain: most likely state that
 * changed between the estimate and the block (another refund took the budget, the admin paused
 * BillPay), which a later try gets past; but a payer's contract wallet can also answer its
 * signature check one way to the estimate and the other in the block, and then every try
 * spends the refunder key's gas for nothing. So they are counted, and bounded.
 */
const REFUND_REVERTS_REVIEW = 3;
const REFUND_REVERT_RETRY_SECONDS = 300;

/** A refund mined and reverted: tried again after a wait, and held for an operator once REFUND_REVERTS_REVIEW have. */
async function refundReverted(deps: Pick<FlowDeps, "orders" | "log">, o: Order, reason: string, err: ContractRefused): Promise<Order> {
  const reverts = await deps.orders.refundReverted(o.requestId, REFUND_REVERT_RETRY_SECONDS);
  if (reverts === undefined) return (await deps.orders.get(o.requestId)) ?? o;
  const line = { requestId: o.requestId, reverts, error: err.message };
  if (reverts < REFUND_REVERTS_REVIEW) {
    deps.log.warn(`a refund was mined and reverted; tried again in ${REFUND_REVERT_RETRY_SECONDS} s`, line);
    return (await deps.orders.get(o.requestId)) ?? o;
  }
  deps.log.error("refunds kept reverting on chain; held for an operator", line);
  return move(deps, o, ["REFUNDING"], "NEEDS_REVIEW", {
    failureReason: `${reason}; its refund was mined and reverted ${reverts} times, each at the service's gas (the last: ${err.message}): held for an operator`,
  });
}

/** BillPay refusals of a refund that no retry changes (a pause or a spent budget does change). */
const REFUND_NEVER = new Set([
  "UnknownOrder",
  "RefundExceedsPayment",
  "AuthorizationNotUsed",
  "NotAnAuthorizationToken",
  "AuthorizationNotToThisContract",
  "InvalidAuthorizationSignature",
  "ZeroNonce",
  "ZeroAmount",
  "Permit2NonceNotUsed",
  "InvalidPermit2Signature",
  "Permit2Missing",
]);

/**
 * The order's record of its refunds: each transaction signed for it is recorded before it is
 * sent (the payment watch and review wait while one may land), and those recorded already are
 * handed over, so that one still unmined is waited for, not signed again under another nonce.
 */
async function refundRecord(deps: Pick<FlowDeps, "orders">, o: Order): Promise<RefundRecord> {
  const onSigned = async (hash: Hex, signed: SignedRefund) => {
    if (!(await deps.orders.refundSigned(o.requestId, hash, signed, "REFUNDING"))) throw new RefundWithdrawn(`order ${o.requestId} is no longer REFUNDING: its refund is not sent`);
  };
  return { onSigned, signedBefore: await deps.orders.signedRefunds(o.requestId) };
}

async function refundPull(deps: Pick<FlowDeps, "operator" | "orders">, o: Order, amount: bigint) {
  return deps.operator.refund({ chain: o.chain as ChainKey, orderId: o.onchainOrderId as Hex, amount, ...(await refundRecord(deps, o)) });
}

async function refundX402(deps: Pick<FlowDeps, "operator" | "orders">, refunding: Order, amount: bigint, orderId?: Hex) {
  const stored = refunding.payment as unknown as StoredPayment;
  const record = await refundRecord(deps, refunding);
  const a = stored.authorization;
  if (stored.method === "permit2") {
    // The stored authorization is the permit read into EIP-3009's shape (x402-protocol/payment.ts).
    return deps.operator.refundPermit2({
      chain: refunding.chain as ChainKey,
      requestId: refunding.requestId,
      orderId,
      permit: {
        token: refunding.tokenAddress as Hex,
        amount: BigInt(a.value),
        nonce: BigInt(a.nonce),
        deadline: BigInt(a.validBefore),
        owner: a.from as Hex,
        to: a.to as Hex,
        validAfter: BigInt(a.validAfter),
        signature: stored.signature,
      },
      amount,
      ...record,
    });
  }
  return deps.operator.refundAuthorization({
      chain: refunding.chain as ChainKey,
      requestId: refunding.requestId,
      orderId,
      token: refunding.tokenAddress as Hex,
      authorization: {
        from: a.from as Hex,
        to: a.to as Hex,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
        nonce: a.nonce as Hex,
      },
      signature: stored.signature,
      amount,
      ...record,
    });
}

/** What becomes of a refused payment landed later anyway (x402-flow.ts closeExpiredRefusals). */
function latePayment(o: Order): string {
  const before = new Date(Number(o.authValidBefore) * 1000).toISOString();
  return x402RailOf(o) === "permit2"
    ? `if this permit is settled by x402's proxy before ${before}, it is refunded; settled through another contract, it is held for an operator`
    : `if this authorization is submitted on chain before ${before}, it is refunded`;
}

/**
 * What the payer sees: the interface's result shape. `purchased_code` only when the caller
 * proved it is the payer (the paying response, or the order route with proof); otherwise
 * null, with `purchased_code_withheld` when there is one.
 */
export function orderResult(o: Order, options: { showCode: boolean } = { showCode: true }) {
  const notCharged = o.status === "PAYMENT_FAILED" || o.status === "REFUSED";
  const failed = notCharged || o.status === "REFUNDING" || o.status === "REFUNDED";
  const status = o.status === "SUCCESS" ? "SUCCESS" : failed ? "FAILED_VENDING" : "TIMEOUT";
  const withheld = !options.showCode && o.purchasedCode !== null;
  return {
    success: status === "SUCCESS",
    status,
    purchased_code: options.showCode ? o.purchasedCode : null,
    units: o.units,
    request_id: o.requestId,
    tx_hash: o.txHash,
    // Every code with its label (a WAEC card's serial and PIN, Eko's token and bonus token), beside the text.
    ...(options.showCode && o.purchasedCodes && o.purchasedCodes.length > 1 ? { purchased_codes: o.purchasedCodes } : {}),
    ...(withheld ? { purchased_code_withheld: true } : {}),
    ...(notCharged
      ? // The payment never moved: nothing to refund. A refused one is refunded should it land before it expires.
        {
          charged: false,
          reason: o.failureReason,
          ...(o.status === "REFUSED" && o.authValidBefore !== null
            ? { late_payment: latePayment(o) }
            : {}),
        }
      : status === "FAILED_VENDING"
        ? { refund: { status: o.status === "REFUNDED" ? "REFUNDED" : "PENDING", tx_hash: o.refundTxHash, reason: o.failureReason } }
        : o.status === "NEEDS_REVIEW"
          ? { review: { reason: o.failureReason, detail: "held for an operator: nothing more is vended or sent until one decides" } }
          : {}),
  };
}
