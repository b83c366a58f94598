/**
 * One x402 order, settle first: lock the payment once, settle it through the facilitator
 * (verified first only when the intake found the payer short), count it paid only when the ledger shows a payment of exactly the order's
 * amount under its (chain, token, payer, nonce), and only then vend (orders/fulfil.ts); a
 * bill that fails is refunded on chain. The facilitator's word decides nothing about money:
 * its success only starts the wait for the chain (the receipt of the hash it names, or the
 * ledger), its refusal only means "not now", and a block that shows the payment before it
 * answers is not kept waiting for it (sightedFirst).
 *
 * A refused authorization can still land until it expires (the payer, a relayer or anyone
 * holding it can submit it), so a refused order stays REFUSED, not failed, until the chain
 * shows it can no longer land; if it lands meanwhile it is refunded, because the payer was
 * told it did not settle. Every step is a state transition in the order table, so the
 * worker finishes whatever a crash or a slow facilitator left behind, exactly once.
 */
import { errorText } from "../log-safety.ts";
import type { PaymentPayload, PaymentRequirements, SettleResponse } from "@x402/core/types";
import type { Hex } from "viem";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { ServiceError } from "../errors.ts";
import { isPaymentOf, paymentMismatch, x402RailOf, type LedgerPayment } from "../ledger-client.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { VendPlan } from "../biller/catalogue/vend-plan.ts";
import { samePayment, type DecodedPayment, type StoredPayment } from "../x402-protocol/payment.ts";
import { isSettlementPending, SERVICE_REFUSALS, settleAnswer, verifyAnswer, type FacilitatorAnswer, type ServiceRefusalStatus } from "../x402-protocol/facilitator-answer.ts";
import { FINISHED, FirstAttempts, fulfil, mayHaveBeenVended, move, refund, refundUnheld, type FlowDeps } from "./fulfil.ts";
import { newOrderIds, newOrderSecret, type Order, type OrderStatus } from "./store.ts";
import { authorizationOnChain } from "../chain/payment-state.ts";
import { awaitConfirmations, deepEnough } from "./payment-watch.ts";
import { orderPaymentIn } from "../chain/receipt-payment.ts";
import { sightAuthorization } from "../chain/settlement-sighting.ts";
import { closeSpentPermit2 } from "./spent-permit2.ts";
import { earlierUnderId } from "./payment-id.ts";
import { startStage } from "../stage-timing.ts";
import { permit2Approval, permit2ApprovalNeeded } from "../../lib/permit2.ts";
import { deployedClientFor } from "../../lib/chain-client.ts";

/**
 * What settling an x402 order touches, and nothing else: the facilitators; the chain as the
 * service's own node shows it (deployments, new blocks, confirmation depth); the ledger and
 * how long a request waits for it; the order store and the watch on confirmed payments; the
 * log and metrics. It sends nothing from BillPay (no operator or refunder key).
 */
export type SettleDeps = Pick<FlowDeps, "facilitators" | "deployments" | "heads" | "confirmations" | "ledger" | "ledgerWaitMs" | "orders" | "watches" | "metrics" | "log">;

/** @x402/evm's facilitator reason for a payer that has not approved Permit2 (its exact/facilitator errors). */
const ErrPermit2AllowanceRequired = "permit2_allowance_required";


/** The ledger's payment under the order's key, if any. */
async function ledgerPaymentOf(deps: Pick<FlowDeps, "ledger">, o: Order): Promise<LedgerPayment | null> {
  return (await deps.ledger.authorization(o.chain as ChainKey, o.tokenAddress, o.payer, o.authNonce!, x402RailOf(o))).payment;
}

/**
 * SETTLING -> PAID when the chain's payment under the order's key is exactly the order's;
 * NEEDS_REVIEW when it is not. `source`: what showed it, the ledger (held to the confirmation
 * depth here) or the node's receipt (held to it when it was read: chain/receipt-payment.ts).
 */
