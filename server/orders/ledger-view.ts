/**
 * What the ledger shows under an order's key (an x402 order's chain, token, payer and nonce on
 * its rail; a pull's order id), on the order's own chain: its payment, if any, and the refunds
 * of it. Operators' decisions (review.ts) and the refund watch (refund-watch.ts) read it alike.
 */
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

/** The newest of the refunds the ledger shows (by block), if any. */
export function newestRefund(refunds: LedgerRefund[]): LedgerRefund | undefined {
  return refunds.reduce<LedgerRefund | undefined>((n, r) => (!n || BigInt(r.blockNumber) > BigInt(n.blockNumber) ? r : n), undefined);
}
