/**
 * Delivered bills asked again on a schedule. VTpass reverses a delivered transaction after the
 * fact (its status "reversed", the amount back in the merchant's wallet) and says so by webhook,
 * sent "5 times before giving up" (callback-api-integration). A reversal whose webhooks all went
 * unanswered (the service down, a proxy failing) would leave the payer charged for nothing: the
 * served order is otherwise looked at again only by its webhooks (biller-webhook.ts). So each
 * delivered bill's delivering attempt is asked again at BILLER_REVERSAL_CHECKS_SECONDS after
 * its order was made, then after each ask, and acted on as a webhook naming it would be
 * (fulfil.ts actOnBillerState: a reversal refunded on chain once, bounded by the ledger's
 * payment, or held for an operator while another attempt is pending). Bounded for the biller:
 * as many asks per bill as the schedule has entries, at most CHECKS_PER_PASS a pass and none
 * claimed past PASS_BUDGET_MS into it; a bill
 * not asked within twice the schedule and an hour of its making never is. Orders made before
 * the schedule existed are not asked (their reversal_checks is NULL: server/db.ts).
 */
import { errorText } from "../log-safety.ts";
import { actOnBillerState, type FlowDeps } from "./fulfil.ts";

/** Asks at most this many bills a pass (a worker pass every WORKER_INTERVAL_MS). */
const CHECKS_PER_PASS = 10;
/**
 * Claims no further bill once a pass has spent this long: the worker's passes run one at a
 * time, and a biller that answers slowly (each ask may wait BILLER_TIMEOUT_MS) must not hold
 * up the refunds and settlements the next pass finishes first. What is left is due next pass.
 */
const PASS_BUDGET_MS = 5_000;

export interface ReversalCheckDeps extends FlowDeps {
  /** BILLER_REVERSAL_CHECKS_SECONDS: when each ask is due, after the order was made or the ask before. */
  reversalChecksSeconds: readonly number[];
}

/** One pass: the delivered bills whose next ask is due, each asked once. Returns how many were asked. */
export async function checkReversals(deps: ReversalCheckDeps): Promise<number> {
  const schedule = deps.reversalChecksSeconds;
  if (schedule.length === 0) return 0;
  // Twice the whole schedule: a worker stopped for a while still asks what fell due meanwhile.
  const windowSeconds = 2 * schedule.reduce((a, b) => a + b, 0) + 3_600;
  const asked: string[] = [];
  const stopAt = Date.now() + PASS_BUDGET_MS;
  while (asked.length < CHECKS_PER_PASS && Date.now() < stopAt) {
    const order = await deps.orders.claimReversalCheck(schedule, windowSeconds, deps.leaseSeconds, asked);
    if (!order) break;
    asked.push(order.requestId);
    try {
      // Asks the attempt that delivered the bill, which need not be the latest (an earlier one
      // may have delivered after a later was sent): its reversal is what a refund answers.
      const now = await actOnBillerState(deps, order);
      if (now.status !== order.status) deps.log.warn("a delivered bill asked again came back changed", { requestId: order.requestId, before: order.status, after: now.status });
    } catch (err) {
      // Counted all the same: the next ask is the schedule's next, and the webhooks still come.
      deps.log.warn("a delivered bill could not be asked again now", { requestId: order.requestId, error: errorText(err) });
    } finally {
      await deps.orders.release(order.requestId, order.leaseToken);
    }
  }
  return asked.length;
}
