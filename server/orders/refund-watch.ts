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
 * the lost transaction land after all, the second refund reverts, or the first does.
 *
 * An order that moved on meanwhile (its payment lost too: PAYMENT_FAILED, with nothing owed
 * either way) is watched no more.
 */
import type { Hex } from "viem";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import type { Db } from "../db.ts";
import { x402RailOf, type LedgerClient, type LedgerRefund } from "../ledger-client.ts";
import { errorText } from "../log-safety.ts";
import type { Log } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { REORG_WATCH_BLOCKS } from "./payment-watch.ts";
import type { AlongsideWrite, Order, OrderStore } from "./store.ts";

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

  /** Which chain this is: its genesis and BillPay's address (a local chain started afresh is another). */
  private deployment(chain: string): string {
    const d = this.deployments.chains[chain as ChainKey]!;
    return `${d.genesisHash}:${d.billPay.address}`.toLowerCase();
  }

  /** Watches the refund that makes `o` REFUNDED, as a write in that move's statement (OrderStore.advance). */
  recording(o: Order, txHash: Hex, block: bigint): AlongsideWrite {
    return {
      sql: (n) => `INSERT INTO refund_watch (request_id, chain, deployment, tx_hash, block_number)
       VALUES ($${n}, $${n + 1}, $${n + 2}, $${n + 3}, $${n + 4})
       ON CONFLICT (request_id) DO UPDATE SET tx_hash = EXCLUDED.tx_hash, block_number = EXCLUDED.block_number, updated_at = now()`,
      params: [o.requestId, o.chain, this.deployment(o.chain), txHash.toLowerCase(), block.toString()],
    };
  }

  /** The chain's watched refunds, oldest first; those of another deployment of it are dropped. */
  async open(chain: ChainKey): Promise<RefundWatchRow[]> {
    const deployment = this.deployment(chain);
    await this.db.query(`DELETE FROM refund_watch WHERE chain = $1 AND deployment <> $2`, [chain, deployment]);
    return this.db.query<RefundWatchRow>(
      `SELECT request_id, tx_hash, block_number::text AS block_number FROM refund_watch WHERE chain = $1 ORDER BY block_number LIMIT $2`,
      [chain, WATCH_BATCH],
    );
  }

  /** Watched no more: past the watch, sent again, or its order moved on. */
  async close(requestId: string, txHash: string): Promise<void> {
    await this.db.query(`DELETE FROM refund_watch WHERE request_id = $1 AND tx_hash = $2`, [requestId, txHash]);
  }
}

/** What watching refunds may touch: the ledger (what it shows), the orders and their watches. */
export interface RefundWatchDeps {
  deployments: Deployments;
  ledger: LedgerClient;
  orders: OrderStore;
  refundWatches: RefundWatches;
  metrics: Metrics;
  log: Log;
}

/** The refunds the ledger shows under the order's key on its chain. */
async function refundsUnderKey(deps: RefundWatchDeps, o: Order): Promise<LedgerRefund[]> {
  const chainId = chainInfo(o.chain).chainId;
  const shown = o.rail === "pull" ? await deps.ledger.order(o.onchainOrderId) : await deps.ledger.authorization(o.chain as ChainKey, o.tokenAddress, o.payer, o.authNonce!, x402RailOf(o));
  return shown.refunds.filter((r) => r.chainId === chainId);
}

/**
 * One pass over the watched refunds of every chain: closes those past the watch, and sends
 * those the chain dropped to an operator. Returns how many lost refunds it acted on.
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
      try {
        const order = await deps.orders.get(w.request_id);
        if (!order || order.status !== "REFUNDED") {
          await deps.refundWatches.close(w.request_id, w.tx_hash);
          continue;
        }
        const refunds = await refundsUnderKey(deps, order);
        if (refunds.length > 0) {
          // Shown (in its block, or another one after a reorganisation): watched until the
          // newest block it may stand in is past the ledger's depth.
          const newest = refunds.reduce((max, r) => (BigInt(r.blockNumber) > max ? BigInt(r.blockNumber) : max), BigInt(w.block_number));
          if (newest + REORG_WATCH_BLOCKS <= indexed) await deps.refundWatches.close(w.request_id, w.tx_hash);
          continue;
        }
        if (BigInt(w.block_number) > indexed) continue; // the ledger is not back at that height yet
        const lost = `its refund (transaction ${w.tx_hash}) was reorganised off the chain while its payment stands: refund it again`;
        const held = await deps.orders.transition(order.requestId, ["REFUNDED"], "NEEDS_REVIEW", { failureReason: `${order.failureReason ?? "refunded"}; ${lost}` });
        await deps.refundWatches.close(w.request_id, w.tx_hash);
        if (held) {
          deps.log.error("a refund the service sent was reorganised off the chain; held for an operator to refund it again", { requestId: order.requestId, chain, txHash: w.tx_hash, block: w.block_number });
          deps.metrics.refundsLost.inc({ chain, rail: order.rail });
          acted++;
        }
      } catch (err) {
        deps.log.warn("could not check a refund against the ledger yet; will retry", { requestId: w.request_id, error: errorText(err) });
      }
    }
  }
  return acted;
}
