/**
 * The ledger pass: reads every payment the ledger shows reaching BillPay, on both rails, and
 * makes sure each one is accounted for exactly once, whoever submitted it and however late:
 *   - a pull with no order, or whose order was written off: refunded to its payer, keyed by
 *     (chain, order id) in orphan_pull (BillPay refunds an order id once in any case); but a
 *     written-off order's pull whose bill was vended (or may have been) is held for an operator to serve;
 *   - an x402 payment whose order was refused or written off (the payer was told it did not
 *     settle): refunded through its order, or held for review if the amount differs;
 *   - an x402 payment with no order at all (sent to BillPay by hand, not through the
 *     service): recorded in orphan_payment; refunded on chain when it is a good payment the
 *     service refused and kept (orders/refused-payments.ts: the service holds its signed
 *     authorization), else left for an operator, since the service could not refund it.
 * Each chain and rail keeps its own position (chains are indexed at their own pace). A
 * payment whose order is still being decided (PULLING, SETTLING) holds the position at its
 * second, so it is read again until its order is final: should the order then be written
 * off, the payment is still found and refunded.
 */
import { errorText } from "../log-safety.ts";
import { ContractRefused } from "../chain/operator.ts";
import type { Hex } from "viem";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import type { Db } from "../db.ts";
import { isPaymentOf, x402RailOf, type LedgerPayment } from "../ledger-client.ts";
import { mayHaveBeenVended, move, refundUnheld, type FlowDeps } from "./fulfil.ts";
import { landedAfterRefusal } from "./x402-flow.ts";
import { refundLanding } from "./late-landing.ts";
import { REORG_WATCH_BLOCKS } from "./payment-watch.ts";
import { refundFound, refundStanding } from "./refund-watch.ts";
import { pullOnChain } from "../chain/payment-state.ts";

const PAGE = 200;

interface OrphanPullRow {
  chain: ChainKey;
  order_id: string;
  token_address: string;
  amount: string;
}

/** Payments no order accounts for, and the pass's positions. */
/**
 * SQL: order `b` holds orphan payment `o`, under the same key on the same rail (an order's
 * rail is its stored payment's method: x402-protocol/payment.ts; absent, EIP-3009).
 */
export const ORDER_HOLDS_ORPHAN = `b.chain = o.chain AND b.token_address = o.token_address AND b.payer = o.payer AND b.auth_nonce = o.auth_nonce
  AND COALESCE(b.payment->>'method', 'eip3009') = CASE o.rail WHEN 'permit2' THEN 'permit2' ELSE 'eip3009' END`;

export class Orphans {
  constructor(private readonly db: Db) {}

  /**
   * Records a pull no order accounts for, to be refunded: "new" the first time; "again" when
   * one recorded as dropped from the chain lands again (the same pull after a
   * reorganisation, or whoever holds the operator key sending one under its id again).
   */
  async recordPull(chain: ChainKey, p: LedgerPayment): Promise<"new" | "again" | undefined> {
    const [row] = await this.db.query<{ fresh: boolean }>(
      `INSERT INTO orphan_pull (chain, order_id, payer, token_address, amount, pull_tx_hash, status)
       VALUES ($1, $2, $3, $4, $5, $6, 'REFUNDING')
       ON CONFLICT (chain, order_id) DO UPDATE SET status = 'REFUNDING', payer = EXCLUDED.payer, token_address = EXCLUDED.token_address,
         amount = EXCLUDED.amount, pull_tx_hash = EXCLUDED.pull_tx_hash, refund_block = NULL
       WHERE orphan_pull.status = 'DROPPED'
       RETURNING orphan_pull.created_at = now() AS fresh`,
      [chain, p.orderId!.toLowerCase(), p.payer.toLowerCase(), p.token.toLowerCase(), p.amount, p.txHash],
    );
    return row ? (row.fresh ? "new" : "again") : undefined;
  }

  async recordPayment(chain: ChainKey, p: LedgerPayment): Promise<boolean> {
    const rows = await this.db.query(
      `INSERT INTO orphan_payment (chain, token_address, payer, auth_nonce, amount, tx_hash, status, rail)
       VALUES ($1, $2, $3, $4, $5, $6, 'NEEDS_REVIEW', $7) ON CONFLICT DO NOTHING RETURNING chain`,
      [chain, p.token.toLowerCase(), p.payer.toLowerCase(), p.authorizationNonce!.toLowerCase(), p.amount, p.txHash, p.rail],
    );
    return rows.length > 0;
  }

