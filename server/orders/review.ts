/**
 * An operator's decisions on what the service holds for them, from the console or
 * `npm run review`. Nothing here trusts the operator's word about money: every action is
 * checked against what the ledger shows under the payment's own key (an x402 order's
 * (chain, token, payer, nonce), a pull's order id), read when the action is taken, and
 * anything it does not allow is refused with nothing moved.
 *
 * A NEEDS_REVIEW order can be
 *   - refunded: only when the ledger shows a payment under its key, by the order's payer in
 *     its token, and never a bill whose delivery stands or may yet (an attempt, asked again
 *     now, delivered or still pending: a refund would give it away); exactly what the ledger
 *     shows paid is refunded (never the order's own amount when that differs, never anything
 *     when the ledger shows nothing), through the usual refund path (fulfil.ts `refund`:
 *     BillPay's refund / refundAuthorization with the refunder key, within the refund
 *     budget; BillPay itself refunds a key once, and an
 *     x402 refund at most the signed authorization's value). NEEDS_REVIEW -> REFUNDING ->
 *     REFUNDED. The amount approved is kept with the action (review_action.amount): it is
 *     the only figure the refund path sends for an order whose payment is not exactly its
 *     own, and only while the ledger still shows exactly that. When the ledger already shows
 *     the key refunded in full, the order is marked REFUNDED with that refund, and nothing is sent.
 *   - served: only when the ledger shows a payment of exactly the order's amount, payer and
 *     token (`paymentMismatch` is null), confirmed as deep as any payment must be, and not
 *     refunded; NEEDS_REVIEW -> PAID, then vended by `fulfil` (a vend that fails is refunded
 *     as usual, and one the biller holds again comes back to review).
 *   - closed: no money moves. Only when the ledger, caught up to the chain's head, shows no
 *     payment under the key, and for a Permit2 order (a permit settled through another
 *     contract pays BillPay unseen by the ledger): with its nonce spent, only when no transfer
 *     of its amount from its payer into BillPay is unaccounted for (spent-permit2.ts); with it
 *     unspent, only once the permit has lapsed by the chain's clock: NEEDS_REVIEW ->
 *     PAYMENT_FAILED (final, "not charged"). Should a payment land under the key later, the
 *     ledger pass refunds it, as for any written-off order whose bill was not vended (one
 *     indexed while the close runs is taken up by the close). With a payment shown, closing is refused: that money must be
 *     refunded or served.
 *   - held for a refund by hand, then closed as refunded by hand naming the refund's
 *     transaction: only a Permit2 order held because its payer sent BillPay a transfer of its
 *     amount that no payment accounts for (it may be the permit settled through another
 *     contract, which the service cannot refund through BillPay with nothing booked under the
 *     key), and never one whose delivery stands. The hold comes before anything is sent and
 *     takes one such transfer, as deep as a payment must be (one transfer is taken once, an
 *     order held once: so it is given back once however many orders or operators it met).
 *     The operator then sends the amount from BillPay or its admin; the transaction is checked
 *     as an orphan's hand refund is, must come after the transfer taken, and closes one thing
 *     only: NEEDS_REVIEW -> REFUNDED. A transfer taken holds no other order.
 * An x402 payment no order accounts for (orphan_payment, NEEDS_REVIEW) cannot be refunded by
 * the service, which never held the payer's signed authorization (refundAuthorization needs
 * it), unless the payer offers it again (a refusal is then kept, and the ledger pass refunds
 * it). An operator decides it, with a reason: held for a refund by hand before sending one
 * (REFUNDING_BY_HAND: the service then neither refunds it nor lets an order take it, so it is
 * refunded once); then closed as refunded by hand, when the operator gives the transaction,
 * checked on chain to have succeeded after the payment, to carry a transfer of exactly the
 * payment's amount of its token to its payer from BillPay or its admin, and to be no refund of
 * another payment (one transaction closes one payment) -> REFUNDED; or closed as kept, with the reason
 * saying why -> RESOLVED. Either way nothing is sent by the service.
 *
 * Two decisions never run on one order at once: each holds the order's lease while it runs,
 * and a second is refused (store.ts `claim`).
 *
 * Every action is recorded in review_action with who (the operator's name, or "local"), when,
 * why (a reason is required) and what came of it, refusals included.
 */
import { decodeEventLog, erc20Abi, isAddress, isHash, type Hex } from "viem";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { deployedClientFor, publicClientFor } from "../../lib/chain-client.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { amountIn, describeAmount } from "../../lib/token-amounts.ts";
import { rpcUrlFor } from "../../lib/deployments.ts";
import type { Db } from "../db.ts";
import { ServiceError } from "../errors.ts";
import { paymentMismatch, x402RailOf, type LedgerInflow, type LedgerPayment } from "../ledger-client.ts";
import { errorText } from "../log-safety.ts";
import { authorizationOnChain } from "../chain/payment-state.ts";
import { refundsInSight } from "./refunds-in-sight.ts";
import type { StoredPayment } from "../x402-protocol/payment.ts";
import { fulfil, otherAttemptsNow, refund, type FlowDeps } from "./fulfil.ts";
import { deepEnough } from "./payment-watch.ts";
import { inflowsText, spentPermit2Verdict } from "./spent-permit2.ts";
import { landedAfterRefusal } from "./x402-flow.ts";
import { ORDER_HOLDS_ORPHAN } from "./ledger-pass.ts";
import { ledgerUnderKey, newestRefund, type LedgerView } from "./ledger-view.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND, transitionIn, type Order } from "./store.ts";

export const REVIEW_ACTIONS = ["refund", "serve", "close", "hold"] as const;
export type ReviewAction = (typeof REVIEW_ACTIONS)[number] | "hold-orphan" | "close-orphan";

/**
 * What came of an action: DONE (it took effect, final as decided), ACCEPTED (the order moved
 * as decided and the worker finishes it: a refund waiting for the budget, a bill the biller
 * is still working on), FAILED (it was tried and the order came back to review: BillPay
 * refused the refund, the biller held the bill again), REFUSED (nothing moved).
 */
export type ReviewOutcome = "PENDING" | "DONE" | "ACCEPTED" | "FAILED" | "REFUSED";

