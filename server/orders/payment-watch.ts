/**
 * Payments after the ledger confirmed them. A chain can reorganise: the block that held a
 * payment is replaced, and the payment with it, after its bill was vended. The ledger follows
 * the chain and drops the payment; this module notices, and makes the order whole again.
 *
 * Every payment that makes an order PAID is recorded here with its block, and watched until
 * the ledger has indexed REORG_WATCH_BLOCKS blocks on top of it: as deep as the ledger itself
 * follows reorganisations (Ponder's finality depth for chains it has no figure for, which
 * Celo and Base are: 30 blocks), so past it neither the ledger nor this watch would see one.
 *
 * A watched payment is lost when the ledger has indexed past its block again and no longer
 * holds it. Then, at once: an error line, `billpay_payments_lost_total`, a row the console
 * shows, and, by the order's state:
 *   - vended or being vended (PAID, PENDING, SUCCESS): the money is collected again, under
 *     the same unique key. x402: the payer's signed authorization, still held, is settled
 *     again through the facilitator. A pull: the operator pulls again under the same order id.
 *     BillPay and the token take each key once, so collecting again can never charge twice.
 *     If it cannot be collected (the authorization expired, its nonce went elsewhere, the
 *     allowance is gone), or it has not been for RECOLLECT_REVIEW_SECONDS, the order goes
 *     to NEEDS_REVIEW: an operator decides. Not while the service's own node shows the
 *     payment back, exactly the order's, in a transaction the watch knows for it (by its
 *     receipt and the ledger's own predicate, chain/receipt-payment.ts), in a block the ledger
 *     has not indexed yet: then the ledger is behind, not the money, and the order waits for
 *     it (a ledger that far behind alerts on its own), up to RECOLLECT_REVIEW_SECONDS more;
 *     a ledger still short of that block then is stalled, and an operator decides. No unit
 *     moves on that receipt; it only keeps an operator from a payment that stands.
 *   - refunding or refunded: nothing was kept, so nothing is owed either way; the order
 *     becomes PAYMENT_FAILED, and should the payment land after all, the ledger pass refunds it
 *     (a payment for a bill that was vended, or may have been, is held for an operator to serve).
 * A collected payment is watched again like any other.
 *
 * Bounds: what is collected again is exactly the order's amount, under the order's own key
 * (its nonce or order id), and counts only when the ledger shows it (the same predicate
 * every payment passes, `paymentMismatch`).
 */
import type { PaymentRequirements } from "@x402/core/types";
import type { Hex } from "viem";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { deploymentIdentity, type Deployments } from "../../lib/deployments.ts";
import { authorizationOnChain, pullOnChain } from "../chain/payment-state.ts";
import { ContractRefused, type ChainOperator } from "../chain/operator.ts";
import type { Db } from "../db.ts";
import { paymentKey, paymentMismatch, type LedgerClient, type LedgerPayment } from "../ledger-client.ts";
import { orderPaymentIn } from "../chain/receipt-payment.ts";
import type { ChainHeads } from "../../lib/chain-heads.ts";
import { errorText } from "../log-safety.ts";
import { isSettlementPending, settleAnswer } from "../x402-protocol/facilitator-answer.ts";
import type { StoredPayment } from "../x402-protocol/payment.ts";
import type { PaymentRail } from "../../lib/payment-logs.ts";
import type { FacilitatorClient } from "@x402/core/server";
import type { Log } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import type { AlongsideWrite, Order, OrderStatus, OrderStore } from "./store.ts";
import { ledgerUnderKey } from "./ledger-view.ts";
import { refundsInSight } from "./refunds-in-sight.ts";

/**
 * What watching payments may touch: the ledger (what it shows), the orders, the hot keys and
 * the facilitators (to collect a lost payment again), and nothing else of the service.
 */
export interface WatchDeps {
  deployments: Deployments;
  heads: ChainHeads;
  confirmations: Partial<Record<ChainKey, number>>;
  facilitators: Partial<Record<ChainKey, FacilitatorClient>>;
  leaseSeconds: number;
  ledger: LedgerClient;
  operator: ChainOperator;
  orders: OrderStore;
  watches: PaymentWatches;
  recollectReviewSeconds: number;
  metrics: Metrics;
  log: Log;
}

