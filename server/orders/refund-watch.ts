/**
 * Refunds after the service sent them. An order is REFUNDED on its refund's first receipt, but
 * a chain can reorganise the block that held it: the refund is gone, its payment stands, and
 * the refunder's nonce may be taken by its next transaction, so the refund would never come
 * back on its own. The payer, told REFUNDED, would be out his money.
 *
 * Every refund the service sends is recorded here with its block (in the statement that makes
 * the order REFUNDED), and watched until the ledger has indexed REORG_WATCH_BLOCKS blocks on
 * top of it, as payments are (orders/payment-watch.ts). A refund is lost when the ledger has
 * indexed past its block again and shows no refund under the order's key. Then: an error line,
 * `billpay_refunds_lost_total`, and the order goes to NEEDS_REVIEW, saying so: money never goes
 * back out of a REFUNDED order by itself (orders/lifecycle.ts). An operator's refund sends it
 * again, bounded as every refund is (what the ledger shows paid under the key, nothing when it
 * shows a refund, the refund budget) and by BillPay itself, which refunds a key once: should
 * the lost transaction land after all, the second refund reverts, or the first does. Serving
 * such an order is refused (orders/review.ts): the lost refund may still land, after the bill.
 *
 * "Lost" is believed of the ledger and the service's own node together: the ledger, indexed
 * past the refund's block, shows no refund under the key, and the node holds no receipt of it
 * (one mined again in a later block is watched there).
 *
 * An order that moved on meanwhile (its payment lost too: PAYMENT_FAILED, with nothing owed
 * either way) is watched no more.
 */
import { TransactionReceiptNotFoundError, type Hex } from "viem";
import { deployedClientFor } from "../../lib/chain-client.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { deploymentIdentity, type Deployments } from "../../lib/deployments.ts";
import type { Db } from "../db.ts";
import type { LedgerClient, LedgerRefund } from "../ledger-client.ts";
import type { RefundKey } from "../../lib/refund-logs.ts";
import { RefundIdTaken, refundOnNode, type RefundOnChain } from "../chain/refund-on-node.ts";
import { transactionKnown } from "../chain/node-transactions.ts";
import { ledgerUnderKey, newestRefund } from "./ledger-view.ts";
import { errorText } from "../log-safety.ts";
import type { Log } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { REORG_WATCH_BLOCKS } from "./payment-watch.ts";
import type { AlongsideWrite, Order, OrderStatus, OrderStore } from "./store.ts";

/** Open watches read per chain and pass. */
const WATCH_BATCH = 500;

interface RefundWatchRow {
  request_id: string;
  tx_hash: string;
  block_number: string;
}

export class RefundWatches {
  constructor(
    private readonly db: Db,
    private readonly deployments: Deployments,
  ) {}

  private deployment(chain: string): string {
    return deploymentIdentity(this.deployments, chain);
  }

  /**
   * Watches the refund that makes `o` REFUNDED, as a write in that move's statement
   * (OrderStore.advance), from the states `from` the move is made: written only if the order
   * is in one of them as the statement reads it, so a stale actor's failed move leaves the
   * watch (and a loss's mark) as it is.
   */
  recording(o: Order, txHash: Hex, block: bigint, from: OrderStatus[]): AlongsideWrite {
    return {
      sql: (n) => `INSERT INTO refund_watch (request_id, chain, deployment, tx_hash, block_number)
       SELECT $${n}, $${n + 1}, $${n + 2}, $${n + 3}, $${n + 4} WHERE EXISTS (SELECT 1 FROM bill_order WHERE request_id = $${n} AND status = ANY($${n + 5}::text[]))
       ON CONFLICT (request_id) DO UPDATE SET tx_hash = EXCLUDED.tx_hash, block_number = EXCLUDED.block_number, lost_at = NULL, updated_at = now()`,
      params: [o.requestId, o.chain, this.deployment(o.chain), txHash.toLowerCase(), block.toString(), from],
    };
  }

  /** Marks the refund lost, as a write in the statement that holds its order (only while it is REFUNDED under this refund). */
  losing(requestId: string, txHash: string): AlongsideWrite {
    return {
      sql: (n) => `UPDATE refund_watch SET lost_at = now(), updated_at = now() WHERE request_id = $${n} AND tx_hash = $${n + 1} AND lost_at IS NULL
       AND EXISTS (SELECT 1 FROM bill_order WHERE request_id = $${n} AND status = 'REFUNDED')`,
      params: [requestId, txHash.toLowerCase()],
    };
  }

  /** The chain's watched refunds, oldest first; those of another deployment of it are dropped. */
  async open(chain: ChainKey): Promise<RefundWatchRow[]> {
    const deployment = this.deployment(chain);
    await this.db.query(`DELETE FROM refund_watch WHERE chain = $1 AND deployment <> $2 AND lost_at IS NULL`, [chain, deployment]);
    return this.db.query<RefundWatchRow>(
      `SELECT request_id, tx_hash, block_number::text AS block_number FROM refund_watch
       WHERE chain = $1 AND deployment = $2 AND lost_at IS NULL ORDER BY block_number LIMIT $3`,
      [chain, deployment, WATCH_BATCH],
    );
  }

