/**
 * International airtime and data (serviceID foreign-airtime), read through the biller's
 * international API (foreign-airtime page): countries, then a country's product types, then
 * the operators of a product type, then an operator's plans. A bill names all four, as the
 * pay call takes them (country_code, product_type_id, operator_id, variation_code).
 *
 * What the merchant is charged, in the page's words: "For variations with the fixed price
 * is the charged_amount (naira equivalent). For variations with the flexible price the
 * charged amount (naira equivalent) can be calculated using variation_rate * amount in GHS"
 * (the destination's currency). So the pay call's `amount` is in the destination's currency
 * (the bill's foreignAmount), within the plan's variation_amount_min/_max; a fixed-price
 * plan's price is its charged_amount, whatever its variation_amount ("0.00" on the page).
 *
 * nairaAmount stays the source of truth for the price, and must be exactly what the biller
 * will charge: foreignAmount x variation_rate to the kobo (rounded half up: the page does
 * not say how VTpass rounds), or a fixed plan's charged_amount. A bill whose figures
 * disagree is refused with the figure that would be accepted, never repriced.
 *
 * Silent on the page, so read safely: a plan whose charge cannot be worked out (no rate, no
 * charged_amount, or a charged_currency other than NGN) is not sold.
 */
import { ServiceError } from "../../errors.ts";
import { formatScaled, toScaled } from "../../pricing/decimal.ts";
import type { Country, InternationalVariation, Operator, ProductType } from "../upstream.ts";
import { INTERNATIONAL_SERVICE_ID } from "../upstream.ts";
import { kobo, koboOrUndefined, nairaNumber } from "./amounts.ts";
import type { TtlCache } from "./ttl-cache.ts";
import type { VendPlan } from "./vend-plan.ts";

/** The bill's fields an international bill needs and a domestic one may not carry. */
export const INTERNATIONAL_FIELDS = ["country_code", "product_type_id", "operator_id"] as const;

export interface InternationalFields {
  foreignAmount?: number;
  country_code?: string;
  product_type_id?: string;
  operator_id?: string;
}

export interface InternationalBill extends InternationalFields {
  serviceID: string;
  billersCode: string;
  nairaAmount: number;
  variation_code?: string;
  phone?: string;
}

export interface OptionsQuery extends InternationalFields {
  variation_code?: string;
}

/** The biller's international calls. */
export interface InternationalBiller {
  internationalCountries(): Promise<Country[]>;
  internationalProductTypes(countryCode: string): Promise<ProductType[]>;
  internationalOperators(countryCode: string, productTypeId: string): Promise<Operator[]>;
  internationalVariations(operatorId: string, productTypeId: string): Promise<{ currency: string | null; plans: InternationalVariation[] }>;
}

export const isInternational = (bill: { serviceID: string }) => bill.serviceID === INTERNATIONAL_SERVICE_ID;

/** foreignAmount at `rate` NGN per unit, in kobo, rounded half up; undefined when either figure is not a plain decimal. */
export function koboFor(foreignAmount: number | string, rate: string): bigint | undefined {
  const cents = toScaled(foreignAmount, 2);
  const rateMicro = toScaled(rate, 6);
  if (cents === undefined || rateMicro === undefined) return undefined;
  return (cents * rateMicro + 500_000n) / 1_000_000n;
}

/** What a plan charges and how it is sent: fixed (its charged_amount, a known local price if the rate gives one) or flexible (a rate and bounds). */
type Pricing =
  | { kind: "fixed"; chargeKobo: bigint; localPrice: string | undefined }
  | { kind: "flexible"; rate: string; min: string | null; max: string | null }
  | { kind: "unpriced"; why: string };