export interface ReviewRecord {
  id: string;
  request_id: string | null;
  orphan_key: string | null;
  action: ReviewAction;
  operator: string;
  reason: string;
  amount: string | null;
  tx_hash: string | null;
  /** A hold for a refund by hand: the ledger's id of the payer's transfer into BillPay it takes to give back. */
  hand_refund_inflow: string | null;
  outcome: ReviewOutcome;
  detail: string | null;
  status_before: string | null;
  status_after: string | null;
  created_at: string;
  updated_at: string;
}

const RECORD_COLUMNS = `id::text AS id, request_id, orphan_key, action, operator, reason, amount::text AS amount, tx_hash, hand_refund_inflow, outcome, detail,
  status_before, status_after, created_at::text AS created_at, updated_at::text AS updated_at`;

/** The longest reason kept. */
export const MAX_REASON = 500;

/** review_action: every operator's action and what came of it. */
export class ReviewRecords {
  constructor(private readonly db: Db) {}

  async start(r: { requestId?: string; orphanKey?: string; action: ReviewAction; operator: string; reason: string; amount?: bigint; txHash?: string; statusBefore?: string }): Promise<string> {
    const [row] = await this.db.query<{ id: string }>(
      `INSERT INTO review_action (request_id, orphan_key, action, operator, reason, amount, tx_hash, outcome, status_before)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8) RETURNING id::text AS id`,
      [r.requestId ?? null, r.orphanKey ?? null, r.action, r.operator, r.reason, r.amount?.toString() ?? null, r.txHash ?? null, r.statusBefore ?? null],
    );
    return row!.id;
  }

  /**
   * Records what came of the action, once: a record already decided (a hold, a close by hand,
   * written with the move they made) is answered as it stands, never rewritten.
   */
  async finish(id: string, outcome: Exclude<ReviewOutcome, "PENDING">, detail: string, statusAfter?: string | null, txHash?: string | null): Promise<ReviewRecord> {
    const [row] = await this.db.query<ReviewRecord>(
      `UPDATE review_action SET outcome = $2, detail = $3, status_after = $4, tx_hash = COALESCE($5, tx_hash), updated_at = now()
       WHERE id = $1 AND outcome = 'PENDING' RETURNING ${RECORD_COLUMNS}`,
      [id, outcome, detail, statusAfter ?? null, txHash ?? null],
    );
    return row ?? (await this.get(id))!;
  }

  forOrder(requestId: string): Promise<ReviewRecord[]> {
    return this.db.query<ReviewRecord>(`SELECT ${RECORD_COLUMNS} FROM review_action WHERE request_id = $1 ORDER BY review_action.id`, [requestId]);
  }

  forOrphan(key: string): Promise<ReviewRecord[]> {
    return this.db.query<ReviewRecord>(`SELECT ${RECORD_COLUMNS} FROM review_action WHERE orphan_key = $1 ORDER BY review_action.id`, [key]);
  }

  get(id: string): Promise<ReviewRecord | undefined> {
    if (!/^\d{1,18}$/.test(id)) return Promise.resolve(undefined);
    return this.db.query<ReviewRecord>(`SELECT ${RECORD_COLUMNS} FROM review_action WHERE id = $1`, [id]).then((r) => r[0]);
  }

  /** Every action, oldest first (for the audit: few, one per operator's decision). */
  all(): Promise<ReviewRecord[]> {
    return this.db.query<ReviewRecord>(`SELECT ${RECORD_COLUMNS} FROM review_action ORDER BY review_action.id`);
  }
}

export type ReviewDeps = FlowDeps & { reviews: ReviewRecords; db: Db };

/** The order's key, as an operator reads it. */
export function keyText(o: Order): string {
  return o.rail === "pull" ? `pull ${o.onchainOrderId} on ${o.chain}` : `x402 (${o.chain}, ${o.tokenAddress}, ${o.payer}, ${x402RailOf(o) === "permit2" ? "Permit2 nonce" : "nonce"} ${o.authNonce})`;
}

/**
 * Whether each action would be taken on the order as the ledger shows it now: null when it
 * would, else why not. (The actions check again, from a fresh read, when taken; a close also
 * waits for the ledger to reach the chain's head first.)
 */
/** An amount in the order's own token, as an operator reads it. */
const inOrderToken = (o: Order, units: bigint | string) => amountIn(o.chain, o.token, units);

export function whyNot(o: Order, view: LedgerView): Record<(typeof REVIEW_ACTIONS)[number], string | null> {
  if (o.status !== "NEEDS_REVIEW") {
    const why = `the order is ${o.status}, not NEEDS_REVIEW: only an order held for review is decided by an operator`;
    return { refund: why, serve: why, close: why, hold: why };
  }
  const p = view.payment;
  const shown = p ? `the ledger shows ${inOrderToken(o, p.amount)} paid under the order's key (transaction ${p.txHash})` : "";
  let refundWhy: string | null = null;
  if (!p) refundWhy = `the ledger shows no payment under the order's key (${keyText(o)}): there is nothing to refund; close it instead`;
  else if (BigInt(p.amount) <= 0n) refundWhy = `${shown}: nothing to refund`;
  else if (paymentMismatch({ ...o, amount: BigInt(p.amount) }, p)) refundWhy = `${paymentMismatch({ ...o, amount: BigInt(p.amount) }, p)}: the refund would go to whoever paid, which is not the order's payer or token; not done from here`;
  else if (view.refunded > 0n && view.refunded < BigInt(p.amount)) refundWhy = `the ledger shows ${inOrderToken(o, view.refunded)} of the ${inOrderToken(o, p.amount)} paid refunded already; BillPay refunds a key once, so the rest cannot be refunded through it`;
  else if (o.rail === "x402" && view.refunded === 0n && BigInt(p.amount) > BigInt((o.payment as unknown as StoredPayment).authorization.value)) {
    refundWhy = `${shown}, more than the payer's signed authorization the service holds (${inOrderToken(o, (o.payment as unknown as StoredPayment).authorization.value)}): BillPay refunds an x402 payment by at most that authorization's value`;
  }
  let serveWhy: string | null = null;
  if (!p) serveWhy = `the ledger shows no payment under the order's key (${keyText(o)}): nothing was paid to serve`;
  else if (paymentMismatch(o, p)) serveWhy = `${paymentMismatch(o, p)}: only a payment of exactly the order's amount, payer and token is served`;
  else if (view.refunded > 0n) serveWhy = `the ledger shows ${view.refunded} refunded under the order's key: the payment went back`;
  const closeWhy = p ? `${shown}: closing would keep the payer's money for nothing; refund it or serve it` : null;
  const holdWhy =
    o.rail !== "x402" || x402RailOf(o) !== "permit2"
      ? "a hold for a refund by hand is only for a Permit2 order held for its payer's transfer into BillPay that no payment accounts for"
      : p
        ? `${shown}: refund it or serve it`
        : null;
  return { refund: refundWhy, serve: serveWhy, close: closeWhy, hold: holdWhy };
}