/** How deep the ledger follows a reorganisation, in blocks: Ponder's default finality depth. */
export const REORG_WATCH_BLOCKS = 30n;
/** How often a payment being collected again is tried again while it does not show. */
const RECOLLECT_RETRY_SECONDS = 30;
/** Open watches read per chain and pass. */
const WATCH_BATCH = 2_000;
const PAGE = 200;

export type LossOutcome = "RECOLLECTING" | "RECOLLECTED" | "REVIEW" | "VOID";

export interface WatchRow {
  request_id: string;
  chain: ChainKey;
  rail: PaymentRail;
  payment_key: string;
  block_number: string;
  block_time: string;
  tx_hash: string;
  final: boolean;
  lost_at: Date | null;
  outcome: LossOutcome | null;
  detail: string | null;
  recollect_tx_hash: string | null;
  attempted_at: Date | null;
}

/** A lost payment and what became of it, for the console and the audit. */
export type Loss = Pick<WatchRow, "request_id" | "chain" | "rail" | "tx_hash" | "lost_at" | "outcome" | "detail" | "recollect_tx_hash"> & { block_number: string };

export class PaymentWatches {
  constructor(
    private readonly db: Db,
    private readonly deployments: Deployments,
  ) {}

  private deployment(chain: string): string {
    return deploymentIdentity(this.deployments, chain);
  }

  /**
   * Watches the payment that makes `o` PAID (again, if it moved to another block, or an
   * operator served it after a loss): watched afresh, an earlier loss's state cleared, so a
   * second loss is told and collected again as the first was.
   */
  async record(o: Order, p: LedgerPayment): Promise<void> {
    const write = this.recording(o, p);
    await this.db.query(write.sql(1), write.params);
  }

  /** `record` as a write that goes with the order's move to PAID, in its statement (OrderStore.advance). */
  recording(o: Order, p: LedgerPayment): AlongsideWrite {
    return {
      sql: (n) => `INSERT INTO payment_watch (request_id, chain, deployment, rail, payment_key, block_number, block_time, tx_hash)
       VALUES ($${n}, $${n + 1}, $${n + 2}, $${n + 3}, $${n + 4}, $${n + 5}, $${n + 6}, $${n + 7})
       ON CONFLICT (request_id) DO UPDATE SET block_number = EXCLUDED.block_number, block_time = EXCLUDED.block_time,
         tx_hash = EXCLUDED.tx_hash, final = false, lost_at = NULL, outcome = NULL, detail = NULL, recollect_tx_hash = NULL,
         attempted_at = NULL, updated_at = now()`,
      params: [o.requestId, o.chain, this.deployment(o.chain), p.rail, paymentKey(p), p.blockNumber, p.timestamp, p.txHash],
    };
  }

  /** The chain's open watches; those of another deployment of it (a local chain started afresh) are dropped. */
  async open(chain: ChainKey, limit = WATCH_BATCH): Promise<WatchRow[]> {
    const deployment = this.deployment(chain);
    await this.db.query(`DELETE FROM payment_watch WHERE chain = $1 AND deployment <> $2 AND NOT final AND lost_at IS NULL`, [chain, deployment]);
    return this.db.query<WatchRow>(
      `SELECT request_id, chain, rail, payment_key, block_number::text, block_time::text, tx_hash, final, lost_at, outcome, detail, recollect_tx_hash, attempted_at
       FROM payment_watch WHERE chain = $1 AND deployment = $2 AND NOT final ORDER BY block_number LIMIT $3`,
      [chain, deployment, limit],
    );
  }

  /**
   * The ledger shows the payment (again): where it now is, and whether it is past the watch.
   * A lost payment keeps the transaction that was lost; the one that collected it is kept beside it.
   */
  async seen(requestId: string, p: LedgerPayment, final: boolean, outcome: LossOutcome | null): Promise<void> {
    if (final && outcome === null) {
      await this.db.query(`DELETE FROM payment_watch WHERE request_id = $1 AND lost_at IS NULL`, [requestId]);
      return;
    }
    await this.db.query(
      `UPDATE payment_watch SET block_number = $2, block_time = $3, final = $5, outcome = $6, updated_at = now(),
         tx_hash = CASE WHEN lost_at IS NULL THEN $4 ELSE tx_hash END,
         recollect_tx_hash = CASE WHEN lost_at IS NULL THEN recollect_tx_hash ELSE $4 END
       WHERE request_id = $1`,
      [requestId, p.blockNumber, p.timestamp, p.txHash, final, outcome],
    );
  }

