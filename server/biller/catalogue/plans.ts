/**
 * Which plan a domestic bill buys, from the biller's plan list, including for a bill in the
 * interface's eight fields (no variation_code). Pure rules, one per kind of product:
 *   - fixed-price plans (data bundles, bouquets, exam PINs): the plan named, whose price must
 *     be nairaAmount (the biller charges the plan's price whatever amount is sent), or the one
 *     plan priced exactly nairaAmount;
 *   - electricity: the meter type named, or the one the post-settlement check reports;
 *   - bank deposits: the bank named, or the one `network` names (VTpass lists banks as
 *     fixed-price plans of price 0.00: the amount is open);
 *   - DStv and GOtv: a bouquet change or a renewal (see vend-plan.ts).
 * A bill is refused (422, with the options) only when the choice is ambiguous or impossible.
 * A code the biller lists twice at different prices (MTN's data list does) cannot say what
 * it charges, so it is never chosen.
 */
import { ServiceError } from "../../errors.ts";
import type { Variation } from "../upstream.ts";
import { formatKobo, kobo, koboOrUndefined, nairaNumber } from "./amounts.ts";
import type { VendPlan } from "./vend-plan.ts";

/** Products whose pay takes a subscription_type (the DStv and GOtv pages): change or renew. */
export const SUBSCRIPTION_PRODUCTS = new Set(["dstv", "gotv"]);

export interface DomesticBill {
  serviceCategory: string;
  serviceID: string;
  network: string;
  nairaAmount: number;
  variation_code?: string;
  subscription_type?: "change" | "renew";
}

export interface PlanOption {
  variation_code: string;
  name: string;
  /** The plan's price in NGN; null for a plan of open amount. */
  nairaAmount: number | null;
}

/** A plan's fixed price in kobo; null for an open amount (fixedPrice "No", or VTpass's "Yes" at 0.00 as bank plans are). */
export function planPrice(v: Variation): bigint | null {
  if (v.fixedPrice !== "Yes") return null;
  const k = koboOrUndefined(v.variation_amount);
  return k === undefined || k === 0n ? null : k;
}

/**
 * A plan the biller fixes at a price that cannot be read ("6.1499999999999995", "N1,000",
 * missing): what it charges is unknown, and taking it for an open amount would vend it for
 * whatever the bill says. Not VTpass's "Yes" at 0.00, which is how its open plans (banks) read.
 */
const unreadablePrice = (v: Variation) => v.fixedPrice === "Yes" && koboOrUndefined(v.variation_amount) === undefined;

/** The plans as offered: one at a price that cannot be read is not sold, so not offered. */
export const planOptions = (plans: Variation[]): PlanOption[] =>
  plans.filter((p) => !unreadablePrice(p)).map((p) => {
    const price = planPrice(p);
    return { variation_code: p.variation_code, name: p.name, nairaAmount: price === null ? null : nairaNumber(price) };
  });

/** Codes whose price cannot be known: listed more than once at different prices, or fixed at a price that cannot be read. */
function unclearPrices(plans: Variation[]): Set<string> {
  const prices = new Map<string, Set<string>>();
  for (const p of plans) prices.set(p.variation_code, (prices.get(p.variation_code) ?? new Set()).add(String(planPrice(p))));
  const conflicting = [...prices].filter(([, s]) => s.size > 1).map(([code]) => code);
  return new Set([...conflicting, ...plans.filter(unreadablePrice).map((p) => p.variation_code)]);
}

const refuse = (code: "PLAN_REQUIRED" | "PLAN_UNKNOWN" | "PLAN_AMBIGUOUS" | "PLAN_AMOUNT_MISMATCH" | "SUBSCRIPTION_TYPE_INVALID", detail: string, options: PlanOption[], extra: Record<string, unknown> = {}) =>
  new ServiceError(code, detail, { ...extra, options });