  /** Every orphan record, for the audit (few: each is a payment made outside the service). */
  async all(): Promise<{ pulls: Array<Record<string, string | null>>; payments: Array<Record<string, string | null>> }> {
    const [pulls, payments] = await Promise.all([
      this.db.query<Record<string, string | null>>(
        `SELECT chain, order_id, payer, token_address, amount::text AS amount, pull_tx_hash, status, refund_tx_hash FROM orphan_pull ORDER BY created_at`,
      ),
      this.db.query<Record<string, string | null>>(
        // One an order has claimed since (submitted before its order was made) is no orphan.
        `SELECT chain, token_address, payer, auth_nonce, amount::text AS amount, tx_hash, status, rail FROM orphan_payment o
         WHERE NOT EXISTS (SELECT 1 FROM bill_order b WHERE ${ORDER_HOLDS_ORPHAN})
         ORDER BY created_at`,
      ),
    ]);
    return { pulls, payments };
  }

  async unrefundedPulls(): Promise<OrphanPullRow[]> {
    return this.db.query<OrphanPullRow>(`SELECT chain, order_id, token_address, amount::text AS amount FROM orphan_pull WHERE status = 'REFUNDING'`);
  }

  /** A pull the chain no longer holds is not refunded (there is nothing to refund) unless it lands again. */
  async pullDropped(chain: ChainKey, orderId: string): Promise<void> {
    await this.db.query(`UPDATE orphan_pull SET status = 'DROPPED' WHERE chain = $1 AND order_id = $2 AND status = 'REFUNDING'`, [chain, orderId]);
  }

  /** Refunded by `txHash` in `block`: sent by this service, or found on chain (BillPay had refunded it already). */
  async pullRefunded(chain: ChainKey, orderId: string, txHash: string, block: bigint): Promise<void> {
    await this.db.query(`UPDATE orphan_pull SET status = 'REFUNDED', refund_tx_hash = $3, refund_block = $4 WHERE chain = $1 AND order_id = $2`, [chain, orderId, txHash, block.toString()]);
  }

  /** Orphan pulls refunded in a block after `block`: their refunds are still within reach of a reorganisation. */
  async pullsRefundedAfter(chain: ChainKey, block: bigint): Promise<Array<OrphanPullRow & { refund_tx_hash: string; refund_block: string }>> {
    return this.db.query(
      `SELECT chain, order_id, token_address, amount::text AS amount, refund_tx_hash, refund_block::text AS refund_block FROM orphan_pull
       WHERE chain = $1 AND status = 'REFUNDED' AND refund_block > $2`,
      [chain, block.toString()],
    );
  }

  /**
   * Sends an orphan pull's refund again, if it is still the one recorded; true when it is.
   * The lost refund's hash stays until another is sent (BillPay may answer that it is
   * refunded already: the lost one landed after all).
   */
  refundLost(chain: ChainKey, orderId: string, txHash: string): Promise<boolean> {
    return this.whileRefundedBy(chain, orderId, txHash, `status = 'REFUNDING', refund_block = NULL`);
  }

  /** The orphan pull's refund stands in a later block (mined again after a reorganisation): watched from there. */
  refundMovedTo(chain: ChainKey, orderId: string, txHash: string, block: bigint): Promise<boolean> {
    return this.whileRefundedBy(chain, orderId, txHash, `refund_block = $4`, [block.toString()]);
  }

  /**
   * Both the pull and its refund left the chain: nothing is owed unless the pull lands again
   * (recordPull revives it). The refund's hash is kept: should both land again, BillPay
   * answers "refunded already", and that refund is still the one on record.
   */
  refundDroppedWithPull(chain: ChainKey, orderId: string, txHash: string): Promise<boolean> {
    return this.whileRefundedBy(chain, orderId, txHash, `status = 'DROPPED', refund_block = NULL`);
  }

  /** The orphan pull's refund is no longer watched (the node holds it past the watch, the ledger never showed it). */
  refundUnwatched(chain: ChainKey, orderId: string, txHash: string): Promise<boolean> {
    return this.whileRefundedBy(chain, orderId, txHash, `refund_block = NULL`);
  }

  /** Sets `set` on an orphan pull while `txHash` is still its refund on record (a watch's read may be stale); true when it was. */
  private async whileRefundedBy(chain: ChainKey, orderId: string, txHash: string, set: string, more: unknown[] = []): Promise<boolean> {
    const rows = await this.db.query(
      `UPDATE orphan_pull SET ${set} WHERE chain = $1 AND order_id = $2 AND status = 'REFUNDED' AND refund_tx_hash = $3 RETURNING chain`,
      [chain, orderId, txHash, ...more],
    );
    return rows.length > 0;
  }