  /** Marks the payment lost; true the first time. */
  async lost(requestId: string): Promise<boolean> {
    const rows = await this.db.query(
      `UPDATE payment_watch SET lost_at = now(), outcome = 'RECOLLECTING', updated_at = now() WHERE request_id = $1 AND lost_at IS NULL RETURNING request_id`,
      [requestId],
    );
    return rows.length > 0;
  }

  /**
   * Takes the next attempt to collect a lost payment again: true for one actor, across
   * instances, and only once the last attempt is `retrySeconds` old.
   */
  async takeAttempt(requestId: string, retrySeconds: number): Promise<boolean> {
    const rows = await this.db.query(
      `UPDATE payment_watch SET attempted_at = now(), updated_at = now()
       WHERE request_id = $1 AND NOT final AND (attempted_at IS NULL OR attempted_at < now() - make_interval(secs => $2)) RETURNING request_id`,
      [requestId, retrySeconds],
    );
    return rows.length > 0;
  }

  /** What the attempt did: its transaction, once signed, and a word for the console. */
  async attempted(requestId: string, txHash: string | null, detail: string | null): Promise<void> {
    await this.db.query(
      `UPDATE payment_watch SET recollect_tx_hash = COALESCE($2, recollect_tx_hash), detail = COALESCE($3, detail), updated_at = now() WHERE request_id = $1`,
      [requestId, txHash, detail],
    );
  }

  /** Ends a loss that will not be collected: watched no more. */
  async close(requestId: string, outcome: "REVIEW" | "VOID", detail: string): Promise<void> {
    await this.db.query(`UPDATE payment_watch SET final = true, outcome = $2, detail = $3, updated_at = now() WHERE request_id = $1`, [requestId, outcome, detail]);
  }

  /** The latest lost payments, newest first. */
  async losses(limit = 100): Promise<Loss[]> {
    return this.db.query<Loss>(
      `SELECT request_id, chain, rail, block_number::text, tx_hash, lost_at, outcome, detail, recollect_tx_hash
       FROM payment_watch WHERE lost_at IS NOT NULL ORDER BY lost_at DESC LIMIT $1`,
      [limit],
    );
  }
}

/**
 * Whether the ledger has indexed the chain's confirmation depth on top of the payment's
 * block. At depth 0 (the local chains) it is confirmed as soon as the ledger shows it.
 */
export async function deepEnough(deps: Pick<WatchDeps, "confirmations" | "ledger">, chain: string, p: Pick<LedgerPayment, "chainId" | "blockNumber">): Promise<boolean> {
  const depth = deps.confirmations[chain as ChainKey] ?? 0;
  if (depth === 0) return true;
  const indexed = await deps.ledger.indexedBlock(p.chainId);
  return indexed !== null && indexed >= BigInt(p.blockNumber) + BigInt(depth);
}

/**
 * The request's wait for depth: the payment once the ledger has indexed deep enough on top
 * of it and still shows it (read again through `read`), or null if it does not within
 * `waitMs` or was dropped meanwhile; the worker then decides.
 */
export async function awaitConfirmations(
  deps: Pick<WatchDeps, "confirmations" | "ledger">,
  chain: string,
  p: LedgerPayment,
  read: () => Promise<LedgerPayment | null | undefined>,
  waitMs: number,
): Promise<LedgerPayment | null> {
  const depth = deps.confirmations[chain as ChainKey] ?? 0;
  if (depth === 0) return p;
  const deadline = Date.now() + waitMs;
  const step = Math.max(50, Math.min(250, chainInfo(chain).pollingIntervalMs / 4));
  for (;;) {
    if (await deepEnough(deps, chain, p).catch(() => false)) return (await read().catch(() => null)) ?? null;
    if (Date.now() >= deadline) return null;
    await new Promise((r) => setTimeout(r, step));
  }
}

