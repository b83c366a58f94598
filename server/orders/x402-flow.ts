/**
 * One x402 order, settle first: lock the payment once, verify and settle it through the
 * facilitator, and only then vend; a bill that fails (verification or vending) is refunded
 * on chain. Every step is a state transition in the order table, so the worker can finish
 * any order a crash or a slow biller left behind, exactly once.
 */
import type { FacilitatorClient } from "@x402/core/server";
import type { PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse } from "@x402/core/types";
import type { Hex } from "viem";
import { eip3009TokenAbi } from "../../lib/abis.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import type { VendResult, VtpassClient } from "../biller/vtpass.ts";
import { newBillerRequestId } from "../biller/vtpass.ts";
import type { Refunder } from "../chain/refunder.ts";
import { ServiceError } from "../errors.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { Authorization, DecodedPayment } from "../x402/payment.ts";
import type { Order, OrderStatus, OrderStore } from "./store.ts";

/** Moves the order on; when another actor moved it first, returns it as it now stands. */
async function move(deps: FlowDeps, order: Order, from: OrderStatus[], to: OrderStatus, fields: Parameters<OrderStore["transition"]>[3] = {}) {
  return (await deps.orders.transition(order.requestId, from, to, fields)) ?? (await deps.orders.get(order.requestId)) ?? order;
}

/** Whether the payer's authorization has been consumed on chain (by this payment, or otherwise). */
export async function authorizationUsed(deps: FlowDeps, o: Order): Promise<boolean> {
  const chain = o.chain as ChainKey;
  return publicClientFor(chain, rpcUrlFor(chain, deps.deployments.chains[chain]!)).readContract({
    address: o.tokenAddress as Hex,
    abi: eip3009TokenAbi,
    functionName: "authorizationState",
    args: [o.payer as Hex, o.authNonce as Hex],
  });
}

/**
 * The facilitator refused or failed. Only when the chain confirms the authorization is
 * still unused is the order PAYMENT_FAILED: a settlement still in flight, or one someone
 * else submitted, must not be written off. Otherwise it stays SETTLING for the worker,
 * which decides from the ledger's record of the payment.
 */
async function paymentFailed(deps: FlowDeps, order: Order, reason: string): Promise<Order> {
  let used: boolean;
  try {
    used = await authorizationUsed(deps, order);
  } catch (err) {
    deps.log("could not read the authorization's state; the worker will decide", { requestId: order.requestId, error: (err as Error).message });
    return order;
  }
  if (used) {
    deps.log("facilitator refused, but the authorization is consumed; the worker will decide", { requestId: order.requestId, reason });
    return order;
  }
  return move(deps, order, ["SETTLING"], "PAYMENT_FAILED", { failureReason: reason });
}

