/**
 * Agent-hub orders, paid by a pull from the wallet's pre-approved allowance: check the
 * wallet can pay (so a refusal charges nothing), create the orders (the table knows every
 * pull before the chain does), pull through BillPay with the operator key (one bill, or a
 * batch in one pullBatch), count an order paid only once the ledger shows its Pulled event,
 * then vend as every order does (orders/fulfil.ts), refunding each failed bill by itself.
 */
import { errorText } from "../log-safety.ts";
import { randomBytes } from "node:crypto";
import type { Hex } from "viem";
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import { ContractRefused, PayerHeldElsewhere, ReplacementRefused, REVERTED_BY_PAYER, type Replaced, type Signed } from "../chain/operator.ts";
import { readWalletState, requireFunds } from "../chain/wallet-state.ts";
import { ServiceError, type ErrorCode } from "../errors.ts";
import { isPaymentOf } from "../ledger-client.ts";
import type { PaymentRequest } from "../schemas.ts";
import type { VendPlan } from "../biller/catalogue/vend-plan.ts";
import { FINISHED, FirstAttempts, fulfil, move, type FlowDeps } from "./fulfil.ts";
import { pulledFromLedger } from "./pull-reconciler.ts";
import { awaitConfirmations } from "./payment-watch.ts";
import { paymentsFromReceipt } from "../chain/receipt-payment.ts";
import { newOrderIds, type Order, type PullGuard } from "./store.ts";


export interface PullBill {
  bill: PaymentRequest;
  /** The bill's identity (quote/quote.ts): a repeat under one idempotency key must be the same bill. */
  bodyHash: string;
  amount: bigint;
  /** How it vends, as the catalogue resolved it when it was priced. */
  vend: VendPlan;
}

export interface PullInput {
  wallet: Hex;
  chain: ChainKey;
  token: TokenSymbol;
  tokenAddress: Hex;
  bills: PullBill[];
  /** Several bills go in one pullBatch; a single one uses pull. */
  batch: boolean;
  scheduleId?: string;
  /** A caller's key for one bill: a retry with it gets the first order, never a second charge. */
  idempotencyKey?: string;
  /** Checked in the statement that records the signed pull: a cancelled schedule or a retired key never pays. */
  guard: PullGuard;
  /** Asked once no earlier order answers the call, before the wallet is read or anything made: a budget of the caller's may refuse it. */
  admit?: () => Promise<void>;
}

/** The pull was not sent: the guard no longer held, or the order was written off meanwhile. */
/**
 * The pull was not recorded, so not sent: its guard failed, or its orders were written off.
 * `previous`, the transaction a re-signing was to take the place of: one that never moved
 * money (never sent, refused at its estimate, or mined and reverted: chain/operator.ts).
 */
class PullWithdrawn extends Error {
  constructor(readonly previous?: Hex) {
    super("the pull was withdrawn before it was sent");
  }
}

/** BillPay's and the token's refusals, as the errors an agent can act on. */
const REFUSALS: Record<string, ErrorCode> = {
  SpendingAllowanceExceeded: "SPENDING_ALLOWANCE_INSUFFICIENT",
  SpendingLimitExceeded: "SPENDING_LIMIT_EXCEEDED",
  ERC20InsufficientAllowance: "TOKEN_ALLOWANCE_INSUFFICIENT",
  ERC20InsufficientBalance: "BALANCE_INSUFFICIENT",
  // The operator-wide cap that bounds a leaked operator key: the service's limit, not the payer's.
  PullBudgetExceeded: "PULL_BUDGET_EXHAUSTED",
  // Mined and reverted, at BillPay's gas, by the payer's own doing: counted against him (agent/hub.ts).
  [REVERTED_BY_PAYER]: "PULL_REVERTED",
};

/** Each order's own key: the caller's for a single bill, `<key>#<position>` in a batch. */
function orderKeys(input: PullInput): Array<string | null> {
  const key = input.idempotencyKey;
  if (!key) return input.bills.map(() => null);
  return input.batch ? input.bills.map((_, i) => `${key}#${i}`) : [key];
}