/**
 * One pass over the watched payments of every chain: closes those past the watch, and acts
 * on those the chain dropped. Returns how many lost payments it acted on.
 */
export async function watchPayments(deps: WatchDeps): Promise<number> {
  let acted = 0;
  for (const chain of Object.keys(deps.deployments.chains) as ChainKey[]) {
    const rows = await deps.watches.open(chain);
    if (rows.length === 0) continue;
    const chainId = chainInfo(chain).chainId;
    // The position first, the payments next: "not in the ledger" is believed only of a
    // ledger that had indexed past the payment's block when it was read.
    const indexed = await deps.ledger.indexedBlock(chainId);
    if (indexed === null) continue;
    const shown = await paymentsSince(deps, chainId, rows);
    for (const w of rows) {
      // Read by its key when the time-ordered read missed it: a block that replaced the watched
      // one may carry an earlier time, and a payment in it would otherwise be taken for lost.
      const p = shown.get(w.payment_key) ?? (BigInt(w.block_number) <= indexed ? await paymentUnderKey(deps, w) : undefined);
      if (p) {
        const final = BigInt(p.blockNumber) + REORG_WATCH_BLOCKS <= indexed;
        const holding = w.lost_at ? w.recollect_tx_hash : w.tx_hash;
        // Another transaction under the order's key: its payer may have signed two under one
        // nonce (the bill's, and one of a unit) and landed the other once a reorganisation took
        // the first. Only exactly the order's payment stands for it.
        const other = p.txHash !== holding ? await otherPayment(deps, w, p) : "its own";
        if (other === "held") acted++;
        if (other !== "its own") continue; // held for an operator, or the order is being worked: the next pass
        if (p.txHash !== holding || w.outcome === "RECOLLECTING") await deps.orders.paymentMovedTo(w.request_id, p.txHash);
        if (w.outcome === "RECOLLECTING") {
          deps.log.info("a lost payment is on chain again", { requestId: w.request_id, chain, txHash: p.txHash });
          deps.metrics.lostPaymentOutcomes.inc({ chain, rail: w.rail, outcome: "recollected" });
          await deps.watches.seen(w.request_id, p, final, "RECOLLECTED");
        } else if (final || p.blockNumber !== w.block_number || p.txHash !== holding) {
          await deps.watches.seen(w.request_id, p, final, w.outcome);
        }
        continue;
      }
      if (BigInt(w.block_number) > indexed) continue; // the ledger is not back at that height yet
      try {
        if (await actOnLoss(deps, w, indexed)) acted++;
      } catch (err) {
        deps.log.warn("could not act on a lost payment yet; will retry", { requestId: w.request_id, error: errorText(err) });
      }
    }
  }
  return acted;
}

/** What the ledger shows under the watched order's key, whatever its block's time. */
async function paymentUnderKey(deps: WatchDeps, w: WatchRow): Promise<LedgerPayment | undefined> {
  const order = await deps.orders.get(w.request_id);
  return (order && (await ledgerUnderKey(deps, order)).payment) ?? undefined;
}

/** The ledger's payments of the watched rails from the oldest watched block's time, by key. */
async function paymentsSince(deps: WatchDeps, chainId: number, rows: WatchRow[]): Promise<Map<string, LedgerPayment>> {
  const shown = new Map<string, LedgerPayment>();
  for (const rail of ["pull", "authorization", "permit2"] as const) {
    const mine = rows.filter((r) => r.rail === rail);
    if (mine.length === 0) continue;
    const from = mine.reduce((min, r) => (BigInt(r.block_time) < min ? BigInt(r.block_time) : min), BigInt(mine[0]!.block_time));
    let page = await deps.ledger.payments({ chainId, rail, from, limit: PAGE });
    for (;;) {
      for (const p of page.payments) shown.set(paymentKey(p), p);
      if (!page.nextCursor) break;
      page = await deps.ledger.payments({ chainId, rail, cursor: page.nextCursor, limit: PAGE });
    }
  }
  return shown;
}

const SERVED: OrderStatus[] = ["PAID", "PENDING", "SUCCESS"];
const REFUNDS: OrderStatus[] = ["REFUNDING", "REFUNDED"];

