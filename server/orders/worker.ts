/**
 * Finishes what requests left unfinished, from the chain's record rather than memory:
 *   SETTLING  settle gave no answer: the ledger says whether the payment landed (exactly the
 *             order's amount: PAID, then vend; anything else: NEEDS_REVIEW) or not (settle
 *             again while the authorization lives, else PAYMENT_FAILED);
 *   REFUSED   refused, but the authorization could still land: closed once it has expired
 *             (x402-flow.ts closeExpiredRefusals); one that landed is refunded by the ledger pass;
 *   PAID      a crash between settlement and vending: vend (a pay already prepared is
 *             followed up by the id it was sent under, never sent again: orders/attempts.ts);
 *   PENDING   the biller is still working: requery the latest attempt;
 *   REFUNDING the refund has not landed: send it again (BillPay refunds once);
 *   PULLING   a pull whose request died: see orders/pull-reconciler.ts.
 * Orders are claimed with a lease, so several instances never work one order at once.
 */
import { errorText } from "../log-safety.ts";
import type { Order } from "./store.ts";
import { actOnBillerState, fulfil, refund, type FlowDeps } from "./fulfil.ts";
import { reconcileAuthorizationPayments, reconcileOrphanPulls, type Orphans } from "./ledger-pass.ts";
import { reconcilePulling } from "./pull-reconciler.ts";
import type { Callbacks } from "../callbacks.ts";
import { closeExpiredRefusals, reconcileSettling } from "./x402-flow.ts";

export interface WorkerDeps extends FlowDeps {
  orphans: Orphans;
  /** Sends the callbacks of orders that became final, on a loop of its own. */
  callbacks?: Callbacks;
  /** Orders younger than this are still in their request's hands. */
  graceSeconds: number;
}

/** One pass: each unfinished order at most once. Returns how many were worked. */
export async function workOnce(deps: WorkerDeps): Promise<number> {
  const seen: string[] = [];
  for (;;) {
    const o = await deps.orders.claimUnfinished(
      ["SETTLING", "PULLING", "PAID", "PENDING", "REFUNDING"],
      deps.graceSeconds,
      deps.leaseSeconds,
      seen,
    );
    if (!o) return seen.length;
    seen.push(o.requestId);
    try {
      switch (o.status) {
        case "SETTLING":
          await reconcileSettling(deps, o);
          break;
        case "PULLING":
          await reconcilePulling(deps, o);
          break;
        case "PAID":
          await fulfil(deps, o);
          break;
        case "PENDING":
          await actOnBillerState(deps, o);
          break;
        case "REFUNDING":
          await refund(deps, o, o.failureReason ?? "refund retried");
          break;
      }
    } catch (err) {
      deps.log.warn("worker could not finish an order; it will retry", { requestId: o.requestId, error: errorText(err) });
    }
    // Released after its work, finished or not: the next pass may take it again once its
    // grace period (counted from its last change) is over.
    await deps.orders.release(o.requestId, o.leaseToken);
  }
}

/**
 * Runs a pass every `intervalMs`, one at a time: unfinished orders, then the ledger pass
 * (payments no live order accounts for, both rails), then expired refusals, then whatever
 * `also` adds (due schedules). Callbacks run beside it on their own loop (callbacks.ts): a
 * receiver that never answers must not hold up refunds.
 */
export function startWorker(deps: WorkerDeps, intervalMs: number, also: Array<() => Promise<unknown>> = []): { stop(): Promise<void> } {
  let running: Promise<unknown> = Promise.resolve();
  const tasks = [
    () => workOnce(deps),
    () => reconcileOrphanPulls(deps),
    () => reconcileAuthorizationPayments(deps),
    () => closeExpiredRefusals(deps),
    ...also,
  ];
  deps.callbacks?.start(intervalMs);
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return; // a slow pass is not stacked up behind
    busy = true;
    running = (async () => {
      for (const task of tasks) await task().catch((err: Error) => deps.log.error("worker pass failed", { error: err.message }));
    })().finally(() => (busy = false));
  }, intervalMs);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all([running, deps.callbacks?.stop()]);
    },
  };
}
