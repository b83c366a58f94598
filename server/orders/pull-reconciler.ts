/**
 * Closes the gaps the pull rail can leave after a crash, each exactly once:
 *   - a PULLING order (its request died): the ledger shows the pull -> PAID, then vend;
 *     the chain never took it (reverted, or never sent) -> PAYMENT_FAILED, nothing moved;
 *   - a pull in the ledger that no live order accounts for (no order at all, or one already
 *     written off): refunded to its payer, keyed by (chain, order id) in orphan_pull, and
 *     BillPay refunds an order id once in any case.
 * Pulled-but-not-vended (PAID) and failed-but-not-refunded (REFUNDING) orders are the
 * worker's usual work (orders/worker.ts).
 */
import type { Hex } from "viem";
import { billPayAbi } from "../../lib/abis.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import { CHAINS, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor } from "../../lib/deployments.ts";
import type { Db } from "../db.ts";
import type { LedgerPayment } from "../ledger-client.ts";
import { fulfil, move, refund, type FlowDeps } from "./fulfil.ts";
import type { Order } from "./store.ts";

const PAGE = 200;

export async function reconcilePulling(deps: FlowDeps, o: Order): Promise<void> {
  const { payments } = await deps.ledger.order(o.onchainOrderId);
  if (payments[0]) {
    const paid = await deps.orders.transition(o.requestId, ["PULLING"], "PAID", { txHash: payments[0].txHash });
    if (paid) await fulfil(deps, paid);
    return;
  }
  const chain = o.chain as ChainKey;
  const client = publicClientFor(chain, rpcUrlFor(chain, deps.deployments.chains[chain]!));
  const onChain = await client.readContract({
    address: deps.deployments.chains[chain]!.billPay.address as Hex,
    abi: billPayAbi,
    functionName: "orderOf",
    args: [o.onchainOrderId as Hex],
  });
  // Pulled, but the ledger has not caught up: a later pass decides from the ledger.
  if (onChain.payer !== "0x0000000000000000000000000000000000000000") return;
  // Signed hashes are recorded before sending, so no hash means nothing was sent. With one,
  // a reverted receipt means nothing moved; no receipt yet means it may still land: wait
  // while the order is young. Should it land after the write-off, the orphan pass refunds it.
  if (!o.txHash) {
    await deps.orders.writeOffUnsent(o.requestId); // a no-op if a pull was signed meanwhile
    return;
  }
  const receipt = await client.getTransactionReceipt({ hash: o.txHash as Hex }).catch(() => null);
  if (!receipt && Date.now() - o.createdAt.getTime() < deps.leaseSeconds * 1000) return;
  await move(deps, o, ["PULLING"], "PAYMENT_FAILED", { failureReason: "the pull did not land" });
}

interface OrphanRow {
  chain: ChainKey;
  order_id: string;
  amount: string;
}

export class OrphanPulls {
  constructor(private readonly db: Db) {}

  async record(chain: ChainKey, p: LedgerPayment): Promise<void> {
    await this.db.query(
      `INSERT INTO orphan_pull (chain, order_id, payer, token_address, amount, pull_tx_hash, status)
       VALUES ($1, $2, $3, $4, $5, $6, 'REFUNDING') ON CONFLICT DO NOTHING`,
      [chain, p.orderId!.toLowerCase(), p.payer.toLowerCase(), p.token.toLowerCase(), p.amount, p.txHash],
    );
  }

  async unrefunded(): Promise<OrphanRow[]> {
    return this.db.query<OrphanRow>(`SELECT chain, order_id, amount::text AS amount FROM orphan_pull WHERE status = 'REFUNDING'`);
  }

  async refunded(chain: ChainKey, orderId: string, txHash: string | null): Promise<void> {
    await this.db.query(`UPDATE orphan_pull SET status = 'REFUNDED', refund_tx_hash = $3 WHERE chain = $1 AND order_id = $2`, [
      chain,
      orderId,
      txHash,
    ]);
  }

  /** How far the pass has read one chain's pulls (ledger timestamp, unix seconds). */
  async position(chainId: number): Promise<bigint | undefined> {
    const [row] = await this.db.query<{ position: string }>(`SELECT position FROM reconciler_cursor WHERE name = $1`, [`pulls:${chainId}`]);
    return row ? BigInt(row.position) : undefined;
  }

  async advance(chainId: number, timestamp: bigint): Promise<void> {
    await this.db.query(
      `INSERT INTO reconciler_cursor (name, position) VALUES ($1, $2)
       ON CONFLICT (name) DO UPDATE SET position = GREATEST(reconciler_cursor.position::numeric, EXCLUDED.position::numeric)::text, updated_at = now()`,
      [`pulls:${chainId}`, timestamp.toString()],
    );
  }
}

/**
 * One pass over the ledger's recent pulls, chain by chain (each chain is indexed at its own
 * pace, so each keeps its own position); returns how many orphans it refunded.
 */
export async function reconcileOrphanPulls(deps: FlowDeps & { orphans: OrphanPulls }): Promise<number> {
  for (const chain of Object.keys(deps.deployments.chains) as ChainKey[]) {
    const chainId = CHAINS[chain].chainId;
    const since = await deps.orphans.position(chainId);
    // One chain's blocks are indexed in order, so its position only moves forward; the
    // position's own second is read again (`from` is inclusive) and known pulls are skipped.
    let page = await deps.ledger.pulls({ chainId, from: since ?? 0n, limit: PAGE });
    let newest = since ?? 0n;
    for (;;) {
      const known = new Map((await deps.orders.findByOnchainIds(page.payments.map((p) => p.orderId!))).map((o) => [o.onchainOrderId, o]));
      for (const p of page.payments) {
        const order = known.get(p.orderId!.toLowerCase());
        if (!order) {
          await deps.orphans.record(chain, p);
        } else if (order.status === "PAYMENT_FAILED") {
          // Written off as never pulled, and then the pull landed: give the money back.
          const reason = "the pull landed after the order was written off";
          const refunding = await deps.orders.transition(order.requestId, ["PAYMENT_FAILED"], "REFUNDING", { failureReason: reason, txHash: p.txHash });
          if (refunding) await refund(deps, refunding, reason);
        }
        if (BigInt(p.timestamp) > newest) newest = BigInt(p.timestamp);
      }
      if (!page.nextCursor) break;
      page = await deps.ledger.pulls({ chainId, cursor: page.nextCursor, limit: PAGE });
    }
    await deps.orphans.advance(chainId, newest);
  }

  let refunded = 0;
  for (const o of await deps.orphans.unrefunded()) {
    try {
      const outcome = await deps.operator.refund({ chain: o.chain, orderId: o.order_id as Hex, amount: BigInt(o.amount) });
      await deps.orphans.refunded(o.chain, o.order_id, "txHash" in outcome ? outcome.txHash : null);
      deps.log("refunded a pull no order accounts for", { chain: o.chain, orderId: o.order_id });
      refunded++;
    } catch (err) {
      deps.log("could not refund an orphan pull; will retry", { orderId: o.order_id, error: (err as Error).message });
    }
  }
  return refunded;
}