export interface ReviewResult {
  record: ReviewRecord;
  order?: Order;
}

/** Refused with nothing moved: the action is recorded as REFUSED with why. */
class Refused extends Error {}

/**
 * Waits (up to `waitMs`) until the ledger has indexed the chain's head as read now: only then
 * is "the ledger shows no payment" believed. False if it does not get there in time.
 */
async function ledgerAtHead(deps: FlowDeps, chain: ChainKey, waitMs = 15_000): Promise<boolean> {
  const d = deps.deployments.chains[chain];
  if (!d) throw new Refused(`the service has no deployment on ${chain}`);
  const head = await publicClientFor(chain, rpcUrlFor(chain, d)).getBlockNumber();
  return (await deps.ledger.reachBlock(chainInfo(chain).chainId, head, waitMs)).reached;
}

/** An operator's decision on an order; `refundTxHash` only with a close, as refunded by hand. */
type DecisionInput = { requestId: string; action: (typeof REVIEW_ACTIONS)[number]; reason: string; operator: string; refundTxHash?: string };

/**
 * Refunds, serves, closes or holds a NEEDS_REVIEW order, as `operator` decided for `reason`.
 * The order is claimed first, and held while the decision runs, so what is read stays so: a
 * second decision, the biller's webhook and the payment watch wait while one holds it, and the
 * worker leaves a leased order alone. The record's "before" is the order as claimed.
 */
export async function resolveOrder(deps: ReviewDeps, input: DecisionInput): Promise<ReviewResult> {
  const read = await deps.orders.get(input.requestId);
  if (!read) throw new ServiceError("ORDER_NOT_FOUND", `no order ${input.requestId}`);
  const claimed = await deps.orders.claim(read.requestId, deps.leaseSeconds, "decision");
  const order = claimed ?? read;
  const line = { requestId: order.requestId, action: input.action, operator: input.operator };
  const release = async () => {
    if (!claimed) return;
    await deps.orders.release(claimed.requestId, claimed.leaseToken).catch((err: unknown) => {
      // The lease ends on its own (ORDER_LEASE_SECONDS); the decision stands as recorded.
      deps.log.warn("could not release an order after an operator's decision; its lease runs out", { ...line, error: errorText(err) });
    });
  };
  const id = await deps.reviews
    .start({ requestId: order.requestId, action: input.action, operator: input.operator, reason: input.reason, txHash: input.refundTxHash?.toLowerCase(), statusBefore: order.status })
    .catch(async (err: unknown) => {
      await release();
      throw err;
    });
  try {
    if (!claimed) {
      throw new Refused(
        order.status === "NEEDS_REVIEW"
          ? "another decision on this order, or the biller's webhook or the payment watch, is at work on it: nothing was done; look again shortly"
          : whyNot(order, { payment: null, refunds: [], refunded: 0n })[input.action]!,
      );
    }
    const result = await decide(deps, claimed, input, id);
    deps.log.warn("an operator decided an order held for review", { ...line, outcome: result.record.outcome, status: result.record.status_after });
    return result;
  } catch (err) {
    const now = (await deps.orders.get(order.requestId)) ?? order;
    if (!(err instanceof Refused) && now.status !== order.status) {
      // It moved (PAID, REFUNDING) before the error: the worker finishes it from there.
      deps.log.error("an operator's action on an order failed after the order moved; the worker finishes it", { ...line, status: now.status, error: errorText(err) });
      return { record: await deps.reviews.finish(id, "ACCEPTED", `the order moved to ${now.status}, then: ${errorText(err)}; the worker finishes it`, now.status), order: now };
    }
    const detail = err instanceof Refused ? err.message : `nothing was moved: ${errorText(err)}`;
    deps.log.warn("an operator's action on an order was refused", { ...line, why: detail });
    return { record: await deps.reviews.finish(id, "REFUSED", detail, now.status), order: now };
  } finally {
    await release();
  }
}

/**
 * Serving an order, or closing it as never paid, is refused while a refund of its payment may
 * still land that the ledger cannot show yet: served, the payer would have the bill and the
 * refund; closed, a refund landing later (the payer's cancelAuthorization spends the nonce
 * BillPay's refund asks for) would pay out what BillPay never kept. A refund unmined in the
 * node's pool, or in no pool under a refunder nonce still unused (voided here, so that the
 * next decision can be taken). A hold for a refund by hand likewise: the payer would have the
 * payment back twice. Serving and holding are also refused for a refund reorganised off the
 * chain (it may land again) and for one BillPay holds already, a block ahead of the ledger;
 * closing is not: BillPay refunds a key once, so a refund that stands can never be joined by
 * another, and a close is what an order whose refund stands without its payment needs.
 */
