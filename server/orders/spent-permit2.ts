/**
 * A Permit2 order whose nonce is spent on chain while the ledger books no payment under it.
 *
 * The ledger books a Permit2 payment only from a transaction sent straight to x402's proxy (it
 * reads the permit from that call, lib/payment-logs.ts). A permit settled through another
 * contract (a batcher, a smart account) may well have paid BillPay without being booked; or
 * the payer spent the nonce on something else (Permit2's `invalidateUnorderedNonces`, or
 * another permit: its nonces span every token and spender), and nothing was paid.
 *
 * What tells them apart, from chain state: any settlement of the order's permit, whoever
 * calls the proxy, moves exactly the order's amount of its token from the payer to BillPay
 * (the permit names x402's exact proxy as its only spender, which always transfers the
 * permitted amount, checked equal to the order's at intake; its witness names BillPay as the
 * `to`), and the ledger records every transfer into BillPay. So when the ledger, indexed past
 * the block at which the nonce was read spent, holds no transfer of that token and amount from
 * the payer into BillPay that no payment accounts for, the permit was never settled, and as a
 * Permit2 nonce is spent once, it never can be: the order is closed as not charged. Any such
 * transfer, at any time (the ledger cannot say which permit it came from, so the safe reading
 * counts them all), holds the order for an operator with the transfers named: so a payer who
 * wants his orders held pays their full price into BillPay for it. The caller checks the
 * ledger's position first.
 */
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import type { LedgerClient, LedgerInflow } from "../ledger-client.ts";
import type { Log } from "../log.ts";
import type { Order, OrderStatus, OrderStore } from "./store.ts";

/** The payer's transfers of the order's token and amount into BillPay that no payment accounts for (at most the newest 100). */
export async function unbookedInflowsOf(deps: { ledger: LedgerClient }, o: Order): Promise<{ transfers: LedgerInflow[]; more: boolean }> {
  return deps.ledger.unbookedInflows(chainInfo(o.chain as ChainKey).chainId, o.tokenAddress, o.payer, o.amount);
}

/** The transfers, for a person: "<amount> in <tx>", newest first. */
export function inflowsText(found: { transfers: LedgerInflow[]; more: boolean }): string {
  const shown = found.transfers.slice(0, 3).map((t) => `${t.amount} in ${t.txHash}`);
  return `${shown.join(", ")}${found.more || found.transfers.length > shown.length ? " and more" : ""}`;
}

/**
 * Closes a spent-nonce Permit2 order from `from`: PAYMENT_FAILED when the ledger shows no
 * unbooked transfer of its amount from its payer, NEEDS_REVIEW (with an alert) when it does.
 */
export async function closeSpentPermit2(deps: { ledger: LedgerClient; orders: OrderStore; log: Log }, o: Order, from: OrderStatus[], prefix = ""): Promise<void> {
  const found = await unbookedInflowsOf(deps, o);
  if (found.transfers.length === 0) {
    await deps.orders.transition(o.requestId, from, "PAYMENT_FAILED", {
      failureReason: `${prefix}the permit's Permit2 nonce was spent on chain on something else, and no transfer of the order's amount from the payer into BillPay is unaccounted for: it was never settled and never can be; nothing was charged`,
    });
    return;
  }
  const held = await deps.orders.transition(o.requestId, from, "NEEDS_REVIEW", {
    failureReason: `${prefix}the permit's Permit2 nonce is spent on chain, but no settlement the ledger can attribute paid BillPay under it, and the payer has sent BillPay transfers of the order's amount that no payment accounts for (${inflowsText(found)}): it may have been settled through another contract; held for an operator`,
  });
  if (held) {
    deps.log.error("a Permit2 nonce was spent with no payment the ledger can attribute, and its payer sent BillPay transfers of the order's amount that no payment accounts for: held for an operator", {
      requestId: o.requestId,
      chain: o.chain,
      payer: o.payer,
      transfers: found.transfers.slice(0, 3).map((t) => t.txHash),
    });
  }
}