  /** How far the pass has read one chain's payments of one rail (ledger timestamp, unix seconds). */
  async position(name: string): Promise<bigint | undefined> {
    const [row] = await this.db.query<{ position: string }>(`SELECT position FROM reconciler_cursor WHERE name = $1`, [name]);
    return row ? BigInt(row.position) : undefined;
  }

  /**
   * Starts the pass at `timestamp` on every rail of one chain, for a database that comes to a
   * ledger holding payments that are not its orders (a test's service on chains other suites
   * paid on); a pass already further on stays where it is.
   */
  async startAt(chainId: number, timestamp: bigint): Promise<void> {
    for (const rail of Object.keys(CURSOR_PREFIX) as Array<LedgerPayment["rail"]>) await this.advance(readerCursor(rail, chainId), timestamp);
  }

  async advance(name: string, timestamp: bigint): Promise<void> {
    await this.db.query(
      `INSERT INTO reconciler_cursor (name, position) VALUES ($1, $2)
       ON CONFLICT (name) DO UPDATE SET position = GREATEST(reconciler_cursor.position::numeric, EXCLUDED.position::numeric)::text, updated_at = now()`,
      [name, timestamp.toString()],
    );
  }
}

export type LedgerPassDeps = FlowDeps & { orphans: Orphans };

const CURSOR_PREFIX: Record<LedgerPayment["rail"], string> = { pull: "pulls", authorization: "authorizations", permit2: "permit2" };

/** The name under which the pass keeps its position in one chain's payments of one rail. */
function readerCursor(rail: LedgerPayment["rail"], chainId: number): string {
  return `${CURSOR_PREFIX[rail]}:${chainId}`;
}

/**
 * Reads one chain's payments of one rail from the pass's position on. Its own second is read
 * again (`from` is inclusive), and what is already accounted for is recognised and skipped.
 * The position moves only up to the newest payment the ledger can no longer drop, one
 * REORG_WATCH_BLOCKS under its indexed head (as deep as the ledger follows a
 * reorganisation). A block's second is later than its parent's, so any payment landing in a
 * block above that one, even again in a reorganised block whose second is earlier than the
 * dropped fork's, is at or after the position and is read again.
 */
async function readForward(
  deps: LedgerPassDeps,
  chain: ChainKey,
  rail: LedgerPayment["rail"],
  each: (page: LedgerPayment[]) => Promise<LedgerPayment[]>,
) {
  const chainId = chainInfo(chain).chainId;
  const name = readerCursor(rail, chainId);
  const since = await deps.orphans.position(name);
  // Read before the payments: any payment past it is within reach of a reorganisation too.
  const indexed = (await deps.ledger.indexedBlock(chainId)) ?? 0n;
  const final = (p: LedgerPayment) => BigInt(p.blockNumber) + REORG_WATCH_BLOCKS <= indexed;
  let newest = since ?? 0n;
  let hold: bigint | undefined;
  let page = await deps.ledger.payments({ chainId, rail, from: since ?? 0n, limit: PAGE });
  for (;;) {
    const undecided = await each(page.payments);
    for (const p of undecided) if (hold === undefined || BigInt(p.timestamp) < hold) hold = BigInt(p.timestamp);
    for (const p of page.payments.filter(final)) if (BigInt(p.timestamp) > newest) newest = BigInt(p.timestamp);
    if (!page.nextCursor) break;
    page = await deps.ledger.payments({ chainId, rail, cursor: page.nextCursor, limit: PAGE });
  }
  await deps.orphans.advance(name, hold !== undefined && hold < newest ? hold : newest);
}

/** Orphan pulls (chain:order id) whose wait for the refund budget this process has said (once each). */
const saidWaiting = new Set<string>();

/**
 * An orphan pull's refund waits for BillPay's refund budget, as an order's does: said at
 * error level and counted (billpay_refunds_waiting_total) the first time this process sees it
 * wait, louder when the budget can never hold it (only the admin can raise it); at debug after.
 * The audit lists it as not refunded yet all the while.
 */
