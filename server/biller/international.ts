/**
 * International airtime and data (the biller's serviceID foreign-airtime), read through the
 * biller's international API: countries, then a country's product types, then the operators
 * of a product type, then an operator's plans with their rate (NGN per unit of the local
 * currency). A bill names all four, as the biller's pay call takes them (country_code,
 * product_type_id, operator_id, variation_code), with the local figure as foreignAmount.
 *
 * nairaAmount stays the source of truth for the price: it must be foreignAmount at the
 * plan's rate, to the kobo (rounded half up), and a fixed-price plan's own price. A bill
 * whose figures disagree is refused with the figure that would be accepted, never
 * repriced: the payer sees and pays nairaAmount, and the biller is asked for foreignAmount.
 */
import { ServiceError } from "../errors.ts";
import { formatScaled, toScaled } from "../pricing/decimal.ts";
import { kobo, requireFixedPrice } from "./plan-price.ts";
import type { TtlCache } from "./ttl-cache.ts";
import type { Variation } from "./vtpass.ts";

export const INTERNATIONAL_SERVICE_ID = "foreign-airtime";
/** The bill's fields an international bill needs and a domestic one may not carry. */
export const INTERNATIONAL_FIELDS = ["foreignAmount", "country_code", "product_type_id", "operator_id"] as const;

export interface InternationalFields {
  foreignAmount?: number;
  country_code?: string;
  product_type_id?: string;
  operator_id?: string;
}

export interface Country {
  code: string;
  name: string;
  currency: string;
  prefix: string;
}
export interface ProductType {
  product_type_id: string;
  name: string;
}
export interface Operator {
  operator_id: string;
  name: string;
}
/** A plan of an operator: `variation_rate` is NGN per unit of the country's currency. */
export interface InternationalVariation extends Variation {
  variation_rate: string;
}

/** The biller's international calls (VtpassClient implements them). */
export interface InternationalBiller {
  internationalCountries(): Promise<Country[]>;
  internationalProductTypes(countryCode: string): Promise<ProductType[]>;
  internationalOperators(countryCode: string, productTypeId: string): Promise<Operator[]>;
  internationalVariations(operatorId: string, productTypeId: string): Promise<InternationalVariation[]>;
}

export const isInternational = (bill: { serviceID: string }) => bill.serviceID === INTERNATIONAL_SERVICE_ID;

/** foreignAmount at `rate` NGN per unit, in kobo, rounded half up; undefined when either figure is not a plain decimal. */
export function koboFor(foreignAmount: number, rate: string): bigint | undefined {
  const cents = toScaled(foreignAmount, 2);
  const rateMicro = toScaled(rate, 6);
  if (cents === undefined || rateMicro === undefined) return undefined;
  return (cents * rateMicro + 500_000n) / 1_000_000n;
}

/** The local figure a fixed-price plan stands for: its NGN price at its rate, to the cent. */
function foreignPriceOf(plan: InternationalVariation): string | undefined {
  const priceKobo = toScaled(plan.variation_amount, 2);
  const rateMicro = toScaled(plan.variation_rate, 6);
  if (priceKobo === undefined || rateMicro === undefined || rateMicro === 0n) return undefined;
  return formatScaled((priceKobo * 1_000_000n + rateMicro / 2n) / rateMicro, 2);
}

const unknown = (what: string, value: string, known: string[]) =>
  new ServiceError("INTERNATIONAL_OPTION_UNKNOWN", `no ${what} "${value}"; known: ${known.join(", ") || "none"}`, { known });

