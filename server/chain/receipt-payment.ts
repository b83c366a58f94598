/**
 * A payment confirmed from the service's own node, the moment its block exists, instead of
 * once the ledger has indexed it (a poll and a push later: up to a second on a real
 * profile's ledger).
 *
 * What bounds it: the receipt is read from the service's own node (never a facilitator's or
 * a payer's word), by the hash the service itself has (the operator's own pull, or the
 * facilitator's settlement; a wrong hash only finds nothing of ours); it counts only if the
 * transaction succeeded and its logs hold, by the ledger's own predicate (lib/payment-logs.ts),
 * a payment under the order's unique key; and the caller then holds it to the order exactly
 * (paymentMismatch), as every ledger payment is. On a profile with a confirmation depth, the
 * node must have that many blocks on top of it and still hold the receipt in the same block.
 *
 * What follows: the payment is watched like any (orders/payment-watch.ts). Once the ledger
 * indexes past its block, it must show the same payment, or the order is treated as one whose
 * payment was reorganised away: collected again under the same key, or held for an operator.
 * A refund is sent only for a payment the ledger shows (orders/fulfil.ts refund), so no unit
 * leaves BillPay on a receipt alone, and the audit checks every served order against the ledger.
 */
import type { Hex, TransactionReceipt } from "viem";
import { sharedClientFor } from "../../lib/chain-client.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { isProxyCall, paymentsInLogs } from "../../lib/payment-logs.ts";
import { logId } from "../../ponder/src/ids.ts";
import { isPaymentOf, type KeyedOrder, type LedgerPayment } from "../ledger-client.ts";
import type { ChainHeads } from "../../lib/chain-heads.ts";

/** How long a receipt wait sleeps at most before looking again, when no block wakes it. */
const LOOK_AGAIN_MS = 200;

export interface ReceiptDeps {
  deployments: Deployments;
  heads: ChainHeads;
  /** Blocks on top of a payment's before it counts, per chain. */
  confirmations: Partial<Record<ChainKey, number>>;
}

/**
 * The payments into BillPay that transaction `txHash` made, in the ledger's shape, once the
 * node holds its receipt at the chain's confirmation depth; null when it holds none within
 * `waitMs`, the transaction failed, or its block was replaced meanwhile.
 */
export async function paymentsFromReceipt(deps: ReceiptDeps, chain: ChainKey, txHash: Hex, waitMs: number, known?: TransactionReceipt): Promise<LedgerPayment[] | null> {
  const d = deps.deployments.chains[chain];
  if (!d) return null;
  const client = sharedClientFor(chain, rpcUrlFor(chain, d));
  const deadline = Date.now() + waitMs;
  // `known`: the receipt the service's own node just gave for its own transaction (a pull).
  const receipt = known?.transactionHash === txHash ? known : await untilDeadline(deps, chain, deadline, () => client.getTransactionReceipt({ hash: txHash }).catch(() => null));
  if (!receipt || receipt.status !== "success") return null;

  const depth = BigInt(deps.confirmations[chain] ?? 0);
  if (depth > 0n) {
    const deep = await untilDeadline(deps, chain, deadline, async () => ((await client.getBlockNumber()) >= receipt.blockNumber + depth ? true : null));
    if (!deep) return null;
    // Still in the same block now that it is deep enough: a replaced block is a lost receipt.
    const again = await client.getTransactionReceipt({ hash: txHash }).catch(() => null);
    if (!again || again.blockHash !== receipt.blockHash || again.status !== "success") return null;
  }
  // The block's time, from its head as the node announced it (keyed by hash), else asked.
  const timestamp = deps.heads.timeOf(chain, receipt.blockHash) ?? (await client.getBlock({ blockHash: receipt.blockHash }).catch(() => null))?.timestamp;
  if (timestamp === undefined) return null; // replaced between the reads
  // A settlement through x402's Permit2 proxy is known by its calldata too (lib/payment-logs.ts).
  const input = isProxyCall(receipt.to) ? (await client.getTransaction({ hash: txHash }).catch(() => null))?.input : undefined;
  return inLedgerShape(chainInfo(chain).chainId, d.billPay.address, receipt, timestamp, input);
}

/**
 * The payment under `order`'s key in transaction `txHash` (paymentsFromReceipt), undefined
 * when it shows none; a receipt that could not be read shows none, and `failed` hears why.
 * The caller still holds it to the order exactly (paymentMismatch).
 */
export async function orderPaymentIn(deps: ReceiptDeps, order: KeyedOrder, txHash: Hex, waitMs: number, failed: (err: unknown) => void = () => {}): Promise<LedgerPayment | undefined> {
  const shown = await paymentsFromReceipt(deps, order.chain as ChainKey, txHash, waitMs).catch((err: unknown) => {
    failed(err);
    return null;
  });
  return shown?.find(isPaymentOf(order));
}

function inLedgerShape(chainId: number, billPay: string, receipt: TransactionReceipt, timestamp: bigint, input: Hex | undefined): LedgerPayment[] {
  return paymentsInLogs({ to: receipt.to, input, logs: receipt.logs }, billPay).map((p) => ({
    id: logId(chainId, receipt.transactionHash, p.logIndex),
    chainId,
    rail: p.rail,
    orderId: p.orderId,
    authorizationNonce: p.authorizationNonce,
    payer: p.payer,
    token: p.token,
    amount: p.amount.toString(),
    txHash: receipt.transactionHash,
    blockNumber: receipt.blockNumber.toString(),
    timestamp: timestamp.toString(),
  }));
}

/**
 * `look` again as each block arrives, until it answers, the deadline passes, `signal` aborts,
 * or the heads are closed (shutdown: their waits answer at once, and the loop would spin).
 */
export async function untilDeadline<T>(deps: Pick<ReceiptDeps, "heads">, chain: ChainKey, deadline: number, look: () => Promise<T | null>, signal?: AbortSignal): Promise<T | null> {
  for (;;) {
    const seen = deps.heads.latest(chain); // before the look: a block during it wakes the wait at once
    const found = await look();
    if (found !== null) return found;
    const left = deadline - Date.now();
    if (left <= 0 || signal?.aborted || deps.heads.isClosed()) return null;
    await deps.heads.after(chain, seen, Math.min(LOOK_AGAIN_MS, left));
  }
}