/** The plan named by code; refused when unknown, listed twice at different prices, or priced other than the bill. */
function namedPlan(bill: DomesticBill, plans: Variation[], code: string): Variation {
  const found = plans.filter((p) => p.variation_code === code);
  if (found.length === 0) throw refuse("PLAN_UNKNOWN", `${bill.serviceID} has no plan "${code}"`, planOptions(plans));
  if (unclearPrices(plans).has(code)) {
    const unreadable = found.find(unreadablePrice);
    const how = unreadable ? `at a fixed price that cannot be read ("${unreadable.variation_amount}")` : "more than once at different prices";
    // The options: the code's own prices where it has two, else the plans that are sold.
    throw refuse("PLAN_AMBIGUOUS", `the biller lists ${code} of ${bill.serviceID} ${how}, so what it charges cannot be known; choose another plan`, planOptions(unreadable ? plans : found));
  }
  const plan = found[0]!;
  const price = planPrice(plan);
  if (price !== null && price !== kobo(bill.nairaAmount)) {
    throw refuse("PLAN_AMOUNT_MISMATCH", `plan ${code} of ${bill.serviceID} costs ${formatKobo(price)} NGN whatever amount is sent; send nairaAmount ${formatKobo(price)}`, planOptions([plan]), {
      plan_amount: nairaNumber(price),
    });
  }
  return plan;
}

/** The fixed-price plans priced exactly the bill's amount (codes with conflicting prices left out). */
function pricedAt(bill: DomesticBill, plans: Variation[]): Variation[] {
  const amount = kobo(bill.nairaAmount);
  const unclear = unclearPrices(plans);
  return plans.filter((p) => planPrice(p) === amount && !unclear.has(p.variation_code));
}

const BANK_NOISE = /\b(PLC|LIMITED|LTD|NIGERIA|NIG)\b/g;
/** The forms a bank may be named by: "GTBANK PLC" is GTBANK and GT; "Providus Bank" is PROVIDUSBANK and PROVIDUS. */
function bankNames(s: string): Set<string> {
  const words = s.toUpperCase().replace(/[^A-Z0-9 ]+/g, " ").replace(BANK_NOISE, " ").replace(/\s+/g, " ").trim();
  const joined = words.replace(/ /g, "");
  return new Set([joined, joined.replace(/BANK$/, ""), joined.replace(/^BANK/, "")].filter((n) => n.length >= 2));
}

/** The bank a bill's `network` names, among the biller's bank plans (by code or name), if exactly one. */
function bankByNetwork(network: string, plans: Variation[]): Variation | undefined {
  const wanted = bankNames(network);
  const matches = plans.filter((p) => [...bankNames(p.variation_code), ...bankNames(p.name)].some((n) => wanted.has(n)));
  return matches.length === 1 ? matches[0] : undefined;
}

/** A bill naming a subscription_type for a product that takes none. */
export const subscriptionNotTaken = (serviceID: string, options: PlanOption[] = []) =>
  refuse("SUBSCRIPTION_TYPE_INVALID", `only ${[...SUBSCRIPTION_PRODUCTS].join(" and ")} take subscription_type; leave it out for ${serviceID}`, options);

/** What the catalogue decides of a domestic bill's plan: the fields of its vend plan. */
export type PlanChoice = Pick<VendPlan, "variationCode" | "meterTypeFromVerify" | "subscription">;

export function choosePlan(bill: DomesticBill, plans: Variation[]): PlanChoice {
  const options = planOptions(plans);
  if (bill.subscription_type !== undefined && !SUBSCRIPTION_PRODUCTS.has(bill.serviceID)) throw subscriptionNotTaken(bill.serviceID, options);
  if (SUBSCRIPTION_PRODUCTS.has(bill.serviceID)) return chooseSubscription(bill, plans);
  if (plans.length === 0) {
    if (bill.variation_code !== undefined) throw refuse("PLAN_UNKNOWN", `${bill.serviceID} has no plans; leave variation_code out`, []);
    return {};
  }
  if (bill.variation_code !== undefined) return { variationCode: namedPlan(bill, plans, bill.variation_code).variation_code };

  if (bill.serviceCategory === "ELECTRICITY") return { meterTypeFromVerify: true };
  if (bill.serviceCategory === "BANK") {
    const bank = bankByNetwork(bill.network, plans);
    if (!bank) throw refuse("PLAN_REQUIRED", `"${bill.network}" names none of the banks ${bill.serviceID} pays into, or several; send the bank's variation_code`, options);
    return { variationCode: bank.variation_code };
  }
  const priced = pricedAt(bill, plans);
  if (priced.length === 1) return { variationCode: priced[0]!.variation_code };
  if (priced.length > 1) {
    throw refuse("PLAN_AMBIGUOUS", `${priced.length} plans of ${bill.serviceID} cost ${bill.nairaAmount} NGN; send the variation_code of the one to buy`, planOptions(priced));
  }
  throw refuse("PLAN_REQUIRED", `no plan of ${bill.serviceID} costs ${bill.nairaAmount} NGN; send a variation_code, or the nairaAmount of a plan`, options);
}

