/**
 * Closes a PULLING order whose request died: the ledger shows the pull -> PAID (exactly the
 * order's amount, else NEEDS_REVIEW), then vend; the chain never took it (reverted, or never
 * sent) -> PAYMENT_FAILED, nothing moved. A pull that lands after the write-off is found by
 * the ledger pass (orders/ledger-pass.ts). Pulled-but-not-vended (PAID) and
 * failed-but-not-refunded (REFUNDING) orders are the worker's usual work (orders/worker.ts).
 */
import type { Hex } from "viem";
import { publicClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor } from "../../lib/deployments.ts";
import { paymentMismatch, type LedgerPayment } from "../ledger-client.ts";
import { fulfil, ledgerPaymentFor, move, type FlowDeps } from "./fulfil.ts";
import type { Order } from "./store.ts";
import { pullOnChain } from "../chain/payment-state.ts";
import { nonceUnused, transactionKnown, type SignedNonce } from "../chain/node-transactions.ts";
import { deepEnough } from "./payment-watch.ts";

/**
 * PULLING -> PAID when the chain's pull is exactly the order's; NEEDS_REVIEW (nothing vended
 * or sent) when not. `source`: what showed it, the ledger (held to the confirmation depth
 * here) or the node's receipt (held to it when read: chain/receipt-payment.ts).
 */
export async function pulledFromLedger(deps: FlowDeps, o: Order, pull: LedgerPayment, source: "ledger" | "receipt" = "ledger"): Promise<Order> {
  const mismatch = paymentMismatch(o, pull);
  if (mismatch) {
    deps.log.warn("pull does not match its order; held for review", { requestId: o.requestId, mismatch });
    return move(deps, o, ["PULLING"], "NEEDS_REVIEW", { failureReason: mismatch, txHash: pull.txHash });
  }
  if (source === "ledger" && !(await deepEnough(deps, o.chain, pull))) return o; // not confirmed yet: a later read decides
  // Watched from the statement that makes it PAID (orders/payment-watch.ts).
  const paid = await move(deps, o, ["PULLING"], "PAID", { txHash: pull.txHash }, deps.watches.recording(o, pull));
  if (paid.status === "PAID") deps.metrics.paymentConfirmations.inc({ chain: o.chain, rail: "pull", source });
  return paid;
}

export async function reconcilePulling(deps: FlowDeps, o: Order): Promise<void> {
  const pull = await ledgerPaymentFor(deps, o);
  if (pull) {
    const paid = await pulledFromLedger(deps, o, pull);
    if (paid.status === "PAID") await fulfil(deps, paid);
    return;
  }
  // Pulled, but the ledger has not caught up: a later pass decides from the ledger.
  if (await pullOnChain(deps, o)) return;
  const chain = o.chain as ChainKey;
  const client = publicClientFor(chain, rpcUrlFor(chain, deps.deployments.chains[chain]!));
  // Signed hashes are recorded before sending, so no hash means nothing was sent. With some,
  // each is asked, the order naming only the newest (one it replaced may land instead): a
  // reverted receipt moved nothing; one that succeeded is a pull mined since the read above,
  // which the next pass finds. One with no receipt may still land: wait while the order is
  // young, and for as long as the node knows the transaction (unmined in its pool: a request
  // still raising its fee outlives its lease; or mined since the receipt was asked). Should a
  // pull land after the write-off (only a reorganisation deeper than the confirmations could
  // give its nonce back: nonceSpent), the orphan pass refunds it.
  if (!o.txHash) {
    await deps.orders.writeOffUnsent(o.requestId); // a no-op if a pull was signed meanwhile
    return;
  }
  const signed = await deps.orders.signedPullRecord(o.requestId);
  const receipts = await Promise.all(signed.hashes.map((hash) => client.getTransactionReceipt({ hash }).catch(() => null)));
  if (receipts.some((r) => r?.status === "success")) return;
  const unmined = signed.hashes.filter((_, i) => !receipts[i]);
  if (unmined.length > 0 && Date.now() - o.createdAt.getTime() < deps.leaseSeconds * 1000) return;
  for (const hash of unmined) if (await transactionKnown(deps, chain, hash)) return;
  if (unmined.length > 0 && !(await nonceSpent(deps, o, chain, signed.nonces))) return;
  await move(deps, o, ["PULLING"], "PAYMENT_FAILED", { failureReason: "the pull did not land" });
}

/**
 * Whether the operator key's nonce the order's newest pull was signed under is used, deep
 * enough that no reorganisation gives it back. A pull the node's pool dropped (a restart, a fee
 * eviction) is not void: anyone who saw it can send it again, and the order written off meanwhile
 * would charge its payer for no bill (the orphan pass would refund it, at the service's gas).
 * While the nonce is unused, the operator key sends itself nothing under it (chain/operator.ts
 * voidNonce), and the order waits for a later pass. Pulls signed before nonces were kept have
 * none: the node's word that it holds none of them stands, as it did.
 */
async function nonceSpent(deps: FlowDeps, o: Order, chain: ChainKey, nonces: SignedNonce[]): Promise<boolean> {
  const unused = await nonceUnused(deps, chain, nonces);
  if (!unused) return true;
  const voiding = await deps.operator.voidNonce(chain, unused);
  if (voiding === "not ours") {
    // Signed under another instance's operator key: nothing here can use its nonce.
    await move(deps, o, ["PULLING"], "NEEDS_REVIEW", {
      failureReason: `its pull, signed under nonce ${unused.nonce} of operator key ${unused.signer} (not this instance's), is in no pool the service's node holds, and may still land until that nonce is used: wait for it, or have that key use the nonce, before closing the order`,
    });
  } else deps.log.warn("a pull the node no longer holds may still land: its nonce is voided before the order is written off", { requestId: o.requestId, nonce: unused.nonce, voiding });
  return false;
}