async function settledFromLedger(deps: SettleDeps, o: Order, payment: LedgerPayment, source: "ledger" | "receipt" = "ledger"): Promise<Order> {
  const mismatch = paymentMismatch(o, payment);
  if (mismatch) {
    deps.log.warn("x402 payment does not match its order; held for review, nothing sent or vended", { requestId: o.requestId, mismatch });
    return move(deps, o, ["SETTLING"], "NEEDS_REVIEW", { failureReason: mismatch, txHash: payment.txHash });
  }
  if (source === "ledger" && !(await deepEnough(deps, o.chain, payment))) return o; // not confirmed yet: a later read decides
  // Watched from the statement that makes it PAID (orders/payment-watch.ts).
  const paid = await move(deps, o, ["SETTLING"], "PAID", { txHash: payment.txHash }, deps.watches.recording(o, payment));
  if (paid.status === "PAID") deps.metrics.paymentConfirmations.inc({ chain: o.chain, rail: "x402", source });
  return paid;
}

/**
 * A payment landed under the key of an order the service refused (or wrote off): the payer
 * was told it did not settle, so exactly what the chain shows is refunded; a payment of
 * another amount waits for an operator. So does the payment of a bill that was vended (a
 * reorganisation took its payment, and an operator closed it as unpaid): it pays for that
 * bill now, and a refund would give the bill away. `held`: the caller holds the order's lease
 * (an operator's decision), else the refund claims it.
 */
export async function landedAfterRefusal(deps: FlowDeps, o: Order, payment: LedgerPayment, held = false): Promise<Order> {
  const mismatch = paymentMismatch(o, payment);
  if (mismatch) {
    deps.log.warn("a refused x402 payment landed with another amount; held for review", { requestId: o.requestId, mismatch });
    return move(deps, o, ["REFUSED", "PAYMENT_FAILED"], "NEEDS_REVIEW", { failureReason: mismatch, txHash: payment.txHash });
  }
  if (await mayHaveBeenVended(deps, o)) {
    deps.log.error("the payment of a bill already vended landed after its order was written off; held for an operator to serve it", { requestId: o.requestId, txHash: payment.txHash });
    return move(deps, o, ["REFUSED", "PAYMENT_FAILED"], "NEEDS_REVIEW", {
      failureReason: `the payment landed (transaction ${payment.txHash}) after the order was written off, and its bill had been vended (or may have been): serve it (nothing is vended again), or refund it if the biller shows the bill failed or taken back`,
      txHash: payment.txHash,
    });
  }
  const reason = "the payment landed on chain after the service had refused it";
  // The payer's doing: its refund draws on the late slice of the budget (orders/refund-share.ts).
  const refunding = await deps.orders.transition(o.requestId, ["REFUSED", "PAYMENT_FAILED"], "REFUNDING", { failureReason: reason, txHash: payment.txHash, lateRefund: true });
  if (!refunding) return (await deps.orders.get(o.requestId)) ?? o;
  // Watched as every confirmed payment is: a reorganisation deeper than the refund's wait that
  // takes it and its refund is met as a refunded order's is (payment-watch.ts actOnLoss).
  await deps.watches.record(refunding, payment);
  deps.log.info("refunding a payment that landed after it was refused", { requestId: o.requestId });
  return held ? refund(deps, refunding, reason) : refundUnheld(deps, refunding, reason);
}

/**
 * SETTLING -> REFUSED: nothing moved yet, and the worker watches the authorization until it
 * expires. Undefined for an order whose settlement was reported pending earlier (its hash
 * recorded): that one may land until its authorization expires, so it stays SETTLING and the
 * chain decides, whatever refused this try (the facilitator, the service's credentials, no
 * facilitator at all).
 */
async function refuse(deps: Pick<FlowDeps, "orders">, order: Order, reason: string): Promise<Order | undefined> {
  if (order.txHash) return undefined;
  return move(deps, order, ["SETTLING"], "REFUSED", { failureReason: reason });
}