  /** Watched no more: past the watch, or its order moved on. */
  async close(requestId: string, txHash: string): Promise<void> {
    await this.db.query(`DELETE FROM refund_watch WHERE request_id = $1 AND tx_hash = $2 AND lost_at IS NULL`, [requestId, txHash]);
  }

  /** The refund stands in another block now (mined again after a reorganisation). */
  async movedTo(requestId: string, txHash: string, block: bigint): Promise<void> {
    await this.db.query(`UPDATE refund_watch SET block_number = $3, updated_at = now() WHERE request_id = $1 AND tx_hash = $2`, [requestId, txHash, block.toString()]);
  }

  /**
   * The order's lost refund, if it has one not sent again since: a signed public transaction
   * that may still land (anyone can submit it while the refunder's nonce is not past it).
   */
  async lostRefund(requestId: string): Promise<string | null> {
    const [row] = await this.db.query<{ tx_hash: string }>(`SELECT tx_hash FROM refund_watch WHERE request_id = $1 AND lost_at IS NOT NULL`, [requestId]);
    return row?.tx_hash ?? null;
  }
}

/** What watching refunds may touch: the ledger (what it shows), the service's node (receipts, through the deployments), the orders and their watches. */
export interface RefundWatchDeps {
  deployments: Deployments;
  ledger: LedgerClient;
  orders: OrderStore;
  refundWatches: RefundWatches;
  leaseSeconds: number;
  metrics: Metrics;
  log: Log;
}

/**
 * The refund BillPay already holds under a key, when it answers "already refunded" (`refusal`,
 * its error's name) to a refund the service sends (one a crashed run sent, or another
 * actor's): the newest the ledger shows under the key (`shown`), else the newest the service's
 * own node holds under it, by the ledger's predicate, from REORG_WATCH_BLOCKS under the
 * ledger's indexed block (or the payment's block, `paidIn`, if later) to its head. The node may
 * be a block or two ahead of the ledger, and a refund the ledger has not shown yet is as
 * exposed to a reorganisation as any: its caller records it with the move to REFUNDED and
 * watches it. Throws when neither holds one: nothing is recorded as refunded, or left
 * unwatched, on BillPay's answer alone. RefundIdTaken when BillPay said OrderExists and holds
 * the key itself not refunded (only the order id was taken: no such refund exists); otherwise
 * the caller tries again.
 */
export async function refundFound(
  deps: { ledger: LedgerClient; deployments: Deployments },
  chain: ChainKey,
  key: RefundKey,
  shown: LedgerRefund[],
  paidIn: bigint,
  refusal: string,
): Promise<RefundOnChain> {
  const newest = newestRefund(shown);
  if (newest) return { txHash: newest.txHash as Hex, block: BigInt(newest.blockNumber), amount: BigInt(newest.amount) };
  const indexed = await deps.ledger.indexedBlock(chainInfo(chain).chainId);
  if (indexed === null) throw new Error("BillPay holds the key refunded, and the ledger has indexed nothing yet to show where");
  const reach = indexed > REORG_WATCH_BLOCKS ? indexed - REORG_WATCH_BLOCKS : 0n;
  const from = paidIn > reach ? paidIn : reach;
  const onNode = await refundOnNode(deps, chain, key, from);
  if (onNode.refund) return onNode.refund;
  if (refusal === "OrderExists" && !onNode.keyRefunded) throw new RefundIdTaken(chain);
  throw new Error(`BillPay answered ${refusal}, but neither the ledger (indexed to block ${indexed}) nor the service's node (from block ${from}) shows the refund yet`);
}

/**
 * One pass over the watched refunds of every chain: closes those past the watch, and holds
 * those the chain dropped for an operator. Returns how many lost refunds it acted on.
 */
export async function watchRefunds(deps: RefundWatchDeps): Promise<number> {
  let acted = 0;
  for (const chain of Object.keys(deps.deployments.chains) as ChainKey[]) {
    const rows = await deps.refundWatches.open(chain);
    if (rows.length === 0) continue;
    // The position first, the refunds next: "not in the ledger" is believed only of a ledger
    // that had indexed past the refund's block when it was read.
    const indexed = await deps.ledger.indexedBlock(chainInfo(chain).chainId);
    if (indexed === null) continue;
    for (const w of rows) {
      if (BigInt(w.block_number) > indexed) continue; // the ledger is not at that height yet
      try {
        if (await actOn(deps, chain, w, indexed)) acted++;
      } catch (err) {
        deps.log.warn("could not check a refund against the ledger yet; will retry", { requestId: w.request_id, error: errorText(err) });
      }
    }
  }
  return acted;
}

