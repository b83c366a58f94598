/**
 * The service against the biller sandbox written from VTpass's pages, end to end: what the
 * biller's pay is sent for bills in the interface's eight fields, codes and fees as VTpass
 * answers them, a pay attempt per request id (across Lagos midnight, after a lost pay), and
 * VTpass's webhook: a pending bill finished by it, and a reversal after delivery refunded
 * on chain exactly once on both rails, whoever replays or forges the webhook.
 */
import { x402HTTPClient } from "@x402/core/http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { newRequestId } from "../../server/biller/vtpass/request-id.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { settle } from "../../server/orders/x402-flow.ts";
import { fulfil, planOf, recordFirstAttempt, type RecordedAttempt } from "../../server/orders/fulfil.ts";
import { CustomerChecks } from "../../server/biller/customer-check.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { lockAsCrashedRequest } from "../support/orders.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Result = { success: boolean; status: string; request_id: string; tx_hash: string | null; purchased_code: string | null; purchased_codes?: unknown; units: string | null; refund?: { status: string; tx_hash: string | null; reason: string } };

describe("real upstreams: the biller as VTpass publishes it", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let celo: ChainActors;
  let url: string;
  const payer = accounts(15);
  const agentWallet = accounts(16);
  // The sandbox's clock: refuseNextId makes the next pay's id "yesterday's" (a pay that crossed Lagos midnight).
  let refuseNextId = false;

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(
      accounts,
      { BILLER_UNKNOWN_GRACE_MS: "1000", RATE_LIMIT_WEBHOOK_ORDER: "6/60" },
      {
        sandbox: {
          // A pending transaction stays pending until "staff" resolve it (the webhook's case).
          pendingRequeries: 1_000_000,
          now: () => (refuseNextId ? ((refuseNextId = false), new Date(Date.now() + 86_400_000)) : new Date()),
        },
      },
    );
    celo = chainActors(paying.chains.deployments, "CELO");
    url = paying.service.urls.service;
  });
  afterAll(() => paying?.close());

  const keys = () => ({ "api-key": paying.service.config.BILLER_API_KEY, "secret-key": paying.service.config.BILLER_SECRET_KEY });
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const bill = (extra: Record<string, unknown>) => ({ token: "USDC", blockchain: "CELO", wallet_address: payer.address, ...extra });
  async function paymentFor(body: unknown) {
    const challenged = await post(body);
    expect(challenged.status, JSON.stringify(body)).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json()));
    return { headers: client.encodePaymentSignatureHeader(payload), payload };
  }
  async function pay(body: Record<string, unknown>): Promise<Result> {
    return (await (await post(body, (await paymentFor(body)).headers)).json()) as Result;
  }
  const attempts = (requestId: string) =>
    paying.service.db.query<{ biller_request_id: string; attempt: number }>(`SELECT biller_request_id, attempt FROM biller_attempt WHERE request_id = $1 ORDER BY attempt`, [requestId]);
  /** What the sandbox received for the order's latest pay attempt (404-like 015 when none reached it). */
  async function sentFor(requestId: string) {
    const all = await attempts(requestId);
    const last = all.at(-1)!;
    return (await (await fetch(`${paying.service.urls.biller}/sandbox/transactions/${last.biller_request_id}`, { headers: keys() })).json()) as {
      code?: string;
      request: Record<string, unknown>;
      charged: number;
      status: string;
    };
  }
  const order = async (requestId: string) =>
    (await paying.service.db.query<{ status: string; flag: string | null; refund_tx_hash: string | null }>(`SELECT status, flag, refund_tx_hash FROM bill_order WHERE request_id = $1`, [requestId]))[0]!;
  const webhook = (data: unknown, query = "") =>
    fetch(`${url}/api/biller/webhook${query}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ type: "transaction-update", data }) });
  const staff = async (billerRequestId: string, action: "reverse" | "resolve", body: unknown = {}) => {
    const res = await fetch(`${paying.service.urls.biller}/sandbox/transactions/${billerRequestId}/${action}`, { method: "POST", headers: { ...keys(), "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(res.status).toBe(200);
  };

  it("vends bills in the interface's eight fields as VTpass's pay asks for them", async () => {
    const cases: Array<[Record<string, unknown>, Record<string, unknown>]> = [
      [{ serviceID: "dstv", serviceCategory: "CABLE", network: "DSTV", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount: 1850 }, { subscription_type: "renew", amount: 1850 }],
      [{ serviceID: "dstv", serviceCategory: "CABLE", network: "DSTV", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount: 2565 }, { subscription_type: "change", variation_code: "dstv-yanga", amount: 2565 }],
      [{ serviceID: "gotv", serviceCategory: "CABLE", network: "GOTV", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount: 410 }, { subscription_type: "renew" }],
      [{ serviceID: "bank-deposit", serviceCategory: "BANK", network: "GTBANK", billersCode: SANDBOX_NUMBERS.bankAccount, nairaAmount: 5000 }, { variation_code: "gtb", amount: 5000 }],
      [{ serviceID: "mtn-data", serviceCategory: "DATA", network: "MTN", billersCode: "08011111111", nairaAmount: 1000 }, { variation_code: "mtn-100mb-1000" }],
      [{ serviceID: "jamb", serviceCategory: "EDUCATION", network: "JAMB", billersCode: SANDBOX_NUMBERS.jambProfile, nairaAmount: 7700 }, { variation_code: "utme-mock" }],
      [{ serviceID: "startimes", serviceCategory: "CABLE", network: "STARTIMES", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount: 900 }, { variation_code: "nova" }],
    ];
    for (const [fields, sent] of cases) {
      const result = await pay(bill(fields));
      expect(result, JSON.stringify(fields)).toMatchObject({ status: "SUCCESS" });
      expect((await sentFor(result.request_id)).request, JSON.stringify(fields)).toMatchObject(sent);
    }
    // A renewal at another amount than the smartcard's renewal (1850) is refunded after the check.
    const wrongRenewal = await pay(bill({ serviceID: "dstv", serviceCategory: "CABLE", network: "DSTV", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount: 1900, subscription_type: "renew" }));
    expect(wrongRenewal).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED", reason: expect.stringContaining("costs 1850 NGN") } });
    // A choice the bill cannot make is refused before any challenge, with the options.
    const ambiguous = await post(bill({ serviceID: "dstv", serviceCategory: "CABLE", network: "DSTV", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount: 12_400 }));
    expect(ambiguous.status).toBe(422);
    expect(await ambiguous.json()).toMatchObject({ code: "PLAN_AMBIGUOUS", options: [{ variation_code: "dstv7" }, { variation_code: "dstv80" }] });
  });

  it("sends an international top-up in the destination's currency, priced at what VTpass will charge", async () => {
    const result = await pay(bill({ serviceID: "foreign-airtime", serviceCategory: "AIRTIME", network: "GHANA MTN", billersCode: "233241234567", phone: "08011111111", nairaAmount: 2110, foreignAmount: 20, country_code: "GH", product_type_id: "1", operator_id: "5", variation_code: "5-topup" }));
    expect(result.status).toBe("SUCCESS");
    const sent = await sentFor(result.request_id);
    expect(sent.request).toMatchObject({ amount: 20, country_code: "GH", operator_id: "5", product_type_id: "1", email: expect.stringContaining("@") });
    expect(sent.charged).toBe(2110);
    expect((await order(result.request_id)).flag).toBeNull();
  });

  it("hands the payer every code whole, and flags a fee the biller adds", async () => {
    const waec = await pay(bill({ serviceID: "waec", serviceCategory: "EDUCATION", network: "WAEC", billersCode: "08011111111", nairaAmount: 900 }));
    expect(waec).toMatchObject({ status: "SUCCESS", purchased_code: expect.stringMatching(/^Serial: WRN\d{9}, PIN: \d{12}$/), purchased_codes: [{ label: "Serial" }, { label: "PIN" }] });
    const eko = await pay(bill({ serviceID: "eko-electric", serviceCategory: "ELECTRICITY", network: "EKO", billersCode: SANDBOX_NUMBERS.prepaidMeter, nairaAmount: 2000 }));
    expect(eko.purchased_code).toMatch(/^Token: \d{20}, Bonus Token: \d{20}$/);
    const showmax = await pay(bill({ serviceID: "showmax", serviceCategory: "CABLE", network: "SHOWMAX", billersCode: "08011111111", nairaAmount: 2900 }));
    expect(showmax).toMatchObject({ status: "SUCCESS", purchased_code: expect.stringMatching(/^SHM\d{12}$/) });
    expect((await order(showmax.request_id)).flag).toContain("convenience fee of 100 NGN");
  });

  it("makes each pay attempt's request id when it is sent: a pay refused for its date is sent again under a fresh id and served", async () => {
    refuseNextId = true;
    const result = await pay(bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 600 }));
    expect(result.status).toBe("SUCCESS");
    const ids = await attempts(result.request_id);
    expect(ids.map((a) => a.attempt)).toEqual([1, 2]);
    expect(new Set(ids.map((a) => a.biller_request_id)).size).toBe(2);
    // The first was refused (nothing processed); the second is the one the biller knows.
    const first = await (await fetch(`${paying.service.urls.biller}/sandbox/transactions/${ids[0]!.biller_request_id}`, { headers: keys() })).json();
    expect(first).toMatchObject({ code: "015" });
    expect((await sentFor(result.request_id)).status).toBe("delivered");
  });

  it("follows a pay that got no answer by the id it was sent under, and sends again under a new id only once the biller has no record of it", async () => {
    // No answer to the pay: the same attempt is requeried and found delivered; no second pay.
    const silent = await pay(bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "400000000000", nairaAmount: 610 }));
    expect(silent.status).toBe("SUCCESS");
    expect(await attempts(silent.request_id)).toHaveLength(1);

    // A crash between recording an attempt and sending it: the biller never heard of it.
    const body = bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 620 });
    const { payload } = await paymentFor(body);
    const flow = paying.service.flow;
    const locked = await lockAsCrashedRequest(flow, { body, payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "lost-pay" });
    expect((await settle(flow, locked)).status).toBe("PAID");
    const lostId = newRequestId();
    await flow.attempts.record(locked.requestId, 1, lostId, { serviceID: "mtn", billersCode: "08011111111", amount: 620, phone: "08011111111" });
    // Within the grace nothing new is sent; past it, attempt 2 goes out under a new id.
    await workOnce(flow);
    expect(await attempts(locked.requestId)).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 1_100)); // past the grace (1 s here, set above)
    await expect.poll(async () => (await workOnce(flow), (await order(locked.requestId)).status), { timeout: 10_000, interval: 200 }).toBe("SUCCESS");
    const ids = await attempts(locked.requestId);
    expect(ids.map((a) => a.biller_request_id)).toEqual([lostId, expect.not.stringMatching(lostId)]);
  });

  it("a first pay attempt recorded while a slow settlement ran goes out only under the request's own lease, stamped sent when it goes", async () => {
    const flow = paying.service.flow;
    const sandboxSays = async (billerRequestId: string) => (await (await fetch(`${paying.service.urls.biller}/sandbox/transactions/${billerRequestId}`, { headers: keys() })).json()) as { code?: string; status?: string };
    // As if its settlement had taken a minute.
    const slow = (first: RecordedAttempt | undefined): RecordedAttempt => ({ ...first!, recordedAt: first!.recordedAt - 60_000 });

    // The request's lease passed on meanwhile (this one ran out at once): nothing is sent from
    // the request. The worker follows the attempt up (the grace here is 1 s): the biller has no
    // record of it, so attempt 2 goes out, and the bill is served once.
    const lostBody = bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 650 });
    const lost = await lockAsCrashedRequest(flow, { body: lostBody, payload: (await paymentFor(lostBody)).payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "slow-lost" });
    const lostFirst = await recordFirstAttempt(flow, lost);
    expect(lostFirst).toBeDefined();
    const lostPaid = await settle(flow, lost);
    expect(lostPaid.status).toBe("PAID");
    expect((await fulfil(flow, lostPaid, { fresh: true, first: slow(lostFirst) })).status).toBe("PAID");
    expect(await sandboxSays(lostFirst!.billerRequestId)).toMatchObject({ code: "015" });
    await new Promise((r) => setTimeout(r, 1_100)); // past the grace, from when it was recorded
    await expect.poll(async () => (await workOnce(flow), (await order(lost.requestId)).status), { timeout: 10_000, interval: 200 }).toBe("SUCCESS");
    const lostAttempts = await attempts(lost.requestId);
    expect(lostAttempts.map((a) => a.attempt)).toEqual([1, 2]);
    expect(lostAttempts[0]!.biller_request_id).toBe(lostFirst!.billerRequestId);
    expect(await sandboxSays(lostFirst!.billerRequestId)).toMatchObject({ code: "015" }); // never sent
    expect(await sandboxSays(lostAttempts[1]!.biller_request_id)).toMatchObject({ status: "delivered" });

    // The lease still the request's: stamped sent now, sent under its recorded id, served.
    const keptBody = bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 660 });
    const locked = await lockAsCrashedRequest(flow, { body: keptBody, payload: (await paymentFor(keptBody)).payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "slow-kept" });
    const held = (await flow.orders.claim(locked.requestId, 60))!;
    const keptFirst = await recordFirstAttempt(flow, held);
    const recorded = (await flow.attempts.of(held.requestId))[0]!.sentAt;
    const paid = await settle(flow, held);
    await new Promise((r) => setTimeout(r, 20));
    expect((await fulfil(flow, paid, { fresh: true, first: slow(keptFirst) })).status).toBe("SUCCESS");
    const kept = await flow.attempts.of(held.requestId);
    expect(kept.map((a) => [a.attempt, a.billerRequestId])).toEqual([[1, keptFirst!.billerRequestId]]);
    expect(kept[0]!.sentAt.getTime()).toBeGreaterThan(recorded.getTime());
  });

  it("records a bill's first pay attempt ahead only when its number check needs no question to the biller: one not asked yet waits for the payment", async () => {
    const flow = paying.service.flow;
    // Checks with a cache of their own (this suite's other bills asked the same meter), counted.
    const checks = new CustomerChecks(flow.biller, 60_000, async () => 0, 3);
    let asked = 0;
    const counting = Object.assign(Object.create(checks) as CustomerChecks, { ask: (...a: Parameters<CustomerChecks["ask"]>) => (asked++, checks.ask(...a)) });
    const deps = { ...flow, customerChecks: counting };
    const meter = bill({ serviceID: "eko-electric", serviceCategory: "ELECTRICITY", network: "EKO", billersCode: SANDBOX_NUMBERS.prepaidMeter, nairaAmount: 2100 });
    const order = await lockAsCrashedRequest(flow, { body: meter, payload: (await paymentFor(meter)).payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "meter-ahead" });
    const plan = planOf(order);
    expect(plan.verify).toBeTruthy();
    // Not asked yet (the meter was not checked before payment): nothing recorded, and the biller not asked for an unpaid bill.
    expect(await recordFirstAttempt(deps, order)).toBeUndefined();
    expect(asked).toBe(0);
    expect(await attempts(order.requestId)).toEqual([]);
    // Asked before payment (verify_customer, an upfront check): recorded ahead from the answer kept.
    expect(await checks.ask({ ...plan, verify: plan.verify! })).toMatchObject({ ok: true });
    const first = await recordFirstAttempt(deps, order);
    expect(first?.pay).toMatchObject({ serviceID: "eko-electric", billersCode: SANDBOX_NUMBERS.prepaidMeter });
    expect(asked).toBe(0);
    expect(await attempts(order.requestId)).toHaveLength(1);
    await flow.orders.transition(order.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "test: ended by hand" });
    expect(await attempts(order.requestId)).toEqual([]); // closed unpaid: withdrawn with the move
  });

  it("finishes a pending bill from VTpass's webhook, before any requery loop would", async () => {
    const result = await pay(bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "201000000000", nairaAmount: 630 }));
    expect(result.status).toBe("TIMEOUT");
    expect((await order(result.request_id)).status).toBe("PENDING");
    const [attempt] = await attempts(result.request_id);
    await staff(attempt!.biller_request_id, "resolve", { status: "delivered" }); // the sandbox calls the webhook
    expect((await order(result.request_id)).status).toBe("SUCCESS");
  });

  it("refunds a served x402 bill the biller reverses, exactly once, however the webhook is replayed, copied or raced", async () => {
    const before = await celo.balanceOf("USDC", payer.address);
    const result = await pay(bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 640 }));
    expect(result.status).toBe("SUCCESS");
    const paidAmount = before - (await celo.balanceOf("USDC", payer.address));
    const [attempt] = await attempts(result.request_id);
    // A forged "reversal" for a bill the biller still calls delivered changes nothing: it is
    // not acknowledged either (the requery does not show it), so VTpass would send it again.
    const forged = await webhook({ code: "040", content: { transactions: { status: "reversed" } }, requestId: attempt!.biller_request_id });
    expect(forged.status).toBe(503);
    expect(await forged.json()).toMatchObject({ code: "BILLER_UNAVAILABLE" });
    expect((await order(result.request_id)).status).toBe("SUCCESS");

    await staff(attempt!.biller_request_id, "reverse"); // VTpass reverses it and calls the webhook
    const reversed = await order(result.request_id);
    expect(reversed.status).toBe("REFUNDED");
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before);
    // Replayed and raced: nothing more moves. A copy arriving while another is at work on the
    // order is asked to come again (503); past the order's webhook limit, 429.
    const again = await Promise.all(Array.from({ length: 4 }, () => webhook({ requestId: attempt!.biller_request_id })));
    expect(again.every((r) => r.status === 200 || r.status === 429 || r.status === 503)).toBe(true);
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before);
    expect(paidAmount).toBeGreaterThan(0n);
    const shown = (await (await fetch(`${url}/api/orders/${result.request_id}`)).json()) as Result;
    expect(shown).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED", reason: expect.stringContaining("reversed") } });
  });

  it("refunds a served agent-hub bill the biller reverses: the pull goes back, once", async () => {
    await celo.approveAndAllow(agentWallet, "USDC", 10_000_000n);
    const apiKey = await linkAgent(url, agentWallet);
    const agent = await mcpAgent(url);
    try {
      const before = await celo.balanceOf("USDC", agentWallet.address);
      const served = await agent.call("pay_bill", { api_key: apiKey, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 650 });
      expect(served.data).toMatchObject({ status: "SUCCESS" });
      const requestId = served.data.request_id as string;
      expect(await celo.balanceOf("USDC", agentWallet.address)).toBeLessThan(before);
      const [attempt] = await attempts(requestId);
      await staff(attempt!.biller_request_id, "reverse");
      expect((await order(requestId)).status).toBe("REFUNDED");
      expect(await celo.balanceOf("USDC", agentWallet.address)).toBe(before);
      await webhook({ requestId: attempt!.biller_request_id });
      expect(await celo.balanceOf("USDC", agentWallet.address)).toBe(before);
    } finally {
      await agent.close();
    }
  });

  it("reads a product's plans afresh after VTpass's variations-update", async () => {
    const data = (nairaAmount: number) => post(bill({ serviceID: "mtn-data", serviceCategory: "DATA", network: "MTN", billersCode: "08011111111", nairaAmount }));
    expect((await data(1500)).status).toBe(402); // mtn-20hrs-1500, now in the catalogue's cache
    const repriced = await fetch(`${paying.service.urls.biller}/sandbox/variations/mtn-data/mtn-20hrs-1500`, { method: "POST", headers: { ...keys(), "content-type": "application/json" }, body: JSON.stringify({ variation_amount: 1600 }) });
    expect(repriced.status).toBe(200);
    expect((await data(1500)).status).toBe(402); // still the cached list
    const hook = await fetch(`${url}/api/biller/webhook`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ type: "variations-update", serviceID: "mtn-data" }) });
    expect(await hook.json()).toEqual({ response: "success" });
    expect(await (await data(1500)).json()).toMatchObject({ code: "PLAN_REQUIRED" });
    expect((await data(1600)).status).toBe(402);
    // A name no bill could carry (one too long for the limits' table, say) is passed over, answered as any.
    for (const serviceID of ["x".repeat(300), `${" ".repeat(300)}mtn`]) {
      const madeUp = await fetch(`${url}/api/biller/webhook`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ type: "variations-update", serviceID }) });
      expect(madeUp.status, serviceID.trim()).toBe(200);
      expect(await madeUp.json()).toEqual({ response: "success" });
    }
  });

  it("answers what it cannot act on plainly: an unknown id, a body that is not JSON, a wrong token, and too many for one order", async () => {
    const unknown = await webhook({ requestId: newRequestId() });
    expect(await unknown.json()).toEqual({ response: "success" });
    const garbled = await fetch(`${url}/api/biller/webhook`, { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" });
    expect(garbled.status).toBe(400);
    expect(await garbled.json()).toMatchObject({ code: "INVALID_JSON" });
    const guarded = createApp({
      config: loadConfig({ BILLER_WEBHOOK_TOKEN: "a-long-webhook-token-123" }),
      db: paying.service.db,
      deployments: paying.chains.deployments,
      rates: new ConfiguredRate(1_550_000n),
      flow: paying.service.flow,
      hub: paying.service.hub,
    });
    const hook = (query: string) => guarded.request(`/api/biller/webhook${query}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ type: "transaction-update", data: { requestId: "x" } }) });
    expect((await hook("?token=wrong")).status).toBe(401);
    expect((await hook("")).status).toBe(401);
    expect(await (await hook("?token=a-long-webhook-token-123")).json()).toEqual({ response: "success" });

    // Each webhook for a known order costs a requery: past the limit it is refused (VTpass sends again later).
    const result = await pay(bill({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 660 }));
    const [attempt] = await attempts(result.request_id);
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await webhook({ requestId: attempt!.biller_request_id })).status);
    expect(statuses.slice(0, 6)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(statuses.slice(6)).toEqual([429, 429]);
    expect((await order(result.request_id)).status).toBe("SUCCESS");
  });
});