function waitForBudget(deps: LedgerPassDeps, o: OrphanPullRow, budget: { available: bigint; limit: bigint }): void {
  const line = { chain: o.chain, orderId: o.order_id, amount: o.amount, available: budget.available.toString(), limit: budget.limit.toString() };
  const key = `${o.chain}:${o.order_id}`;
  if (saidWaiting.has(key)) return deps.log.debug("an orphan pull's refund waits for the refund budget", line);
  const token = deps.deployments.chains[o.chain]?.tokens.find((t) => t.address.toLowerCase() === o.token_address.toLowerCase())?.symbol ?? o.token_address;
  deps.metrics.refundsWaiting.inc({ chain: o.chain, token });
  if (BigInt(o.amount) > budget.limit) deps.log.error("an orphan pull's refund is larger than BillPay's refund budget can ever hold; the admin must raise it", line);
  else deps.log.error("an orphan pull's refund waits for the refund budget; an operator may need to raise it", line);
  saidWaiting.add(key);
}

/** Pulls no live order accounts for are refunded; returns how many orphan pulls it refunded. */
export async function reconcileOrphanPulls(deps: LedgerPassDeps): Promise<number> {
  for (const chain of Object.keys(deps.deployments.chains) as ChainKey[]) {
    await readForward(deps, chain, "pull", async (payments) => {
      const known = new Map((await deps.orders.findByOnchainIds(payments.map((p) => p.orderId!))).map((o) => [o.onchainOrderId, o]));
      const undecided: LedgerPayment[] = [];
      for (const p of payments) {
        const order = known.get(p.orderId!.toLowerCase());
        if (!order || !isPaymentOf(order)(p)) {
          // The service pulls only for pull orders it wrote first, on their own chain: a pull
          // with none (or under an x402 order's id, which the service never pulls under, or
          // under an order's id on another chain) was sent by someone else holding the
          // operator key. Said at once, loudly; then refunded.
          const recorded = await deps.orphans.recordPull(chain, p);
          if (recorded === "again") {
            deps.log.warn("an orphan pull dropped from the chain landed again; refunding it", { chain, orderId: p.orderId, txHash: p.txHash });
          } else if (recorded === "new") {
            deps.metrics.orphanPulls.inc({ chain });
            deps.log.error("a pull with no order reached BillPay: the operator key may be in other hands (pause BillPay and rotate it)", {
              chain,
              orderId: p.orderId,
              payer: p.payer,
              amount: p.amount,
              txHash: p.txHash,
            });
          }
        } else if (order.status === "PULLING") {
          undecided.push(p);
        } else if (order.status === "PAYMENT_FAILED" && (await mayHaveBeenVended(deps, order))) {
          // Written off after its bill was vended (a reorganisation took the pull, and an operator
          // closed it), and then the pull landed: the payer holds the bill, so an operator serves it.
          deps.log.error("the pull of a bill already vended landed after its order was written off; held for an operator to serve it", { requestId: order.requestId, txHash: p.txHash });
          await move(deps, order, ["PAYMENT_FAILED"], "NEEDS_REVIEW", {
            failureReason: `the pull landed (transaction ${p.txHash}) after the order was written off, and its bill had been vended (or may have been): serve it (nothing is vended again), or refund it if the biller shows the bill failed or taken back`,
            txHash: p.txHash,
          });
        } else if (order.status === "PAYMENT_FAILED") {
          // Written off as never pulled, and then the pull landed: give the money back.
          const reason = "the pull landed after the order was written off";
          const refunding = await deps.orders.transition(order.requestId, ["PAYMENT_FAILED"], "REFUNDING", { failureReason: reason, txHash: p.txHash });
          if (refunding) await refundUnheld(deps, refunding, reason);
        }
      }
      return undecided;
    });
  }

  await watchOrphanPullRefunds(deps);
  let refunded = 0;
  for (const o of await deps.orphans.unrefundedPulls()) {
    try {
      // It waits for BillPay's refund budget, as an order's refund does: nothing is sent that
      // BillPay would refuse. The audit lists it as not refunded yet meanwhile.
      const budget = await deps.refundBudgets.read(o.chain, o.token_address);
      if (BigInt(o.amount) > budget.available) {
        waitForBudget(deps, o, budget);
        continue;
      }
      // A pull's refund is bounded on chain too: BillPay refunds at most what the order id pulled, once.
      const outcome = await deps.operator.refund({ chain: o.chain, orderId: o.order_id as Hex, amount: BigInt(o.amount) });
      deps.refundBudgets.forget(o.chain, o.token_address);
      // BillPay answered "already refunded": the refund it holds is found on chain and watched as one sent here.
      const sent = "block" in outcome ? outcome : await orphanRefundFound(deps, o, outcome.errorName);
      await deps.orphans.pullRefunded(o.chain, o.order_id, sent.txHash, sent.block);
      deps.log.warn("refunded a pull no order accounts for", { chain: o.chain, orderId: o.order_id });
      refunded++;
    } catch (err) {
      if (err instanceof ContractRefused && err.errorName === "RefundBudgetExceeded") {
        // The budget moved between the read and the send (an order's refund, another instance): read afresh next pass.
        deps.refundBudgets.forget(o.chain, o.token_address);
        deps.log.warn("an orphan pull's refund found the refund budget spent meanwhile; it waits", { chain: o.chain, orderId: o.order_id });
      } else if (err instanceof ContractRefused && err.errorName === "UnknownOrder" && (await droppedFromChain(deps, o))) {
        deps.log.warn("an orphan pull left the chain before its refund; nothing to refund unless it lands again", { chain: o.chain, orderId: o.order_id });
      } else deps.log.error("could not refund an orphan pull; will retry", { orderId: o.order_id, error: errorText(err) });
    }
  }
  return refunded;
}

