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
 * nothing, and a bill checked before payment is not checked again after settlement (the
 * post-settlement check, orders/fulfil.ts, asks through here too); an answer the biller
 * could not give is never cached. A bill is asked exactly as its vend plan will be checked.
 */
import { formatKobo } from "./catalogue/amounts.ts";
import { checkFor } from "./catalogue/plans.ts";
import { TtlCache } from "./catalogue/ttl-cache.ts";
import type { BillerApi, VerifyResult } from "./upstream.ts";
import { refusedByCheck, type VendPlan } from "./catalogue/vend-plan.ts";
import { ServiceError } from "../errors.ts";
import { errorText } from "../log-safety.ts";

export interface CustomerQuestion {
  serviceCategory: string;
  serviceID: string;
  billersCode: string;
  variation_code?: string;
}

/** A vend plan with its number check. */
type CheckedPlan = Pick<VendPlan, "serviceID" | "billersCode"> & { verify: NonNullable<VendPlan["verify"]> };

/** What the biller's merchant-verify is asked for a plan (and the key its answer is kept under). */
const checkRequest = (plan: CheckedPlan) => ({ serviceID: plan.serviceID, billersCode: plan.billersCode, ...(plan.verify.type ? { type: plan.verify.type } : {}) });

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

  /** verify_customer: the biller's answer for a number; VERIFY_NOT_OFFERED for a product without a check. */
  async verify(q: CustomerQuestion): Promise<VerifyResult> {
    const check = checkFor(q.serviceCategory, q.serviceID, q.variation_code);
    if (!check) throw new ServiceError("VERIFY_NOT_OFFERED", `${q.serviceID} has no number check: its bills need only the number itself`);
    try {
      return await this.ask({ serviceID: q.serviceID, billersCode: q.billersCode, verify: check });
    } catch (err) {
      throw billerUnavailable(err);
    }
  }

  /** A plan's number check (its `verify` set), cached when definite; throws the biller's error when it gives no answer. */
  ask(plan: CheckedPlan): Promise<VerifyResult> {
    const request = checkRequest(plan);
    return this.cache.get(JSON.stringify(request), () => this.biller.verify(request));
  }

  /** The check's answer if it was asked lately (kept, or on its way), without asking the biller; undefined otherwise. */
  asked(plan: CheckedPlan): Promise<VerifyResult> | undefined {
    return this.cache.peek(JSON.stringify(checkRequest(plan)));
  }

  /**
   * Before a bill is priced for `payer`: when the payer's bills failed the number check
   * lately and this bill has one, the number is checked now, and a wrong one is refused
   * (CUSTOMER_NOT_VERIFIED) before anything is paid; so is a plan the check shows cannot be
   * paid as priced (RENEWAL_AMOUNT_MISMATCH: a renewal at other than the smartcard's renewal
   * amount), which after payment is refunded and counted as a failed check too.
   */
  async checkUpfront(plan: VendPlan, payer: string, budgetUnderPressure: () => Promise<boolean>): Promise<void> {
    const verify = plan.verify;
    if (!verify) return;
    const failures = await this.failuresOf(payer);
    let why: string;
    if (failures >= this.upfrontAfter) why = `${failures} of this wallet's recent bills failed the biller's number check, so its bills are checked before payment`;
    else if (await budgetUnderPressure()) why = "refunds are heavy just now, so every bill's number is checked before payment";
    else return;
    const answer = await this.ask({ ...plan, verify }).catch((err: unknown) => {
      throw billerUnavailable(err);
    });
    if (answer.ok) {
      const refused = refusedByCheck(plan, answer);
      if (refused) {
        throw new ServiceError("RENEWAL_AMOUNT_MISMATCH", `${why}; the biller's check says ${refused}. Nothing was charged`, {
          reason: refused,
          ...(answer.renewalKobo !== null ? { renewal_amount: formatKobo(answer.renewalKobo) } : {}),
        });
      }
      return;
    }
    throw new ServiceError("CUSTOMER_NOT_VERIFIED", `${why}; the biller says this one is wrong: ${answer.reason}. Nothing was charged`, { reason: answer.reason });
  }
}

const billerUnavailable = (err: unknown) =>
  new ServiceError("BILLER_UNAVAILABLE", `the biller could not check the number (${errorText(err).split("\n")[0]}); try again`);

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
