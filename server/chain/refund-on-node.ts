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
import { encodeAbiParameters, keccak256, type Hex } from "viem";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { isRefundUnder, REFUND_EVENTS, refundOf, type RefundKey } from "../../lib/refund-logs.ts";

/** BillPay's order id for a refund is taken by something else, and the payment's key is not refunded: BillPay will refuse its refund under that id for ever. */
export class RefundIdTaken extends Error {
  constructor(chain: ChainKey) {
    super(`BillPay on ${chain} holds the refund's order id taken (OrderExists), and the payment's key not refunded: no refund of this payment exists, nor can one under that id`);
    this.name = "RefundIdTaken";
  }
}

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

/**
 * Whether BillPay on the service's node holds `key` itself refunded: a pull's order, or an
 * x402 payment's authorization (token, payer, nonce) or Permit2 nonce (payer, nonce: Permit2's
 * nonces are the owner's across tokens). BillPay also answers "already refunded" when only the
 * order id is taken (`OrderExists`), by whoever held the operator or refunder key: then no
 * refund of this payment exists, nor ever can under that id.
 */
export async function keyRefundedOnNode(deps: { deployments: Deployments }, chain: ChainKey, key: RefundKey): Promise<boolean> {
  const d = deps.deployments.chains[chain];
  const client = deployedClientFor(deps.deployments, chain);
  if (!d || !client) throw new Error(`no deployment of BillPay on ${chain}`);
  const address = d.billPay.address as Hex;
  if ("orderId" in key) return (await client.readContract({ address, abi: billPayAbi, functionName: "orderOf", args: [key.orderId] })).refunded;
  if (key.rail === "permit2") {
    const slot = keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [key.payer, BigInt(key.nonce)]));
    return client.readContract({ address, abi: billPayAbi, functionName: "permit2Refunded", args: [slot] });
  }
  const slot = keccak256(encodeAbiParameters([{ type: "address" }, { type: "address" }, { type: "bytes32" }], [key.token, key.payer, key.nonce]));
  return client.readContract({ address, abi: billPayAbi, functionName: "authorizationRefunded", args: [slot] });
}