export async function startPullOrders(deps: FlowDeps, input: PullInput): Promise<{ orders: Order[]; replay: boolean }> {
  const keys = orderKeys(input);
  // A key is one call's, whichever tool made it: a bill's key K and a batch's first K#0 are
  // looked up together, so the other tool under the same key is refused, not paid again.
  const otherTool = input.idempotencyKey && (input.batch ? input.idempotencyKey : `${input.idempotencyKey}#0`);
  if (input.idempotencyKey) {
    const seen = await deps.orders.findByIdempotencyKeys(input.wallet, [...(keys as string[]), otherTool as string]);
    if (seen.length > 0) return { orders: await sameBills(deps, seen, keys as string[], input), replay: true };
  }
  await input.admit?.();
  const total = input.bills.reduce((sum, b) => sum + b.amount, 0n);
  const [state] = await readWalletState(deps.deployments, input.chain, input.wallet, [input.tokenAddress]);
  requireFunds(state!, total, input.token);

  const batchId = input.batch ? `bat_${randomBytes(10).toString("hex")}` : null;
  const { orders, created } = await deps.orders.createPullOrders(
    input.bills.map((b, i) => ({
      ...newOrderIds(),
      bodyHash: b.bodyHash,
      bill: b.bill as unknown as Record<string, unknown>,
      vend: b.vend,
      chain: input.chain,
      token: input.token,
      tokenAddress: input.tokenAddress,
      payer: input.wallet,
      amount: b.amount,
      batchId,
      scheduleId: input.scheduleId ?? null,
      idempotencyKey: keys[i]!,
    })),
    deps.leaseSeconds,
  );
  if (!created) return { orders: await sameBills(deps, orders, keys as string[], input), replay: true };
  // The two forms of a key are not one unique key to the table: a call of the other tool under
  // it, made at the same time, may have written its orders too. Looked for once these are
  // written, so of two such calls at least the later one sees the other, and whichever sees
  // the other takes its orders back (no pull was signed for them) and is refused: one is
  // charged at most, and none when both see each other.
  if (otherTool && (await deps.orders.findByIdempotencyKeys(input.wallet, [otherTool])).length > 0) {
    await deps.orders.withdrawUnsent(orders.map((o) => o.requestId));
    throw new ServiceError("IDEMPOTENCY_KEY_REUSED", `idempotency_key "${input.idempotencyKey}" is being used by another call of the other tool; nothing was charged`);
  }

  let last = orders;
  // Each order's first pay attempt is recorded while the pull is mined (orders/fulfil.ts recordFirstAttempt).
  const firsts = new FirstAttempts(deps, orders);
  try {
    last = await pullAndWait(deps, input.chain, orders, input.guard);
    last = await Promise.all(last.map(async (o) => (o.status === "PAID" ? fulfil(deps, o, { fresh: true, first: await firsts.take(o) }) : o)));
    return { orders: last, replay: false };
  } finally {
    await firsts.withdrawUntaken();
    // Unfinished orders go to the worker at once; finished ones need no release.
    // Released with the token they were created under: if the worker took one over, it stays the worker's.
    for (const [i, o] of last.entries()) if (!FINISHED.has(o.status)) await deps.orders.release(o.requestId, orders[i]!.leaseToken);
  }
}

/** The orders an idempotency key already made, checked to be for the same bills, in order. */
async function sameBills(deps: FlowDeps, seen: Order[], keys: string[], input: PullInput): Promise<Order[]> {
  const byKey = new Map(seen.map((o) => [o.idempotencyKey, o]));
  const orders = keys.map((k) => byKey.get(k));
  // The whole earlier batch must match, not just as many bills as this call names.
  const earlier = seen[0]?.batchId ? (await deps.orders.byBatch(seen[0].batchId)).length : seen.length;
  if (orders.some((o, i) => !o || o.bodyHash !== input.bills[i]!.bodyHash) || seen.length !== keys.length || earlier !== keys.length) {
    throw new ServiceError(
      "IDEMPOTENCY_KEY_REUSED",
      `idempotency_key "${input.idempotencyKey}" already paid for ${seen.map((o) => o.requestId).join(", ")}, different bills`,
    );
  }
  return orders as Order[];
}

/**
 * Sends the pull and waits for the ledger. A refusal fails every order (nothing moved) and
 * is thrown as the agent's error; an unclear outcome (no receipt, ledger behind) leaves the
 * orders PULLING for the worker, which decides from the chain and the ledger.
 */