async function refuseWhileRefundMayLand(deps: ReviewDeps, order: Order, action: "serve" | "close" | "hold"): Promise<void> {
  const chain = order.chain as ChainKey;
  const harm = {
    serve: "serving it could give away both the bill and the refund",
    close: "closing it as never paid could leave a refund paid out of BillPay without its payment",
    hold: "refunding it by hand could give the payment back twice",
  }[action];
  const lost = action !== "close" && (await deps.refundWatches.lostRefund(order.requestId));
  if (lost) {
    throw new Refused(
      `its refund (transaction ${lost}) was reorganised off the chain and may still land (anyone can submit it while the refunder's nonce is not past it): ${harm}; refund it again instead (BillPay refunds a key once)`,
    );
  }
  const seen = await refundsInSight(deps, order);
  if (seen && "pending" in seen) {
    throw new Refused(`its refund (transaction ${seen.pending}) is waiting to be mined on ${chain}: ${harm}; decide once it is mined or gone${action === "serve" ? ", or refund it (BillPay refunds a key once)" : ""}`);
  }
  if (seen && "landable" in seen) {
    const { signer, nonce } = seen.landable;
    const depth = deps.confirmations[chain] ?? 0;
    const deep = depth === 0 ? "mined" : `${depth} blocks deep`;
    const next = {
      sent: `the refunder now sends itself nothing under that nonce, which voids it; decide again once that is ${deep}`,
      held: "another transaction of the refunder's is waiting to be mined under that nonce, which voids it; decide again once it is mined",
      used: `that nonce has just been used; decide again once it is ${deep}`,
      "not ours": "that key is another instance's: decide from that instance, which voids it, or once its nonce is used (by that instance, or by hand with that key)",
      unsent: "the refunder could not send the transaction that voids it; decide again shortly",
    }[seen.voiding];
    throw new Refused(`a refund signed for it under nonce ${nonce} of ${signer} is in no pool and not mined, but may still be sent by anyone who saw it until that nonce is used: ${harm}; ${next}`);
  }
  if (seen && action !== "close") {
    throw new Refused(
      `BillPay on ${chain} holds its payment refunded already (the service's node shows it; the ledger may not yet): ${action === "serve" ? "serving it would give the bill away" : "there is nothing left to refund by hand"}`,
    );
  }
}

