/**
 * One x402 order, settle first: lock the payment once, verify and settle it through the
 * facilitator, and only then vend (orders/fulfil.ts); a bill that fails is refunded on
 * chain. Every step is a state transition in the order table, so the worker can finish
 * any order a crash or a slow biller left behind, exactly once.
 */
import type { PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse } from "@x402/core/types";
import type { Hex } from "viem";
import { eip3009TokenAbi } from "../../lib/abis.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor } from "../../lib/deployments.ts";
import { ServiceError } from "../errors.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { DecodedPayment, StoredPayment } from "../x402/payment.ts";
import { FINISHED, fulfil, move, type FlowDeps } from "./fulfil.ts";
import { newOrderIds, type Order } from "./store.ts";

/** Whether the payer's authorization has been consumed on chain (by this payment, or otherwise). */
export async function authorizationUsed(deps: FlowDeps, o: Order): Promise<boolean> {
  const chain = o.chain as ChainKey;
  return publicClientFor(chain, rpcUrlFor(chain, deps.deployments.chains[chain]!)).readContract({
    address: o.tokenAddress as Hex,
    abi: eip3009TokenAbi,
    functionName: "authorizationState",
    args: [o.payer as Hex, o.authNonce! as Hex],
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
  const { order, created } = await deps.orders.lockPayment(
    {
      ...newOrderIds(),
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
    if (!FINISHED.has(last.status)) await deps.orders.release(order.requestId, order.leaseToken);
  }
}


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
