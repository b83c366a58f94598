/**
 * A bill's price on one chain and token: checked against the biller's catalogue, then
 * locked as a quote for the challenge's lifetime, keyed by the bill's identity (billHash).
 * Both rails price here: the x402 challenge and the agent hub's get_quote and pay_bill.
 * The arithmetic is in price.ts, the rate in rates.ts, the locked quotes in quotes.ts.
 */
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import type { Catalogue } from "../biller/catalogue.ts";
import { ServiceError } from "../errors.ts";
import type { PaymentRequest } from "../schemas.ts";
import { toScaled } from "./decimal.ts";
import { priceBill, type Category } from "./price.ts";
import { bodyHash, type QuoteStore } from "./quotes.ts";
import type { RateSource } from "./rates.ts";

export interface QuoteContext {
  quotes: QuoteStore;
  rates: RateSource;
  fees: Record<Category, bigint>;
  /** Every bill is checked against the biller's catalogue before it is priced. */
  catalogue: Catalogue;
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

/**
 * Checks the bill against the biller's catalogue (a bill that could never vend, or a plan
 * whose price is not nairaAmount, is refused here, before any price is shown), then locks
 * (or finds) its quote on its chain and token.
 */
export async function quoteBill(
  req: PaymentRequest,
  ctx: QuoteContext,
  option: { chain: ChainKey; token: TokenSymbol },
) {
  await ctx.catalogue.check(req);
  const kobo = toScaled(req.nairaAmount, 2)!;
  const hash = billHash(req, option);
  const [quote] = await ctx.quotes.lock(hash, [option], async () => {
    const rate = await ctx.rates.ngnPerUsdMilli().catch((err: Error) => {
      throw new ServiceError("RATE_UNAVAILABLE", err.message);
    });
    const price = priceBill(kobo, rate, ctx.fees[req.serviceCategory]);
    return { amount: price.amount, rateMilli: rate };
  });
  return { hash, quote: quote! };
}