async function decide(deps: ReviewDeps, order: Order, input: DecisionInput, id: string): Promise<ReviewResult> {
  const chain = order.chain as ChainKey;
  const byHand = input.refundTxHash as Hex | undefined;
  if (byHand !== undefined && input.action !== "close") throw new Refused("only a close names a refund transaction (closed as refunded by hand)");
  // An order held for a refund by hand is closed by that refund and nothing else: its
  // transfer, taken by the hold, no longer holds it by the verdict's reading (spent-permit2.ts).
  const held = await deps.orders.handRefundInflow(order.requestId);
  if (held && !(input.action === "close" && byHand !== undefined)) {
    throw new Refused(
      `the order is held for a refund by hand of its payer's transfer ${transactionOf(held)}: send exactly ${inOrderToken(order, order.amount)} to ${order.payer} from BillPay (withdraw) or its admin, then close it with that transaction; nothing else closes it`,
    );
  }
  if ((input.action === "close" || input.action === "hold") && order.status !== "NEEDS_REVIEW") throw new Refused(whyNot(order, { payment: null, refunds: [], refunded: 0n })[input.action]!);
  // Every decision reads the ledger as the chain is now: "no payment" (close, hold) is believed
  // only then, and a payment or refund the service confirmed from its own node's receipt a
  // block ago (serve, refund) may not be indexed yet, which would refuse them for nothing.
  // Within half the decision's lease: the order stays held while the decision runs.
  if (!(await ledgerAtHead(deps, chain, Math.min(15_000, deps.leaseSeconds * 500)))) throw new Refused(`the ledger has not indexed ${chain} up to its head yet: what was paid and refunded under the order's key cannot be told; try again shortly`);
  const view = await ledgerUnderKey(deps, order).catch((err: unknown) => {
    throw new Refused(`the ledger could not be read (${errorText(err)}); nothing was moved`);
  });
  const why = whyNot(order, view)[input.action];
  if (why) throw new Refused(why);
  // After every refusal that reads only: this one may send a transaction (a void).
  if (input.action === "serve" || input.action === "close" || input.action === "hold") await refuseWhileRefundMayLand(deps, order, input.action);
  if (input.action === "hold") return holdForHandRefund(deps, order, id);
  if (byHand !== undefined) return closeRefundedByHand(deps, order, id, byHand);
  const permit2 = input.action === "close" && x402RailOf(order) === "permit2" ? await authorizationOnChain(deps, order) : undefined;
  if (permit2 && !permit2.used && order.authValidBefore !== null && permit2.timestamp < order.authValidBefore) {
    // A permit still valid may yet be settled through another contract, which the ledger
    // would not book under the key: no later pass would refund it, so "not charged" must wait.
    throw new Refused(
      `the order's Permit2 permit can still be settled until ${new Date(Number(order.authValidBefore) * 1000).toISOString()} (by the chain's clock), and one settled through another contract would go unseen: close it after that`,
    );
  }
  if (permit2?.used) {
    // The ledger books a Permit2 payment only from a call straight to x402's proxy: with the
    // nonce spent, "not charged" holds only as spent-permit2.ts reads it (the nonce spent as
    // deep as a payment must be, the ledger at that block, no unbooked transfer of the amount).
    const v = await spentPermit2Verdict(deps, order).catch((err: unknown) => {
      throw new Refused(`the chain or the ledger could not be read (${errorText(err)}); nothing was moved`);
    });
    if (v.verdict === "wait") throw new Refused(`the order's Permit2 nonce is spent on chain, but ${v.why}: whether it paid BillPay cannot be told yet; try again shortly`);
    if (v.verdict === "held") {
      throw new Refused(
        `the order's Permit2 nonce is spent on chain and its payer sent BillPay transfers of the order's amount that no payment accounts for (${inflowsText(v.found)}): one may be this permit settled through another contract, so it cannot be closed as not charged; it stays held. To give it back, hold it for a refund by hand (before sending anything), send the amount, then close it with that transaction`,
      );
    }
  }
  // The payer reads the order's reason: it names the decision, never the operator or his note
  // (those are kept with the review action, for operators).
  const by = `review #${id}`;
  switch (input.action) {
    case "close": {
      const closed = await deps.orders.transition(order.requestId, ["NEEDS_REVIEW"], "PAYMENT_FAILED", {
        failureReason: `closed by an operator (${by}); the ledger shows no payment under the order's key`,
      });
      if (!closed) throw new Refused("the order moved on meanwhile; nothing was done");
      // A payment indexed between the read above and the move was passed over by the ledger
      // pass while the order was held: it is taken up here, as a landing after a write-off.
      const late = order.rail === "pull" ? null : (await ledgerUnderKey(deps, closed).catch(() => null))?.payment;
      if (late) {
        const after = await landedAfterRefusal(deps, closed, late, true);
        return { record: await deps.reviews.finish(id, "ACCEPTED", `closed, but a payment landed under the key meanwhile (transaction ${late.txHash}): ${after.status}`, after.status), order: after };
      }
      return { record: await deps.reviews.finish(id, "DONE", "closed: PAYMENT_FAILED, nothing was charged and nothing moved; a payment landing under the key later is refunded by the ledger pass (held for an operator instead when the bill was vended)", closed.status), order: closed };
    }
    case "serve": {
      const p = view.payment!;
      await refuseShallow(deps, order.chain, p);
      const paid = await deps.orders.transition(order.requestId, ["NEEDS_REVIEW"], "PAID", { txHash: p.txHash, failureReason: `served by an operator (${by})` });
      if (!paid) throw new Refused("the order moved on meanwhile; nothing was done");
      await deps.watches.record(paid, p);
      const after = await fulfil(deps, paid);
      const outcome = after.status === "SUCCESS" || after.status === "REFUNDED" ? "DONE" : after.status === "NEEDS_REVIEW" ? "FAILED" : "ACCEPTED";
      const detail =
        after.status === "SUCCESS"
          ? "served: the bill was delivered"
          : after.status === "NEEDS_REVIEW"
            ? `the bill was held for review again: ${after.failureReason ?? ""}`
            : after.status === "REFUNDING" || after.status === "REFUNDED"
              ? `the vend failed and the payment is refunded as usual (${after.status}): ${after.failureReason ?? ""}`
              : `paid; the biller is still working on it (${after.status}): the worker finishes it`;
      return { record: await deps.reviews.finish(id, outcome, detail, after.status, after.refundTxHash), order: after };
    }
    case "refund": {
      const p = view.payment!;
      const paid = BigInt(p.amount);
      if (view.refunded >= paid) {
        // The money went back already (by hand, or a refund the order never heard of): nothing is sent.
        const last = newestRefund(view.refunds)!;
        // Watched as any refund (orders/refund-watch.ts): it may be only a block deep.
        const done = await deps.orders.advance(
          order,
          ["NEEDS_REVIEW"],
          "REFUNDED",
          { failureReason: `refunded, as an operator found (${by}): the ledger already shows ${view.refunded} refunded under the order's key`, refundTxHash: last.txHash },
          deps.refundWatches.recording(order, last.txHash as Hex, BigInt(last.blockNumber), ["NEEDS_REVIEW"]),
        );
        if (!done) throw new Refused("the order moved on meanwhile; nothing was done");
        return { record: await deps.reviews.finish(id, "DONE", `the ledger already shows the payment refunded (${view.refunded}, transaction ${last.txHash}); nothing was sent`, done.status, last.txHash), order: done };
      }
      const stands = await deliveryStands(deps, order);
      if (stands) throw new Refused(stands);
      // As deep as a bill is vended on: an x402 refund asks BillPay only that its nonce be
      // spent, so one sent for a shallow payment stands should a reorganisation put the
      // payer's cancelAuthorization in the payment's place (the automatic refunds wait so too).
      await refuseShallow(deps, order.chain, p);
      // The amount approved is what the ledger shows paid: the refund path sends it, and only while the ledger still shows exactly that.
      await deps.db.query(`UPDATE review_action SET amount = $2 WHERE id = $1`, [id, paid.toString()]);
      const reason = `refunded by an operator (${by})`;
      // A payment of another amount than the order's paid for no bill: no receipt or settlement
      // is ever given for it (paidForItsBill), and its refund draws on the late slice, as a
      // landing the service refused does (the payer sent what was not asked).
      const refunding = await deps.orders.transition(order.requestId, ["NEEDS_REVIEW"], "REFUNDING", { failureReason: reason, ...(paid !== order.amount ? { lateRefund: true } : {}) });
      if (!refunding) throw new Refused("the order moved on meanwhile; nothing was done");
      // Watched afresh (one held after a loss, or never watched: a payment of another amount), as every confirmed payment is.
      await deps.watches.record(refunding, p);
      const after = await refund(deps, refunding, reason, ["REFUNDING"]);
      if (after.status === "REFUNDED") {
        return { record: await deps.reviews.finish(id, "DONE", `refunded ${paid} (what the ledger shows paid under the order's key)`, after.status, after.refundTxHash), order: after };
      }
      if (after.status === "NEEDS_REVIEW") return { record: await deps.reviews.finish(id, "FAILED", `the refund came back to review: ${after.failureReason ?? ""}`, after.status), order: after };
      return { record: await deps.reviews.finish(id, "ACCEPTED", `the refund of ${paid} is under way (${after.status}); the worker sends it: ${after.failureReason ?? ""}`, after.status), order: after };
    }
    default:
      throw new Refused(`unknown action ${String(input.action)}`);
  }
}

const DELIVERED = "the biller delivered this bill (an attempt of it, asked again now, is delivered): a refund would give it away; serve it, or refund it once the biller's answer to that attempt says it was taken back";

/** Refused while the payment is not as deep as a bill is vended on (the confirmations of its chain). */
async function refuseShallow(deps: ReviewDeps, chain: string, p: Pick<LedgerPayment, "chainId" | "blockNumber">): Promise<void> {
  if (await deepEnough(deps, chain, p)) return;
  throw new Refused(`the payment (block ${p.blockNumber}) is not yet as deep as ${deps.confirmations[chain as ChainKey] ?? 0} confirmations; try again shortly`);
}

/**
 * Why a refund would give the bill away, or undefined when it would not (the ledger pass holds
 * such a landing for exactly this). Every attempt is asked again now, by its own id, as the
 * worker does before it refunds a failed bill: an operator's screen may be older than the
 * biller's word. One delivered stands; one still pending may yet deliver. With no attempt, a
 * code kept (before outcomes were) counts as a delivery.
 */
async function deliveryStands(deps: ReviewDeps, order: Order): Promise<string | undefined> {
  const attempts = await deps.attempts.of(order.requestId);
  if (attempts.length === 0) return order.purchasedCode !== null ? DELIVERED : undefined;
  const now = await otherAttemptsNow(deps, attempts);
  if (now.delivered) return DELIVERED;
  if (now.pending) {
    return `the biller answers pay attempt ${now.pending.attempt.attempt} (${now.pending.attempt.billerRequestId}) as pending, or did not answer: it may yet deliver the bill, so nothing is refunded until it answers delivered, failed or taken back; try again later`;
  }
  return undefined;
}

