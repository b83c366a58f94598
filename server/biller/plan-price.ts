/** What a plan's price means for a bill: a fixed-price plan is charged its own price, whatever amount is sent. */
import { ServiceError } from "../errors.ts";
import type { Variation } from "./vtpass.ts";

export const kobo = (naira: number | string) => Math.round(Number(naira) * 100);

/** nairaAmount must be a fixed-price plan's price: refused with the plan's amount rather than silently repriced. */
export function requireFixedPrice(plan: Variation, bill: { serviceID: string; nairaAmount: number }): void {
  if (plan.fixedPrice === "Yes" && kobo(plan.variation_amount) !== kobo(bill.nairaAmount)) {
    throw new ServiceError(
      "PLAN_AMOUNT_MISMATCH",
      `plan ${plan.variation_code} of ${bill.serviceID} costs ${Number(plan.variation_amount)} NGN whatever amount is sent; send nairaAmount ${Number(plan.variation_amount)}`,
      { plan_amount: Number(plan.variation_amount) },
    );
  }
}