/** The payment as an order keeps it: the signed payload the facilitator is given (protocol 2), and its authorization. */
export function storedPayment(p: DecodedPayment, requirements: PaymentRequirements, resourceUrl: string): StoredPayment {
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
    method: p.method,
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

/**
 * The order a payment already made, answered only to the same payment (signature
 * included) for the same bill. The (from, nonce) of a real payment is public on chain, so
 * anything less would hand a stranger the order; a refusal names no order.
 */
export function replayOf(order: Order, payment: DecodedPayment, bodyHash: string): Order {
  // One answer for both mismatches: telling them apart would confirm a copied signature.
  if (!samePayment(order.payment as unknown as StoredPayment, payment) || order.bodyHash !== bodyHash) {
    throw new ServiceError("PAYMENT_ALREADY_USED", "this authorization's nonce is already used; sign a new authorization for this bill");
  }
  return order;
}

export async function startX402Order(
  deps: FlowDeps,
  input: {
    bill: PaymentRequest;
    /** How the bill vends, as the catalogue resolved it when it was priced. */
    vend: VendPlan;
    bodyHash: string;
    chain: ChainKey;
    token: string;
    tokenAddress: string;
    amount: bigint;
    payment: DecodedPayment;
    requirements: PaymentRequirements;
    resourceUrl: string;
    /** The client's id for the payment, as stored (orders/payment-id.ts storedKey). */
    idempotencyKey?: string;
    /** Ask the facilitator to verify before settling: the intake's read found the payer short, or could not read (settle). */
    verifyFirst?: boolean;
  },
  /** Told the order the moment it is PAID, before it vends (the route signs x402's receipt meanwhile). */
  paid?: (order: Order) => void,
): Promise<{ order: Order; replay: boolean; secret?: string }> {
  const secret = newOrderSecret();
  const locking = startStage("lock payment");
  const { order, created } = await deps.orders.lockPayment(
    {
      ...newOrderIds(),
      bodyHash: input.bodyHash,
      bill: input.bill as unknown as Record<string, unknown>,
      vend: input.vend,
      chain: input.chain,
      token: input.token,
      tokenAddress: input.tokenAddress,
      payer: input.payment.authorization.from,
      amount: input.amount,
      authNonce: input.payment.authorization.nonce,
      authValidBefore: input.payment.authorization.validBefore,
      payment: storedPayment(input.payment, input.requirements, input.resourceUrl) as unknown as Record<string, unknown>,
      requirements: input.requirements as unknown as Record<string, unknown>,
      secretHash: secret.hash,
      idempotencyKey: input.idempotencyKey ?? null,
    },
    deps.leaseSeconds,
  );
  locking();
  if (!created) {
    // A concurrent copy created it first: answered like any replay. Or a concurrent request
    // under the same payment id (another authorization): answered as the id's first order.
    const samePaymentKey = order.authNonce?.toLowerCase() === input.payment.authorization.nonce.toLowerCase() && order.tokenAddress.toLowerCase() === input.tokenAddress.toLowerCase();
    return { order: samePaymentKey ? replayOf(order, input.payment, input.bodyHash) : earlierUnderId(order, input.bodyHash), replay: true };
  }
  let last = order;
  // Its first pay attempt is recorded while the payment settles (orders/fulfil.ts recordFirstAttempt).
  const firsts = new FirstAttempts(deps, [order]);
  try {
    last = await settle(deps, order, { fresh: true, verifyFirst: input.verifyFirst ?? true });
    if (last.status === "PAID") {
      paid?.(last);
      const vending = startStage("vend");
      last = await fulfil(deps, last, { fresh: true, first: await firsts.take(order) });
      vending();
    }
    return { order: last, replay: false, secret: secret.secret };
  } finally {
    await firsts.withdrawUntaken();
    // An unfinished order goes to the worker at once; a finished one needs no release.
    if (!FINISHED.has(last.status)) await deps.orders.release(order.requestId, order.leaseToken);
  }
}

/**
 * Settles. The facilitator is asked to verify first only when the service's own read at
 * intake found the payer short of the amount (`verifyFirst`): its refusal then names the
 * reason, as it always has, and nothing is broadcast. Otherwise settle alone: the service
 * has made verify's other checks itself, from the chain, before the order (x402/pay.ts),
 * and a facilitator verifies inside its settle anyway (docs/money.md, "One call to the
 * facilitator").
 *
 * A refusal ends in REFUSED; a success, or a settlement the facilitator reports pending
 * (broadcast under a hash, not yet confirmed), waits (up to the ledger wait) for the
 * ledger's payment; no answer, or a ledger that has not caught up, leaves the order
 * SETTLING for the worker. A facilitator that refuses the service itself (credentials,
 * credits, rate limit), or that a fresh request never reached, settled nothing: REFUSED,
 * and the caller is told why (FacilitatorRefusedService).
 */
export async function settle(deps: SettleDeps, order: Order, options: { fresh?: boolean; verifyFirst?: boolean } = {}): Promise<Order> {
  const facilitator = deps.facilitators[order.chain as ChainKey];
  const { payload } = order.payment as unknown as StoredPayment;
  const requirements = order.requirements as unknown as PaymentRequirements;
  if (!facilitator) return (await refuse(deps, order, "no facilitator for this chain")) ?? order;

  if (options.verifyFirst) {
    const verifying = startStage("facilitator verify");
    const verified = await verifyAnswer(() => facilitator.verify(payload, requirements));
    verifying();
    if (verified.kind === "refused-service") return refusedService(deps, order, "verify", verified);
    // Verify submits nothing: no answer to it is a plain "not charged".
    if (verified.kind !== "answered") return unreachable(deps, order, verified.error, options);
    if (!verified.response.isValid) {
      const { invalidReason, invalidMessage } = verified.response;
      return refusedBy(deps, order, invalidReason, invalidMessage, options);
    }
  }

  const settling = startStage("facilitator settle");
  let settleTimed = false;
  // The stage ends once, when the answer or the chain's sighting of the payment comes first.
  const decided = () => {
    if (!settleTimed) settling();
    settleTimed = true;
  };
  const answer = settleAnswer(() => facilitator.settle(payload, requirements));
  const sighted = await sightedFirst(deps, order, answer, decided);
  if (sighted) return sighted;
  const settled = await answer;
  decided();
  if (settled.kind === "refused-service") return refusedService(deps, order, "settle", settled);
  if (settled.kind === "not-sent" && options.fresh) return unreachable(deps, order, settled.error, options);
  if (settled.kind === "not-sent" || settled.kind === "no-answer") {
    // Unclear whether it landed (an earlier settle of this order may have): the worker
    // decides from the chain and the ledger.
    deps.log.warn("facilitator settle gave no answer; the worker will reconcile", { requestId: order.requestId, error: errorText(settled.error) });
    return order;
  }
  const result = settled.response;
  if (isSettlementPending(result)) {
    // Broadcast, not confirmed: it may still land, so the payer is never told it did not.
    // The hash is kept on the order; the ledger decides, as for any settlement.
    deps.log.info("facilitator reports the settlement pending; waiting for the chain", { requestId: order.requestId, txHash: result.transaction || null });
    const pending = result.transaction ? await move(deps, order, ["SETTLING"], "SETTLING", { txHash: result.transaction }) : order;
    return awaitPayment(deps, pending, result.transaction);
  }
  if (result.success) {
    const confirming = startStage("payment confirmed");
    const confirmed = await awaitPayment(deps, order, result.transaction);
    confirming();
    return confirmed;
  }
  return refusedBy(deps, order, result.errorReason ?? "settlement failed", result.errorMessage, options);
}

/**
 * The order's payment as the service's own node shows it, when the node announces its block
 * before the facilitator's answer arrives (chain/settlement-sighting.ts): PAID (or held for
 * review) from the sighted transaction's receipt, by the same predicate and the same exact
 * match as a facilitator-named hash. Undefined when the answer comes first, or the sighted
 * transaction shows nothing of the order's: the facilitator's answer then decides as before.
 * The answer that comes after a sighting is only logged when it disagrees with the chain.
 */
async function sightedFirst(deps: SettleDeps, order: Order, answer: Promise<FacilitatorAnswer<SettleResponse>>, decided: () => void): Promise<Order | undefined> {
  if (x402RailOf(order) !== "authorization" || !order.authNonce) return undefined;
  const chain = order.chain as ChainKey;
  const stop = new AbortController();
  const answered = answer.then(() => undefined);
  const key = { token: order.tokenAddress as Hex, payer: order.payer as Hex, nonce: order.authNonce as Hex };
  try {
    // A search that fails decides nothing: the facilitator's answer does, as before.
    const sighting = sightAuthorization(deps, chain, key, stop.signal, Date.now() + deps.ledgerWaitMs).catch(() => undefined);
    const txHash = await Promise.race([answered, sighting]);
    if (!txHash) return undefined;
    // A sighted transaction that shows nothing of the order's leaves the answer to decide, and
    // the settle stage runs on until it comes.
    const payment = await receiptPaymentOf(deps, order, txHash);
    if (!payment) return undefined;
    decided();
    const confirming = startStage("payment confirmed");
    // A refusal, or another transaction, from a facilitator whose settlement the chain shows:
    // worth an operator's eye (a confused or lying facilitator); no answer at all is not.
    void answer.then((a) => {
      if (a.kind !== "answered") return;
      const { success, transaction, errorReason } = a.response;
      const sameTx = transaction?.toLowerCase() === txHash.toLowerCase();
      if ((!success && !isSettlementPending(a.response)) || (transaction && !sameTx)) {
        deps.log.warn("the facilitator's answer disagrees with the chain, which shows the payment; the chain decides", { requestId: order.requestId, txHash, answer: errorReason ?? transaction ?? null });
      }
    });
    const paid = await settledFromLedger(deps, order, payment, "receipt");
    confirming();
    return paid;
  } finally {
    stop.abort();
  }
}

/**
 * The facilitator refused the payment (at verify, or at settle before or after broadcasting):
 * the chain decides what that means (refused). A fresh Permit2 order refused for want of an
 * allowance tells the payer what to approve: named so by verify, or found so by reading the
 * allowance when settle fails (a facilitator's settle need not check it first; @x402/evm's
 * does not, and answers the failed call).
 */
async function refusedBy(deps: SettleDeps, order: Order, reason: string | undefined, message: string | undefined, options: { fresh?: boolean }): Promise<Order> {
  const after = await refused(deps, order, `facilitator: ${reason ?? "invalid payment"}${message ? ` (${message})` : ""}`);
  if (options.fresh && after.status === "REFUSED" && x402RailOf(after) === "permit2" && (reason === ErrPermit2AllowanceRequired || (await allowanceShort(deps, after)))) {
    throw permit2AllowanceRequired(after);
  }
  return after;
}

/** Whether the payer's Permit2 allowance is below the order's amount now (false when it cannot be read). */
async function allowanceShort(deps: SettleDeps, o: Order): Promise<boolean> {
  const chain = o.chain as ChainKey;
  const client = deployedClientFor(deps.deployments, chain)!;
  return (await permit2ApprovalNeeded(client, o.tokenAddress as Hex, o.payer as Hex, o.amount).catch(() => null)) !== null;
}

/**
 * A facilitator the request never reached, or a verify with no answer: nothing was
 * submitted. For a fresh order the payer is told so, plainly, and this authorization is
 * never settled by the service (if anyone lands it, it is refunded); the worker's retry of
 * an older order leaves it to the next pass.
 */
async function unreachable(deps: SettleDeps, order: Order, error: unknown, options: { fresh?: boolean }): Promise<Order> {
  if (!options.fresh) {
    deps.log.warn("facilitator unreachable; the worker will retry", { requestId: order.requestId, error: errorText(error) });
    return order;
  }
  deps.log.warn("facilitator unreachable; the payment is refused, nothing was submitted", { requestId: order.requestId, error: errorText(error) });
  const moved = await refuse(deps, order, "the facilitator could not be reached; nothing was submitted");
  if (!moved) return order;
  throw new FacilitatorRefusedService("FACILITATOR_UNAVAILABLE", "the facilitator could not be reached, and nothing was charged; sign a new authorization to pay later", {
    request_id: moved.requestId,
    charged: false,
    retry_after_seconds: 30,
  });
}

/**
 * The facilitator's PERMIT2_ALLOWANCE_REQUIRED (x402 scheme_exact_evm.md, Permit2 step 2),
 * after the order is REFUSED (nothing moved): the payer is told what to approve. The
 * service checks the allowance itself before it asks (x402/pay.ts), so this is the rare
 * approval withdrawn in between.
 */
function permit2AllowanceRequired(o: Order): ServiceError {
  return new ServiceError("PERMIT2_ALLOWANCE_REQUIRED", `the facilitator found no allowance for Permit2 to move ${o.amount} from ${o.payer}; approve it once, then sign a new permit`, {
    request_id: o.requestId,
    charged: false,
    chain: o.chain,
    approval: permit2Approval(o.tokenAddress as Hex, o.amount, null),
  });
}

/** Thrown after an order is REFUSED because the facilitator refused the service (401, 402, 429): the payer's answer. */
export class FacilitatorRefusedService extends ServiceError {}

/**
 * The facilitator refused the service itself: nothing was submitted, so the order is
 * REFUSED (its authorization is still watched until it expires, as every refusal's is) and
 * the payer is told, with a code of its own, that nothing was charged. Operators get a log
 * line and a metric: 401 and 402 need them (a key, credits); 429 passes.
 */
async function refusedService(
  deps: Pick<FlowDeps, "orders" | "metrics" | "log">,
  order: Order,
  operation: "verify" | "settle",
  refusal: { status: ServiceRefusalStatus; detail: string },
): Promise<Order> {
  const code = SERVICE_REFUSALS[refusal.status];
  const what = {
    401: "refused the service's credentials",
    402: "has no settlement credits left for this service",
    429: "is rate-limiting this service",
  }[refusal.status];
  deps.metrics.facilitatorRefusals.inc({ chain: order.chain, operation, status: String(refusal.status) });
  const line = { requestId: order.requestId, chain: order.chain, operation, status: refusal.status, error: refusal.detail };
  if (refusal.status === 429) deps.log.warn("facilitator rate-limited the service; the payment was not settled", line);
  else deps.log.error(`facilitator ${what}; no payment settles until an operator acts (FACILITATOR_API_KEY_${order.chain}, credits)`, line);
  const reason = `the ${order.chain} facilitator ${what} (${refusal.status}); nothing was settled`;
  const moved = await refuse(deps, order, reason);
  if (!moved) return order;
  throw new FacilitatorRefusedService(code, `${reason}, and nothing was charged; sign a new authorization to pay later`, {
    request_id: moved.requestId,
    charged: false,
    // Celo documents the 429 but not its window: a minute is a guess, stated as one.
    ...(refusal.status === 429 ? { retry_after_seconds: 60 } : {}),
  });
}

/**
 * The facilitator refused. If the nonce is already spent on chain (someone settled this very
 * authorization first, or spent the nonce on another one), the ledger decides: exactly the
 * order's payment makes it PAID, anything else NEEDS_REVIEW, and until it shows, SETTLING
 * for the worker. Otherwise nothing has moved: REFUSED.
 */
async function refused(deps: SettleDeps, order: Order, reason: string): Promise<Order> {
  const onChain = await authorizationOnChain(deps, order).catch(() => undefined);
  if (!onChain) return order; // the chain could not be read: the worker decides later
  if (onChain.used) return awaitPayment(deps, order, order.txHash ?? undefined);
  const moved = await refuse(deps, order, reason);
  if (!moved) deps.log.warn("facilitator refused a payment whose earlier settlement is still pending; waiting for the chain", { requestId: order.requestId, reason });
  return moved ?? order;
}

/**
 * The settlement's own receipt first: the facilitator's hash leads to it, the service's own
 * node holds it, and the ledger's predicate finds the order's payment in it or nothing
 * (chain/receipt-payment.ts). A hash that leads nowhere of ours (another transaction, one
 * that reverted, none at all) proves nothing, and the ledger decides as before.
 */
async function awaitPayment(deps: SettleDeps, order: Order, txHash: string | undefined): Promise<Order> {
  const deadline = Date.now() + deps.ledgerWaitMs;
  if (txHash && /^0x[0-9a-fA-F]{64}$/.test(txHash)) {
    const payment = await receiptPaymentOf(deps, order, txHash as Hex);
    if (payment) return settledFromLedger(deps, order, payment, "receipt");
  }
  // One wait in all: what the receipt's wait used is not waited again.
  return awaitLedgerPayment(deps, order, isPaymentOf(order), Math.max(0, deadline - Date.now()));
}

/** The order's payment in transaction `txHash`, as the receipt on the service's own node shows it (chain/receipt-payment.ts); undefined if none. */
function receiptPaymentOf(deps: SettleDeps, order: Order, txHash: Hex): Promise<LedgerPayment | undefined> {
  return orderPaymentIn(deps, order, txHash, deps.ledgerWaitMs, (err) =>
    deps.log.warn("could not read a settlement's receipt; waiting for the facilitator or the ledger", { requestId: order.requestId, error: errorText(err) }),
  );
}

/** Waits for the ledger to show the payment; PAID (or NEEDS_REVIEW) once it does, unchanged if it does not in time. */
async function awaitLedgerPayment(deps: SettleDeps, order: Order, ours: (p: LedgerPayment) => boolean, waitMs = deps.ledgerWaitMs): Promise<Order> {
  const read = () => ledgerPaymentOf(deps, order);
  const shown = await deps.ledger.awaitPayment(
    ours,
    read,
    waitMs,
    (err) => deps.log.warn("ledger unreachable while waiting for an x402 payment", { requestId: order.requestId, error: errorText(err) }),
  );
  const payment = shown && (await awaitConfirmations(deps, order.chain, shown, read, deps.ledgerWaitMs));
  return payment ? settledFromLedger(deps, order, payment) : ((await deps.orders.get(order.requestId)) ?? order);
}

/**
 * A SETTLING order whose request gave up (the worker holds its lease). The chain is read
 * first and the ledger's position next, so "no payment in the ledger" is only believed of a
 * ledger that has indexed the block the chain was read at.
 */
export async function reconcileSettling(deps: FlowDeps, o: Order): Promise<void> {
  const onChain = await authorizationOnChain(deps, o);
  const indexed = await deps.ledger.indexedBlock(chainInfo(o.chain).chainId);
  const payment = await ledgerPaymentOf(deps, o);
  if (payment) {
    const order = await settledFromLedger(deps, o, payment);
    if (order.status === "PAID") await fulfil(deps, order);
    return;
  }
  if (!onChain.used) {
    if (o.authValidBefore! > onChain.timestamp) {
      // A facilitator refusing the service leaves the order REFUSED: nothing more to do here.
      const order = await settle(deps, o).catch((err: unknown) => {
        if (err instanceof FacilitatorRefusedService) return undefined;
        throw err;
      });
      if (order?.status === "PAID") await fulfil(deps, order);
    } else {
      await deps.orders.transition(o.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "the authorization expired unsettled" });
    }
    return;
  }
  if (indexed !== null && indexed >= onChain.block) {
    // The nonce is spent and the ledger, caught up past it, shows no payment under it. For
    // EIP-3009: cancelled, or spent on another authorization with the same nonce; the ledger
    // books every EIP-3009 transfer into BillPay, directly or through a contract, so nothing
    // reached BillPay and nothing is owed: closed as not charged, nothing left for a person.
    // For Permit2 the ledger's payments alone cannot tell: see spent-permit2.ts.
    if (x402RailOf(o) === "permit2") await closeSpentPermit2(deps, o, ["SETTLING"]);
    else await deps.orders.transition(o.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "the authorization's nonce was spent on chain (cancelled, or used elsewhere) and no payment reached BillPay under it; nothing was charged" });
  }
  // Otherwise the ledger is behind: a later pass decides.
}

