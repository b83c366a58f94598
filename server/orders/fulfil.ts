/**
 * What every order does once it is paid, whichever rail paid it: post-settlement
 * verification where the product has it, vending through the biller (requeried while it is
 * pending), and an on-chain refund when the bill fails. Each step is a state transition in
 * the order table, so the worker can finish whatever a crash or a slow biller left behind.
 * A refund is sent only for what the ledger shows was paid for the order, exactly.
 */
import { type Log } from "../log.ts";
import type { Hex } from "viem";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import type { FacilitatorClient } from "@x402/core/server";
import type { Catalogue } from "../biller/catalogue.ts";
import type { VendResult, VtpassClient } from "../biller/vtpass.ts";
import { isInternational } from "../biller/international.ts";
import type { Metrics } from "../metrics.ts";
import { ContractRefused, type ChainOperator } from "../chain/operator.ts";
import { errorText } from "../log-safety.ts";
import { paymentMismatch, type LedgerClient, type LedgerPayment } from "../ledger-client.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { StoredPayment } from "../x402/payment.ts";
import { toScaled } from "../pricing/decimal.ts";
import { FINAL_STATUSES, type Order, type OrderStatus, type OrderStore } from "./store.ts";

/** Moves the order on; when another actor moved it first, returns it as it now stands. */
export async function move(deps: FlowDeps, order: Order, from: OrderStatus[], to: OrderStatus, fields: Parameters<OrderStore["transition"]>[3] = {}) {
  return (await deps.orders.transition(order.requestId, from, to, fields)) ?? (await deps.orders.get(order.requestId)) ?? order;
}


export interface FlowDeps {
  orders: OrderStore;
  deployments: Deployments;
  /** How long whoever works an order (a request or the worker) holds it: longer than its worst case. */
  leaseSeconds: number;
  facilitators: Partial<Record<ChainKey, FacilitatorClient>>;
  biller: VtpassClient;
  /** The biller's products and plans, cached: every bill is checked against it before it is priced. */
  catalogue: Catalogue;
  /** The hot keys' transactions on BillPay: pulls (operator) and refunds (refunder). */
  operator: ChainOperator;
  /** Where an order's payment and refund are read from. */
  ledger: LedgerClient;
  /** How long a pay waits for the ledger to show its payment (pull or x402) before answering TIMEOUT. */
  ledgerWaitMs: number;
  /** How long a request waits for the biller before answering TIMEOUT. */
  vendDeadlineMs: number;
  requeryIntervalMs: number;
  /** The phone sent with products that are not themselves a phone number. */
  defaultPhone: string;
  /** The e-mail the biller's international pay call requires. */
  defaultEmail: string;
  /** Vend latency, refunds and upstream calls, for /metrics. */
  metrics: Metrics;
  log: Log;
}


/** Numbers checked with the biller after settlement, before vending (Showmax has none). */
export function needsVerification(bill: Pick<PaymentRequest, "serviceCategory" | "serviceID">): boolean {
  switch (bill.serviceCategory) {
    case "ELECTRICITY":
    case "BANK":
      return true;
    case "EDUCATION":
      return bill.serviceID === "jamb";
    case "CABLE":
      return bill.serviceID !== "showmax";
    default:
      return false;
  }
}


/** States nothing automatic moves on from (NEEDS_REVIEW waits for an operator). */
export const FINISHED = new Set<OrderStatus>(FINAL_STATUSES);

/**
 * Vends a paid order: verification where the product has it, then the biller, waiting up to
 * the deadline. `resumed`: the order was left PAID by an earlier attempt that may already
 * have sent the pay, so the biller is asked first; only if it has no record of the request
 * is the order verified and paid (never refunded for a bill that may have been delivered).
 */
