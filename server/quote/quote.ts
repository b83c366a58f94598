/**
 * A bill's price on one chain and token: checked against the biller's catalogue, then
 * priced under the current rate version (rate-versions.ts), keyed by the bill's identity
 * (billHash). Nothing is written: the price is a pure function of the bill and the version.
 * Both rails price here: the x402 challenge and paid retry, and the agent hub's get_quote
 * and pay_bill. The arithmetic is in price.ts, the rate in rates.ts.
 */
import { createHash } from "node:crypto";
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import type { Catalogue } from "../biller/catalogue/catalogue.ts";
import type { PaymentRequest } from "../schemas.ts";
import { toScaled } from "../pricing/decimal.ts";
import { priceBill, type Category, type PriceBreakdown } from "../pricing/price.ts";
import type { RateVersion, RateVersions } from "../pricing/rate-versions.ts";
import type { RefundBudgets } from "../chain/refund-budget.ts";
import type { CustomerChecks } from "../biller/customer-check.ts";

export interface QuoteContext {
  versions: RateVersions;
  /** Every bill is checked against the biller's catalogue before it is priced. */
  catalogue: Catalogue;
  /** The challenge's lifetime: how long a price shown is honoured. */
  ttlSeconds: number;
  /** A bill its token's refund budget could never refund is refused before it is priced (chain/refund-budget.ts). */
  refundBudgets?: RefundBudgets;
  /** A payer whose bills failed the biller's number check has this bill's number checked before it is priced. */
  customerChecks?: CustomerChecks;
}

/** A bill's price under one rate version. */
export interface Quote {
  chain: string;
  token: string;
  amount: bigint;
  version: RateVersion;
  /** Until when a payment of `amount` is honoured, counted from now. */
  expiresAt: Date;
}

/** Hash of the fields that define the bill and who pays, in a fixed order. */
export function bodyHash(fields: Record<string, string>): string {
  const canonical = JSON.stringify(Object.keys(fields).sort().map((k) => [k, fields[k]]));
  return createHash("sha256").update(canonical).digest("hex");
}

/** The bill's identity: what a quote and a payment are bound to. */
export function billHash(req: PaymentRequest, option: { chain: ChainKey; token: TokenSymbol }): string {
  return bodyHash({
    serviceID: req.serviceID,
    serviceCategory: req.serviceCategory,
    network: req.network.toUpperCase(),
    billersCode: req.billersCode,
    kobo: toScaled(req.nairaAmount, 2)!.toString(),
    variation_code: req.variation_code ?? "",
    phone: req.phone ?? "",
    // Only cable bills that name it carry it: other bills keep the hash they always had.
    ...(req.subscription_type === undefined ? {} : { subscription_type: req.subscription_type }),
    // Only international bills carry these: domestic bills keep the hash they always had.
    ...(req.country_code === undefined && req.foreignAmount === undefined && req.operator_id === undefined && req.product_type_id === undefined
      ? {}
      : {
          foreign_cents: req.foreignAmount === undefined ? "" : toScaled(req.foreignAmount, 2)!.toString(),
          country_code: req.country_code ?? "",
          product_type_id: req.product_type_id ?? "",
          operator_id: req.operator_id ?? "",
        }),
    wallet_address: req.wallet_address.toLowerCase(),
    chain: option.chain,
    token: option.token,
  });
}

/** The bill's price under `version`: the whole pricing rule, in one pure function. */
export function priceUnder(req: Pick<PaymentRequest, "nairaAmount" | "serviceCategory">, version: RateVersion): PriceBreakdown {
  return priceBill(toScaled(req.nairaAmount, 2)!, version.rateMilli, version.fees[req.serviceCategory as Category]);
}

const quoteOf = (req: PaymentRequest, version: RateVersion, option: { chain: ChainKey; token: TokenSymbol }, ttlSeconds: number): Quote => ({
  ...option,
  amount: priceUnder(req, version).amount,
  version,
  expiresAt: new Date(Date.now() + ttlSeconds * 1000),
});

/**
 * Checks the bill against the biller's catalogue (a bill that could never vend, or a plan
 * whose price is not nairaAmount, is refused here, before any price is shown), then prices
 * it under the current rate version, and refuses a price its token's refund budget could
 * never return. A payer whose bills failed the biller's number check has this one's
 * number checked first (biller/customer-check.ts). Writes nothing; the bill's vend plan comes back with
 * its price, for the order to keep.
 */
export async function quoteBill(
  req: PaymentRequest,
  ctx: QuoteContext,
  option: { chain: ChainKey; token: TokenSymbol },
  hash: string = billHash(req, option),
) {
  const { vend } = await ctx.catalogue.check(req);
  const budgets = ctx.refundBudgets;
  await ctx.customerChecks?.checkUpfront(vend, req.wallet_address, async () => (budgets ? budgets.underPressure(option.chain, option.token) : false));
  const version = await ctx.versions.current();
  const quote = quoteOf(req, version, option, ctx.ttlSeconds);
  await ctx.refundBudgets?.assertRefundable(option.chain, option.token, quote.amount);
  return { hash, quote, vend };
}

/**
 * The bill's price under the rate version a live quote of it was locked to (quote-locks.ts):
 * what get_quote showed, with that quote's expiry; undefined when that version is no longer
 * live within the quotes' lifetime (then the current price stands).
 */
export async function lockedQuote(
  req: PaymentRequest,
  ctx: QuoteContext,
  option: { chain: ChainKey; token: TokenSymbol },
  lock: { versionId: string; expiresAt: Date },
): Promise<Quote | undefined> {
  const version = (await ctx.versions.liveWithin(ctx.ttlSeconds)).find((v) => v.id === lock.versionId);
  if (!version) return undefined;
  const quote = { ...quoteOf(req, version, option, ctx.ttlSeconds), expiresAt: lock.expiresAt };
  await ctx.refundBudgets?.assertRefundable(option.chain, option.token, quote.amount);
  return quote;
}

/**
 * The price a payment of `offered` may be accepted at: the quote under a rate version live
 * within the last `windowSeconds` that prices this very bill at exactly `offered`, so a
 * payment made within the challenge's lifetime is honoured at the price it was shown,
 * however the rate moved since. The server recomputes each candidate from its own stored
 * versions; the client names nothing but the amount it signed. Undefined when no live
 * version gives that amount (the caller refuses it as AMOUNT_MISMATCH).
 */
export async function acceptedQuote(
  req: PaymentRequest,
  ctx: QuoteContext,
  option: { chain: ChainKey; token: TokenSymbol },
  offered: bigint,
  windowSeconds: number,
  /** Only this version (the one a signed offer names). */
  versionId?: string,
): Promise<Quote | undefined> {
  const versions = await ctx.versions.liveWithin(windowSeconds);
  const version = versions.find((v) => (versionId === undefined || v.id === versionId) && priceUnder(req, v).amount === offered);
  return version && quoteOf(req, version, option, ctx.ttlSeconds);
}