async function pullAndWait(deps: FlowDeps, chain: ChainKey, orders: Order[], guard: PullGuard): Promise<Order[]> {
  const items = orders.map((o) => ({ requestId: o.requestId, payer: o.payer as Hex, token: o.tokenAddress as Hex, amount: o.amount }));
  const ids = orders.map((o) => o.requestId);
  // Every transaction that carries the pull is recorded under the guard before it is sent,
  // a re-signing in another transaction too (it names the one it takes the place of).
  const onSigned: Signed = async (hash, previous, under) => {
    if (!(await deps.orders.setTxHash(ids, hash, guard, previous, under))) throw new PullWithdrawn(previous);
  };
  // A replacement is the same transaction at a higher fee, under the same nonce: no new
  // authority, so no guard; but not for an order written off meanwhile (the operator then
  // stops raising the fee and waits for the transaction already sent).
  const onReplaced: Replaced = async (previous, next, how, fees) => {
    if (!(await deps.orders.replaceTxHash(ids, previous, next, how !== undefined, fees)) && how === undefined) throw new ReplacementRefused();
  };
  let mined: Hex;
  try {
    if (items.length === 1) mined = await deps.operator.pull(chain, items[0]!, onSigned, onReplaced);
    else mined = await deps.operator.pullBatch(chain, items, onSigned, onReplaced);
  } catch (err) {
    if (err instanceof PullWithdrawn) {
      // Nothing that moves money was sent. Either the guard failed (these orders are still
      // waiting: write them off and say why) or the worker wrote them off meanwhile (they are its to report).
      const writtenOff = await Promise.all(orders.map((o) => deps.orders.writeOffUnsent(o.requestId, err.previous)));
      if (writtenOff.some((o) => o === undefined)) return Promise.all(orders.map(async (o) => (await deps.orders.get(o.requestId)) ?? o));
      const reason = "scheduleId" in guard ? "the schedule was cancelled before its pull was sent" : "the api_key was retired before the pull was sent";
      throw new ServiceError("scheduleId" in guard ? "SCHEDULE_NOT_ACTIVE" : "API_KEY_RETIRED", `${reason}; nothing was charged`, { request_ids: ids });
    }
    if (err instanceof PayerHeldElsewhere) {
      // Never signed: nothing was sent, so the orders fail now rather than wait for the worker.
      await Promise.all(orders.map((o) => move(deps, o, ["PULLING"], "PAYMENT_FAILED", { failureReason: err.message })));
      throw new ServiceError("SERVICE_BUSY", `${err.message}; nothing was charged`, { request_ids: ids });
    }
    if (!(err instanceof ContractRefused)) {
      deps.log.warn("pull outcome unknown; the worker will reconcile", { requestIds: ids, error: errorText(err) });
      return orders;
    }
    const reason = `BillPay refused the pull: ${err.errorName}`;
    await Promise.all(orders.map((o) => move(deps, o, ["PULLING"], "PAYMENT_FAILED", { failureReason: reason })));
    const code = REFUSALS[err.errorName] ?? "PULL_REFUSED";
    throw new ServiceError(code, `${reason}; nothing was charged`, { request_ids: ids });
  }
  // The operator's own transaction, from the service's own node: each order's pull in it, by
  // the ledger's predicate (chain/receipt-payment.ts). What it does not show, the ledger decides.
  const shown = await paymentsFromReceipt(deps, chain, mined, deps.ledgerWaitMs, deps.operator.minedReceipt(mined)).catch((err: unknown) => {
    deps.log.warn("could not read the pull's receipt; waiting for the ledger", { requestIds: ids, error: errorText(err) });
    return null;
  });
  if (shown) {
    const fromReceipt = await Promise.all(
      orders.map(async (o) => {
        const pull = shown.find(isPaymentOf(o));
        return pull ? pulledFromLedger(deps, o, pull, "receipt") : undefined;
      }),
    );
    if (fromReceipt.every((o) => o !== undefined)) return fromReceipt as Order[];
  }
  // One transaction: once the ledger shows its first pull, it shows them all.
  const first = await awaitLedgerPull(deps, orders[0]!);
  const rest = await Promise.all(orders.slice(1).map((o) => awaitLedgerPull(deps, o, first.status === "PAID" ? 0 : undefined)));
  return [first, ...rest];
}

/** PULLING -> PAID once the ledger shows the pull (exactly the order's, else NEEDS_REVIEW); unchanged if it does not within the wait. */
export async function awaitLedgerPull(deps: FlowDeps, order: Order, waitMs = deps.ledgerWaitMs): Promise<Order> {
  const ours = isPaymentOf(order);
  const read = async () => (await deps.ledger.order(order.onchainOrderId)).payments.find(ours);
  const shown = await deps.ledger.awaitPayment(
    ours,
    read,
    waitMs,
    (err) => deps.log.warn("ledger unreachable while waiting for a pull", { requestId: order.requestId, error: errorText(err) }),
  );
  const pull = shown && (await awaitConfirmations(deps, order.chain, shown, read, deps.ledgerWaitMs));
  return pull ? pulledFromLedger(deps, order, pull) : ((await deps.orders.get(order.requestId)) ?? order);
}
