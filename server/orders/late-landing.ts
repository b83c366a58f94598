/**
 * A good payment the service refused landed anyway (orders/refused-payments.ts keeps such
 * refusals): it becomes an order refunded on chain by the service, not an orphan left for an
 * operator. What bounds it is said there and in docs/money.md.
 *
 * Its refund keeps back LATE_LANDING_FEE for its own gas. The service never sent such a payment
 * to anyone (it was refused before any order or facilitator call), so its payer landed it, or
 * someone he showed it to; and a refund costs BillPay about twice the gas of the landing
 * (refundAuthorization against transferWithAuthorization, `npm run bench:gas`). Without the fee
 * a wallet could land its own authorization, offer it, be refunded in full, and repeat, each
 * round costing the service more than it cost the wallet. A payment the service's facilitator
 * landed after the service refused its order (x402-flow.ts landedAfterRefusal) is the service's
 * doing, and is refunded in full.
 */
import { parseUnits } from "viem";
import { chainInfo, tokenOn, type ChainKey } from "../../lib/chains.ts";
import type { TokenSymbol } from "../../lib/networks.ts";
import { amountIn } from "../../lib/token-amounts.ts";
import { ServiceError } from "../errors.ts";
import type { LedgerPayment } from "../ledger-client.ts";
import { errorText } from "../log-safety.ts";
import { ledgerPaymentFor, refundUnheld, type FlowDeps } from "./fulfil.ts";
import type { RefusedPayment } from "./refused-payments.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND, type Order } from "./store.ts";

/**
 * A kept refusal's payment landed (`payment`: the ledger's, under its key): it becomes an order
 * refunded on chain. Only for exactly the recorded amount (another amount waits for an
 * operator as any orphan does), and only while no operator has closed its orphan and no order
 * holds its key. Answers the order, or undefined when there is nothing to refund.
 */
export async function refundLanding(
  deps: FlowDeps,
  record: RefusedPayment,
  payment: Pick<LedgerPayment, "amount" | "txHash"> & Partial<LedgerPayment>,
  options: { now?: boolean } = { now: true },
): Promise<Order | undefined> {
  if (BigInt(payment.amount) !== record.amount) return undefined;
  const refund = lateLandingRefund(deps, record.chain, record.token, record.amount);
  if (!refund) return undefined; // worth no more than its refund's gas: an operator's, as any orphan
  const order = await deps.orders.createLandedRefund(record, payment.txHash, refund.fee);
  if (!order) return undefined;
  // Watched as every confirmed payment is (payment-watch.ts: a loss that takes it and its refund
  // is met as a refunded order's is); read from the ledger when the caller has only its hash.
  const watched = payment.blockNumber !== undefined ? (payment as LedgerPayment) : await ledgerPaymentFor(deps, order).catch(() => null);
  if (watched) await deps.watches.record(order, watched);
  deps.log.warn("a payment the service had refused landed on chain; refunding it to the payer", { requestId: order.requestId, chain: record.chain, payer: record.payer, why: record.reason });
  if (!options.now) return order; // the worker refunds it (an unleased REFUNDING order)
  try {
    return await refundUnheld(deps, order, order.failureReason ?? "landed after its refusal");
  } catch (err) {
    deps.log.error("could not refund a payment landed after its refusal; the worker will retry", { requestId: order.requestId, error: errorText(err) });
    return order;
  }
}

/**
 * A payment offered whose nonce the chain already shows spent (read before any order exists)
 * pays for no bill: the answer is always the error to give, decided from the ledger once it
 * has indexed the block the nonce was read at. A payment that reached BillPay before any
 * order asked for it (the payer's own relayer was faster, or a refusal landed anyway) is not
 * served either: its calldata is public once mined, and an EIP-3009 authorization or a permit
 * names no bill, so whoever presented it could name his own bill, and its payer would lose
 * it. It is refunded to its payer instead: the refusal is kept with the signed authorization
 * (bounded: refused-payments.ts), and the ledger pass refunds exactly the payment the ledger
 * shows under its key (ledger-pass.ts, refundLanding), once. The other answers: the nonce
 * spent with no payment to BillPay (cancelled, used elsewhere), a payment of another amount
 * (held for an operator), an orphan an operator already refunded by hand or kept, or a ledger
 * not yet caught up; each refusal is kept too, so a payment landing under it after all is
 * refunded to the payer. `cancelled`: the ledger, caught up, shows no payment to BillPay under
 * the nonce, so the payer spent it himself (the authorization was never public), and the
 * offer is his doing; anything else may be a replay of public calldata by anyone.
 */
