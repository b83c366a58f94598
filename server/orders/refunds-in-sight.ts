/**
 * What of an order's refunds may still stand on chain that the ledger cannot show yet, asked
 * from the order's record of every refund transaction signed for it (chain/refund-on-node.ts
 * refundInSight), with a refund that may still land in no pool voided at once: the refunder
 * sends itself nothing under its nonce (chain/operator.ts voidNonce). Asked by whatever
 * would decide that no refund lands: an operator's serve, close or hold (review.ts), and the
 * payment watch writing off a refunded order whose payment was reorganised away.
 */
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import type { ChainOperator } from "../chain/operator.ts";
import { refundInSight } from "../chain/refund-on-node.ts";
import { orderKeyOf } from "../ledger-client.ts";
import type { Order, OrderStore } from "./store.ts";

export interface RefundsInSightDeps {
  deployments: Deployments;
  confirmations: Partial<Record<ChainKey, number>>;
  orders: Pick<OrderStore, "signedRefundRecord">;
  operator: Pick<ChainOperator, "voidNonce">;
}

export type RefundsInSight =
  | Exclude<Awaited<ReturnType<typeof refundInSight>>, { landable: unknown }>
  | (Extract<Awaited<ReturnType<typeof refundInSight>>, { landable: unknown }> & { voiding: Awaited<ReturnType<ChainOperator["voidNonce"]>> });

/** refundInSight for the order, a landable refund voided (`voiding` says what became of the void). */
export async function refundsInSight(deps: RefundsInSightDeps, order: Order): Promise<RefundsInSight> {
  const chain = order.chain as ChainKey;
  const seen = await refundInSight(deps, chain, orderKeyOf(order), await deps.orders.signedRefundRecord(order.requestId));
  if (!seen || !("landable" in seen)) return seen;
  return { ...seen, voiding: await deps.operator.voidNonce(chain, seen.landable) };
}