function pricingOf(plan: InternationalVariation): Pricing {
  if (plan.fixedPrice === "Yes") {
    if (plan.charged_amount === null) return { kind: "unpriced", why: "a fixed price with no charged_amount" };
    if ((plan.charged_currency ?? "NGN").toUpperCase() !== "NGN") return { kind: "unpriced", why: `a charge in ${plan.charged_currency}, not NGN` };
    const charge = koboOrUndefined(plan.charged_amount);
    if (charge === undefined || charge === 0n) return { kind: "unpriced", why: `an unreadable charged_amount (${plan.charged_amount})` };
    const rateMicro = plan.variation_rate === null ? undefined : toScaled(plan.variation_rate, 6);
    const localPrice = rateMicro ? formatScaled((charge * 1_000_000n + rateMicro / 2n) / rateMicro, 2) : undefined;
    return { kind: "fixed", chargeKobo: charge, localPrice };
  }
  if (plan.variation_rate === null || !toScaled(plan.variation_rate, 6)) return { kind: "unpriced", why: "a flexible price with no variation_rate" };
  return { kind: "flexible", rate: plan.variation_rate, min: plan.variation_amount_min, max: plan.variation_amount_max };
}

/** What a plan's pricing asks, as one comparable string. */
const priceKey = (p: Pricing): string => (p.kind === "fixed" ? `fixed ${p.chargeKobo}` : p.kind === "flexible" ? `flexible ${p.rate} ${p.min} ${p.max}` : "unpriced");

const unknown = (what: string, value: string, known: string[]) =>
  new ServiceError("INTERNATIONAL_OPTION_UNKNOWN", `no ${what} "${value}"; known: ${known.join(", ") || "none"}`, { known });

const below = (a: string, b: string | null) => b !== null && toScaled(a, 6)! < (toScaled(b, 6) ?? 0n);
const above = (a: string, b: string | null) => b !== null && toScaled(b, 6) !== undefined && toScaled(a, 6)! > toScaled(b, 6)!;

/** The cache key of an operator's plans of a product type (under `international:`). */
const plansKey = (operatorId: string, productTypeId: string) => `plans:${operatorId}:${productTypeId}`;

export class InternationalCatalogue {
  constructor(
    private readonly biller: InternationalBiller,
    private readonly cache: TtlCache,
  ) {}

  private read<T>(key: string, what: string, load: () => Promise<T>): Promise<T> {
    return this.cache.get(`international:${key}`, load).catch((err: Error) => {
      throw new ServiceError("BILLER_UNAVAILABLE", `the biller's international catalogue could not be read (${what}): ${err.message}`);
    });
  }

  countries() {
    return this.read("countries", "countries", () => this.biller.internationalCountries());
  }

  async country(code: string): Promise<Country> {
    const all = await this.countries();
    return all.find((c) => c.code === code) ?? throwError(unknown("country_code", code, all.map((c) => c.code)));
  }

  private productTypes(country: Country) {
    return this.read(`types:${country.code}`, `product types of ${country.code}`, () => this.biller.internationalProductTypes(country.code));
  }

  async productType(country: Country, id: string): Promise<ProductType> {
    const all = await this.productTypes(country);
    return all.find((t) => t.product_type_id === id) ?? throwError(unknown(`product_type_id in ${country.code}`, id, all.map((t) => t.product_type_id)));
  }

  private operators(country: Country, type: ProductType) {
    return this.read(`operators:${country.code}:${type.product_type_id}`, `operators of ${country.code}`, () =>
      this.biller.internationalOperators(country.code, type.product_type_id),
    );
  }

  async operator(country: Country, type: ProductType, id: string): Promise<Operator> {
    const all = await this.operators(country, type);
    return all.find((o) => o.operator_id === id) ?? throwError(unknown(`operator_id for ${country.code} ${type.name}`, id, all.map((o) => o.operator_id)));
  }

  /** Forgets an operator's plans of a product type (one was charged otherwise), so the next bill reads them afresh. */
  forgetPlans(operatorId: string, productTypeId: string): void {
    this.cache.forget(`international:${plansKey(operatorId, productTypeId)}`);
  }

  private async plans(operator: Operator, type: ProductType) {
    return (
      await this.read(plansKey(operator.operator_id, type.product_type_id), `plans of operator ${operator.operator_id}`, () =>
        this.biller.internationalVariations(operator.operator_id, type.product_type_id),
      )
    ).plans;
  }

