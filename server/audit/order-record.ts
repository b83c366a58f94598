/** An order as the operators' routes serve it, and as the audit reads it from them. */
import { amountIn } from "../../lib/token-amounts.ts";
import { x402RailOf } from "../ledger-client.ts";
import type { Order } from "../orders/store.ts";

/** The most orders one /ops/orders page serves, and the audit reads at once. */
export const MAX_PAGE = 500;

/** An order as the audit sees it: amounts as decimal strings of token units. */
export function opsOrder(o: Order) {
  return {
    request_id: o.requestId,
    rail: o.rail,
    status: o.status,
    chain: o.chain,
    token: o.token,
    token_address: o.tokenAddress,
    payer: o.payer,
    amount: o.amount.toString(),
    amount_text: amountIn(o.chain, o.token, o.amount),
    onchain_order_id: o.onchainOrderId,
    auth_nonce: o.authNonce,
    // The ledger rail an x402 order's payment arrives on (EIP-3009's or Permit2's); null for a pull.
    payment_rail: o.rail === "pull" ? null : x402RailOf(o),
    tx_hash: o.txHash,
    refund_tx_hash: o.refundTxHash,
    // What its refund keeps back for its gas (a kept refusal that landed: orders/late-landing.ts).
    refund_fee: o.refundFee.toString(),
    failure_reason: o.failureReason,
    flag: o.flag,
    auth_valid_before: o.authValidBefore?.toString() ?? null,
    created_at: o.createdAt.toISOString(),
    unfinished_since: o.unfinishedSince.toISOString(),
  };
}
export type OpsOrder = ReturnType<typeof opsOrder>;