/**
 * Closes REFUSED orders whose authorization has expired: once the chain's clock is past it
 * and the ledger has indexed that far, it can never land. Whatever did land meanwhile is
 * refunded (or held for review) instead. Returns how many were closed.
 */
export async function closeExpiredRefusals(deps: FlowDeps, limit = 50): Promise<number> {
  const due = await deps.orders.refusedExpired(BigInt(Math.floor(Date.now() / 1000)), limit);
  let closed = 0;
  for (const o of due) {
    try {
      const onChain = await authorizationOnChain(deps, o);
      if (onChain.timestamp < o.authValidBefore!) continue; // the chain's clock is behind ours
      const indexed = await deps.ledger.indexedBlock(chainInfo(o.chain).chainId);
      if (indexed === null || indexed < onChain.block) continue;
      const payment = await ledgerPaymentOf(deps, o);
      if (payment) {
        await landedAfterRefusal(deps, o, payment);
      } else if (onChain.used && x402RailOf(o) === "permit2") {
        await closeSpentPermit2(deps, o, ["REFUSED"], `${o.failureReason ?? "refused"}; `);
      } else {
        const reason = onChain.used ? "its nonce went to something else; nothing reached BillPay" : "the authorization expired unsettled";
        await deps.orders.transition(o.requestId, ["REFUSED"], "PAYMENT_FAILED", { failureReason: `${o.failureReason ?? "refused"}; ${reason}` });
      }
      closed++;
    } catch (err) {
      deps.log.warn("could not close a refused order; will retry", { requestId: o.requestId, error: errorText(err) });
    }
  }
  return closed;
}