  /** Checks an international bill (see the file's comment) and returns how it vends; throws the 422 or 503 to answer. */
  async check(bill: InternationalBill): Promise<VendPlan> {
    const missing = INTERNATIONAL_FIELDS.filter((f) => bill[f] === undefined);
    if (missing.length > 0) {
      throw new ServiceError(
        "INTERNATIONAL_FIELDS_INVALID",
        `an international bill (${INTERNATIONAL_SERVICE_ID}) needs ${missing.join(", ")}, which its eight fields cannot say; list_international_options (GET /api/international) gives them`,
        { options: (await this.countries()).map((c) => ({ country_code: c.code, name: c.name, currency: c.currency })) },
      );
    }
    const country = await this.country(bill.country_code!);
    const type = await this.productType(country, bill.product_type_id!);
    const operator = await this.operator(country, type, bill.operator_id!);
    const plans = await this.plans(operator, type);
    const codes = plans.map((p) => p.variation_code).join(", ");
    if (bill.variation_code === undefined) throw new ServiceError("PLAN_REQUIRED", `${operator.name} needs a variation_code: one of ${codes}`);
    const found = plans.filter((p) => p.variation_code === bill.variation_code);
    if (found.length === 0) throw new ServiceError("PLAN_UNKNOWN", `${operator.name} has no plan "${bill.variation_code}"; its plans: ${codes}`);
    // Listed more than once at different prices, what the biller charges cannot be known (as for a domestic plan: plans.ts).
    if (new Set(found.map((p) => priceKey(pricingOf(p)))).size > 1) {
      throw new ServiceError("PLAN_AMBIGUOUS", `${operator.name} lists ${bill.variation_code} more than once at different prices, so what it charges cannot be known; choose another plan`);
    }
    const plan = found[0]!;

    const pricing = pricingOf(plan);
    const base = {
      serviceID: INTERNATIONAL_SERVICE_ID,
      billersCode: bill.billersCode,
      phone: bill.phone ?? bill.billersCode,
      variationCode: plan.variation_code,
      verify: null,
      international: { country_code: country.code, operator_id: operator.operator_id, product_type_id: type.product_type_id },
    };
    const mismatch = (naira: bigint, why: string) =>
      new ServiceError("FOREIGN_AMOUNT_MISMATCH", `${why} is ${formatScaled(naira, 2)} NGN; send nairaAmount ${formatScaled(naira, 2)}`, {
        naira_amount: nairaNumber(naira),
        currency: country.currency,
        ...(pricing.kind === "flexible" ? { ngn_per_unit: pricing.rate } : {}),
      });
    switch (pricing.kind) {
      case "unpriced":
        throw new ServiceError("BILLER_UNAVAILABLE", `plan ${plan.variation_code} of ${operator.name} cannot be priced: the biller lists ${pricing.why}`);
      case "fixed": {
        if (bill.foreignAmount !== undefined && pricing.localPrice !== undefined && toScaled(bill.foreignAmount, 2) !== toScaled(pricing.localPrice, 2)) {
          throw new ServiceError("FOREIGN_AMOUNT_MISMATCH", `plan ${plan.variation_code} is ${pricing.localPrice} ${country.currency}; send that foreignAmount, or leave it out`, {
            foreign_amount: Number(pricing.localPrice),
            currency: country.currency,
          });
        }
        if (pricing.chargeKobo !== kobo(bill.nairaAmount)) throw mismatch(pricing.chargeKobo, `plan ${plan.variation_code}`);
        // The page: the amount "will be ignored as the variation code determine the price".
        return { ...base, ...(pricing.localPrice !== undefined ? { amount: pricing.localPrice } : {}), chargeKobo: pricing.chargeKobo.toString() };
      }
      case "flexible": {
        if (bill.foreignAmount === undefined) {
          throw new ServiceError("INTERNATIONAL_FIELDS_INVALID", `plan ${plan.variation_code} takes an amount in ${country.currency}: send foreignAmount`);
        }
        const local = String(bill.foreignAmount);
        if (below(local, pricing.min) || above(local, pricing.max)) {
          throw new ServiceError("AMOUNT_OUT_OF_RANGE", `plan ${plan.variation_code} takes ${pricing.min ?? 0} to ${pricing.max ?? "any"} ${country.currency}; got ${local}`, {
            minimum: pricing.min === null ? null : Number(pricing.min),
            maximum: pricing.max === null ? null : Number(pricing.max),
            currency: country.currency,
          });
        }
        const charge = koboFor(local, pricing.rate)!;
        if (charge !== kobo(bill.nairaAmount)) throw mismatch(charge, `${local} ${country.currency} at ${pricing.rate} NGN per ${country.currency}`);
        return { ...base, amount: local, chargeKobo: charge.toString() };
      }
    }
  }

