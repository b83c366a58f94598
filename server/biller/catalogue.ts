/**
 * The biller's catalogue as pricing needs it: which products each category holds and the
 * amounts each takes, and each product's plans. Read through the biller's own API and kept
 * for a while (CATALOGUE_TTL_MS). Every bill is checked here before it is priced, on both
 * rails, so a bill that could never vend is refused before any challenge or pull:
 *   - the serviceID must be a product of the bill's category (the category sets the fee
 *     and whether the number is verified, so it cannot be borrowed from another product);
 *   - a product with plans needs a known variation_code; one without plans takes none;
 *   - a fixed-price plan (data bundles, bouquets, exam PINs) is charged at the plan's price
 *     whatever amount is sent, so nairaAmount must equal it: a mismatch is refused with the
 *     plan's amount rather than silently repriced, because nairaAmount is the price the
 *     caller states and sees;
 *   - nairaAmount must lie within the product's limits;
 *   - an international bill (serviceID foreign-airtime) is checked by international.ts:
 *     its country, product type, operator and plan, and nairaAmount against foreignAmount
 *     at the biller's rate; a domestic bill may not carry those fields.
 */
import type { Category } from "../pricing/price.ts";
import { ServiceError } from "../errors.ts";
import {
  INTERNATIONAL_FIELDS,
  INTERNATIONAL_SERVICE_ID,
  InternationalCatalogue,
  isInternational,
  type InternationalBiller,
  type InternationalFields,
} from "./international.ts";
import { requireFixedPrice } from "./plan-price.ts";
import { TtlCache } from "./ttl-cache.ts";
import type { BillerService, Variation, VtpassClient } from "./vtpass.ts";

/** The biller's category identifier for each of the service's categories. */
export const BILLER_CATEGORY: Record<Category, string> = {
  AIRTIME: "airtime",
  DATA: "data",
  ELECTRICITY: "electricity-bill",
  CABLE: "tv-subscription",
  BANK: "bank-deposit",
  EDUCATION: "education",
};

export interface BillToCheck extends InternationalFields {
  serviceCategory: Category;
  serviceID: string;
  nairaAmount: number;
  variation_code?: string;
}

/** What the catalogue says about a bill that passed: the product, and its plan if it has plans. */
export interface CheckedBill {
  service: BillerService;
  plan: Variation | null;
}


export class Catalogue {
  private readonly cache: TtlCache;
  /** International airtime and data (serviceID foreign-airtime): countries, operators and their rates. */
  readonly international: InternationalCatalogue;

  constructor(
    private readonly biller: Pick<VtpassClient, "services" | "variations"> & InternationalBiller,
    ttlMs: number,
  ) {
    this.cache = new TtlCache(ttlMs);
    this.international = new InternationalCatalogue(biller, this.cache);
  }

  private cached<T>(key: string, load: () => Promise<T>): Promise<T> {
    return this.cache.get(key, load);
  }

  private unavailable(what: string, err: unknown): ServiceError {
    return billerUnavailable(what, err);
  }

  /** The products of one category; BILLER_UNAVAILABLE when the biller cannot answer. */
  async services(category: Category): Promise<BillerService[]> {
    return this.cached(`services:${category}`, () => this.biller.services(BILLER_CATEGORY[category])).catch((err) => {
      throw this.unavailable(`${category} products`, err);
    });
  }

  private variations(serviceID: string): Promise<Variation[]> {
    return this.cached(`variations:${serviceID}`, () => this.biller.variations(serviceID)).catch((err) => {
      throw this.unavailable(`plans of ${serviceID}`, err);
    });
  }

  /** Checks a bill against the catalogue (see the file's comment); throws the 422 or 503 to answer. */
  async check(bill: BillToCheck): Promise<CheckedBill> {
    const services = await this.services(bill.serviceCategory);
    const service = services.find((s) => s.serviceID === bill.serviceID);
    if (!service) {
      throw new ServiceError(
        "SERVICE_UNKNOWN",
        `"${bill.serviceID}" is not a ${bill.serviceCategory} product; ${bill.serviceCategory} products: ${services.map((s) => s.serviceID).join(", ")}`,
      );
    }
    const plan = isInternational(bill) ? await this.international.check(bill) : await this.domesticPlan(bill);
    checkLimits(service, bill);
    return { service, plan };
  }

  /** A domestic bill's plan, where its product has plans. */
  private async domesticPlan(bill: BillToCheck): Promise<Variation | null> {
    const present = INTERNATIONAL_FIELDS.filter((f) => bill[f] !== undefined);
    if (present.length > 0) {
      throw new ServiceError("INTERNATIONAL_FIELDS_INVALID", `${present.join(", ")} belong to international bills (serviceID ${INTERNATIONAL_SERVICE_ID}) only; leave them out for ${bill.serviceID}`);
    }
    const plans = await this.variations(bill.serviceID);
    let plan: Variation | null = null;
    if (plans.length === 0) {
      if (bill.variation_code !== undefined) {
        throw new ServiceError("PLAN_UNKNOWN", `${bill.serviceID} has no plans; leave variation_code out`);
      }
    } else {
      const codes = plans.map((p) => p.variation_code).join(", ");
      if (bill.variation_code === undefined) {
        throw new ServiceError("PLAN_REQUIRED", `${bill.serviceID} needs a variation_code (a plan or meter type): one of ${codes}`);
      }
      plan = plans.find((p) => p.variation_code === bill.variation_code) ?? null;
      if (!plan) throw new ServiceError("PLAN_UNKNOWN", `${bill.serviceID} has no plan "${bill.variation_code}"; its plans: ${codes}`);
      requireFixedPrice(plan, bill);
    }
    return plan;
  }
}

function checkLimits(service: BillerService, bill: BillToCheck): void {
  const { minimumAmount: min, maximumAmount: max } = service;
  if ((min !== null && bill.nairaAmount < min) || (max !== null && bill.nairaAmount > max)) {
    throw new ServiceError(
      "AMOUNT_OUT_OF_RANGE",
      `${bill.serviceID} takes ${min ?? 0} to ${max ?? "any"} NGN per bill; got ${bill.nairaAmount}`,
      { minimum: min, maximum: max },
    );
  }
}

export function billerUnavailable(what: string, err: unknown): ServiceError {
  return new ServiceError("BILLER_UNAVAILABLE", `the biller's catalogue could not be read (${what}): ${(err as Error).message}`);
}
