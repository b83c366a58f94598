/**
 * What the ledger shows under an order's key (an x402 order's chain, token, payer and nonce on
 * its rail; a pull's order id), on the order's own chain: its payment, if any, and the refunds
 * of it. Operators' decisions (review.ts) and the refund watch (refund-watch.ts) read it alike.
 */
import type { ChainHeads } from "../../lib/chain-heads.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { isPaymentOf, orderKeyOf, type LedgerClient, type LedgerPayment, type LedgerRefund } from "../ledger-client.ts";
import type { Order } from "./store.ts";

export interface LedgerView {
  payment: LedgerPayment | null;
  refunds: LedgerRefund[];
  refunded: bigint;
}

export async function ledgerUnderKey(deps: { ledger: LedgerClient }, o: Order): Promise<LedgerView> {
  const chainId = chainInfo(o.chain).chainId;
  const key = orderKeyOf(o);
  // An order id carries no chain: a pull under it on another chain is someone else's (isPaymentOf).
  const shown =
    "orderId" in key
      ? await deps.ledger.order(key.orderId).then((r) => ({ payment: r.payments.find(isPaymentOf(o)) ?? null, refunds: r.refunds }))
      : await deps.ledger.authorization(o.chain as ChainKey, key.token, key.payer, key.nonce, key.rail);
  const refunds = shown.refunds.filter((r) => r.chainId === chainId);
  return { payment: shown.payment, refunds, refunded: refunds.reduce((s, r) => s + BigInt(r.amount), 0n) };
}

/**
 * An order in one of these with a transaction hash had its payment seen on chain (by the
 * ledger, or in a receipt from the service's own node); one held for review may have lost it
 * since (a reorganisation), which the re-read then shows as it is.
 */
const PAYMENT_SEEN: ReadonlySet<string> = new Set(["PAID", "PENDING", "SUCCESS", "REFUNDING", "REFUNDED", "NEEDS_REVIEW"]);

/**
 * Whether the ledger's records lack what the service itself confirmed of `o`, from its own
 * node's receipts: its payment once paid, its refund once refunded. The ledger indexes those
 * blocks on its own pace, so for a moment it may; a reader then reads it again once it has
 * indexed the newest block (ledgerUnderKeyCaughtUp, the agent hub's history).
 */
export function ledgerLacksConfirmed(o: Order, payment: unknown, refundTxHashes: readonly string[]): boolean {
  if (PAYMENT_SEEN.has(o.status) && o.txHash && !payment) return true;
  return o.status === "REFUNDED" && !!o.refundTxHash && !refundTxHashes.some((h) => h.toLowerCase() === o.refundTxHash!.toLowerCase());
}

/**
 * ledgerUnderKey for an operator's screen: when it lacks what the service confirmed of the
 * order, read again once the ledger has indexed the newest block the service has seen (up to
 * `waitMs`), so a screen opened a block after the payment does not show "no payment".
 */
export async function ledgerUnderKeyCaughtUp(deps: { ledger: LedgerClient; heads: ChainHeads }, o: Order, waitMs = 2_000): Promise<LedgerView> {
  const view = await ledgerUnderKey(deps, o);
  if (!ledgerLacksConfirmed(o, view.payment, view.refunds.map((r) => r.txHash))) return view;
  const head = deps.heads.latest(o.chain as ChainKey);
  if (head === 0n || !(await deps.ledger.reachBlock(chainInfo(o.chain).chainId, head, waitMs, 200)).reached) return view;
  return ledgerUnderKey(deps, o);
}

/** The newest of the refunds the ledger shows (by block), if any. */
export function newestRefund(refunds: LedgerRefund[]): LedgerRefund | undefined {
  return refunds.reduce<LedgerRefund | undefined>((n, r) => (!n || BigInt(r.blockNumber) > BigInt(n.blockNumber) ? r : n), undefined);
}
