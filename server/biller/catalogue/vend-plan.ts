/**
 * A vend plan: how a bill will be vended, decided by the catalogue when the bill is priced
 * and stored with its order, so the pay sent after settlement is the one that was priced.
 * Two choices wait for the post-settlement number check, because only it can tell:
 *   - a meter's type, when the bill names none: merchant-verify's `Meter_Type`, else
 *     prepaid (the IKEDC page's verify answer carries `Meter_Type`; prepaid is the default
 *     meter the pages lead with);
 *   - DStv and GOtv without a subscription type: renew when the renewal amount merchant-verify
 *     reports is the bill's amount, else change to the bouquet priced at that amount.
 */
import type { PayRequest, VerifyResult } from "../upstream.ts";
import { formatKobo } from "./amounts.ts";

export interface VendPlan {
  serviceID: string;
  billersCode: string;
  /** The customer's phone; null where the product is not a phone number and the bill named none (the service's default then). */
  phone: string | null;
  /** The plan, bank or meter type to send; absent for products without plans, and for a meter whose type the check decides. */
  variationCode?: string;
  /** The pay call's `amount`, a decimal in the product's currency (NGN, or the destination's for international). */
  amount?: string;
  /** What the biller will charge the merchant, in kobo: nairaAmount, which the catalogue held to the plan. */
  chargeKobo: string;
  /** Checked with the biller after settlement, before the pay, with this `type` (meter type, exam type, bank). */
  verify: { type?: string } | null;
  /** Electricity without variation_code: the meter type comes from the check. */
  meterTypeFromVerify?: boolean;
  /** DStv and GOtv: change (to variationCode), renew (the current bouquet), or either (see the file's comment). */
  subscription?: "change" | "renew" | "either";
  international?: { country_code: string; operator_id: string; product_type_id: string };
}

/** The pay a plan comes to once its number is checked, or why it cannot be paid; `flag` is a note for operators. */
export type CompletedPlan = { pay: Omit<PayRequest, "requestId">; flag?: string } | { refuse: string };

/**
 * Why the number check's answer shows the plan cannot be paid as priced, or undefined: a
 * renewal priced at other than the smartcard's renewal amount (the biller would charge that
 * amount, not the bill's). The check answers it before payment as well as after.
 */
export function refusedByCheck(plan: VendPlan, verified: Extract<VerifyResult, { ok: true }> | undefined): string | undefined {
  const renewal = verified?.renewalKobo ?? null;
  const charge = BigInt(plan.chargeKobo);
  if (plan.subscription === "renew" && renewal !== null && renewal !== charge) return `renewing this smartcard's bouquet costs ${formatKobo(renewal)} NGN, not the bill's ${formatKobo(charge)} NGN`;
  return undefined;
}

/** Completes a plan with what the post-settlement check found (`verified` is absent for products without a check). */
export function completePlan(plan: VendPlan, verified: Extract<VerifyResult, { ok: true }> | undefined, defaults: { phone: string; email: string }): CompletedPlan {
  const pay: Omit<PayRequest, "requestId"> = {
    serviceID: plan.serviceID,
    billersCode: plan.billersCode,
    phone: plan.phone ?? defaults.phone,
    ...(plan.variationCode !== undefined ? { variationCode: plan.variationCode } : {}),
    ...(plan.amount !== undefined ? { amount: Number(plan.amount) } : {}),
    ...(plan.international ? { international: { ...plan.international, email: defaults.email } } : {}),
  };
  if (plan.meterTypeFromVerify) pay.variationCode = verified?.meterType ?? "prepaid";
  if (!plan.subscription) return { pay };

  const charge = BigInt(plan.chargeKobo);
  const renewal = verified?.renewalKobo ?? null;
  const renew = (): CompletedPlan => {
    const { variationCode: _bouquet, ...rest } = pay;
    const unchecked = renewal === null ? { flag: "renewed at the bill's amount: the biller's check named no renewal amount to hold it to" } : {};
    return { pay: { ...rest, subscriptionType: "renew" }, ...unchecked };
  };
  switch (plan.subscription) {
    case "change":
      return { pay: { ...pay, subscriptionType: "change" } };
    case "renew": {
      const refuse = refusedByCheck(plan, verified);
      return refuse ? { refuse } : renew();
    }
    case "either":
      if (renewal !== null && renewal === charge) return renew();
      if (pay.variationCode !== undefined) return { pay: { ...pay, subscriptionType: "change" } };
      return renew();
  }
}
