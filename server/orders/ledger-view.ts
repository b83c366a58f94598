/**
 * What the ledger shows under an order's key (an x402 order's chain, token, payer and nonce on
 * its rail; a pull's order id), on the order's own chain: its payment, if any, and the refunds
 * of it. Operators' decisions (review.ts) and the refund watch (refund-watch.ts) read it alike.
 */
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import type { Hex } from "viem";
import type { RefundKey } from "../../lib/refund-logs.ts";
import { isPaymentOf, x402RailOf, type LedgerClient, type LedgerPayment, type LedgerRefund } from "../ledger-client.ts";
import type { Order } from "./store.ts";

export interface LedgerView {
  payment: LedgerPayment | null;
  refunds: LedgerRefund[];
  refunded: bigint;
}

/**
 * A pulled order's pull as the ledger shows it: under its order id, and on its own chain. An
 * order id carries no chain, so the same id on another chain is someone else's pull (whoever
 * held the operator key there), never this order's.
 */
export async function ledgerPullOf(deps: { ledger: LedgerClient }, o: Order): Promise<LedgerPayment | null> {
  return (await deps.ledger.order(o.onchainOrderId)).payments.find(isPaymentOf(o)) ?? null;
}

export async function ledgerUnderKey(deps: { ledger: LedgerClient }, o: Order): Promise<LedgerView> {
  const chainId = chainInfo(o.chain).chainId;
  const shown =
    o.rail === "pull"
      ? await deps.ledger.order(o.onchainOrderId).then((r) => ({ payment: r.payments.find(isPaymentOf(o)) ?? null, refunds: r.refunds }))
      : await deps.ledger.authorization(o.chain as ChainKey, o.tokenAddress, o.payer, o.authNonce!, x402RailOf(o));
  const refunds = shown.refunds.filter((r) => r.chainId === chainId);
  return { payment: shown.payment, refunds, refunded: refunds.reduce((s, r) => s + BigInt(r.amount), 0n) };
}

/** The key the ledger shows the order's refunds under, for finding one on the service's node by the same predicate (chain/refund-on-node.ts). */
export function refundKeyOf(o: Order): RefundKey {
  if (o.rail === "pull") return { orderId: o.onchainOrderId as Hex };
  return { rail: x402RailOf(o), token: o.tokenAddress as Hex, payer: o.payer as Hex, nonce: o.authNonce as Hex };
}

/** The newest of the refunds the ledger shows (by block), if any. */
export function newestRefund(refunds: LedgerRefund[]): LedgerRefund | undefined {
  return refunds.reduce<LedgerRefund | undefined>((n, r) => (!n || BigInt(r.blockNumber) > BigInt(n.blockNumber) ? r : n), undefined);
}
