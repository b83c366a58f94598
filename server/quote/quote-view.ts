/**
 * A quote as POST /api/quote and the get_quote tool show it: the price in token units,
 * how it was made (the bill's value at the rate, the rate and its source, the category's
 * service fee, the facilitator fee, whether the minimum applied), the rate version it was
 * priced under, and until when a payment of that amount is honoured.
 */
import { formatUnits } from "viem";
import type { PaymentRequest } from "../schemas.ts";
import { MIN_PRICE_MICRO_USD } from "../pricing/price.ts";
import { priceUnder, type Quote } from "./quote.ts";

const usd = (micro: bigint) => formatUnits(micro, 6);

export function quoteView(bill: Pick<PaymentRequest, "nairaAmount" | "serviceCategory">, quote: Quote) {
  const parts = priceUnder(bill, quote.version);
  const sum = parts.billMicroUsd + parts.serviceFeeMicroUsd + parts.facilitatorFeeMicroUsd;
  return {
    chain: quote.chain,
    token: quote.token,
    amount: { units: quote.amount.toString(), formatted: usd(quote.amount) },
    expires_at: quote.expiresAt.toISOString(),
    rate_version: quote.version.id,
    breakdown: {
      bill_naira: bill.nairaAmount,
      bill_usd: usd(parts.billMicroUsd),
      ngn_per_usd: formatUnits(quote.version.rateMilli, 3),
      rate_source: quote.version.source,
      service_fee_usd: usd(parts.serviceFeeMicroUsd),
      facilitator_fee_usd: usd(parts.facilitatorFeeMicroUsd),
      minimum_usd: usd(MIN_PRICE_MICRO_USD),
      minimum_applied: sum < MIN_PRICE_MICRO_USD,
    },
  };
}