/**
 * The refund BillPay already holds for an orphan pull (refund-watch.ts refundFound): under its
 * order id on its chain in the ledger, else on the service's own node. Throws when neither
 * shows it yet: the pull stays to be refunded, and is tried again next pass.
 */
async function orphanRefundFound(deps: LedgerPassDeps, o: OrphanPullRow, refusal: string) {
  const chainId = chainInfo(o.chain).chainId;
  const shown = (await deps.ledger.order(o.order_id)).refunds.filter((r) => r.chainId === chainId);
  return refundFound(deps, o.chain, { orderId: o.order_id as Hex }, shown, 0n, refusal);
}

/**
 * An orphan pull BillPay no longer holds (its refund was refused as an unknown order) that the
 * ledger no longer shows either was reorganised away: retrying could never succeed, so it is
 * marked DROPPED (true), and recorded afresh should it land again. Unsure, it is retried.
 */
async function droppedFromChain(deps: LedgerPassDeps, o: OrphanPullRow): Promise<boolean> {
  try {
    const chainId = chainInfo(o.chain).chainId;
    if ((await deps.ledger.order(o.order_id)).payments.some((p) => p.chainId === chainId && p.rail === "pull")) return false;
    await deps.orphans.pullDropped(o.chain, o.order_id);
    return true;
  } catch (err) {
    deps.log.warn("could not tell whether an orphan pull left the chain; will retry", { orderId: o.order_id, error: errorText(err) });
    return false;
  }
}

/**
 * An orphan pull's refund is watched as an order's is (refund-watch.ts), until the ledger has
 * indexed REORG_WATCH_BLOCKS blocks on top of it. Once the ledger is indexed past its block:
 *   - shown (there, or in a later block after a reorganisation): watched where it stands;
 *   - not shown, and the service's own node has it mined elsewhere or pending: watched
 *     there, or waited for (as with an order's, a refund the node holds past the watch that
 *     the ledger never shows is said once at error level, and watched no more);
 *   - not shown, not on the node, and the pull gone too, from the ledger and from BillPay on
 *     the node: nothing is owed; marked DROPPED, so that the pull, should it land again, is
 *     recorded afresh and refunded;
 *   - else lost: sent again. What bounds that is BillPay's: it refunds an order id once, at
 *     most what it pulled, so a first refund that lands after all makes the second revert, at
 *     the cost of its gas. An orphan pull has no order to hold for an operator, and nothing
 *     to serve, so there is nothing else to decide.
 */
async function watchOrphanPullRefunds(deps: LedgerPassDeps): Promise<void> {
  for (const chain of Object.keys(deps.deployments.chains) as ChainKey[]) {
    try {
      const chainId = chainInfo(chain).chainId;
      const indexed = await deps.ledger.indexedBlock(chainId);
      if (indexed === null) continue;
      for (const o of await deps.orphans.pullsRefundedAfter(chain, indexed - REORG_WATCH_BLOCKS)) {
        if (BigInt(o.refund_block) > indexed) continue; // not indexed yet
        try {
          await watchOrphanPullRefund(deps, chain, o, indexed);
        } catch (err) {
          deps.log.warn("could not check an orphan pull's refund yet; will retry", { chain, orderId: o.order_id, error: errorText(err) });
        }
      }
    } catch (err) {
      deps.log.warn("could not read the orphan pulls' refunds to watch; will retry", { chain, error: errorText(err) });
    }
  }
}