/**
 * Holds a Permit2 order for a refund by hand of its payer's transfer into BillPay, before
 * anything is sent: the decision takes that transfer (the oldest one no hold has taken, as deep
 * as a payment must be), in the statement that records it. One transfer is taken once and an
 * order held once (review_action's unique indexes), so however many orders one transfer held,
 * and however many operators look at them, it is given back once; once taken, it holds no other
 * order (spent-permit2.ts). The order stays NEEDS_REVIEW until closed with the refund.
 */
async function holdForHandRefund(deps: ReviewDeps, order: Order, id: string): Promise<ReviewResult> {
  const stands = await deliveryStands(deps, order);
  if (stands) throw new Refused(stands);
  const nonce = await authorizationOnChain(deps, order);
  if (!nonce.used) throw new Refused("the order's Permit2 nonce is not spent on chain: nothing can have been settled under it; close it once its permit has lapsed");
  const v = await spentPermit2Verdict(deps, order).catch((err: unknown) => {
    throw new Refused(`the chain or the ledger could not be read (${errorText(err)}); nothing was moved`);
  });
  if (v.verdict === "wait") throw new Refused(`the order's Permit2 nonce is spent on chain, but ${v.why}; try again shortly`);
  if (v.verdict === "not-charged") throw new Refused("no transfer of the order's amount from its payer into BillPay is left unaccounted for: there is nothing to give back; close it (not charged)");
  const deep: LedgerInflow[] = [];
  for (const t of v.open) if (await deepEnough(deps, order.chain, t)) deep.push(t);
  const inflow = deep.sort((x, y) => Number(BigInt(x.blockNumber) - BigInt(y.blockNumber)))[0];
  if (!inflow) throw new Refused(`its payer's transfers into BillPay (${inflowsText(v.found)}) are not yet as deep as ${deps.confirmations[order.chain as ChainKey] ?? 0} confirmations; try again shortly`);
  const detail = `held for a refund by hand of its payer's transfer ${inflow.txHash}: send exactly ${inOrderToken(order, order.amount)} to ${order.payer} from BillPay (withdraw) or its admin, then close it with that transaction`;
  try {
    const [record] = await deps.db.query<ReviewRecord>(
      `UPDATE review_action SET hand_refund_inflow = $2, outcome = 'DONE', detail = $3, status_after = $4, updated_at = now() WHERE id = $1 RETURNING ${RECORD_COLUMNS}`,
      [id, inflow.id, detail, order.status],
    );
    return { record: record!, order };
  } catch (err) {
    // SQLSTATE 23505: another hold took the transfer, or held this order, first.
    if ((err as { code?: string }).code === "23505") throw new Refused(`the transfer ${inflow.txHash} was taken by another hold, or this order was held, meanwhile; look again`);
    throw err;
  }
}

/**
 * Closes a held Permit2 order as refunded by hand: the refund's transaction, checked on chain
 * to give back exactly the order's amount to its payer from BillPay or its admin, after the
 * transfer its hold took, and to refund no other key. The record (its transaction unique among
 * hand refunds, orphans' too) and the move to REFUNDED are one database transaction.
 */
async function closeRefundedByHand(deps: ReviewDeps, order: Order, id: string, txHash: Hex): Promise<ReviewResult> {
  const taken = await deps.orders.handRefundInflow(order.requestId);
  if (!taken) {
    throw new Refused(
      "a close names a refund transaction only for a Permit2 order held for a refund by hand of its payer's transfer into BillPay (hold it first, before sending anything); this one is not held so",
    );
  }
  const inflow = (await deps.ledger.unbookedInflows(chainInfo(order.chain).chainId, order.tokenAddress, order.payer, order.amount, 100)).transfers.find((t) => t.id === taken);
  if (!inflow) throw new Refused(`the ledger no longer shows the transfer the hold took (${taken}) as one no payment accounts for: look at the order again before closing it`);
  const refund = await checkHandRefund(deps, { chain: order.chain as ChainKey, token: order.tokenAddress, payer: order.payer, amount: order.amount.toString(), key: { rail: "permit2", nonce: order.authNonce! } }, txHash);
  if (refund.block < BigInt(inflow.blockNumber) || (refund.block === BigInt(inflow.blockNumber) && refund.logIndex < inflow.logIndex)) {
    throw new Refused(`transaction ${txHash} comes before the transfer it would give back (${inflow.txHash}): it cannot have given it back`);
  }
  const detail = `closed as refunded by hand: transaction ${txHash} sent ${inOrderToken(order, order.amount)} back to ${order.payer} (checked on chain) for its transfer ${inflow.txHash}`;
  const closed = await deps.db
    .transaction(async (tx) => {
      await tx.query(`UPDATE review_action SET outcome = 'DONE', detail = $2, status_after = 'REFUNDED', tx_hash = $3, updated_at = now() WHERE id = $1`, [id, detail, txHash.toLowerCase()]);
      const moved = await transitionIn(tx, order.requestId, ["NEEDS_REVIEW"], "REFUNDED", {
        failureReason: `refunded by hand, as an operator found (review #${id}): its payer's transfer into BillPay, which may have been its settlement, was sent back`,
        refundTxHash: txHash,
      });
      if (!moved) throw new Refused("the order moved on meanwhile; nothing was done");
      return moved;
    })
    .catch((err: unknown) => {
      if (err instanceof Refused) throw err;
      // SQLSTATE 23505: the transaction closed another payment or order first.
      if ((err as { code?: string }).code === "23505") throw new Refused(`transaction ${txHash} already closed another payment or order as refunded by hand`);
      throw err;
    });
  const record = (await deps.reviews.get(id))!;
  return { record, order: closed };
}

/** An orphan x402 payment's key as one text (lower case). */
export function orphanKey(o: { chain: string; token_address: string; payer: string; auth_nonce: string }): string {
  return [o.chain.toUpperCase(), o.token_address, o.payer, o.auth_nonce].map((v, i) => (i === 0 ? v : v.toLowerCase())).join(":");
}