export async function fulfil(deps: FlowDeps, order: Order, options: { resumed?: boolean } = {}): Promise<Order> {
  if (options.resumed) {
    const known = await deps.biller.requery(order.billerRequestId);
    if (!(known.state === "pending" && known.unknownRequest)) return applyVendResult(deps, order, known);
  }
  const bill = order.bill as unknown as PaymentRequest;
  if (needsVerification(bill)) {
    try {
      const verified = await deps.biller.verify({ serviceID: bill.serviceID, billersCode: bill.billersCode, type: bill.variation_code });
      if (!verified.ok) return refund(deps, order, `verification failed: ${verified.reason}`);
    } catch (err) {
      return refund(deps, order, `verification unavailable: ${errorText(err)}`);
    }
  }
  const timer = deps.metrics.vendSeconds.startTimer();
  let result = await pay(deps, order);
  const deadline = Date.now() + deps.vendDeadlineMs;
  while (result.state === "pending" && Date.now() + deps.requeryIntervalMs < deadline) {
    await new Promise((r) => setTimeout(r, deps.requeryIntervalMs));
    result = await requery(deps, order);
  }
  timer({ outcome: result.state });
  return applyVendResult(deps, order, result);
}

/** Pays the biller under the order's fixed request id (a repeat is recognised as one). */
function pay(deps: FlowDeps, order: Order): Promise<VendResult> {
  const bill = order.bill as unknown as PaymentRequest;
  const phone = bill.phone ?? (bill.serviceCategory === "AIRTIME" || bill.serviceCategory === "DATA" ? bill.billersCode : deps.defaultPhone);
  return deps.biller.pay({
    requestId: order.billerRequestId,
    serviceID: bill.serviceID,
    billersCode: bill.billersCode,
    variationCode: bill.variation_code,
    amount: bill.nairaAmount,
    phone,
    ...(isInternational(bill)
      ? { international: { country_code: bill.country_code!, operator_id: bill.operator_id!, product_type_id: bill.product_type_id!, email: deps.defaultEmail } }
      : {}),
  });
}

/** Asks the biller how the order stands; when it has no record, the pay is sent again. */
export async function requery(deps: FlowDeps, order: Order): Promise<VendResult> {
  const result = await deps.biller.requery(order.billerRequestId);
  return result.state === "pending" && result.unknownRequest ? pay(deps, order) : result;
}

/** A note for operators when the biller charged something other than the bill's amount (a plan repriced since the quote, say). */
function chargeFlag(order: Order, charged: string | null): string | undefined {
  if (charged === null) return undefined;
  const priced = (order.bill as unknown as PaymentRequest).nairaAmount;
  // Kobo, as integers: the biller answers "1000.00", 1000 or "1,000.00" depending on the product.
  const expected = toScaled(priced, 2);
  const actual = toScaled(charged.replace(/,/g, ""), 2);
  return actual !== undefined && actual === expected ? undefined : `the biller charged ${charged} NGN; the bill was priced at ${priced} NGN`;
}

export async function applyVendResult(deps: FlowDeps, order: Order, result: VendResult): Promise<Order> {
  switch (result.state) {
    case "delivered": {
      const flag = chargeFlag(order, result.amount);
      if (flag) deps.log.warn("biller amount differs from the bill; flagged for operators", { requestId: order.requestId, flag });
      deps.log.info("bill delivered", { requestId: order.requestId, rail: order.rail, serviceID: (order.bill as { serviceID?: string }).serviceID });
      return move(deps, order, ["PAID", "PENDING"], "SUCCESS", {
        purchasedCode: result.purchasedCode ?? undefined,
        units: result.units ?? undefined,
        billerAmount: result.amount ?? undefined,
        flag,
      });
    }
    case "failed":
      return refund(deps, order, `biller: ${result.reason}`);
    default:
      return move(deps, order, ["PAID", "PENDING"], "PENDING", { failureReason: result.reason });
  }
}

/** The ledger's record of what was paid for an order: its pull, or its x402 payment. */
export async function ledgerPaymentFor(deps: FlowDeps, o: Order): Promise<LedgerPayment | null> {
  if (o.rail === "pull") return (await deps.ledger.order(o.onchainOrderId)).payments[0] ?? null;
  return (await deps.ledger.authorization(o.chain as ChainKey, o.tokenAddress, o.payer, o.authNonce!)).payment;
}

