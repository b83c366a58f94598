/**
 * What every order does once it is paid, whichever rail paid it: post-settlement
 * verification where the product has it, vending through the biller (requeried while it is
 * pending), and an on-chain refund when the bill fails. Each step is a state transition in
 * the order table, so the worker can finish whatever a crash or a slow biller left behind.
 */
import type { Hex } from "viem";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import type { FacilitatorClient } from "@x402/core/server";
import type { VendResult, VtpassClient } from "../biller/vtpass.ts";
import type { ChainOperator } from "../chain/operator.ts";
import type { LedgerClient } from "../ledger-client.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { StoredPayment } from "../x402/payment.ts";
import type { Order, OrderStatus, OrderStore } from "./store.ts";

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
  /** The operator key's transactions on BillPay: pulls and refunds. */
  operator: ChainOperator;
  /** Where an order's payment and refund are read from. */
  ledger: LedgerClient;
  /** How long a pay waits for the ledger to show its pull before answering TIMEOUT. */
  ledgerWaitMs: number;
  /** How long a request waits for the biller before answering TIMEOUT. */
  vendDeadlineMs: number;
  requeryIntervalMs: number;
  /** The phone sent with products that are not themselves a phone number. */
  defaultPhone: string;
  log: (msg: string, fields?: Record<string, unknown>) => void;
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


export const FINISHED = new Set<OrderStatus>(["SUCCESS", "REFUNDED", "PAYMENT_FAILED"]);

/** Vends a paid order: verification where the product has it, then the biller, waiting up to the deadline. */
export async function fulfil(deps: FlowDeps, order: Order): Promise<Order> {
  const bill = order.bill as unknown as PaymentRequest;
  if (needsVerification(bill)) {
    try {
      const verified = await deps.biller.verify({ serviceID: bill.serviceID, billersCode: bill.billersCode, type: bill.variation_code });
      if (!verified.ok) return refund(deps, order, `verification failed: ${verified.reason}`);
    } catch (err) {
      return refund(deps, order, `verification unavailable: ${(err as Error).message}`);
    }
  }
  let result = await pay(deps, order);
  const deadline = Date.now() + deps.vendDeadlineMs;
  while (result.state === "pending" && Date.now() + deps.requeryIntervalMs < deadline) {
    await new Promise((r) => setTimeout(r, deps.requeryIntervalMs));
    result = await requery(deps, order);
  }
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
  });
}

/** Asks the biller how the order stands; when it has no record, the pay is sent again. */
export async function requery(deps: FlowDeps, order: Order): Promise<VendResult> {
  const result = await deps.biller.requery(order.billerRequestId);
  return result.state === "pending" && result.unknownRequest ? pay(deps, order) : result;
}

export async function applyVendResult(deps: FlowDeps, order: Order, result: VendResult): Promise<Order> {
  switch (result.state) {
    case "delivered":
      return move(deps, order, ["PAID", "PENDING"], "SUCCESS", {
        purchasedCode: result.purchasedCode ?? undefined,
        units: result.units ?? undefined,
      });
    case "failed":
      return refund(deps, order, `biller: ${result.reason}`);
    default:
      return move(deps, order, ["PAID", "PENDING"], "PENDING", { failureReason: result.reason });
  }
}

/**
 * Refunds the payer on chain: REFUNDING first (so a crash is retried), REFUNDED once the
 * chain has it. A pulled order is refunded by its order id, an x402 one with the payer's
 * own authorization; BillPay refunds each once.
 */
export async function refund(deps: FlowDeps, order: Order, reason: string): Promise<Order> {
  const refunding = await move(deps, order, ["PAID", "PENDING", "REFUNDING"], "REFUNDING", { failureReason: reason });
  if (refunding.status !== "REFUNDING") return refunding;
  try {
    const outcome = refunding.rail === "pull" ? await refundPull(deps, refunding) : await refundX402(deps, refunding);
    const txHash = "txHash" in outcome ? outcome.txHash : undefined;
    return move(deps, refunding, ["REFUNDING"], "REFUNDED", { refundTxHash: txHash });
  } catch (err) {
    deps.log("refund failed; the worker will retry", { requestId: refunding.requestId, error: (err as Error).message });
    return refunding;
  }
}

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

/** What the payer sees: the interface's result shape. */
export function orderResult(o: Order) {
  const failed = o.status === "REFUNDING" || o.status === "REFUNDED" || o.status === "PAYMENT_FAILED";
  const status = o.status === "SUCCESS" ? "SUCCESS" : failed ? "FAILED_VENDING" : "TIMEOUT";
  return {
    success: status === "SUCCESS",
    status,
    purchased_code: o.purchasedCode,
    units: o.units,
    request_id: o.requestId,
    tx_hash: o.txHash,
    ...(o.status === "PAYMENT_FAILED"
      ? // The payment never moved: nothing to refund.
        { charged: false, reason: o.failureReason }
      : status === "FAILED_VENDING"
        ? { refund: { status: o.status === "REFUNDED" ? "REFUNDED" : "PENDING", tx_hash: o.refundTxHash, reason: o.failureReason } }
        : {}),
  };
}