/** What a lost payment's order needs (`indexed`: the block the ledger had indexed when its payments were read); true when something was done. */
async function actOnLoss(deps: WatchDeps, w: WatchRow, indexed: bigint): Promise<boolean> {
  await markLost(deps, w);
  // One actor per attempt, across instances; the next only once this one has had time to show.
  if (!(await deps.watches.takeAttempt(w.request_id, RECOLLECT_RETRY_SECONDS))) return false;
  // Whoever is working the order finishes first (a final order's lease is nominal).
  const order = await deps.orders.claim(w.request_id, deps.leaseSeconds);
  if (!order) return false;
  try {
    if (REFUNDS.includes(order.status)) {
      // A refund that stands without its payment is BillPay's own money paid out: an x402
      // refund needs only its nonce spent, and the payer's cancelAuthorization in the payment's
      // place spends it too. An operator's, as the audit also names it. Read from BillPay on
      // the service's node, not the ledger, which may show neither while it takes the
      // reorganisation in; a refund the node holds unmined, or one dropped from its pool
      // whose nonce is still unused, may yet land: the next pass. Every
      // refund transaction signed for the order is recorded before it is sent (one stuck on
      // fees included), so each is asked (refunds-in-sight.ts).
      // One that may land in no pool is voided before anything is decided (its signer's nonce
      // used by another transaction): else the payer could cancel the authorization, which
      // spends its nonce, and send the refund. Looked at again at once: the void may be as
      // deep as it must be already.
      let seen = await refundsInSight(deps, order);
      if (seen && "landable" in seen) {
        const { signer, nonce } = seen.landable;
        if (seen.voiding === "not ours") {
          // Another instance's key (each has its own): left to its next pass, which can void it;
          // to an operator once that has had time, as a lost payment's other waits are.
          const lostFor = (Date.now() - (w.lost_at ?? new Date()).getTime()) / 1000;
          if (lostFor <= deps.recollectReviewSeconds) return false;
          const why = `a refund signed for it under nonce ${nonce} of ${signer}, a key this instance does not hold, may still land`;
          return holdForReview(deps, order, w, REFUNDS, why, `its payment was reorganised off the chain after the ledger confirmed it; ${why}`, "a lost payment's refund may still land under another instance's key; the order waits for an operator");
        }
        seen = await refundsInSight(deps, order);
      }
      if (seen && ("pending" in seen || "landable" in seen)) return false;
      if (seen) {
        const why = "its refund stands on chain without it";
        return holdForReview(deps, order, w, REFUNDS, why, `its payment was reorganised off the chain after the ledger confirmed it; ${why}`, "a refunded payment was reorganised off the chain while its refund stands; the order waits for an operator");
      }
      const why = "its payment was reorganised off the chain, so nothing was kept and nothing is refunded";
      await deps.orders.transition(order.requestId, REFUNDS, "PAYMENT_FAILED", { failureReason: `${order.failureReason ?? "refunding"}; ${why}` });
      await deps.watches.close(order.requestId, "VOID", why);
      deps.metrics.lostPaymentOutcomes.inc({ chain: w.chain, rail: w.rail, outcome: "void" });
      return true;
    }
    if (!SERVED.includes(order.status)) {
      await deps.watches.close(order.requestId, "REVIEW", `the order was ${order.status} when its payment was lost; left to an operator`);
      return true;
    }
    const lostFor = (Date.now() - (w.lost_at ?? new Date()).getTime()) / 1000;
    if (lostFor > deps.recollectReviewSeconds) {
      // Back on the node in a block the ledger has not indexed: lag. One the ledger has indexed past without it is not.
      const back = await backOnNode(deps, order, w);
      if (!back) return review(deps, order, w, `not collected again within ${deps.recollectReviewSeconds} s`);
      // Also a ledger on another fork at that height: the safe reading is a person's.
      if (BigInt(back.blockNumber) <= indexed) return review(deps, order, w, `not collected again within ${deps.recollectReviewSeconds} s as the ledger shows it: the service's node shows it back in block ${back.blockNumber} (transaction ${back.txHash}), which the ledger has indexed past without it`);
      // A ledger that has not reached the block in as long again is not lag but a stall (it
      // alerts on its own, and /readyz says so): the order is not left waiting on it for good.
      if (lostFor > 2 * deps.recollectReviewSeconds) {
        const why = `the service's node shows it back in block ${back.blockNumber} (transaction ${back.txHash}), but the ledger has not indexed that block within ${2 * deps.recollectReviewSeconds} s of the loss`;
        return holdForReview(deps, order, w, SERVED, why, `its payment was reorganised off the chain after the ledger confirmed it; ${why}`, "a lost payment is back on the service's node, but the ledger has stalled short of it; the order waits for an operator");
      }
      const detail = `back on chain (transaction ${back.txHash}, block ${back.blockNumber}, by the service's node); waiting for the ledger to index it`;
      if (w.detail !== detail) deps.log.warn("a lost payment is back on the service's node, but not yet in the ledger; the order waits for the ledger", { requestId: order.requestId, chain: w.chain, txHash: back.txHash, lostForSeconds: Math.round(lostFor) });
      await deps.watches.attempted(order.requestId, null, detail);
      return false;
    }
    return order.rail === "pull" ? await pullAgain(deps, order, w) : await settleAgain(deps, order, w);
  } finally {
    await deps.orders.release(order.requestId, order.leaseToken);
  }
}

