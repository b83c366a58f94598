/**
 * What a payer is promised before it pays: how soon the paying call answers and what happens
 * when a bill cannot be vended. Stated in the 402 (the v2 resource's description, and `terms`
 * in the JSON body) and in /.well-known/x402, from the settings that enforce it, so an agent
 * can decide before it signs.
 */
import type { Config } from "../config.ts";

/** Where an order's state, refund included, is read (server/app.ts). */
export const ORDER_STATUS_PATH = "/api/orders/{request_id}";

export interface PaymentTerms {
  /** The paying call answers within this of the payment settling: SUCCESS, FAILED_VENDING, or TIMEOUT while the bill goes on. */
  vend_deadline_seconds: number;
  /** A bill not final by then is raised with an operator (it is never dropped). */
  operator_alert_seconds: number;
  refund: { when: string; amount: string; to: string; how: string; check: string };
}

export function paymentTerms(config: Pick<Config, "VEND_DEADLINE_MS" | "STUCK_AFTER_SECONDS">, base = ""): PaymentTerms {
  return {
    vend_deadline_seconds: Math.ceil(config.VEND_DEADLINE_MS / 1000),
    operator_alert_seconds: config.STUCK_AFTER_SECONDS,
    refund: {
      when: "the biller cannot vend the bill, or its number fails the biller's check after payment",
      amount: "the whole payment, in the token paid",
      to: "the wallet that paid (the authorization's from)",
      how: "on chain, from BillPay on the chain paid on",
      check: `GET ${base}${ORDER_STATUS_PATH}: refund.status and refund.tx_hash`,
    },
  };
}

/** The terms in one sentence, for the 402's resource description (what every client shows). */
export function termsSentence(terms: PaymentTerms): string {
  return (
    `Answered within ${terms.vend_deadline_seconds} s of settlement (SUCCESS, FAILED_VENDING, or TIMEOUT while it goes on); ` +
    `a bill that cannot be vended is refunded in full on chain to the paying wallet (GET ${ORDER_STATUS_PATH}).`
  );
}