export interface OrphanPayment {
  chain: string;
  token_address: string;
  payer: string;
  auth_nonce: string;
  amount: string;
  tx_hash: string;
  status: string;
  created_at: string;
  rail: "authorization" | "permit2";
}

export async function orphanPayment(db: Db, key: { chain: string; token_address: string; payer: string; auth_nonce: string }): Promise<OrphanPayment | undefined> {
  const [row] = await db.query<OrphanPayment>(
    `SELECT chain, token_address, payer, auth_nonce, amount::text AS amount, tx_hash, status, created_at::text AS created_at, rail FROM orphan_payment
     WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4`,
    [key.chain.toUpperCase(), key.token_address.toLowerCase(), key.payer.toLowerCase(), key.auth_nonce.toLowerCase()],
  );
  return row;
}

/** The decisions on an x402 payment no order accounts for. */
export const ORPHAN_ACTIONS = ["hold", "close"] as const;

/**
 * Decides an x402 payment no order accounts for, for `reason`; nothing is sent by the service.
 *   - hold: held for a refund by hand (NEEDS_REVIEW -> REFUNDING_BY_HAND). From then on the
 *     service will neither refund it (a refusal of the same authorization kept later, and
 *     refunded through BillPay, would pay the payer twice) nor let an order take it. An
 *     operator holds it before sending anything.
 *   - close, with `refundTxHash`: as refunded by hand, only once held, the transaction checked
 *     on chain (REFUNDED);
 *   - close without it: as kept (RESOLVED), whether held or not.
 */
export async function resolveOrphanPayment(
  deps: ReviewDeps,
  input: { chain: string; token_address: string; payer: string; auth_nonce: string; reason: string; operator: string; action?: (typeof ORPHAN_ACTIONS)[number]; refundTxHash?: string },
): Promise<ReviewResult> {
  const row = await orphanPayment(deps.db, input);
  if (!row) throw new ServiceError("NOT_FOUND", "no x402 payment without an order under that key");
  const key = orphanKey(row);
  const hold = input.action === "hold";
  const id = await deps.reviews.start({ orphanKey: key, action: hold ? "hold-orphan" : "close-orphan", operator: input.operator, reason: input.reason, amount: BigInt(row.amount), txHash: input.refundTxHash?.toLowerCase(), statusBefore: row.status });
  try {
    const from = hold ? ["NEEDS_REVIEW"] : input.refundTxHash ? [ORPHAN_HELD_FOR_HAND_REFUND] : ["NEEDS_REVIEW", ORPHAN_HELD_FOR_HAND_REFUND];
    if (hold && input.refundTxHash) throw new Refused("a hold names no transaction: hold the payment, send the refund, then close it with the transaction");
    if (!from.includes(row.status)) {
      throw new Refused(
        row.status === "NEEDS_REVIEW"
          ? "hold this payment for a refund by hand first (the service then cannot refund it too), then send the refund, then close it with the transaction"
          : `this payment is ${row.status} already`,
      );
    }
    const claimed = await deps.db.query(
      `SELECT 1 FROM orphan_payment o JOIN bill_order b ON ${ORDER_HOLDS_ORPHAN} WHERE o.chain = $1 AND o.token_address = $2 AND o.payer = $3 AND o.auth_nonce = $4`,
      [row.chain, row.token_address, row.payer, row.auth_nonce],
    );
    if (claimed.length > 0) throw new Refused("an order of the service holds this payment: it is decided on the order, not here");
    let to = "RESOLVED";
    let detail = `closed as kept in BillPay's treasury (${input.reason}); nothing was sent`;
    if (hold) {
      to = ORPHAN_HELD_FOR_HAND_REFUND;
      detail = `held for a refund by hand: the service will not refund it; send exactly ${describeAmount(deps.deployments, row.chain, row.token_address, row.amount)} to ${row.payer}, then close it with the transaction`;
    } else if (input.refundTxHash) {
      await checkOrphanHandRefund(deps, row, input.refundTxHash as Hex);
      to = "REFUNDED";
      detail = `closed as refunded by hand: transaction ${input.refundTxHash} sent ${describeAmount(deps.deployments, row.chain, row.token_address, row.amount)} to ${row.payer} (checked on chain)`;
    }
    // Guarded on the status read: an order claiming it meanwhile (CLAIMED) wins, and this is refused.
    const moved = await deps.db.query(
      `UPDATE orphan_payment SET status = $5 WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4 AND status = $6 RETURNING status`,
      [row.chain, row.token_address, row.payer, row.auth_nonce, to, row.status],
    );
    if (moved.length === 0) throw new Refused("the payment was resolved meanwhile; nothing was done");
    let record: ReviewRecord;
    try {
      record = await deps.reviews.finish(id, "DONE", detail, to);
    } catch (err) {
      // Unrecorded, so undone: the same transaction closed another payment first (the unique
      // index, SQLSTATE 23505), or the record could not be written.
      await deps.db.query(`UPDATE orphan_payment SET status = $5 WHERE chain = $1 AND token_address = $2 AND payer = $3 AND auth_nonce = $4`, [row.chain, row.token_address, row.payer, row.auth_nonce, row.status]);
      const reused = (err as { code?: string }).code === "23505" && input.refundTxHash !== undefined;
      throw new Refused(
        reused
          ? `transaction ${input.refundTxHash} already closed another payment as refunded by hand`
          : `the decision could not be recorded (${errorText(err).split("\n")[0]}); nothing was changed`,
      );
    }
    deps.log.warn(hold ? "an operator held an x402 payment without an order for a refund by hand" : "an operator closed an x402 payment without an order", { chain: row.chain, txHash: row.tx_hash, operator: input.operator, status: to });
    return { record };
  } catch (err) {
    const detail = err instanceof Refused ? err.message : `nothing was done: ${errorText(err)}`;
    return { record: await deps.reviews.finish(id, "REFUSED", detail, row.status) };
  }
}

/** The transaction of a ledger row, from its id ("<chainId>-<txHash>-<logIndex>", ponder/src/ids.ts). */
const transactionOf = (rowId: string) => rowId.split("-")[1];

