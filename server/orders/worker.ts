/**
 * Finishes what requests left unfinished, from the chain's record rather than memory:
 *   SETTLING  settle gave no answer: the ledger says whether the payment landed (PAID, then
 *             vend) or not (settle again while the authorization lives, else PAYMENT_FAILED);
 *   PAID      a crash between settlement and vending: vend (the biller's request id is
 *             fixed, so a repeat is recognised as one and requeried);
 *   PENDING   the biller is still working: requery;
 *   REFUNDING the refund has not landed: send it again (BillPay refunds once).
 * Orders are claimed with a lease, so several instances never work one order at once.
 */
import { CHAINS, type ChainKey } from "../../lib/chains.ts";
import type { Order } from "./store.ts";
import { applyVendResult, fulfil, refund, requery, type FlowDeps } from "./fulfil.ts";
import { authorizationUsed, settle } from "./x402-flow.ts";

const LEDGER_TIMEOUT_MS = 5_000;

export interface WorkerDeps extends FlowDeps {
  ledgerUrl: string;
  /** Orders younger than this are still in their request's hands. */
  graceSeconds: number;
}

/** The ledger's record of an x402 payment, by (chain, token, payer, nonce). */
async function ledgerPayment(deps: WorkerDeps, o: Order): Promise<{ txHash: string } | null> {
  const chainId = CHAINS[o.chain as ChainKey].chainId;
  const res = await fetch(`${deps.ledgerUrl}/ledger/authorizations/${chainId}/${o.tokenAddress}/${o.payer}/${o.authNonce}`, {
    signal: AbortSignal.timeout(LEDGER_TIMEOUT_MS),
  });
  if (!res.ok) throw new Error(`ledger answered ${res.status}`);
  const body = (await res.json()) as { payment: { txHash: string } | null };
  return body.payment;
}

async function reconcileSettling(deps: WorkerDeps, o: Order): Promise<void> {
  const paid = await ledgerPayment(deps, o);
  if (paid) {
    const order = await deps.orders.transition(o.requestId, ["SETTLING"], "PAID", { txHash: paid.txHash });
    if (order) await fulfil(deps, order);
    return;
  }
  const used = await authorizationUsed(deps, o);
  const validBefore = BigInt((o.payment as { authorization: { validBefore: string } }).authorization.validBefore);
  if (!used && validBefore > BigInt(Math.floor(Date.now() / 1000))) {
    const order = await settle(deps, o);
    if (order.status === "PAID") await fulfil(deps, order);
  } else if (!used) {
    await deps.orders.transition(o.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "authorization expired unsettled" });
  }
  // Used on chain but not (yet) in the ledger: the ledger is behind, or the payer cancelled
  // the nonce. Left for a later pass; it never becomes PAID without the ledger's payment.
}

/** One pass: each unfinished order at most once. Returns how many were worked. */
export async function workOnce(deps: WorkerDeps): Promise<number> {
  const seen: string[] = [];
  for (;;) {
    const o = await deps.orders.claimUnfinished(["SETTLING", "PAID", "PENDING", "REFUNDING"], deps.graceSeconds, deps.leaseSeconds, seen);
    if (!o) return seen.length;
    seen.push(o.requestId);
    try {
      switch (o.status) {
        case "SETTLING":
          await reconcileSettling(deps, o);
          break;
        case "PAID":
          await fulfil(deps, o);
          break;
        case "PENDING":
          await applyVendResult(deps, o, await requery(deps, o));
          break;
        case "REFUNDING":
          await refund(deps, o, o.failureReason ?? "refund retried");
          break;
      }
    } catch (err) {
      deps.log("worker could not finish an order; it will retry", { requestId: o.requestId, error: (err as Error).message });
    }
    // Released after its work, finished or not: the next pass may take it again once its
    // grace period (counted from its last change) is over.
    await deps.orders.release(o.requestId);
  }
}

export function startWorker(deps: WorkerDeps, intervalMs: number): { stop(): Promise<void> } {
  let running: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    running = running.then(() => workOnce(deps)).catch((err: Error) => deps.log("worker pass failed", { error: err.message }));
  }, intervalMs);
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