export interface FlowDeps {
  orders: OrderStore;
  deployments: Deployments;
  /** How long whoever works an order (a request or the worker) holds it: longer than its worst case. */
  leaseSeconds: number;
  facilitators: Partial<Record<ChainKey, FacilitatorClient>>;
  biller: VtpassClient;
  refunder: Refunder;
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

interface StoredPayment {
  x402Version: 1 | 2;
  payload: PaymentPayload;
  authorization: Record<keyof Authorization, string>;
  signature: Hex;
}

function storedPayment(p: DecodedPayment, requirements: PaymentRequirements, resourceUrl: string): StoredPayment {
  // The facilitator speaks protocol 2: a v1 payment is re-wrapped around the same signed payload.
  const payload: PaymentPayload =
    p.x402Version === 2
      ? (p.raw as unknown as PaymentPayload)
      : {
          x402Version: 2,
          resource: { url: resourceUrl, description: "bill payment", mimeType: "application/json" },
          accepted: requirements,
          payload: p.raw.payload as Record<string, unknown>,
        };
  const a = p.authorization;
  return {
    x402Version: p.x402Version,
    payload,
    authorization: {
      from: a.from,
      to: a.to,
      value: a.value.toString(),
      validAfter: a.validAfter.toString(),
      validBefore: a.validBefore.toString(),
      nonce: a.nonce,
    },
    signature: p.signature,
  };
}

export async function startX402Order(
  deps: FlowDeps,
  input: {
    bill: PaymentRequest;
    bodyHash: string;
    chain: ChainKey;
    token: string;
    tokenAddress: string;
    amount: bigint;
    payment: DecodedPayment;
    requirements: PaymentRequirements;
    resourceUrl: string;
  },
): Promise<{ order: Order; replay: boolean }> {
  const billerRequestId = newBillerRequestId();
  const { order, created } = await deps.orders.lockPayment(
    {
    requestId: `req_${billerRequestId}`,
    billerRequestId,
    bodyHash: input.bodyHash,
    bill: input.bill as unknown as Record<string, unknown>,
    chain: input.chain,
    token: input.token,
    tokenAddress: input.tokenAddress,
    payer: input.payment.authorization.from,
    amount: input.amount,
    authNonce: input.payment.authorization.nonce,
    payment: storedPayment(input.payment, input.requirements, input.resourceUrl) as unknown as Record<string, unknown>,
    requirements: input.requirements as unknown as Record<string, unknown>,
    },
    deps.leaseSeconds,
  );
  if (!created) {
    if (order.bodyHash !== input.bodyHash) {
      throw new ServiceError("PAYMENT_ALREADY_USED", `this payment already paid for order ${order.requestId}, a different bill`);
    }
    return { order, replay: true };
  }
  let last = order;
  try {
    last = await settle(deps, order);
    if (last.status === "PAID") last = await fulfil(deps, last);
    return { order: last, replay: false };
  } finally {
    // An unfinished order goes to the worker at once; a finished one needs no release.
    if (!FINISHED.has(last.status)) await deps.orders.release(order.requestId);
  }
}

const FINISHED = new Set<OrderStatus>(["SUCCESS", "REFUNDED", "PAYMENT_FAILED"]);

/** Verifies then settles; a definite refusal ends in PAYMENT_FAILED, an unclear one stays SETTLING for the worker. */
export async function settle(deps: FlowDeps, order: Order): Promise<Order> {
  const facilitator = deps.facilitators[order.chain as ChainKey];
  const { payload } = order.payment as unknown as StoredPayment;
  const requirements = order.requirements as unknown as PaymentRequirements;
  if (!facilitator) return paymentFailed(deps, order, "no facilitator for this chain");

  let verified: VerifyResponse;
  try {
    verified = await facilitator.verify(payload, requirements);
  } catch (err) {
    const response = (err as { response?: VerifyResponse }).response;
    if (!response) {
      deps.log("facilitator verify failed; the worker will retry", { requestId: order.requestId, error: (err as Error).message });
      return order;
    }
    verified = response;
  }
  if (!verified.isValid) {
    return paymentFailed(
      deps,
      order,
      `facilitator: ${verified.invalidReason ?? "invalid payment"}${verified.invalidMessage ? ` (${verified.invalidMessage})` : ""}`,
    );
  }

  let result: SettleResponse;
  try {
    result = await facilitator.settle(payload, requirements);
  } catch (err) {
    const response = (err as { response?: SettleResponse }).response;
    if (!response) {
      // Unclear whether it landed: the worker checks the chain before anything else happens.
      deps.log("facilitator settle gave no answer; the worker will reconcile", { requestId: order.requestId, error: (err as Error).message });
      return order;
    }
    result = response;
  }
  if (!result.success) return paymentFailed(deps, order, `facilitator: ${result.errorReason ?? "settlement failed"}`);
  return move(deps, order, ["SETTLING"], "PAID", { txHash: result.transaction });
}

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

/** Refunds the payer on chain: REFUNDING first (so a crash is retried), REFUNDED once the chain has it. */
export async function refund(deps: FlowDeps, order: Order, reason: string): Promise<Order> {
  const refunding = await move(deps, order, ["PAID", "PENDING", "REFUNDING"], "REFUNDING", { failureReason: reason });
  if (refunding.status !== "REFUNDING") return refunding;
  const stored = refunding.payment as unknown as StoredPayment;
  const a = stored.authorization;
  try {
    const outcome = await deps.refunder.refundAuthorization({
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
    const txHash = "txHash" in outcome ? outcome.txHash : undefined;
    return move(deps, refunding, ["REFUNDING"], "REFUNDED", { refundTxHash: txHash });
  } catch (err) {
    deps.log("refund failed; the worker will retry", { requestId: refunding.requestId, error: (err as Error).message });
    return refunding;
  }
}

/** What the payer sees: the interface's result shape. */
export function orderResult(o: Order) {
  const status = o.status === "SUCCESS" ? "SUCCESS" : o.status === "REFUNDING" || o.status === "REFUNDED" ? "FAILED_VENDING" : "TIMEOUT";
  return {
    success: status === "SUCCESS",
    status,
    purchased_code: o.purchasedCode,
    units: o.units,
    request_id: o.requestId,
    tx_hash: o.txHash,
    ...(status === "FAILED_VENDING"
      ? { refund: { status: o.status === "REFUNDED" ? "REFUNDED" : "PENDING", tx_hash: o.refundTxHash, reason: o.failureReason } }
      : {}),
  };
}
