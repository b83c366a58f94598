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
 * `to`; the Permit2 tokens configured take no fee on transfer), and the ledger records every
 * transfer into BillPay. So when the ledger, indexed past the block at which the nonce was
 * read spent, holds no transfer of that token and amount from the payer into BillPay that no
 * payment accounts for, the permit was never settled, and as a Permit2 nonce is spent once, it
 * never can be: the order is closed as not charged.
 *
 * What bounds it:
 *   - "not charged" is final (a settlement through another contract is never booked under the
 *     key, so no later pass would notice it): the nonce is read spent as deep as a payment must
 *     be before it counts (the chain's confirmations), and the ledger must have indexed that
 *     very block, so a settlement in a block the ledger has not reached, or on a branch about
 *     to be replaced, is never missed;
 *   - any such transfer, at any time (the ledger cannot say which permit it came from, so the
 *     safe reading counts them all), holds the order for an operator with the transfers named:
 *     a payer who wants his orders held pays their full price into BillPay for it;
 *   - but not one an operator has taken to give back by hand, holding an order for it
 *     (orders/review.ts): one transfer is one settlement at most, so once taken it holds no
 *     other order, and is never given back twice. (Past READ transfers taken, an order is held
 *     with none named: reaching it takes a hundred operators' holds for one payer and amount.)
 */
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { authorizationOnChain } from "../chain/payment-state.ts";
import type { LedgerClient, LedgerInflow } from "../ledger-client.ts";
import type { Log } from "../log.ts";
import type { Order, OrderStatus, OrderStore } from "./store.ts";

/** How many of the transfers are read: enough to name them to a person. */
const NAMED = 3;

type Unbooked = { transfers: LedgerInflow[]; more: boolean };
export type SpentPermit2Verdict =
  | { verdict: "wait"; why: string }
  | { verdict: "not-charged" }
  | { verdict: "held"; found: Unbooked; open: LedgerInflow[] };

type VerdictDeps = { deployments: Deployments; ledger: LedgerClient; orders: Pick<OrderStore, "inflowsTakenForHandRefunds">; confirmations: Partial<Record<ChainKey, number>>; ledgerWaitMs: number };

/** How many unbooked transfers are read for a verdict: past those given back by hand, the ones named. */
const READ = 100;

/** How long a verdict waits at most for the ledger to reach the block the nonce was read at (it is usually a poll behind the head). */
const LEDGER_WAIT_CAP_MS = 10_000;

/** What a spent Permit2 nonce says of the order, read so that "not charged" can be final. */
export async function spentPermit2Verdict(deps: VerdictDeps, o: Order): Promise<SpentPermit2Verdict> {
  const chain = o.chain as ChainKey;
  const depth = deps.confirmations[chain] ?? 0;
  const deep = await authorizationOnChain(deps, o, depth);
  if (!deep.used) return { verdict: "wait", why: `the permit's nonce is not yet spent ${depth} blocks under the chain's head` };
  const { reached } = await deps.ledger.reachBlock(chainInfo(chain).chainId, deep.block, Math.min(deps.ledgerWaitMs, LEDGER_WAIT_CAP_MS));
  if (!reached) return { verdict: "wait", why: `the ledger has not yet indexed block ${deep.block}, where the nonce was read spent` };
  const read = await deps.ledger.unbookedInflows(chainInfo(chain).chainId, o.tokenAddress, o.payer, o.amount, READ);
  const taken = await deps.orders.inflowsTakenForHandRefunds(read.transfers.map((t) => t.id));
  const open = read.transfers.filter((t) => !taken.has(t.id));
  // More than were read: the rest may hold it too (the safe reading), though none is named.
  if (open.length === 0 && !read.more) return { verdict: "not-charged" };
  return { verdict: "held", found: { transfers: open.slice(0, NAMED), more: read.more || open.length > NAMED }, open };
}

/** The transfers, for a person: "<amount> in <tx>", newest first. */
export function inflowsText(found: Unbooked): string {
  return `${found.transfers.map((t) => `${t.amount} in ${t.txHash}`).join(", ")}${found.more ? " and more" : ""}`;
}

/**
 * Closes a spent-nonce Permit2 order from `from`, as its verdict says: PAYMENT_FAILED, or
 * NEEDS_REVIEW (with an alert); unchanged while it must wait (a later pass decides).
 */
export async function closeSpentPermit2(deps: VerdictDeps & { orders: OrderStore; log: Log }, o: Order, from: OrderStatus[], prefix = ""): Promise<void> {
  const v = await spentPermit2Verdict(deps, o);
  if (v.verdict === "wait") return;
  if (v.verdict === "not-charged") {
    await deps.orders.transition(o.requestId, from, "PAYMENT_FAILED", {
      failureReason: `${prefix}the permit's Permit2 nonce was spent on chain on something else, and no transfer of the order's amount from the payer into BillPay is unaccounted for: it was never settled and never can be; nothing was charged`,
    });
    return;
  }
  const held = await deps.orders.transition(o.requestId, from, "NEEDS_REVIEW", {
    failureReason: `${prefix}the permit's Permit2 nonce is spent on chain, but no settlement the ledger can attribute paid BillPay under it, and the payer has sent BillPay transfers of the order's amount that no payment accounts for (${inflowsText(v.found)}): it may have been settled through another contract; held for an operator`,
  });
  if (held) {
    deps.log.error("a Permit2 nonce was spent with no payment the ledger can attribute, and its payer sent BillPay transfers of the order's amount that no payment accounts for: held for an operator", {
      requestId: o.requestId,
      chain: o.chain,
      payer: o.payer,
      transfers: v.found.transfers.map((t) => t.txHash),
    });
  }
}
