/**
 * Which of BillPay's logs are a refund, and under which key. This is the one predicate: the
 * ledger books refunds by it (ponder/src/billpay.ts), and the service finds a refund on its own
 * node by it when BillPay answers that a key is refunded before the ledger shows where
 * (server/chain/refund-on-node.ts). Written apart, the node could show the service a refund
 * the ledger would book under another key.
 *
 *   - `Refunded` with an authorization nonce of zero: a pulled order's refund, keyed by
 *     BillPay's order id.
 *   - `Refunded` with a nonce: an x402 payment's refund, keyed by (token, payer, EIP-3009 nonce).
 *   - `Permit2Refunded`: an x402 Permit2 payment's refund, keyed by (token, payer, Permit2
 *     nonce, as lib/permit2.ts writes it).
 */
import type { Hex } from "viem";
import { billPayAbi } from "./generated/abis.ts";
import type { PaymentRail } from "./payment-logs.ts";
import { permit2NonceKey } from "./permit2.ts";

const ZERO_NONCE = `0x${"0".repeat(64)}`;

/** BillPay's two refund events, for a node's log filter. */
export const REFUND_EVENTS = billPayAbi.filter((e) => e.type === "event" && (e.name === "Refunded" || e.name === "Permit2Refunded"));

export interface ChainRefund {
  rail: PaymentRail;
  /** BillPay's order id, on every refund; a pull's refund is keyed by it. */
  orderId: Hex;
  /** An x402 refund's EIP-3009 nonce, or its Permit2 nonce (rail permit2); null for a pull's. */
  authorizationNonce: Hex | null;
  payer: Hex;
  token: Hex;
  amount: bigint;
}

type RefundEvent =
  | { eventName: "Refunded"; args: { orderId: Hex; payer: Hex; token: Hex; amount: bigint; authorizationNonce: Hex } }
  | { eventName: "Permit2Refunded"; args: { orderId: Hex; payer: Hex; token: Hex; amount: bigint; nonce: bigint } };

/** The refund one of BillPay's refund events records. */
export function refundOf(e: RefundEvent): ChainRefund {
  const { orderId, payer, token, amount } = e.args;
  if (e.eventName === "Permit2Refunded") return { rail: "permit2", orderId, authorizationNonce: permit2NonceKey(e.args.nonce), payer, token, amount };
  const byAuthorization = e.args.authorizationNonce !== ZERO_NONCE;
  return { rail: byAuthorization ? "authorization" : "pull", orderId, authorizationNonce: byAuthorization ? e.args.authorizationNonce : null, payer, token, amount };
}

/**
 * What a refund is asked for by, as the ledger answers it: a pulled order's refunds by its
 * order id (`/ledger/orders/:id`), an x402 payment's by rail, token, payer and nonce
 * (`/ledger/authorizations`).
 */
export type RefundKey = { orderId: Hex } | { rail: "authorization" | "permit2"; token: Hex; payer: Hex; nonce: Hex };

export function isRefundUnder(key: RefundKey, r: ChainRefund): boolean {
  const same = (a: string | null, b: string) => a !== null && a.toLowerCase() === b.toLowerCase();
  if ("orderId" in key) return same(r.orderId, key.orderId);
  return r.rail === key.rail && same(r.token, key.token) && same(r.payer, key.payer) && same(r.authorizationNonce, key.nonce);
}
