/**
 * What the ledger shows under an order's key (an x402 order's chain, token, payer and nonce on
 * its rail; a pull's order id), on the order's own chain: its payment, if any, and the refunds
 * of it. Operators' decisions (review.ts) and the refund watch (refund-watch.ts) read it alike.
 */
import type { ChainHeads } from "../../lib/chain-heads.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { isPaymentOf, orderKeyOf, type LedgerClient, type LedgerPayment, type LedgerRefund } from "../ledger-client.ts";
import type { LedgerHealth } from "../ledger-health.ts";
import { paymentConfirmed, type Order } from "./store.ts";

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
 * A reader that finds the ledger lacking what the service confirmed of an order a moment ago
 * (ledgerLacksConfirmed) reads it again once the ledger has indexed the newest block the
 * service has seen, waiting this long at most, looking this often.
 */
export const LEDGER_CATCH_UP_MS = 2_000;
export const LEDGER_LOOK_MS = 200;
/** How long after the service last changed an order the ledger's lacking it can be lag. */
export const LAG_WINDOW_MS = 60_000;

/**
 * Whether the ledger's records lack what the service itself confirmed of `o` a moment ago,
 * from its own node's receipts: its payment once paid (or held for review just after), its
 * refund once refunded. The ledger indexes those blocks on its own pace, so for a moment it
 * may. Long after the order last changed, a lack is no lag (a payment a reorganisation took,
 * a refund by hand the ledger books as a plain transfer): it is read as it is.
 */
export function ledgerLacksConfirmed(o: Order, payment: unknown, refundTxHashes: readonly string[], now = Date.now()): boolean {
  if (now - o.updatedAt.getTime() > LAG_WINDOW_MS) return false;
  if ((paymentConfirmed(o) || (o.status === "NEEDS_REVIEW" && o.txHash)) && !payment) return true;
  return o.status === "REFUNDED" && !!o.refundTxHash && !refundTxHashes.some((h) => h.toLowerCase() === o.refundTxHash!.toLowerCase());
}

/** How long a reader waits for the ledger on `chain`: not at all while the service's watch finds it behind, stalled or unreadable (it would not catch up in time). */
export function catchUpWaitMs(health: Pick<LedgerHealth, "latest">, chain: ChainKey): number {
  const state = health.latest().find((p) => p.chain === chain)?.state;
  return state === "behind" || state === "stalled" || state === "unreadable" ? 0 : LEDGER_CATCH_UP_MS;
}

/**
 * ledgerUnderKey for an operator's screen: when it lacks what the service confirmed of the
 * order, read again once the ledger has indexed the newest block the service has seen, so a
 * screen opened a block after the payment does not show "no payment".
 */
export async function ledgerUnderKeyCaughtUp(deps: { ledger: LedgerClient; heads: ChainHeads; ledgerHealth: Pick<LedgerHealth, "latest"> }, o: Order): Promise<LedgerView> {
  const view = await ledgerUnderKey(deps, o);
  if (!ledgerLacksConfirmed(o, view.payment, view.refunds.map((r) => r.txHash))) return view;
  const chain = o.chain as ChainKey;
  const head = deps.heads.latest(chain);
  if (head === 0n || !(await deps.ledger.reachBlock(chainInfo(chain).chainId, head, catchUpWaitMs(deps.ledgerHealth, chain), LEDGER_LOOK_MS)).reached) return view;
  return ledgerUnderKey(deps, o);
}

/** The newest of the refunds the ledger shows (by block), if any. */
export function newestRefund(refunds: LedgerRefund[]): LedgerRefund | undefined {
  return refunds.reduce<LedgerRefund | undefined>((n, r) => (!n || BigInt(r.blockNumber) > BigInt(n.blockNumber) ? r : n), undefined);
}