/**
 * Refunds the payer on chain: REFUNDING first (so a crash is retried), REFUNDED once the
 * chain has it. Only when the ledger shows the order's payment, of exactly its amount: a
 * refund never exceeds what the chain shows was paid. A pulled order is refunded by its
 * order id, an x402 one with the payer's own authorization; BillPay refunds each once.
 */
export async function refund(deps: FlowDeps, order: Order, reason: string): Promise<Order> {
  const refunding = await move(deps, order, ["PAID", "PENDING", "REFUNDING"], "REFUNDING", { failureReason: reason });
  if (refunding.status !== "REFUNDING") return refunding;
  try {
    const paid = await ledgerPaymentFor(deps, refunding);
    if (!paid) throw new Error("the ledger does not show the order's payment (yet); nothing is refunded until it does");
    const mismatch = paymentMismatch(refunding, paid);
    if (mismatch) {
      deps.log.error("refund held for review: the ledger's payment is not the order's", { requestId: refunding.requestId, mismatch });
      return move(deps, refunding, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: `refund held: ${mismatch}` });
    }
    const outcome = refunding.rail === "pull" ? await refundPull(deps, refunding) : await refundX402(deps, refunding);
    const txHash = "txHash" in outcome ? outcome.txHash : undefined;
    deps.log.info("refunded on chain", { requestId: refunding.requestId, rail: refunding.rail, amount: refunding.amount.toString(), txHash, reason });
    deps.metrics.refunds.inc({ chain: refunding.chain, token: refunding.token, rail: refunding.rail });
    deps.metrics.refundedUnits.inc({ chain: refunding.chain, token: refunding.token }, Number(refunding.amount));
    return move(deps, refunding, ["REFUNDING"], "REFUNDED", { refundTxHash: txHash });
  } catch (err) {
    deps.metrics.refundFailures.inc({ chain: refunding.chain, token: refunding.token });
    if (err instanceof ContractRefused && REFUND_NEVER.has(err.errorName)) {
      // Retrying cannot change BillPay's answer: an operator decides.
      deps.log.error("refund refused by BillPay; held for review", { requestId: refunding.requestId, error: err.errorName });
      return move(deps, refunding, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: `${reason}; BillPay refused the refund: ${err.errorName}` });
    }
    deps.log.error("refund failed; the worker will retry", { requestId: refunding.requestId, error: errorText(err) });
    return refunding;
  }
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
  "OrderExists",
]);

function refundPull(deps: FlowDeps, o: Order) {
  return deps.operator.refund({ chain: o.chain as ChainKey, orderId: o.onchainOrderId as Hex, amount: o.amount });
}

function refundX402(deps: FlowDeps, refunding: Order) {
  const stored = refunding.payment as unknown as StoredPayment;
  const a = stored.authorization;
  return deps.operator.refundAuthorization({
      chain: refunding.chain as ChainKey,
      requestId: refunding.requestId,
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
      amount: refunding.amount,
    });
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
    ...(withheld ? { purchased_code_withheld: true } : {}),
    ...(notCharged
      ? // The payment never moved: nothing to refund. A refused one is refunded should it land before it expires.
        {
          charged: false,
          reason: o.failureReason,
          ...(o.status === "REFUSED" && o.authValidBefore !== null
            ? { late_payment: `if this authorization is submitted on chain before ${new Date(Number(o.authValidBefore) * 1000).toISOString()}, it is refunded` }
            : {}),
        }
      : status === "FAILED_VENDING"
        ? { refund: { status: o.status === "REFUNDED" ? "REFUNDED" : "PENDING", tx_hash: o.refundTxHash, reason: o.failureReason } }
        : o.status === "NEEDS_REVIEW"
          ? { review: { reason: o.failureReason, detail: "the chain does not show the payment this order expected; nothing was vended or sent, and an operator will decide" } }
          : {}),
  };
}
