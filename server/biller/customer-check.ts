/**
 * The biller's number check (merchant-verify), before anything is paid:
 *   - for anyone, free, as `verify_customer` (REST and the agent tools): the customer's name
 *     and what else the biller tells, for a meter, smartcard, account or profile number;
 *   - for a payer whose earlier bills failed that check (VERIFY_UPFRONT_AFTER_FAILURES
 *     within VERIFY_UPFRONT_WINDOW_SECONDS), on every checkable bill before its price is
 *     shown: such a payer's wrong numbers are refused unpaid instead of settled and
 *     refunded at the service's cost;
 *   - for everyone while the token's refund budget is under pressure (less than
 *     REFUND_PRESSURE_PERCENT of it left: many wallets, each with its share, may be at it).
 * Otherwise the interface's settle-then-verify stays the rule.
 * Definite answers are cached (VERIFY_CACHE_MS), so repeating a question costs the biller
 * nothing; an answer the biller could not give is never cached.
 */
import { formatKobo } from "./catalogue/amounts.ts";
import { checkFor } from "./catalogue/plans.ts";
import { TtlCache } from "./catalogue/ttl-cache.ts";
import type { BillerApi, VerifyResult } from "./upstream.ts";
import { ServiceError } from "../errors.ts";
import { errorText } from "../log-safety.ts";

export interface CustomerQuestion {
  serviceCategory: string;
  serviceID: string;
  billersCode: string;
  variation_code?: string;
}

export class CustomerChecks {
  private readonly cache: TtlCache;

  constructor(
    private readonly biller: BillerApi,
    ttlMs: number,
    /** How many of a payer's bills failed the check lately (orders/store.ts failedVerifications). */
    private readonly failuresOf: (payer: string) => Promise<number>,
    private readonly upfrontAfter: number,
  ) {
    this.cache = new TtlCache(ttlMs);
  }

  /** Whether the product has a number check at all (airtime, data and exam PINs have none). */
  static checkable(q: CustomerQuestion): boolean {
    return checkFor(q.serviceCategory, q.serviceID.toLowerCase(), q.variation_code) !== null;
  }

  /** The biller's answer for the number; BILLER_UNAVAILABLE when it gives none. */
  async verify(q: CustomerQuestion): Promise<VerifyResult> {
    const check = checkFor(q.serviceCategory, q.serviceID.toLowerCase(), q.variation_code);
    if (!check) throw new ServiceError("VERIFY_NOT_OFFERED", `${q.serviceID} has no number check: its bills need only the number itself`);
    const request = { serviceID: q.serviceID.toLowerCase(), billersCode: q.billersCode, ...(check.type ? { type: check.type } : {}) };
    try {
      return await this.cache.get(JSON.stringify(request), () => this.biller.verify(request));
    } catch (err) {
      throw new ServiceError("BILLER_UNAVAILABLE", `the biller could not check the number (${errorText(err).split("\n")[0]}); try again`);
    }
  }

  /**
   * Before a bill is priced for `payer`: when the payer's bills failed the number check
   * lately and this bill has one, the number is checked now, and a wrong one is refused
   * (CUSTOMER_NOT_VERIFIED) before anything is paid.
   */
  async checkUpfront(q: CustomerQuestion, payer: string, budgetUnderPressure: () => Promise<boolean>): Promise<void> {
    if (!CustomerChecks.checkable(q)) return;
    const failures = await this.failuresOf(payer);
    let why: string;
    if (failures >= this.upfrontAfter) why = `${failures} of this wallet's recent bills failed the biller's number check, so its bills are checked before payment`;
    else if (await budgetUnderPressure()) why = "refunds are heavy just now, so every bill's number is checked before payment";
    else return;
    const answer = await this.verify(q);
    if (answer.ok) return;
    throw new ServiceError("CUSTOMER_NOT_VERIFIED", `${why}; the biller says this one is wrong: ${answer.reason}. Nothing was charged`, { reason: answer.reason });
  }
}

/** The public view of an answer: the customer's name and what else the biller told. */
export function customerView(q: CustomerQuestion, answer: VerifyResult) {
  if (!answer.ok) return { valid: false as const, serviceID: q.serviceID, billersCode: q.billersCode, reason: answer.reason };
  return {
    valid: true as const,
    serviceID: q.serviceID,
    billersCode: q.billersCode,
    customer_name: answer.customerName,
    ...(answer.meterType ? { meter_type: answer.meterType } : {}),
    ...(answer.currentBouquet ? { current_bouquet: answer.currentBouquet } : {}),
    ...(answer.renewalKobo !== null ? { renewal_amount: formatKobo(answer.renewalKobo) } : {}),
  };
}
