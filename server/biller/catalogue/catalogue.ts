/**
 * The biller's catalogue as pricing and vending need it: which products each category
 * holds and the amounts each takes, and each product's plans, read through the biller's own
 * API and kept for a while (CATALOGUE_TTL_MS). Every bill is checked here before it is
 * priced, on both rails, and comes out as its vend plan (vend-plan.ts), stored with its
 * order: a bill that could never vend is refused before any challenge or pull.
 *   - the serviceID must be a product of the bill's category (the category sets the fee
 *     and whether the number is checked, so it cannot be borrowed from another product);
 *   - the plan is chosen by plans.ts, or refused with the options to choose from;
 *   - nairaAmount must lie within the product's limits;
 *   - an international bill (foreign-airtime) is checked by international.ts; a domestic
 *     bill may not carry its fields.
 * Imports run one way: this module knows the service's BillerApi (../upstream.ts), never an
 * upstream's wire format.
 */
import { ServiceError } from "../../errors.ts";
import type { Category } from "../../pricing/price.ts";
import { UnknownProduct, type BillerApi, type BillerService, type Variation } from "../upstream.ts";
import { formatKobo, kobo } from "./amounts.ts";
import { INTERNATIONAL_FIELDS, InternationalCatalogue, isInternational, type InternationalFields } from "./international.ts";
import { checkFor, choosePlan, planOptions, SUBSCRIPTION_PRODUCTS, subscriptionNotTaken, type PlanOption } from "./plans.ts";
import { TtlCache } from "./ttl-cache.ts";
import type { VendPlan } from "./vend-plan.ts";

/** The biller's category identifier for each of the service's categories (the service-categories page). */
export const BILLER_CATEGORY: Record<Category, string> = {
  AIRTIME: "airtime",
  DATA: "data",
  ELECTRICITY: "electricity-bill",
  CABLE: "tv-subscription",
  BANK: "bank-deposit",
  EDUCATION: "education",
};

/** Products whose billersCode is the customer's phone (their pay's `phone` is the same number). */
const PHONE_PRODUCTS = new Set(["AIRTIME", "DATA"]);

export interface BillToCheck extends InternationalFields {
  serviceCategory: Category;
  serviceID: string;
  network: string;
  billersCode: string;
  nairaAmount: number;
  variation_code?: string;
  subscription_type?: "change" | "renew";
  phone?: string;
}

/** What the catalogue says about a bill that passed: the product, and how the bill vends. */
export interface CheckedBill {
  service: BillerService;
  vend: VendPlan;
}

export class Catalogue {
  private readonly cache: TtlCache;
  /** International airtime and data (serviceID foreign-airtime): countries, operators and their rates. */
  readonly international: InternationalCatalogue;

  constructor(
    private readonly biller: Pick<BillerApi, "services" | "variations" | "internationalCountries" | "internationalProductTypes" | "internationalOperators" | "internationalVariations">,
    ttlMs: number,
  ) {
    this.cache = new TtlCache(ttlMs);
    this.international = new InternationalCatalogue(biller, this.cache);
  }

  /** The products of one category; BILLER_UNAVAILABLE when the biller cannot answer. */
  async services(category: Category): Promise<BillerService[]> {
    return this.cache.get(`services:${category}`, () => this.biller.services(BILLER_CATEGORY[category])).catch((err) => {
      throw billerUnavailable(`${category} products`, err);
    });
  }

  private variations(serviceID: string): Promise<Variation[]> {
    return this.cache.get(`variations:${serviceID}`, () => this.biller.variations(serviceID)).catch((err) => {
      if (err instanceof UnknownProduct) throw new ServiceError("SERVICE_UNKNOWN", err.message);
      throw billerUnavailable(`plans of ${serviceID}`, err);
    });
  }

  /** Checks a bill against the catalogue (see the file's comment); throws the 422 or 503 to answer. */
  async check(bill: BillToCheck): Promise<CheckedBill> {
    const services = await this.services(bill.serviceCategory);
    const service = services.find((s) => s.serviceID === bill.serviceID);
    if (!service) {
      throw new ServiceError("SERVICE_UNKNOWN", `"${bill.serviceID}" is not a ${bill.serviceCategory} product; ${bill.serviceCategory} products: ${services.map((s) => s.serviceID).join(", ")}`, {
        options: services.map((s) => s.serviceID),
      });
    }
    if (isInternational(bill) && bill.subscription_type !== undefined) throw subscriptionNotTaken(bill.serviceID);
    const vend = isInternational(bill) ? await this.international.check(bill) : await this.domestic(bill);
    checkLimits(service, bill);
    return { service, vend };
  }