/** What a refund by hand must give back: exactly `amount` of `token` on `chain` to `payer`; `key` is the payment's own (a refund of it through BillPay counts). */
interface HandRefundOf {
  chain: ChainKey;
  token: string;
  payer: string;
  amount: string;
  key: { rail: "authorization" | "permit2"; nonce: string };
}

/**
 * The hand refund's transaction: succeeded, with a transfer of exactly the amount of its
 * token to its payer, from BillPay (the admin's withdrawal to the payer) or from the admin
 * itself. A transfer from anyone else refunds nothing of BillPay's: the payer sending the
 * amount to himself from another wallet would otherwise close it. Nor does a refund of another
 * payment's key through BillPay (Refunded, Permit2Refunded): that money was that payment's.
 * Answers where its transfer stands (block, log index), for the caller's "after the payment".
 */
async function checkHandRefund(deps: FlowDeps, of: HandRefundOf, txHash: Hex): Promise<{ block: bigint; logIndex: number }> {
  if (!isHash(txHash)) throw new Refused("the refund transaction must be a 0x-prefixed 32-byte hash");
  const d = deps.deployments.chains[of.chain];
  if (!d) throw new Refused(`the service has no deployment on ${of.chain}`);
  const receipt = await deployedClientFor(deps.deployments, of.chain)!
    .getTransactionReceipt({ hash: txHash })
    .catch(() => null);
  if (!receipt) throw new Refused(`${of.chain} has no mined transaction ${txHash}`);
  if (receipt.status !== "success") throw new Refused(`transaction ${txHash} reverted on ${of.chain}`);
  // A refund through BillPay refunds the key it names: this payment's own (rebuilt from its
  // public calldata, refundAuthorization or refundPermit2 mark the key refunded) counts, any
  // other order's does not.
  // Hex values alike, addresses and 32-byte nonces: equal whatever their case.
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  const anotherKeys = receipt.logs.some((l) => {
    if (!same(l.address, d.billPay.address)) return false;
    try {
      const e = decodeEventLog({ abi: billPayAbi, data: l.data, topics: l.topics });
      if (e.eventName === "Refunded") {
        const ours = of.key.rail === "authorization" && BigInt(e.args.authorizationNonce) !== 0n && same(e.args.authorizationNonce, of.key.nonce);
        return !(ours && same(e.args.payer, of.payer) && same(e.args.token, of.token));
      }
      if (e.eventName === "Permit2Refunded") {
        const ours = of.key.rail === "permit2" && e.args.nonce === BigInt(of.key.nonce);
        return !(ours && same(e.args.payer, of.payer) && same(e.args.token, of.token));
      }
      return false;
    } catch {
      return false;
    }
  });
  if (anotherKeys) throw new Refused(`transaction ${txHash} is a refund of another payment through BillPay, not a refund of this one`);
  const transfers = receipt.logs.flatMap((l) => {
    if (!same(l.address, of.token)) return [];
    try {
      const e = decodeEventLog({ abi: erc20Abi, data: l.data, topics: l.topics });
      return e.eventName === "Transfer" ? [{ ...e.args, logIndex: l.logIndex }] : [];
    } catch {
      return [];
    }
  });
  const senders = new Set([d.billPay.address, d.roles.admin].map((a) => a.toLowerCase()));
  const exact = transfers.find((t) => senders.has(t.from.toLowerCase()) && same(t.to, of.payer) && t.value === BigInt(of.amount));
  if (!exact) {
    throw new Refused(
      `transaction ${txHash} carries no transfer of exactly ${describeAmount(deps.deployments, of.chain, of.token, of.amount)} to ${of.payer} from BillPay or its admin${transfers.length ? ` (it moves ${transfers.map((t) => `${t.value} raw units from ${t.from} to ${t.to}`).join(", ")})` : ""}`,
    );
  }
  // As deep as a payment must be: a refund a reorganisation could still take closes nothing.
  if (!(await deepEnough(deps, of.chain, { chainId: chainInfo(of.chain).chainId, blockNumber: receipt.blockNumber.toString() }))) {
    throw new Refused(`transaction ${txHash} is not yet as deep as ${deps.confirmations[of.chain] ?? 0} confirmations; try again shortly`);
  }
  return { block: receipt.blockNumber, logIndex: exact.logIndex };
}

/**
 * An orphan's hand refund: checked as above, and after the payment. The payment's block: the
 * ledger's (it keeps every payment), else the node's receipt (a node may have pruned an old
 * transaction's); neither, and "after the payment" cannot be told.
 */
async function checkOrphanHandRefund(deps: FlowDeps, row: OrphanPayment, txHash: Hex): Promise<void> {
  const chain = row.chain as ChainKey;
  const refundedAt = (await checkHandRefund(deps, { chain, token: row.token_address, payer: row.payer, amount: row.amount, key: { rail: row.rail, nonce: row.auth_nonce } }, txHash)).block;
  const booked = await deps.ledger
    .authorization(chain, row.token_address, row.payer, row.auth_nonce, row.rail)
    .then((r) => r.payment)
    .catch(() => null);
  const paidAt = booked
    ? BigInt(booked.blockNumber)
    : (
        await deployedClientFor(deps.deployments, chain)!
          .getTransactionReceipt({ hash: row.tx_hash as Hex })
          .catch(() => null)
      )?.blockNumber;
  if (paidAt === undefined) throw new Refused(`neither the ledger nor ${chain}'s node can show the payment ${row.tx_hash} now, so the refund cannot be told to come after it; try again shortly`);
  if (refundedAt < paidAt) throw new Refused(`transaction ${txHash} is older than the payment (${row.tx_hash}): it cannot have refunded it`);
}

/** What an operator's name may be: letters, digits and . _ @ - and spaces, at most 64. */
export function validOperatorName(name: string): boolean {
  return /^[\p{L}\p{N}._@ -]{1,64}$/u.test(name) && name.trim().length > 0;
}

/** A key of an orphan payment, checked: addresses and a 32-byte nonce. */
export function validOrphanKey(k: { chain: string; token_address: string; payer: string; auth_nonce: string }): boolean {
  return /^[A-Za-z]{2,16}$/.test(k.chain) && isAddress(k.token_address, { strict: false }) && isAddress(k.payer, { strict: false }) && /^0x[0-9a-fA-F]{64}$/.test(k.auth_nonce);
}
