/**
 * A locked quote as POST /api/quote and the get_quote tool show it: the price in token units,
 * how it was made (the bill's value at the rate, the rate and its source, the category's
 * service fee, the facilitator fee, whether the minimum applied) and until when it holds.
 * The breakdown is recomputed from the locked rate; the amount is the locked one, which is
 * what a payment must carry.
 */
import { formatUnits } from "viem";
import type { LockedQuote } from "./quotes.ts";
import type { PaymentRequest } from "../schemas.ts";
import { toScaled } from "./decimal.ts";
import { MIN_PRICE_MICRO_USD, priceBill, type Category } from "./price.ts";

const usd = (micro: bigint) => formatUnits(micro, 6);

export function quoteView(bill: Pick<PaymentRequest, "nairaAmount" | "serviceCategory">, quote: LockedQuote, fees: Record<Category, bigint>, rateSource: string) {
  const parts = priceBill(toScaled(bill.nairaAmount, 2)!, quote.rateMilli, fees[bill.serviceCategory as Category]);
  const sum = parts.billMicroUsd + parts.serviceFeeMicroUsd + parts.facilitatorFeeMicroUsd;
  return {
    chain: quote.chain,
    token: quote.token,
    amount: { units: quote.amount.toString(), formatted: usd(quote.amount) },
    expires_at: quote.expiresAt.toISOString(),
    breakdown: {
      bill_naira: bill.nairaAmount,
      bill_usd: usd(parts.billMicroUsd),
      ngn_per_usd: formatUnits(quote.rateMilli, 3),
      rate_source: rateSource,
      service_fee_usd: usd(parts.serviceFeeMicroUsd),
      facilitator_fee_usd: usd(parts.facilitatorFeeMicroUsd),
      minimum_usd: usd(MIN_PRICE_MICRO_USD),
      minimum_applied: sum < MIN_PRICE_MICRO_USD,
    },
  };
}