/**
 * The order's payment as the service's own node shows it in a transaction the watch knows for
 * it (the one that collected it again, or the one lost, mined again), by the transaction's
 * receipt and the ledger's own predicate, exactly the order's; undefined when neither holds it.
 */
async function backOnNode(deps: WatchDeps, o: Order, w: WatchRow): Promise<LedgerPayment | undefined> {
  for (const hash of new Set([w.recollect_tx_hash, w.tx_hash].filter((h): h is string => h !== null))) {
    // At any depth: it only keeps the order waiting, and a later pass reads it again.
    const p = await orderPaymentIn({ ...deps, confirmations: {} }, o, hash as Hex, 0);
    if (p && !paymentMismatch(o, p)) return p;
  }
  return undefined;
}

/** Records the watched payment lost, once: logged, counted, and listed among the losses. */
async function markLost(deps: WatchDeps, w: WatchRow): Promise<void> {
  if (w.lost_at === null && (await deps.watches.lost(w.request_id))) {
    deps.log.error("a confirmed payment was reorganised off the chain", { requestId: w.request_id, chain: w.chain, rail: w.rail, block: w.block_number, txHash: w.tx_hash });
    deps.metrics.paymentsLost.inc({ chain: w.chain, rail: w.rail });
  }
}

/**
 * `p`, found under the watched order's key in another transaction: "its own" when it is
 * exactly the order's payment (paymentMismatch). Otherwise the order goes to an operator
 * ("held": served or refunding, it moves to NEEDS_REVIEW; in any other state it stays, for
 * the ledger pass and the audit) and its watch closes, as for a payment that could not be
 * collected again; "busy" while someone else works the order (the next pass decides).
 */
async function otherPayment(deps: WatchDeps, w: WatchRow, p: LedgerPayment): Promise<"its own" | "held" | "busy"> {
  const seen = await deps.orders.get(w.request_id);
  if (!seen || !paymentMismatch(seen, p)) return "its own";
  // Whoever is working the order finishes first, as for a lost payment (actOnLoss).
  const order = await deps.orders.claim(w.request_id, deps.leaseSeconds);
  if (!order) return "busy";
  try {
    const mismatch = paymentMismatch(order, p);
    if (!mismatch) return "its own";
    await markLost(deps, w);
    const why = `after a reorganisation its key holds another payment (transaction ${p.txHash}): ${mismatch}`;
    const held = await deps.orders.transition(order.requestId, [...SERVED, ...REFUNDS], "NEEDS_REVIEW", { failureReason: `its payment was reorganised off the chain; ${why}` });
    deps.log.error(held ? "a watched payment's key holds another payment now; the order waits for an operator" : `a watched payment's key holds another payment now; the order, ${order.status}, is left as it is`, {
      requestId: order.requestId,
      chain: w.chain,
      txHash: p.txHash,
      mismatch,
    });
    await deps.watches.close(order.requestId, "REVIEW", why);
    deps.metrics.lostPaymentOutcomes.inc({ chain: w.chain, rail: w.rail, outcome: "review" });
    return "held";
  } finally {
    await deps.orders.release(order.requestId, order.leaseToken);
  }
}

