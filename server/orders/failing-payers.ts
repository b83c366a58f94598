/**
 * A payer whose bills keep failing at the biller is refused new ones for a while. Each such
 * bill is settled or pulled and then refunded on chain, at the service's gas, and a biller
 * failure is the payer's to cause: airtime and data take any number, and a junk one fails.
 * The refund budget bounds what such bills return by amount (orders/refund-share.ts), not
 * how many refunds, or pulls and biller calls, they cost; at the smallest price a wallet
 * could otherwise make the service send thousands of refunds a day for a few units of its
 * own. Read from the orders themselves, so every instance sees the same count.
 */
import { ServiceError } from "../errors.ts";
import type { OrderStore } from "./store.ts";

/** RATE_LIMIT_FAILED_VENDS_PAYER: bills the biller failed, per payer, within a window; 0 bills: never refused. */
export interface FailedVendLimit {
  points: number;
  seconds: number;
}

/** RATE_LIMITED, before anything is paid, when `payer` has `limit.points` bills the biller failed within the window. */
export async function refuseFailingPayer(orders: Pick<OrderStore, "failedVends">, payer: string, limit: FailedVendLimit): Promise<void> {
  if (limit.points <= 0) return;
  const failed = await orders.failedVends(payer, limit.seconds, limit.points);
  if (failed.length < limit.points) return;
  // The oldest of them leaves the window first.
  const retry = Math.max(1, Math.ceil((failed.at(-1)!.getTime() + limit.seconds * 1000 - Date.now()) / 1000));
  throw new ServiceError(
    "RATE_LIMITED",
    `${failed.length} of this wallet's bills failed at the biller in the last ${limit.seconds} s, each refunded on chain at the service's cost; ` +
      `check the numbers (verify_customer, or the biller's plans) and retry in ${retry} s. Nothing was charged`,
    { retry_after_seconds: retry },
  );
}