export interface OptionsQuery extends InternationalFields {
  variation_code?: string;
}

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

  async productType(country: Country, id: string): Promise<ProductType> {
    const all = await this.read(`types:${country.code}`, `product types of ${country.code}`, () => this.biller.internationalProductTypes(country.code));
    return all.find((t) => t.product_type_id === id) ?? throwError(unknown(`product_type_id in ${country.code}`, id, all.map((t) => t.product_type_id)));
  }

  async operator(country: Country, type: ProductType, id: string): Promise<Operator> {
    const all = await this.operators(country, type);
    return all.find((o) => o.operator_id === id) ?? throwError(unknown(`operator_id for ${country.code} ${type.name}`, id, all.map((o) => o.operator_id)));
  }

  private operators(country: Country, type: ProductType) {
    return this.read(`operators:${country.code}:${type.product_type_id}`, `operators of ${country.code}`, () =>
      this.biller.internationalOperators(country.code, type.product_type_id),
    );
  }

  private plans(operator: Operator, type: ProductType) {
    return this.read(`plans:${operator.operator_id}:${type.product_type_id}`, `plans of operator ${operator.operator_id}`, () =>
      this.biller.internationalVariations(operator.operator_id, type.product_type_id),
    );
  }

  /** Checks an international bill (see the file's comment) and returns its plan; throws the 422 or 503 to answer. */
  async check(bill: InternationalFields & { serviceID: string; nairaAmount: number; variation_code?: string }): Promise<InternationalVariation> {
    const missing = INTERNATIONAL_FIELDS.filter((f) => bill[f] === undefined);
    if (missing.length > 0) {
      throw new ServiceError("INTERNATIONAL_FIELDS_INVALID", `an international bill (${INTERNATIONAL_SERVICE_ID}) needs ${missing.join(", ")}; list_international_options gives them`);
    }
    const country = await this.country(bill.country_code!);
    const type = await this.productType(country, bill.product_type_id!);
    const operator = await this.operator(country, type, bill.operator_id!);
    const plans = await this.plans(operator, type);
    const codes = plans.map((p) => p.variation_code).join(", ");
    if (bill.variation_code === undefined) throw new ServiceError("PLAN_REQUIRED", `${operator.name} needs a variation_code: one of ${codes}`);
    const plan = plans.find((p) => p.variation_code === bill.variation_code);
    if (!plan) throw new ServiceError("PLAN_UNKNOWN", `${operator.name} has no plan "${bill.variation_code}"; its plans: ${codes}`);
    requireFixedPrice(plan, bill);
    const expected = koboFor(bill.foreignAmount!, plan.variation_rate);
    if (expected === undefined) throw new ServiceError("BILLER_UNAVAILABLE", `the biller's rate for ${plan.variation_code} is unreadable: ${plan.variation_rate}`);
    if (expected !== BigInt(kobo(bill.nairaAmount))) {
      const naira = Number(formatScaled(expected, 2));
      throw new ServiceError(
        "FOREIGN_AMOUNT_MISMATCH",
        `${bill.foreignAmount} ${country.currency} at ${plan.variation_rate} NGN per ${country.currency} is ${naira} NGN; send nairaAmount ${naira}, or the foreignAmount that matches yours`,
        { naira_amount: naira, ngn_per_unit: plan.variation_rate, currency: country.currency },
      );
    }
    return plan;
  }

  /**
   * The guided path to a payable bill: with nothing, the countries; with a country, its
   * product types; then the operators; then the operator's plans, and a bill to pay (with
   * foreignAmount for a plan of open amount).
   */
  async options(q: OptionsQuery) {
    if (q.country_code === undefined) {
      return { countries: await this.countries(), next: "call again with country_code" };
    }
    const country = await this.country(q.country_code);
    if (q.product_type_id === undefined) {
      const types = await this.read(`types:${country.code}`, `product types of ${country.code}`, () => this.biller.internationalProductTypes(country.code));
      return { country, product_types: types, next: "call again with product_type_id" };
    }
    const type = await this.productType(country, q.product_type_id);
    if (q.operator_id === undefined) {
      return { country, product_type: type, operators: await this.operators(country, type), next: "call again with operator_id" };
    }
    const operator = await this.operator(country, type, q.operator_id);
    const plans = (await this.plans(operator, type)).map((p) => ({
      variation_code: p.variation_code,
      name: p.name,
      fixed_price: p.fixedPrice === "Yes",
      ngn_per_unit: p.variation_rate,
      ...(p.fixedPrice === "Yes" ? { nairaAmount: Number(p.variation_amount), foreignAmount: Number(foreignPriceOf(p)) } : {}),
    }));
    const chosen = plans.find((p) => p.variation_code === q.variation_code) ?? (plans.length === 1 ? plans[0] : undefined);
    const base = { country, product_type: type, operator, currency: country.currency, plans };
    if (!chosen) return { ...base, next: "call again with variation_code (and foreignAmount for a plan without a fixed price)" };
    const foreignAmount = chosen.foreignAmount ?? q.foreignAmount;
    if (foreignAmount === undefined) return { ...base, next: `call again with foreignAmount in ${country.currency} for ${chosen.variation_code}` };
    const naira = koboFor(foreignAmount, chosen.ngn_per_unit);
    if (naira === undefined) throw new ServiceError("VALIDATION_FAILED", "foreignAmount has at most 2 decimals");
    return {
      ...base,
      bill: {
        serviceID: INTERNATIONAL_SERVICE_ID,
        serviceCategory: "AIRTIME",
        network: operator.name.toUpperCase(),
        billersCode: `<the number to top up, with its country prefix ${country.prefix}>`,
        nairaAmount: Number(formatScaled(naira, 2)),
        foreignAmount,
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