/** The served order goes to an operator: its money could not be collected again. */
async function review(deps: WatchDeps, o: Order, w: WatchRow, why: string): Promise<boolean> {
  const reason = `its payment was reorganised off the chain after the ledger confirmed it, and could not be collected again: ${why}`;
  return holdForReview(deps, o, w, SERVED, why, reason, "a lost payment could not be collected again; the order waits for an operator");
}

/** A lost payment's order held for an operator: logged, moved to NEEDS_REVIEW, its watch closed, counted. */
async function holdForReview(deps: WatchDeps, o: Order, w: WatchRow, from: OrderStatus[], why: string, reason: string, line: string): Promise<boolean> {
  deps.log.error(line, { requestId: o.requestId, chain: o.chain, why });
  await deps.orders.transition(o.requestId, from, "NEEDS_REVIEW", { failureReason: reason });
  await deps.watches.close(o.requestId, "REVIEW", why);
  deps.metrics.lostPaymentOutcomes.inc({ chain: w.chain, rail: w.rail, outcome: "review" });
  return true;
}

/** x402: the payer's signed authorization, still held, settled again through the facilitator. */
async function settleAgain(deps: WatchDeps, o: Order, w: WatchRow): Promise<boolean> {
  const onChain = await authorizationOnChain(deps, o);
  if (onChain.used) {
    // Spent again already: most likely the same payment back in a block the ledger has not
    // indexed; if it never shows, its nonce went elsewhere, and the deadline sends it to review.
    await deps.watches.attempted(o.requestId, null, "the authorization's nonce is spent again; waiting for the ledger");
    return false;
  }
  if (o.authValidBefore! <= onChain.timestamp) return review(deps, o, w, "the payer's authorization has expired");
  const facilitator = deps.facilitators[o.chain as ChainKey];
  if (!facilitator) return review(deps, o, w, "no facilitator for this chain");
  const { payload } = o.payment as unknown as StoredPayment;
  const answer = await settleAnswer(() => facilitator.settle(payload, o.requirements as unknown as PaymentRequirements));
  if (answer.kind === "answered" && (answer.response.success || isSettlementPending(answer.response))) {
    await deps.watches.attempted(o.requestId, answer.response.transaction || null, "submitted again through the facilitator");
    deps.log.warn("a lost x402 payment was submitted again", { requestId: o.requestId, txHash: answer.response.transaction || null });
    return true;
  }
  // Refused or unanswered: tried again while the authorization lives (and within the deadline).
  const why = answer.kind === "answered" ? `facilitator: ${answer.response.errorReason ?? "settlement failed"}` : "the facilitator did not answer";
  await deps.watches.attempted(o.requestId, null, why);
  deps.log.warn("a lost x402 payment could not be submitted again yet; will retry", { requestId: o.requestId, why });
  return false;
}

/** A pull: the operator pulls again under the same order id (BillPay takes an order id once). */
async function pullAgain(deps: WatchDeps, o: Order, w: WatchRow): Promise<boolean> {
  const chain = o.chain as ChainKey;
  if (await pullOnChain(deps, o)) {
    await deps.watches.attempted(o.requestId, null, "BillPay holds the pull again; waiting for the ledger");
    return false;
  }
  try {
    await deps.operator.pull(
      chain,
      { requestId: o.requestId, payer: o.payer as Hex, token: o.tokenAddress as Hex, amount: o.amount },
      (hash) => deps.watches.attempted(o.requestId, hash, "pulled again under the same order id"),
      async (_previous, next) => deps.watches.attempted(o.requestId, next, null),
    );
    deps.log.warn("a lost pull was pulled again", { requestId: o.requestId });
    return true;
  } catch (err) {
    if (err instanceof ContractRefused && err.errorName === "OrderExists") return false; // landed meanwhile: the ledger will show it
    if (err instanceof ContractRefused) return review(deps, o, w, `BillPay refused the pull again (${err.errorName})`);
    await deps.watches.attempted(o.requestId, null, `the pull could not be sent: ${errorText(err)}`);
    throw err;
  }
}
