/**
 * The price of a bill in token units: nairaAmount converted at the NGN/USD rate, plus the
 * category's service fee, plus the flat 0.001 USD facilitator fee, at least 0.05 USD,
 * rounded up to the token's smallest unit. Every settlement token is a 6-decimal USD
 * stablecoin, so one token unit is one micro-dollar.
 */
import { ceilDiv } from "./decimal.ts";

export const CATEGORIES = ["AIRTIME", "DATA", "ELECTRICITY", "CABLE", "BANK", "EDUCATION"] as const;
export type Category = (typeof CATEGORIES)[number];

export const FACILITATOR_FEE_MICRO_USD = 1_000n; // 0.001 USD
export const MIN_PRICE_MICRO_USD = 50_000n; // 0.05 USD
/** The rate is carried in thousandths of a naira per dollar. */
export const RATE_SCALE = 3;

export interface PriceBreakdown {
  /** Total, in token units (micro-USD). */
  amount: bigint;
  billMicroUsd: bigint;
  serviceFeeMicroUsd: bigint;
  facilitatorFeeMicroUsd: bigint;
  /** NGN per USD, in thousandths. */
  rateMilli: bigint;
}

/**
 * @param kobo         the bill, in kobo (1/100 NGN)
 * @param rateMilli    NGN per USD, in thousandths
 * @param serviceFeeMicroUsd the category's fee
 */
export function priceBill(kobo: bigint, rateMilli: bigint, serviceFeeMicroUsd: bigint): PriceBreakdown {
  if (rateMilli <= 0n) throw new Error("the NGN/USD rate must be positive");
  // USD = (kobo / 100) / (rateMilli / 1000) = kobo * 10 / rateMilli; in micro-USD, * 10^6.
  const billMicroUsd = ceilDiv(kobo * 10n * 1_000_000n, rateMilli);
  const total = billMicroUsd + serviceFeeMicroUsd + FACILITATOR_FEE_MICRO_USD;
  return {
    amount: total > MIN_PRICE_MICRO_USD ? total : MIN_PRICE_MICRO_USD,
    billMicroUsd,
    serviceFeeMicroUsd,
    facilitatorFeeMicroUsd: FACILITATOR_FEE_MICRO_USD,
    rateMilli,
  };
}