  private async domestic(bill: BillToCheck): Promise<VendPlan> {
    const present = INTERNATIONAL_FIELDS.filter((f) => bill[f] !== undefined).concat(bill.foreignAmount !== undefined ? ["foreignAmount" as never] : []);
    if (present.length > 0) {
      throw new ServiceError("INTERNATIONAL_FIELDS_INVALID", `${present.join(", ")} belong to international bills (serviceID foreign-airtime) only; leave them out for ${bill.serviceID}`);
    }
    const choice = choosePlan(bill, await this.variations(bill.serviceID));
    const nairaKobo = kobo(bill.nairaAmount);
    return {
      serviceID: bill.serviceID,
      billersCode: bill.billersCode,
      phone: bill.phone ?? (PHONE_PRODUCTS.has(bill.serviceCategory) || bill.serviceID === "showmax" ? bill.billersCode : null),
      ...choice,
      amount: formatKobo(nairaKobo),
      chargeKobo: nairaKobo.toString(),
      verify: checkFor(bill.serviceCategory, bill.serviceID, choice.variationCode),
    };
  }

  /** Forgets a product's plans (the biller says they changed), so the next bill reads them afresh. */
  forgetPlans(serviceID: string): void {
    this.cache.forget(`variations:${serviceID}`);
  }

  /** Forgets the plans a vend plan was priced from: an international one's operator and product type, else its product's. */
  forgetPlansOf(plan: Pick<VendPlan, "serviceID" | "international">): void {
    if (plan.international) this.international.forgetPlans(plan.international.operator_id, plan.international.product_type_id);
    else this.forgetPlans(plan.serviceID);
  }

  /**
   * SERVICE_UNKNOWN unless the biller lists the product (in `category`, or in any): checked
   * against the cached product lists, so a stranger naming random products costs the biller
   * nothing before it is asked about one.
   */
  async requireListed(serviceID: string, category?: Category): Promise<void> {
    const categories = category ? [category] : (Object.keys(BILLER_CATEGORY) as Category[]);
    const listed = await Promise.all(categories.map((c) => this.services(c)));
    if (!listed.some((products) => products.some((p) => p.serviceID === serviceID))) {
      throw new ServiceError("SERVICE_UNKNOWN", `${serviceID} is not one of the biller's ${category ?? ""} products`.replace("  ", " "));
    }
  }

  /** list_plans: a product's plans, each with its price (null: any amount), and how a bill without one is resolved. */
  async plans(serviceID: string): Promise<{ serviceID: string; plans: PlanOption[]; subscription_types?: string[] }> {
    if (isInternational({ serviceID })) {
      throw new ServiceError("INTERNATIONAL_FIELDS_INVALID", `${serviceID}'s plans are per country, product type and operator: list_international_options (GET /api/international) gives them`);
    }
    await this.requireListed(serviceID);
    const plans = planOptions(await this.variations(serviceID));
    return { serviceID, plans, ...(SUBSCRIPTION_PRODUCTS.has(serviceID) ? { subscription_types: ["change", "renew"] } : {}) };
  }
}

function checkLimits(service: BillerService, bill: BillToCheck): void {
  const { minimumAmount: min, maximumAmount: max } = service;
  if ((min !== null && bill.nairaAmount < min) || (max !== null && bill.nairaAmount > max)) {
    throw new ServiceError("AMOUNT_OUT_OF_RANGE", `${bill.serviceID} takes ${min ?? 0} to ${max ?? "any"} NGN per bill; got ${bill.nairaAmount}`, {
      minimum: min,
      maximum: max,
    });
  }
}

function billerUnavailable(what: string, err: unknown): ServiceError {
  return new ServiceError("BILLER_UNAVAILABLE", `the biller's catalogue could not be read (${what}): ${(err as Error).message}`);
}