async function watchOrphanPullRefund(deps: LedgerPassDeps, chain: ChainKey, o: OrphanPullRow & { refund_tx_hash: string; refund_block: string }, indexed: bigint): Promise<void> {
  const chainId = chainInfo(chain).chainId;
  const shown = await deps.ledger.order(o.order_id);
  const shownIn = shown.refunds.filter((r) => r.chainId === chainId).map((r) => BigInt(r.blockNumber));
  const standing = await refundStanding(deps, chain, o.refund_tx_hash, shownIn, indexed);
  switch (standing.kind) {
    case "final":
      return void (await deps.orphans.refundUnwatched(chain, o.order_id, o.refund_tx_hash));
    case "ledger-missing":
      deps.log.error("the chain holds an orphan pull's refund past the watch that the ledger does not show; the ledger needs a look", { chain, orderId: o.order_id, txHash: o.refund_tx_hash });
      return void (await deps.orphans.refundUnwatched(chain, o.order_id, o.refund_tx_hash));
    case "watch":
      if (standing.block > BigInt(o.refund_block)) await deps.orphans.refundMovedTo(chain, o.order_id, o.refund_tx_hash, standing.block);
      return;
    case "pending":
      return;
  }
  const pullStands = shown.payments.some((p) => p.chainId === chainId && p.rail === "pull") || (await pullOnChain(deps, { chain, onchainOrderId: o.order_id }));
  if (!pullStands) {
    if (await deps.orphans.refundDroppedWithPull(chain, o.order_id, o.refund_tx_hash)) {
      deps.log.warn("an orphan pull and its refund both left the chain; refunded afresh should the pull land again", { chain, orderId: o.order_id });
    }
    return;
  }
  if (await deps.orphans.refundLost(chain, o.order_id, o.refund_tx_hash)) {
    deps.metrics.refundsLost.inc({ chain, rail: "orphan_pull" });
    deps.log.error("an orphan pull's refund was reorganised off the chain while the pull stands; sending it again", { chain, orderId: o.order_id, txHash: o.refund_tx_hash });
  }
}

/**
 * x402 payments that landed without a live order: after a refusal or write-off (refunded
 * through the order) or with no order at all (recorded for review). Returns how many it acted on.
 */
export async function reconcileAuthorizationPayments(deps: LedgerPassDeps): Promise<number> {
  let acted = 0;
  for (const chain of Object.keys(deps.deployments.chains) as ChainKey[]) {
    for (const rail of ["authorization", "permit2"] as const) await readForward(deps, chain, rail, async (payments) => {
      const undecided: LedgerPayment[] = [];
      const keyOf = (token: string, payer: string, nonce: string) => `${token}:${payer}:${nonce}`.toLowerCase();
      const known = new Map(
        (await deps.orders.findByPayments(chain, payments.map((p) => ({ token: p.token, payer: p.payer, nonce: p.authorizationNonce! })))).map((o) => [
          keyOf(o.tokenAddress, o.payer, o.authNonce ?? ""),
          o,
        ]),
      );
      for (const p of payments) {
        // An order is keyed by its nonce; the rail its payment arrives on must be its own too.
        const found = known.get(keyOf(p.token, p.payer, p.authorizationNonce!));
        const order = found && x402RailOf(found) === p.rail ? found : undefined;
        if (!order) {
          const recorded = await deps.orphans.recordPayment(chain, p);
          const refusal = await deps.refused.find(chain, p.rail, p.token, p.payer, p.authorizationNonce!);
          if (refusal && (await refundLanding(deps, refusal, p))) {
            acted++;
          } else if (recorded) {
            deps.log.warn("an x402 payment reached BillPay with no order; recorded for review", { chain, txHash: p.txHash });
            acted++;
          }
          continue;
        }
        // (A payment submitted before its order was made stays in orphan_payment, but all()
        // leaves out every row an order holds, so it is nobody's orphan.)
        if (order.status === "REFUSED" || order.status === "PAYMENT_FAILED") {
          await landedAfterRefusal(deps, order, p);
          acted++;
        } else if (order.status === "SETTLING") {
          undecided.push(p); // the worker decides it; read again until it has
        }
      }
      return undecided;
    });
  }
  // Payments recorded as orphans before their refusal was kept (the payer landed one himself,
  // then offered it): refunded now that the service holds their signature.
  for (const { record, txHash, amount } of await deps.refused.landedOrphans()) {
    if (await refundLanding(deps, record, { txHash, amount: amount.toString() })) acted++;
  }
  return acted;
}
