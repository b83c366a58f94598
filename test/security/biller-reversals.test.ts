/**
 * What the biller says after a bill was paid for, against the real local stack (chain, ledger,
 * facilitator, biller sandbox): a bill is never both delivered to the payer and refunded,
 * and a reversal is never acknowledged unseen.
 *   - a requery that goes unanswered does not erase which attempt delivered the bill;
 *   - a reversal asks every other attempt again, not only those last seen delivered;
 *   - a reversal's webhook the requery does not confirm yet is asked for again, and refunded
 *     once it is; a webhook for an order someone else is working on is asked for again;
 *   - a delivery seen before a waiting refund was sent holds the refund for an operator;
 *   - an operator's refund asks the biller afresh: refused while a delivery stands or an
 *     attempt is still pending.
 */
import { x402HTTPClient } from "@x402/core/http";
import type { Account, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import type { VendResult } from "../../server/biller/upstream.ts";
import { actOnBillerState, refund, type FlowDeps } from "../../server/orders/fulfil.ts";
import { ledgerUnderKey, ledgerUnderKeyCaughtUp } from "../../server/orders/ledger-view.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import { resolveOrder, ReviewRecords } from "../../server/orders/review.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { checkReversals } from "../../server/orders/reversal-checks.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { PENDING_NUMBER, x402Bill } from "../support/bills.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { metricSum } from "../support/metrics.ts";

type Body = Record<string, unknown>;

describe("the biller's word after payment: never delivered and refunded, never a reversal unseen", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts, { BILLER_UNKNOWN_GRACE_MS: "0", LEDGER_WAIT_MS: "4000" }, { sandbox: { pendingRequeries: 1_000 } });
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
  });
  afterAll(async () => {
    await paying?.close();
  });

  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const usdc = (who: Account) => celo.balanceOf("USDC", who.address);
  const keys = () => ({ "api-key": service.config.BILLER_API_KEY, "secret-key": service.config.BILLER_SECRET_KEY });
  const sandbox = async (billerRequestId: string, action: string, body: Body = {}, query = "") => {
    const res = await fetch(`${service.urls.biller}/sandbox/transactions/${billerRequestId}/${action}${query}`, { method: "POST", headers: { ...keys(), "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(res.status, await res.clone().text()).toBe(200);
  };
  const stuck = () => metricSum(url, "billpay_orders_stuck ");
  const attemptsOf = (requestId: string) => service.flow.attempts.of(requestId);
  const orderOf = async (requestId: string) => (await service.flow.orders.get(requestId))!;
  /** The webhook VTpass sends for a transaction, its data in the requery's shape. */
  const webhook = (billerRequestId: string, status: string) =>
    fetch(`${url}/api/biller/webhook`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ type: "transaction-update", data: { code: "000", content: { transactions: { status } }, requestId: billerRequestId } }),
    });

  /** Pays `body` with the official x402 client; answers the order's request id. */
  async function pay(payer: Account, body: Body): Promise<string> {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const paid = (await (await post(body, client.encodePaymentSignatureHeader(payload))).json()) as Body;
    return paid.request_id as string;
  }
  const showmax = (payer: Account, variation_code: string, nairaAmount: number) =>
    x402Bill(payer.address, { serviceID: "showmax", serviceCategory: "CABLE", network: "SHOWMAX", billersCode: PENDING_NUMBER, variation_code, nairaAmount });

  /** A bill whose first attempt the biller has no record of (so a second goes out), both left pending. */
  async function twoAttempts(payer: Account, variation_code: string, nairaAmount: number) {
    const requestId = await pay(payer, showmax(payer, variation_code, nairaAmount));
    const [a1] = await attemptsOf(requestId);
    await sandbox(a1!.billerRequestId, "hide");
    await workOnce(service.flow);
    const [, a2] = await attemptsOf(requestId);
    expect(a2).toBeDefined();
    return { requestId, a1: a1!, a2: a2! };
  }

  it("a requery that goes unanswered does not erase which attempt delivered the bill: the other attempt's reversal refunds nothing", async () => {
    const payer = accounts(11);
    const start = await usdc(payer);
    const { requestId, a1, a2 } = await twoAttempts(payer, "mobile_only", 1450);
    const price = (await orderOf(requestId)).amount;
    // Attempt 1 is delivered late, and its webhook serves the order.
    await sandbox(a1.billerRequestId, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("SUCCESS");
    // VTpass sends attempt 1's webhook again; this time its requery goes unanswered (a timeout reads as pending).
    const unanswered: FlowDeps = {
      ...service.flow,
      biller: Object.assign(Object.create(service.flow.biller), { requery: async (): Promise<VendResult> => ({ state: "pending", reason: "no answer in time" }) }),
    };
    expect((await actOnBillerState(unanswered, await orderOf(requestId), a1)).status).toBe("SUCCESS");
    expect((await attemptsOf(requestId))[0]!.outcome).toBe("delivered");
    // The biller then fails attempt 2 (reversed): the bill stands, delivered by attempt 1.
    await sandbox(a2.billerRequestId, "resolve", { status: "reversed" });
    const order = await orderOf(requestId);
    expect(order.status).toBe("SUCCESS");
    expect(await usdc(payer)).toBe(start - price);
  });

  it("a reversal asks every other attempt again: one delivered with no webhook keeps the bill standing, and nothing is refunded", async () => {
    const payer = accounts(12);
    const start = await usdc(payer);
    const { requestId, a1, a2 } = await twoAttempts(payer, "full", 2900);
    const price = (await orderOf(requestId)).amount;
    await sandbox(a2.billerRequestId, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("SUCCESS");
    // Attempt 1 is delivered too, its webhook never arriving; then the biller takes attempt 2 back.
    await sandbox(a1.billerRequestId, "resolve", { status: "delivered" }, "?notify=0");
    await sandbox(a2.billerRequestId, "reverse");
    const order = await orderOf(requestId);
    expect(order.status).toBe("SUCCESS");
    expect(await usdc(payer)).toBe(start - price);
    expect((await attemptsOf(requestId)).map((a) => a.outcome)).toEqual(["delivered", "reversed"]);
  });

  it("a reversal's webhook the requery does not show yet is asked for again; once it does, the payer is refunded, once", async () => {
    const payer = accounts(13);
    const start = await usdc(payer);
    const requestId = await pay(payer, x402Bill(payer.address));
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    const [attempt] = await attemptsOf(requestId);
    // The callback says reversed; the requery still says delivered (it lags, or the body is forged).
    const early = await webhook(attempt!.billerRequestId, "reversed");
    expect(early.status).toBe(503);
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    // The biller reverses it (its own webhook left out); the callback comes again and is now confirmed.
    await sandbox(attempt!.billerRequestId, "reverse", {}, "?notify=0");
    const again = await webhook(attempt!.billerRequestId, "reversed");
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ response: "success" });
    expect((await orderOf(requestId)).status).toBe("REFUNDED");
    expect(await usdc(payer)).toBe(start);
    // Sent once more, it changes nothing.
    expect((await webhook(attempt!.billerRequestId, "reversed")).status).toBe(200);
    expect(await usdc(payer)).toBe(start);
  });

  it("a webhook for an order someone else is working on is asked for again, not acknowledged unseen; sent again, it serves the bill", async () => {
    const payer = accounts(14);
    const requestId = await pay(payer, showmax(payer, "mobile_only", 1450));
    expect((await orderOf(requestId)).status).toBe("PENDING");
    const [attempt] = await attemptsOf(requestId);
    await sandbox(attempt!.billerRequestId, "resolve", { status: "delivered" }, "?notify=0");
    const held = (await service.flow.orders.claim(requestId, 60, "work"))!;
    try {
      expect((await webhook(attempt!.billerRequestId, "delivered")).status).toBe(503);
    } finally {
      await service.flow.orders.release(requestId, held.leaseToken);
    }
    expect((await orderOf(requestId)).status).toBe("PENDING");
    expect((await webhook(attempt!.billerRequestId, "delivered")).status).toBe(200);
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
  });

  it("an operator's refund asks the biller afresh: refused while an attempt is pending, and while one stands delivered", async () => {
    const payer = accounts(17);
    const start = await usdc(payer);
    const requestId = await pay(payer, showmax(payer, "mobile_only", 1450));
    const price = (await orderOf(requestId)).amount;
    // Held for an operator while the biller still holds its attempt pending (as a landing after a write-off is).
    expect(await service.flow.orders.transition(requestId, ["PENDING"], "NEEDS_REVIEW", { failureReason: "held for the test" })).toBeDefined();
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const decide = () => resolveOrder(review, { requestId, action: "refund", reason: "the payer asked", operator: "alice" });
    const pending = await decide();
    expect(pending.record.outcome).toBe("REFUSED");
    expect(pending.record.detail).toMatch(/answers pay attempt 1 .* as pending/);
    // The biller delivers it (its webhook never arriving): the operator's screen still shows it pending.
    const [attempt] = await attemptsOf(requestId);
    await sandbox(attempt!.billerRequestId, "resolve", { status: "delivered" }, "?notify=0");
    const delivered = await decide();
    expect(delivered.record.outcome).toBe("REFUSED");
    expect(delivered.record.detail).toMatch(/the biller delivered this bill/);
    expect((await orderOf(requestId)).status).toBe("NEEDS_REVIEW");
    expect(await usdc(payer)).toBe(start - price);
  });

  it("an operator's decision taken while the ledger is still a few blocks behind waits for it, and is not refused for a payment it has not indexed yet", async () => {
    const payer = accounts(8);
    const requestId = await pay(payer, x402Bill(payer.address));
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    expect(await service.flow.orders.transition(requestId, ["SUCCESS"], "NEEDS_REVIEW", { failureReason: "held for the test" })).toBeDefined();
    // A ledger that, for its first three looks at its height, is three blocks short of the head
    // and has not indexed the payment: as the ledger is when the service confirmed it from its receipt.
    const real = service.flow.ledger;
    let lagLooks = 3;
    let heightsAsked = 0;
    const lagging = new Proxy(real, {
      get(target, key, receiver) {
        if (key === "indexedBlock")
          return async (chainId: number) => {
            heightsAsked++;
            const indexed = await target.indexedBlock(chainId);
            return indexed !== null && lagLooks-- > 0 ? indexed - 3n : indexed;
          };
        if (key === "authorization")
          return async (...args: Parameters<typeof real.authorization>) => (lagLooks > 0 ? { payment: null, refunds: [] } : target.authorization(...args));
        // Bound to the proxy: the client's own waits read the lagging height too.
        const value = Reflect.get(target, key, receiver) as unknown;
        return typeof value === "function" ? value.bind(receiver) : value;
      },
    });
    // The operator's screen reads the same ledger: it shows the payment, not "no payment".
    const held = await orderOf(requestId);
    expect((await ledgerUnderKey({ ledger: lagging }, held)).payment).toBeNull();
    lagLooks = 3;
    expect((await ledgerUnderKeyCaughtUp({ ledger: lagging, heads: service.flow.heads, ledgerHealth: { latest: () => [] } }, held)).payment).toMatchObject({ txHash: held.txHash });
    expect(lagLooks).toBeLessThan(0); // it waited for the ledger's height
    lagLooks = 3;
    heightsAsked = 0;
    const review = { ...service.flow, ledger: lagging, reviews: new ReviewRecords(service.db), db: service.db };
    const served = await resolveOrder(review, { requestId, action: "serve", reason: "the payment stands", operator: "alice" });
    expect(served.record.outcome).toBe("DONE");
    expect(served.order?.status).toBe("SUCCESS");
    expect(heightsAsked).toBeGreaterThanOrEqual(4); // three looks short, then there
    expect(await attemptsOf(requestId)).toHaveLength(1); // followed up under its id, not paid again
  });

  it("a refund whose payment the ledger has not indexed yet waits for it and is no failure; one the ledger has indexed past, without the payment, is", async () => {
    const payer = accounts(7);
    const start = await usdc(payer);
    const requestId = await pay(payer, showmax(payer, "mobile_only", 1450));
    const order = await orderOf(requestId);
    expect(order.status).toBe("PENDING");
    // A ledger that never shows the payment, and stands `shortBy` blocks short of what it has indexed.
    const real = service.flow.ledger;
    let shortBy = 0n;
    const hiding = new Proxy(real, {
      get(target, key, receiver) {
        if (key === "indexedBlock")
          return async (chainId: number) => {
            const indexed = await target.indexedBlock(chainId);
            return indexed === null ? null : indexed - shortBy;
          };
        if (key === "awaitPayment") return async () => null;
        if (key === "authorization") return async () => ({ payment: null, refunds: [] });
        const value = Reflect.get(target, key, receiver) as unknown;
        return typeof value === "function" ? value.bind(receiver) : value;
      },
    });
    const count = async (counter: { get(): Promise<{ values: Array<{ value: number }> }> }) => (await counter.get()).values.reduce((sum, v) => sum + v.value, 0);
    const failures = () => count(service.flow.metrics.refundFailures);
    const awaiting = () => count(service.flow.metrics.refundsAwaitingLedger);
    const deps = { ...service.flow, ledger: hiding, ledgerWaitMs: 100 };
    const [before, awaitingBefore] = [await failures(), await awaiting()];
    shortBy = 1_000n; // short of the payment's block
    const waited = await refund(deps, order, "biller: transaction failed", ["PENDING"]);
    expect(waited.status).toBe("REFUNDING");
    expect(await failures()).toBe(before);
    expect(await awaiting()).toBe(awaitingBefore + 1); // counted apart: visible, not alerted as failing
    // Past it, and still no payment: that is a failure, retried and alerted.
    shortBy = 0n;
    const paidIn = (await celo.publicClient.getTransactionReceipt({ hash: order.txHash as Hex })).blockNumber;
    await waitForLedgerBlock(paying.ledger.url, 42220, paidIn);
    expect((await refund(deps, waited, "biller: transaction failed", ["REFUNDING"])).status).toBe("REFUNDING");
    expect(await failures()).toBe(before + 1);
    expect(await usdc(payer)).toBe(start - order.amount); // nothing refunded on the ledger's silence
    // Made an hour ago, and retried at every pass since (each retry moves it to REFUNDING
    // again): it has stood since it was made, and counts as stuck however recent its last retry.
    const stuckBefore = await stuck();
    await service.db.query(`UPDATE bill_order SET created_at = now() - interval '1 hour', unfinished_since = now() - interval '1 hour' WHERE request_id = $1`, [requestId]);
    const retried = await refund(deps, waited, "biller: transaction failed", ["REFUNDING"]);
    expect(retried.status).toBe("REFUNDING");
    expect(Date.now() - retried.updatedAt.getTime()).toBeLessThan(60_000);
    expect(await stuck()).toBe(stuckBefore + 1);
    // The ledger as it is: the waiting refund goes, once.
    expect((await refund(service.flow, waited, "biller: transaction failed", ["REFUNDING"])).status).toBe("REFUNDED");
    expect(await usdc(payer)).toBe(start);
  });

  it("a bill the biller keeps pending counts as stuck from when its order was made, however often it is requeried, and what the biller said is kept", async () => {
    const payer = accounts(16);
    const requestId = await pay(payer, showmax(payer, "mobile_only", 1450));
    const before = await stuck();
    // Paid for an hour ago, and requeried at every pass since: still pending at the biller.
    await service.db.query(`UPDATE bill_order SET created_at = now() - interval '1 hour', unfinished_since = now() - interval '1 hour' WHERE request_id = $1`, [requestId]);
    await workOnce(service.flow);
    expect((await orderOf(requestId)).status).toBe("PENDING");
    // What the biller last said of the attempt is kept on it.
    expect((await attemptsOf(requestId))[0]!.outcome).toBe("pending");
    expect(await stuck()).toBe(before + 1);
  });

  it("a delivery seen while the bill's refund waits to be sent holds the refund for an operator, and nothing is refunded", async () => {
    const payer = accounts(15);
    const start = await usdc(payer);
    const { requestId, a1 } = await twoAttempts(payer, "mobile_only", 1450);
    const price = (await orderOf(requestId)).amount;
    // The bill failed and its refund waits (for the refund budget, say): REFUNDING, nothing sent.
    expect(await service.flow.orders.transition(requestId, ["PENDING"], "REFUNDING", { failureReason: "biller: transaction failed" })).toBeDefined();
    // Then the biller delivers attempt 1 after all, and says so.
    await sandbox(a1.billerRequestId, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("NEEDS_REVIEW");
    const order = await orderOf(requestId);
    expect(order.failureReason).toMatch(/delivered pay attempt 1 .* while the refund was not yet done: held for an operator/);
    expect(order.purchasedCodes?.map((c) => c.label)).toEqual(["Voucher (attempt 1)"]);
    // The worker sends nothing for it.
    await workOnce(service.flow);
    expect((await orderOf(requestId)).status).toBe("NEEDS_REVIEW");
    expect(await usdc(payer)).toBe(start - price);
  });

  it("a delivered bill the biller reverses with no webhook reaching the service is asked again on the schedule, found reversed, and refunded once", async () => {
    const payer = accounts(18);
    const start = await usdc(payer);
    const requestId = await pay(payer, x402Bill(payer.address, { nairaAmount: 1510 }));
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    const [attempt] = await attemptsOf(requestId);
    // Reversed by the biller's staff, its webhook never reaching the service.
    await sandbox(attempt!.billerRequestId, "reverse", {}, "?notify=0");
    // Not due on the stack's own schedule (the first ask ten minutes after the order).
    await checkReversals(service.flow);
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    // Due at once: asked, found reversed, refunded on chain (each pass asks a few bills, oldest first).
    const now = { ...service.flow, reversalChecksSeconds: [0, 3_600] };
    await expect.poll(async () => (await checkReversals(now), (await orderOf(requestId)).status), { timeout: 30_000, interval: 200 }).toBe("REFUNDED");
    expect(await usdc(payer)).toBe(start);

    // A bill that stands is asked once per entry of the schedule, and left as it is: its next ask is an hour away.
    const other = accounts(19);
    const served = await pay(other, x402Bill(other.address, { nairaAmount: 1520 }));
    const checks = async () => (await service.db.query<{ n: number }>(`SELECT reversal_checks AS n FROM bill_order WHERE request_id = $1`, [served]))[0]!.n;
    await expect.poll(async () => (await checkReversals(now), await checks()), { timeout: 30_000, interval: 200 }).toBe(1);
    await checkReversals(now);
    expect(await checks()).toBe(1);
    expect((await orderOf(served)).status).toBe("SUCCESS");
  });

  it("the scheduled ask asks the attempt that delivered the bill, not the latest: its reversal, with no webhook, is refunded once", async () => {
    const payer = accounts(10);
    const start = await usdc(payer);
    const { requestId, a1, a2 } = await twoAttempts(payer, "mobile_only", 1450);
    // Attempt 1 delivers late and serves the order; attempt 2, the latest, is failed by the biller.
    await sandbox(a1.billerRequestId, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("SUCCESS");
    await sandbox(a2.billerRequestId, "resolve", { status: "reversed" }, "?notify=0");
    // Then attempt 1 is reversed, its webhook never reaching the service.
    await sandbox(a1.billerRequestId, "reverse", {}, "?notify=0");
    const now = { ...service.flow, reversalChecksSeconds: [0, 3_600] };
    await expect.poll(async () => (await checkReversals(now), (await orderOf(requestId)).status), { timeout: 30_000, interval: 200 }).toBe("REFUNDED");
    expect(await usdc(payer)).toBe(start);
  });

  it("a reversal recorded by a run that died before acting on it is still acted on: the attempt recorded reversed is the delivery that went", async () => {
    const payer = accounts(9);
    const start = await usdc(payer);
    const { requestId, a1 } = await twoAttempts(payer, "mobile_only", 1450);
    const price = (await orderOf(requestId)).amount;
    // Attempt 1 delivers late and serves the order; attempt 2, the latest, stays pending.
    await sandbox(a1.billerRequestId, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("SUCCESS");
    // Attempt 1 is reversed; a run asked it, recorded "reversed", and died before acting.
    await sandbox(a1.billerRequestId, "reverse", {}, "?notify=0");
    await service.db.query(`UPDATE biller_attempt SET outcome = 'reversed' WHERE biller_request_id = $1`, [a1.billerRequestId]);
    // Asked again, attempt 1 is still the delivery in question (not the pending latest): its
    // reversal holds the order for an operator while attempt 2 may yet deliver. Nothing refunded.
    const now = { ...service.flow, reversalChecksSeconds: [0, 3_600] };
    await expect.poll(async () => (await checkReversals(now), (await orderOf(requestId)).status), { timeout: 30_000, interval: 200 }).toBe("NEEDS_REVIEW");
    expect(await usdc(payer)).toBe(start - price);
  });
});