/** Where a watched refund stands, once the ledger is indexed past its block (refundStanding). */
export type RefundStanding =
  | { kind: "watch"; block: bigint } // shown, or mined on the node, in `block`: watched there
  | { kind: "final" } // shown, REORG_WATCH_BLOCKS deep: watched no more
  | { kind: "ledger-missing"; block: bigint } // the node holds it that deep; the ledger never showed it
  | { kind: "pending" } // back in the node's pool: waited for
  | { kind: "lost" }; // neither the ledger nor the node holds it

/**
 * Where a refund the service watches stands, for an order's refund (refundWatches) and an
 * orphan pull's (ledger-pass.ts) alike, given the blocks the ledger, indexed to `indexed`,
 * shows refunds under its key in. Not shown, the ledger may be mid-way through following a
 * reorganisation, or the refund mined again in a later block, or back in the node's pool:
 * the service's own node, which holds a receipt only for a transaction on its chain, has the
 * last word. A reverted receipt moved nothing: lost. Throws when the node cannot be asked:
 * nothing is decided then. Whether a lost refund is owed (its payment still stands) is the
 * caller's to decide.
 */
export async function refundStanding(deps: { deployments: Deployments }, chain: ChainKey, txHash: string, shownIn: bigint[], indexed: bigint): Promise<RefundStanding> {
  if (shownIn.length > 0) {
    const newest = shownIn.reduce((max, b) => (b > max ? b : max));
    return newest + REORG_WATCH_BLOCKS <= indexed ? { kind: "final" } : { kind: "watch", block: newest };
  }
  const client = deployedClientFor(deps.deployments, chain)!;
  const receipt = await client.getTransactionReceipt({ hash: txHash as Hex }).catch((err: unknown) => {
    if (err instanceof TransactionReceiptNotFoundError) return null;
    throw err;
  });
  if (receipt?.status === "success") {
    return receipt.blockNumber + REORG_WATCH_BLOCKS <= indexed ? { kind: "ledger-missing", block: receipt.blockNumber } : { kind: "watch", block: receipt.blockNumber };
  }
  if (receipt) return { kind: "lost" };
  // No receipt: one the node still knows is unmined in its pool.
  return (await transactionKnown(deps, chain, txHash as Hex)) ? { kind: "pending" } : { kind: "lost" };
}

/** What one watched refund needs; true when it was lost and its order held. */
async function actOn(deps: RefundWatchDeps, chain: ChainKey, w: RefundWatchRow, indexed: bigint): Promise<boolean> {
  const order = await deps.orders.get(w.request_id);
  if (!order || order.status !== "REFUNDED") {
    await deps.refundWatches.close(w.request_id, w.tx_hash);
    return false;
  }
  const shown = await ledgerUnderKey(deps, order);
  const standing = await refundStanding(deps, chain, w.tx_hash, shown.refunds.map((r) => BigInt(r.blockNumber)), indexed);
  switch (standing.kind) {
    case "final":
      await deps.refundWatches.close(w.request_id, w.tx_hash);
      return false;
    case "ledger-missing":
      // The refund is final, the ledger is what is wrong (the audit shows the treasury against it). Said once, and watched no more.
      deps.log.error("the chain holds a refund past the watch that the ledger does not show; the ledger needs a look", { requestId: w.request_id, chain, txHash: w.tx_hash, block: standing.block.toString() });
      await deps.refundWatches.close(w.request_id, w.tx_hash);
      return false;
    case "watch":
      if (standing.block > BigInt(w.block_number)) await deps.refundWatches.movedTo(w.request_id, w.tx_hash, standing.block);
      return false;
    case "pending":
      return false;
  }
  // The payment went too: nothing is owed either way, and the payment watch closes the order.
  if (!shown.payment) return false;
  // Lost. Held like any order, one actor at a time (a webhook or the payment watch may be at
  // work on it), and only if the refund watched is still the order's (another may have been
  // sent since this pass read the watch).
  const claimed = await deps.orders.claim(order.requestId, deps.leaseSeconds);
  if (!claimed) return false;
  try {
    if (claimed.status !== "REFUNDED" || (claimed.refundTxHash ?? "").toLowerCase() !== w.tx_hash.toLowerCase()) return false;
    // The hold and the mark that refuses a serve of it, in one statement.
    const held = await deps.orders.advance(
      claimed,
      ["REFUNDED"],
      "NEEDS_REVIEW",
      { failureReason: `${claimed.failureReason ? `${claimed.failureReason}; ` : ""}its refund (transaction ${w.tx_hash}) was reorganised off the chain while its payment stands: an operator refunds it again` },
      deps.refundWatches.losing(w.request_id, w.tx_hash),
    );
    if (held?.status !== "NEEDS_REVIEW") return false;
    deps.log.error("a refund the service sent was reorganised off the chain; held for an operator to refund it again", { requestId: order.requestId, chain, txHash: w.tx_hash, block: w.block_number });
    deps.metrics.refundsLost.inc({ chain, rail: order.rail });
    return true;
  } finally {
    await deps.orders.release(claimed.requestId, claimed.leaseToken);
  }
}
