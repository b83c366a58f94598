/**
 * A refund the service's own node holds before the ledger shows it. BillPay answers "already
 * refunded" from the node's state: a refund a crashed run sent, or another actor's, may be a
 * block or two ahead of the ledger. The service still needs its transaction and block, to watch
 * it as every refund is watched (orders/refund-watch.ts): without them a reorganisation could
 * take it away and nothing would notice.
 *
 * Matched by the ledger's own predicate (lib/refund-logs.ts), in BillPay's logs from `from` to
 * the node's head: only BillPay's own events, so nobody else's contract can plant one.
 */
import type { Hex } from "viem";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { isRefundUnder, REFUND_EVENTS, refundOf, type RefundKey } from "../../lib/refund-logs.ts";

export interface RefundOnChain {
  txHash: Hex;
  block: bigint;
}

/** The newest refund under `key` in BillPay's logs on the service's node, from block `from` to its head; null when it holds none. */
export async function refundOnNode(deps: { deployments: Deployments }, chain: ChainKey, key: RefundKey, from: bigint): Promise<RefundOnChain | null> {
  const d = deps.deployments.chains[chain];
  const client = deployedClientFor(deps.deployments, chain);
  if (!d || !client) return null;
  const logs = await client.getLogs({ address: d.billPay.address as Hex, events: REFUND_EVENTS, fromBlock: from, toBlock: "latest", strict: true });
  let newest: RefundOnChain | null = null;
  for (const log of logs) {
    if (log.removed || log.blockNumber === null || log.transactionHash === null) continue;
    if (!isRefundUnder(key, refundOf(log as Parameters<typeof refundOf>[0]))) continue;
    if (!newest || log.blockNumber >= newest.block) newest = { txHash: log.transactionHash, block: log.blockNumber };
  }
  return newest;
}
