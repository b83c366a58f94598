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
 *   PULLING   a pull whose request died: see orders/pull-reconciler.ts;
 *   SUCCESS   asked again on a schedule, for a reversal its webhooks never brought
 *             (orders/reversal-checks.ts).
 * Orders are claimed with a lease, so several instances never work one order at once.
 */
import { errorText } from "../log-safety.ts";
import type { Order, OrderStatus } from "./store.ts";
import { UNFINISHED_STATUSES } from "./lifecycle.ts";
import { actOnBillerState, fulfil, refund, type FlowDeps } from "./fulfil.ts";
import { reconcileAuthorizationPayments, reconcileOrphanPulls, type Orphans } from "./ledger-pass.ts";
import { reconcilePulling } from "./pull-reconciler.ts";
import { watchPayments } from "./payment-watch.ts";
import { watchRefunds } from "./refund-watch.ts";
import { checkReversals, type ReversalCheckDeps } from "./reversal-checks.ts";
import type { Callbacks } from "./callbacks.ts";
import type { KeyLeases } from "../chain/key-lease.ts";
import { closeExpiredRefusals, reconcileSettling } from "./x402-flow.ts";

export interface WorkerDeps extends FlowDeps, ReversalCheckDeps {
  orphans: Orphans;
  /** This instance's lease on its hot keys (chain/key-lease.ts). */
  keyLeases: KeyLeases;
  /** Sends the callbacks of orders that became final, on a loop of its own. */
  callbacks?: Callbacks;
  /** Orders younger than this are still in their request's hands. */
  graceSeconds: number;
}

/** The states the worker finishes: every unfinished one but REFUSED, which closeExpiredRefusals closes once its authorization expires. */
const UNFINISHED: OrderStatus[] = UNFINISHED_STATUSES.filter((s) => s !== "REFUSED");

/** One pass: each unfinished order at most once. Returns how many were worked. */
export async function workOnce(deps: WorkerDeps): Promise<number> {
  const seen: string[] = [];
  for (;;) {
    const o = await deps.orders.claimUnfinished(
      UNFINISHED,
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
 * (payments no live order accounts for, both rails), then expired refusals, the payment and
 * refund watches, the delivered bills due to be asked again, then whatever `also` adds (due
 * schedules). Callbacks run beside it on their own loop (callbacks.ts): a
 * receiver that never answers must not hold up refunds.
 */
export function startWorker(deps: WorkerDeps, intervalMs: number, also: Array<() => Promise<unknown>> = []): { stop(): Promise<void> } {
  let running: Promise<unknown> = Promise.resolve();
  const tasks: Array<[string, () => Promise<unknown>]> = [
    ["unfinished orders", () => workOnce(deps)],
    ["orphan pulls", () => reconcileOrphanPulls(deps)],
    ["x402 payments", () => reconcileAuthorizationPayments(deps)],
    ["expired refusals", () => closeExpiredRefusals(deps)],
    ["payments after confirmation", () => watchPayments(deps)],
    ["refunds after confirmation", () => watchRefunds(deps)],
    ["delivered bills asked again", () => checkReversals(deps)],
    ...also.map((task, i): [string, () => Promise<unknown>] => [`task ${i + 1} of the caller's`, task]),
  ];
  let busy = false;
  // A task that keeps failing (the ledger or a node down) is logged when it starts failing
  // and when it recovers, not on every pass.
  const failing = new Map<string, { since: number; passes: number }>();
  const run = async ([name, task]: [string, () => Promise<unknown>]) => {
    try {
      await task();
      const was = failing.get(name);
      if (was) deps.log.info("worker task recovered", { task: name, failedPasses: was.passes, seconds: Math.round((Date.now() - was.since) / 1000) });
      failing.delete(name);
    } catch (err) {
      const was = failing.get(name);
      if (was) was.passes++;
      else {
        failing.set(name, { since: Date.now(), passes: 1 });
        deps.log.error("worker task failed; retried every pass, logged again when it recovers", { task: name, error: (err as Error).message });
      }
    }
  };
  deps.callbacks?.start(intervalMs);
  // What a restart picks up, said once: an operator reading the log after a crash sees it.
  void deps.orders
    .countByStatus(UNFINISHED)
    .then((open) => {
      const total = Object.values(open).reduce((a, b) => a + b, 0);
      if (total > 0) deps.log.info("worker started: resuming unfinished orders", { total, ...open });
    })
    .catch((err: Error) => deps.log.warn("worker started; could not count unfinished orders", { error: err.message }));
  const timer = setInterval(() => {
    if (busy) return; // a slow pass is not stacked up behind
    busy = true;
    running = (async () => {
      for (const task of tasks) await run(task);
    })().finally(() => (busy = false));
  }, intervalMs);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all([running, deps.callbacks?.stop()]);
    },
  };
}