/**
 * DStv and GOtv: a bouquet change needs a bouquet (named, or the one priced at the bill);
 * a renewal takes none (its price is the smartcard's renewal amount, checked after
 * settlement). With no subscription type, a bill priced at one bouquet is that bouquet
 * or the renewal, whichever the check shows it pays; priced at none, a renewal.
 */
function chooseSubscription(bill: DomesticBill, plans: Variation[]): PlanChoice {
  const options = planOptions(plans);
  if (bill.subscription_type === "renew") {
    if (bill.variation_code !== undefined) throw refuse("SUBSCRIPTION_TYPE_INVALID", "a renewal renews the smartcard's current bouquet: leave variation_code out", options);
    return { subscription: "renew" };
  }
  if (bill.variation_code !== undefined) return { subscription: "change", variationCode: namedPlan(bill, plans, bill.variation_code).variation_code };
  const priced = pricedAt(bill, plans);
  if (priced.length > 1) {
    throw refuse("PLAN_AMBIGUOUS", `${priced.length} bouquets of ${bill.serviceID} cost ${bill.nairaAmount} NGN; send the variation_code of one, or subscription_type renew`, planOptions(priced));
  }
  if (bill.subscription_type === "change") {
    if (priced.length === 0) throw refuse("PLAN_REQUIRED", `no bouquet of ${bill.serviceID} costs ${bill.nairaAmount} NGN; send its variation_code`, options);
    return { subscription: "change", variationCode: priced[0]!.variation_code };
  }
  return priced.length === 1 ? { subscription: "either", variationCode: priced[0]!.variation_code } : { subscription: "renew" };
}

/**
 * The post-settlement number check of a product, as the interface lists them: ELECTRICITY,
 * BANK, EDUCATION (JAMB) and CABLE except Showmax; with the `type` its merchant-verify takes
 * (the meter type, JAMB's variation code, the bank's code; none for cable).
 */
export function checkFor(category: string, serviceID: string, variationCode: string | undefined): VendPlan["verify"] {
  switch (category) {
    case "ELECTRICITY":
      return { type: variationCode ?? "prepaid" };
    case "BANK":
      return { ...(variationCode !== undefined ? { type: variationCode } : {}) };
    case "EDUCATION":
      return serviceID === "jamb" ? { ...(variationCode !== undefined ? { type: variationCode } : {}) } : null;
    case "CABLE":
      return serviceID === "showmax" ? null : {};
    default:
      return null;
  }
}

/**
 * The plan of an order made before vend plans were stored: the bill's own fields, as the
 * service then sent them (international amounts now in the destination's currency, cable
 * bills with their subscription type).
 */
export function legacyPlan(bill: {
  serviceID: string;
  serviceCategory: string;
  billersCode: string;
  nairaAmount: number;
  variation_code?: string;
  phone?: string;
  foreignAmount?: number;
  country_code?: string;
  operator_id?: string;
  product_type_id?: string;
}): VendPlan {
  const international = bill.country_code !== undefined && bill.operator_id !== undefined && bill.product_type_id !== undefined;
  const cable = SUBSCRIPTION_PRODUCTS.has(bill.serviceID);
  return {
    serviceID: bill.serviceID,
    billersCode: bill.billersCode,
    phone: bill.phone ?? (bill.serviceCategory === "AIRTIME" || bill.serviceCategory === "DATA" ? bill.billersCode : null),
    ...(bill.variation_code !== undefined ? { variationCode: bill.variation_code } : {}),
    amount: international && bill.foreignAmount !== undefined ? String(bill.foreignAmount) : formatKobo(kobo(bill.nairaAmount)),
    chargeKobo: kobo(bill.nairaAmount).toString(),
    verify: checkFor(bill.serviceCategory, bill.serviceID, bill.variation_code),
    ...(cable ? { subscription: bill.variation_code !== undefined ? ("change" as const) : ("renew" as const) } : {}),
    ...(international ? { international: { country_code: bill.country_code!, operator_id: bill.operator_id!, product_type_id: bill.product_type_id! } } : {}),
  };
}