export async function spentAtIntake(deps: FlowDeps, record: RefusedPayment, onChain: { block: bigint }): Promise<{ refusal: ServiceError; cancelled: boolean }> {
  const chainId = chainInfo(record.chain).chainId;
  const { reached } = await deps.ledger.reachBlock(chainId, onChain.block, deps.ledgerWaitMs);
  const shown = reached
    ? await deps.ledger
        .authorization(record.chain as ChainKey, record.tokenAddress, record.payer, record.nonce, record.rail)
        .then((r) => r.payment)
        .catch(() => undefined)
    : undefined;
  const orphan = shown && BigInt(shown.amount) === record.amount ? await deps.refused.orphanStatus(record) : undefined;
  // Kept only while its landing may still be the service's to refund: an orphan an operator
  // holds or closed is his, and a record would only take the payer's room.
  const open = orphan === undefined || orphan === "NEEDS_REVIEW";
  const kept = open ? (await deps.refused.record(record, BigInt(Math.floor(Date.now() / 1000)))) !== null : false;
  const later = kept ? "; should a payment under it still reach BillPay, it is refunded" : "";
  const refuse = (detail: string, extra: Record<string, unknown> = {}, cancelled = false) => ({ refusal: new ServiceError("PAYMENT_NONCE_SPENT", detail, { charged: false, ...extra }), cancelled });
  if (!reached || shown === undefined) {
    return refuse(`the chain shows this authorization's nonce already spent, and the ledger has not caught up to tell by what: it pays for no bill; sign a new authorization${later}`);
  }
  if (shown === null) return refuse(`the chain shows this authorization's nonce already spent, with no payment to BillPay under it (cancelled, or used elsewhere): it pays for no bill${later}`, {}, true);
  if (BigInt(shown.amount) !== record.amount) {
    return refuse(`a payment of ${shown.amount} (not this authorization's ${record.amount}) already reached BillPay under its nonce (transaction ${shown.txHash}), outside any order: it is held for an operator, and this authorization pays for no bill`, { landed_tx: shown.txHash });
  }
  if (orphan === undefined || orphan === "NEEDS_REVIEW") {
    const refund = lateLandingRefund(deps, record.chain, record.token, record.amount);
    const back = !kept
      ? "too many refused payments of this payer are kept already, so an operator must refund it"
      : refund
        ? `it is refunded to its payer on chain, ${refund.terms}`
        : "it is worth no more than a refund's gas, so an operator must refund it";
    return refuse(
      `this authorization already reached BillPay on its own (transaction ${shown.txHash}), outside any order. A landed authorization can be read by anyone and names no bill, so it pays for none: ${back}; sign a new authorization for this bill`,
      { landed_tx: shown.txHash },
    );
  }
  const settled = orphan === ORPHAN_HELD_FOR_HAND_REFUND ? "an operator is refunding it by hand" : "an operator has settled it (refunded by hand, or kept)";
  return refuse(`this authorization already reached BillPay on its own (transaction ${shown.txHash}), outside any order, and ${settled}: it pays for no bill`, { landed_tx: shown.txHash });
}

/**
 * What the refund of a kept refusal of `amount` keeps back for its gas (LATE_LANDING_FEE), in
 * units of `token` on `chain`, and the payer's words for it ("less 0.02 USDC on CELO for the
 * refund's gas"); undefined when nothing would be left to give back: such a refusal is not
 * kept, and a landing of it is an operator's, as any orphan.
 */
export function lateLandingRefund(deps: Pick<FlowDeps, "lateLandingFee">, chain: string, token: string, amount: bigint): { fee: bigint; terms: string } | undefined {
  const decimals = tokenOn(chain as ChainKey, token as TokenSymbol)?.decimals;
  if (decimals === undefined) throw new Error(`no token ${token} on ${chain}`);
  const fee = parseUnits(deps.lateLandingFee, decimals);
  return amount > fee ? { fee, terms: `less ${amountIn(chain, token, fee)} for the refund's gas` } : undefined;
}