  /**
   * The guided path to a payable bill: with nothing, the countries; with a country, its
   * product types; then the operators; then the operator's plans, and a bill to pay (with
   * foreignAmount for a plan of open amount).
   */
  async options(q: OptionsQuery) {
    if (q.country_code === undefined) return { countries: await this.countries(), next: "call again with country_code" };
    const country = await this.country(q.country_code);
    if (q.product_type_id === undefined) return { country, product_types: await this.productTypes(country), next: "call again with product_type_id" };
    const type = await this.productType(country, q.product_type_id);
    if (q.operator_id === undefined) return { country, product_type: type, operators: await this.operators(country, type), next: "call again with operator_id" };
    const operator = await this.operator(country, type, q.operator_id);
    const plans = (await this.plans(operator, type)).map((p) => {
      const pricing = pricingOf(p);
      return {
        variation_code: p.variation_code,
        name: p.name,
        fixed_price: pricing.kind === "fixed",
        ...(pricing.kind === "fixed" ? { nairaAmount: nairaNumber(pricing.chargeKobo), ...(pricing.localPrice ? { foreignAmount: Number(pricing.localPrice) } : {}) } : {}),
        ...(pricing.kind === "flexible"
          ? { ngn_per_unit: pricing.rate, min_foreign_amount: pricing.min === null ? null : Number(pricing.min), max_foreign_amount: pricing.max === null ? null : Number(pricing.max) }
          : {}),
        ...(pricing.kind === "unpriced" ? { not_sold: pricing.why } : {}),
      };
    });
    const chosen = plans.find((p) => p.variation_code === q.variation_code) ?? (plans.length === 1 ? plans[0] : undefined);
    const base = { country, product_type: type, operator, currency: country.currency, plans };
    if (!chosen || "not_sold" in chosen) return { ...base, next: "call again with variation_code (and foreignAmount for a plan without a fixed price)" };
    let naira: bigint;
    let foreignAmount: number | undefined;
    if ("nairaAmount" in chosen && chosen.nairaAmount !== undefined) {
      naira = kobo(chosen.nairaAmount);
      foreignAmount = chosen.foreignAmount;
    } else {
      if (q.foreignAmount === undefined) return { ...base, next: `call again with foreignAmount in ${country.currency} for ${chosen.variation_code}` };
      const k = koboFor(q.foreignAmount, (chosen as { ngn_per_unit: string }).ngn_per_unit);
      if (k === undefined) throw new ServiceError("VALIDATION_FAILED", "foreignAmount has at most 2 decimals");
      naira = k;
      foreignAmount = q.foreignAmount;
    }
    return {
      ...base,
      bill: {
        serviceID: INTERNATIONAL_SERVICE_ID,
        serviceCategory: "AIRTIME",
        network: operator.name.toUpperCase(),
        billersCode: `<the number to top up, with its country prefix ${country.prefix}>`,
        nairaAmount: nairaNumber(naira),
        ...(foreignAmount !== undefined ? { foreignAmount } : {}),
        country_code: country.code,
        product_type_id: type.product_type_id,
        operator_id: operator.operator_id,
        variation_code: chosen.variation_code,
      },
      next: "fill billersCode and pay this bill (pay_bill, or POST /api/pay/x402 with token, blockchain and wallet_address)",
    };
  }
}

function throwError(err: Error): never {
  throw err;
}
