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
import type { SignedTransactions } from "./operator.ts";
import { nonceUnused, transactionPending } from "./node-transactions.ts";

/**
 * BillPay answered OrderExists, and holds the payment's key not refunded: the refund's order id
 * was taken by something else (whoever held the operator or refunder key), no refund of this
 * payment exists, and BillPay will refuse one under that id for ever.
 */
export class RefundIdTaken extends Error {
  constructor(chain: ChainKey) {
    super(`BillPay on ${chain} holds the refund's order id taken (OrderExists), and the payment's key not refunded: no refund of this payment exists, nor can one go under that id`);
    this.name = "RefundIdTaken";
  }
}

export interface RefundOnChain {
  txHash: Hex;
  block: bigint;
  amount: bigint;
}

/**
 * What the service's node shows, at one head, of a refund under `key`: the newest in BillPay's
 * logs from block `from`, and whether BillPay holds the key itself refunded (a pull's order, or
 * an x402 payment's authorization (token, payer, nonce) or Permit2 nonce (payer, nonce:
 * Permit2's nonces are the owner's across tokens)). Both are read at the same block, so a node
 * behind a balancer cannot answer one from a block the other has not reached.
 */
export async function refundOnNode(deps: { deployments: Deployments }, chain: ChainKey, key: RefundKey, from: bigint): Promise<{ refund: RefundOnChain | null; keyRefunded: boolean }> {
  const d = deps.deployments.chains[chain];
  const client = deployedClientFor(deps.deployments, chain);
  if (!d || !client) throw new Error(`no deployment of BillPay on ${chain}`);
  const address = d.billPay.address as Hex;
  const head = await client.getBlockNumber();
  // Newest first, LOG_SPAN blocks a request (providers cap a getLogs range): a ledger far
  // behind makes the range long, and the refund is most likely near the head.
  let refund: RefundOnChain | null = null;
  for (let to = head; to >= from && !refund; to -= LOG_SPAN) {
    const lowest = to - LOG_SPAN + 1n > from ? to - LOG_SPAN + 1n : from;
    for (const log of await client.getLogs({ address, events: REFUND_EVENTS, fromBlock: lowest, toBlock: to, strict: true })) {
      if (log.removed || log.blockNumber === null || log.transactionHash === null) continue;
      const r = refundOf(log as Parameters<typeof refundOf>[0]);
      if (!isRefundUnder(key, r)) continue;
      if (!refund || log.blockNumber >= refund.block) refund = { txHash: log.transactionHash, block: log.blockNumber, amount: r.amount };
    }
    if (lowest === 0n) break;
  }
  return { refund, keyRefunded: await keyRefundedAt(client, address, key, head) };
}

/** Whether BillPay, at the node's head, holds `key` refunded: a refund under it stands on chain. */
export async function keyRefundedOnNode(deps: { deployments: Deployments }, chain: ChainKey, key: RefundKey): Promise<boolean> {
  const d = deps.deployments.chains[chain];
  const client = deployedClientFor(deps.deployments, chain);
  if (!d || !client) throw new Error(`no deployment of BillPay on ${chain}`);
  return keyRefundedAt(client, d.billPay.address as Hex, key, await client.getBlockNumber());
}

/**
 * A refund of an order's payment that may stand on chain whatever the ledger shows yet, as the
 * service's node shows it now, in this order:
 * - `pending`: one of the refund transactions signed for the order held unmined in its pool;
 * - `standing`: BillPay holds the key refunded at the node's head (mined, perhaps a block ahead
 *   of the ledger); a refund mined between the two reads is read so;
 * - `landable`: none held, none standing, but the signer's nonce one was signed under is not yet
 *   used `depth` blocks under the head. A pool drops a transaction (a node restarted, a fee
 *   eviction) without making it void: anyone who saw it can send it again until another
 *   transaction of its signer's takes its nonce, as the refunder's next one does;
 * else undefined: every refund signed for it is dead or mined and reverted.
 * Refunds signed before their nonces were kept are asked of the pool alone.
 */
export async function refundInSight(
  deps: { deployments: Deployments; confirmations: Partial<Record<ChainKey, number>> },
  chain: ChainKey,
  key: RefundKey,
  signed: SignedTransactions,
): Promise<{ pending: Hex } | { standing: true } | { landable: SignedTransactions["nonces"][number] } | undefined> {
  const pending = await Promise.all(signed.hashes.map(async (hash) => ((await transactionPending(deps, chain, hash)) ? hash : undefined)));
  const first = pending.find((hash) => hash !== undefined);
  if (first) return { pending: first };
  if (await keyRefundedOnNode(deps, chain, key)) return { standing: true };
  const unused = await nonceUnused(deps, chain, signed.nonces);
  return unused ? { landable: unused } : undefined;
}

/** Blocks one getLogs request spans (within what public providers allow). */
const LOG_SPAN = 2_000n;

function keyRefundedAt(client: NonNullable<ReturnType<typeof deployedClientFor>>, address: Hex, key: RefundKey, blockNumber: bigint): Promise<boolean> {
  if ("orderId" in key) return client.readContract({ address, abi: billPayAbi, functionName: "orderOf", args: [key.orderId], blockNumber }).then((o) => o.refunded);
  if (key.rail === "permit2") {
    const slot = keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [key.payer, BigInt(key.nonce)]));
    return client.readContract({ address, abi: billPayAbi, functionName: "permit2Refunded", args: [slot], blockNumber });
  }
  const slot = keccak256(encodeAbiParameters([{ type: "address" }, { type: "address" }, { type: "bytes32" }], [key.token, key.payer, key.nonce]));
  return client.readContract({ address, abi: billPayAbi, functionName: "authorizationRefunded", args: [slot], blockNumber });
}
