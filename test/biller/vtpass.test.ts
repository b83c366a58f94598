/**
 * The VTpass client against the local sandbox, which is written from VTpass's pages
 * (services/biller-sandbox/app.ts): what the sandbox enforces is what VTpass documents, so a
 * client that gets past it sends what VTpass asks for.
 */
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { VtpassClient } from "../../server/biller/vtpass/client.ts";
import { lagosStamp, newRequestId } from "../../server/biller/vtpass/request-id.ts";
import type { PayRequest } from "../../server/biller/upstream.ts";
import { listen } from "../support/http-server.ts";

const keys = { apiKey: "k", secretKey: "s", publicKey: "p" };

describe("biller client against the local sandbox", () => {
  let sandbox: Awaited<ReturnType<typeof listen>>;
  let hooks: Awaited<ReturnType<typeof listen>>;
  let biller: VtpassClient;
  let clock = new Date();
  const received: unknown[] = [];
  let hookAnswer: unknown = { response: "success" };

  beforeAll(async () => {
    const receiver = new Hono();
    receiver.post("/hook", async (c) => {
      received.push(await c.req.json());
      return c.json(hookAnswer);
    });
    hooks = await listen(receiver.fetch);
    sandbox = await listen(billerSandboxApp({ ...keys, slowAnswerMs: 1_500, pendingRequeries: 1, duplicateWindowMs: 0, webhookUrl: `${hooks.url}/hook`, now: () => clock }).fetch);
    biller = new VtpassClient({ baseUrl: sandbox.url, ...keys, timeoutMs: 500 });
  });
  afterAll(async () => {
    await sandbox?.close();
    await hooks?.close();
  });

  const airtime = (phone: string, extra: Partial<PayRequest> = {}) =>
    biller.pay({ requestId: newRequestId(clock), serviceID: "mtn", billersCode: phone, amount: 100, phone, ...extra });
  const staff = (requestId: string, action: "resolve" | "reverse", body: unknown = {}) =>
    fetch(`${sandbox.url}/sandbox/transactions/${requestId}/${action}`, { method: "POST", headers: { "api-key": "k", "secret-key": "s", "content-type": "application/json" }, body: JSON.stringify(body) });
  const sent = async (requestId: string) =>
    (await (await fetch(`${sandbox.url}/sandbox/transactions/${requestId}`, { headers: { "api-key": "k", "secret-key": "s" } })).json()) as { request: Record<string, unknown>; charged: number };

  it("makes request ids that start with the Lagos time (GMT+1)", () => {
    expect(lagosStamp(new Date("2026-11-21T23:30:00Z"))).toBe("202611220030");
    expect(newRequestId(new Date("2026-11-21T23:30:00Z"))).toMatch(/^202611220030[0-9a-f]{20}$/);
  });

  it("delivers on the success number and fails on any other", async () => {
    expect(await airtime(SANDBOX_NUMBERS.phone)).toMatchObject({ state: "delivered" });
    expect(await airtime("08099999999")).toEqual({ state: "failed", code: "016", reason: "TRANSACTION FAILED" });
  });

  it("refuses a request id not dated today in Lagos (085), and says so as a refused id: a pay that crossed midnight", async () => {
    const yesterday = newRequestId(new Date(clock.getTime() - 86_400_000));
    expect(await biller.pay({ requestId: yesterday, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" })).toMatchObject({
      state: "failed",
      code: "085",
      requestIdRefused: true,
    });
    // 23:59:30 in Lagos: the id is made; the pay arrives after midnight and is refused.
    clock = new Date("2026-11-25T22:59:30Z");
    const id = newRequestId(clock);
    clock = new Date("2026-11-25T23:00:10Z");
    expect(await biller.pay({ requestId: id, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" })).toMatchObject({ requestIdRefused: true });
    // A requery is not held to the date rule: an id accepted yesterday is asked about today.
    clock = new Date("2026-11-25T22:58:00Z");
    const accepted = newRequestId(clock);
    await biller.pay({ requestId: accepted, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" });
    clock = new Date("2026-11-25T23:05:00Z");
    expect(await biller.requery(accepted)).toMatchObject({ state: "delivered" });
    for (const bad of ["short", "ABCDEFGHIJKLmn", "202613450000abc"]) {
      expect(await biller.pay({ requestId: bad, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" }), bad).toMatchObject({ code: "085" });
    }
    clock = new Date();
  });

  it("reads a requery as a requery: only a failed or reversed transaction is failed, anything unclear stays pending", async () => {
    const id = newRequestId(clock);
    await biller.pay({ requestId: id, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" });
    // Bad credentials say nothing about the transaction: 087 on a requery is pending, not a refund.
    const locked = new VtpassClient({ baseUrl: sandbox.url, apiKey: "k", secretKey: "wrong", publicKey: "p", timeoutMs: 500 });
    expect(await locked.requery(id)).toMatchObject({ state: "pending", reason: expect.stringContaining("087") });
    expect(await biller.requery(id)).toMatchObject({ state: "delivered" });
    // On a pay, the same code means this bill was refused: nothing was delivered.
    expect(await locked.pay({ requestId: newRequestId(clock), serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" })).toMatchObject({ state: "failed", code: "087" });
    // GETs take the public key: with only the secret one they are refused.
    const wrongGet = new VtpassClient({ baseUrl: sandbox.url, apiKey: "k", secretKey: "s", publicKey: "s", timeoutMs: 500 });
    await expect(wrongGet.variations("mtn-data")).rejects.toThrow();
  });

  it("charges a fixed-price plan its own price whatever amount is sent, and says so in the answer", async () => {
    const paid = await biller.pay({ requestId: newRequestId(clock), serviceID: "mtn-data", billersCode: "08011111111", variationCode: "mtn-100mb-1000", amount: 50, phone: "08011111111" });
    expect(paid).toMatchObject({ state: "delivered", charge: { amountKobo: 100_000n } });
    const open = await biller.pay({ requestId: newRequestId(clock), serviceID: "mtn", billersCode: "08011111111", amount: 150, phone: "08011111111" });
    expect(open).toMatchObject({ state: "delivered", charge: { amountKobo: 15_000n } });
  });

  it("reports pending, then requery settles it; a transaction staff resolve or reverse is posted to the webhook until it answers success", async () => {
    const delivered = newRequestId(clock);
    expect(await biller.pay({ requestId: delivered, serviceID: "mtn", billersCode: "201000000000", amount: 100, phone: "201000000000" })).toMatchObject({ state: "pending" });
    expect(await biller.requery(delivered)).toMatchObject({ state: "pending" });
    expect(await biller.requery(delivered)).toMatchObject({ state: "delivered" });

    const stuck = newRequestId(clock);
    await biller.pay({ requestId: stuck, serviceID: "mtn", billersCode: "201000000000", amount: 100, phone: "201000000000" });
    received.length = 0;
    hookAnswer = { response: "not yet" };
    expect((await staff(stuck, "resolve", { status: "reversed" })).status).toBe(200);
    // Sent 5 times in all while the answer is not {"response":"success"}.
    expect(received).toHaveLength(5);
    expect(received[0]).toMatchObject({ type: "transaction-update", data: { code: "040", requestId: stuck, content: { transactions: { status: "reversed" } } } });
    expect(await biller.requery(stuck)).toMatchObject({ state: "failed", reversed: true });

    hookAnswer = { response: "success" };
    received.length = 0;
    const served = newRequestId(clock);
    await biller.pay({ requestId: served, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" });
    await staff(served, "reverse");
    expect(received).toHaveLength(1);
    expect(received[0]).toMatchObject({ data: { code: "040", content: { transactions: { status: "reversed", wallet_credit_id: expect.any(String) } } } });
    expect(await biller.requery(served)).toMatchObject({ state: "failed", reversed: true });
  });

  it("treats an unexpected answer, no answer and a late answer as pending; requery finds them delivered", async () => {
    for (const phone of ["500000000000", "400000000000", "300000000000"]) {
      const requestId = newRequestId(clock);
      const result = await biller.pay({ requestId, serviceID: "mtn", billersCode: phone, amount: 100, phone });
      expect(result, phone).toMatchObject({ state: "pending" });
      expect(await biller.requery(requestId), phone).toMatchObject({ state: "delivered" });
    }
  });

  it("verifies meters (reporting their type), smartcards (with the renewal amount), JAMB profiles and bank accounts; rejects wrong ones", async () => {
    expect(await biller.verify({ serviceID: "ikeja-electric", billersCode: SANDBOX_NUMBERS.prepaidMeter, type: "prepaid" })).toMatchObject({ ok: true, meterType: "prepaid" });
    expect(await biller.verify({ serviceID: "eko-electric", billersCode: SANDBOX_NUMBERS.postpaidMeter, type: "prepaid" })).toMatchObject({ ok: true, meterType: "postpaid" });
    expect(await biller.verify({ serviceID: "dstv", billersCode: SANDBOX_NUMBERS.smartcard })).toMatchObject({ ok: true, renewalKobo: 185_000n, currentBouquet: "dstv-padi" });
    expect(await biller.verify({ serviceID: "jamb", billersCode: SANDBOX_NUMBERS.jambProfile, type: "utme-mock" })).toMatchObject({ ok: true });
    expect(await biller.verify({ serviceID: "bank-deposit", billersCode: SANDBOX_NUMBERS.bankAccount, type: "gtb" })).toMatchObject({ ok: true });
    for (const req of [
      { serviceID: "ikeja-electric", billersCode: "9999999999999", type: "prepaid" },
      { serviceID: "dstv", billersCode: "1234567890" },
      { serviceID: "jamb", billersCode: "1111111111", type: "utme-mock" },
    ]) {
      expect(await biller.verify(req), req.billersCode).toMatchObject({ ok: false });
    }
    // The documented mandatory `type`: without it the biller answers 011, which is no answer about the number.
    await expect(biller.verify({ serviceID: "ikeja-electric", billersCode: SANDBOX_NUMBERS.prepaidMeter })).rejects.toThrow(/011/);
  });

  it("vends a meter of the type it is only, and hands back IKEDC's and Eko's tokens whole", async () => {
    const pay = (serviceID: string, meter: string, variationCode: string) =>
      biller.pay({ requestId: newRequestId(clock), serviceID, billersCode: meter, variationCode, amount: 1000, phone: "08011111111" });
    expect(await pay("ikeja-electric", SANDBOX_NUMBERS.prepaidMeter, "prepaid")).toMatchObject({ state: "delivered", units: "40.0 kWh", codes: [{ label: "Token", value: expect.stringMatching(/^\d{20}$/) }] });
    expect(await pay("eko-electric", SANDBOX_NUMBERS.prepaidMeter, "prepaid")).toMatchObject({ state: "delivered", codes: [{ label: "Token" }, { label: "Bonus Token" }] });
    expect(await pay("ikeja-electric", SANDBOX_NUMBERS.postpaidMeter, "postpaid")).toMatchObject({ state: "delivered", codes: [] });
    expect(await pay("ikeja-electric", SANDBOX_NUMBERS.postpaidMeter, "prepaid")).toMatchObject({ state: "failed" });
  });

  it("takes DStv and GOtv only with a subscription_type: change to a bouquet, renew at the amount sent", async () => {
    const base = { serviceID: "dstv", billersCode: SANDBOX_NUMBERS.smartcard, phone: "08011111111" };
    expect(await biller.pay({ ...base, requestId: newRequestId(clock), variationCode: "dstv-yanga", amount: 2565 })).toMatchObject({ state: "failed", code: "011" });
    const change = newRequestId(clock);
    expect(await biller.pay({ ...base, requestId: change, variationCode: "dstv-yanga", amount: 2565, subscriptionType: "change" })).toMatchObject({ state: "delivered", charge: { amountKobo: 256_500n } });
    expect((await sent(change)).request).toMatchObject({ subscription_type: "change", variation_code: "dstv-yanga" });
    const renew = newRequestId(clock);
    expect(await biller.pay({ ...base, requestId: renew, amount: 1850, subscriptionType: "renew" })).toMatchObject({ state: "delivered", charge: { amountKobo: 185_000n } });
    expect(await biller.pay({ ...base, requestId: newRequestId(clock), amount: 1850, subscriptionType: "renew" as never, serviceID: "gotv", billersCode: "5555555555" })).toMatchObject({ state: "failed" });
  });

  it("hands back WAEC cards, JAMB PINs and Showmax vouchers; Showmax's fee shows in the charge", async () => {
    const waec = await biller.pay({ requestId: newRequestId(clock), serviceID: "waec", billersCode: "", variationCode: "waecdirect", amount: 900, phone: "08011111111" });
    expect(waec).toMatchObject({ state: "delivered", codes: [{ label: "Serial" }, { label: "PIN" }] });
    const jamb = await biller.pay({ requestId: newRequestId(clock), serviceID: "jamb", billersCode: SANDBOX_NUMBERS.jambProfile, variationCode: "utme-no-mock", amount: 6200, phone: "08011111111" });
    expect(jamb).toMatchObject({ state: "delivered", codes: [{ label: "PIN", value: expect.stringMatching(/^\d{12}$/) }] });
    const showmax = await biller.pay({ requestId: newRequestId(clock), serviceID: "showmax", billersCode: "08011111111", variationCode: "full", amount: 2900, phone: "08011111111" });
    expect(showmax).toMatchObject({ state: "delivered", codes: [{ label: "Voucher" }], charge: { feeKobo: 10_000n } });
  });

  it("takes an international amount in the destination's currency within the plan's bounds, and charges it at the rate", async () => {
    const intl = (variationCode: string, amount: number | undefined, extra: Partial<PayRequest> = {}) =>
      biller.pay({
        requestId: newRequestId(clock),
        serviceID: "foreign-airtime",
        billersCode: "233241234567",
        variationCode,
        ...(amount !== undefined ? { amount } : {}),
        phone: "08011111111",
        international: { country_code: "GH", operator_id: "5", product_type_id: "1", email: "a@b.c" },
        ...extra,
      });
    expect(await intl("5-topup", 20)).toMatchObject({ state: "delivered", charge: { amountKobo: 211_000n } });
    expect(await intl("5-topup", 501)).toMatchObject({ state: "failed", code: "017" });
    expect(await intl("5-topup", 0.5)).toMatchObject({ state: "failed", code: "013" });
    // Without the international fields (country, operator, product type, email) it is refused.
    expect(await biller.pay({ requestId: newRequestId(clock), serviceID: "foreign-airtime", billersCode: "233241234567", variationCode: "5-topup", amount: 20, phone: "08011111111" })).toMatchObject({ code: "011" });
    const plans = await biller.internationalVariations("5", "4");
    expect(plans.currency).toBe("GHS");
    expect(plans.plans[0]).toMatchObject({ fixedPrice: "Yes", variation_amount: "0.00", charged_amount: "1055.00", charged_currency: "NGN" });
  });

  it("lists bank plans under `varations` only and JAMB's under `variations` only, and the client reads both", async () => {
    const raw = async (serviceID: string) => (await (await fetch(`${sandbox.url}/api/service-variations?serviceID=${serviceID}`, { headers: { "api-key": "k", "public-key": "p" } })).json()) as { content: Record<string, unknown> };
    expect(Object.keys((await raw("bank-deposit")).content)).toContain("varations");
    expect(Object.keys((await raw("bank-deposit")).content)).not.toContain("variations");
    expect(Object.keys((await raw("jamb")).content)).not.toContain("varations");
    expect((await biller.variations("bank-deposit")).map((v) => v.variation_code)).toEqual(["providus", "gtb", "access", "zenith"]);
    expect((await biller.variations("jamb")).map((v) => v.variation_code)).toEqual(["utme-mock", "utme-no-mock"]);
  });

  it("reports the biller's refusals as failed with their codes; a reused id and an unknown one are for requery to decide", async () => {
    const base = { billersCode: "08011111111", phone: "08011111111" };
    const cases: Array<[Parameters<VtpassClient["pay"]>[0], string]> = [
      [{ ...base, requestId: newRequestId(clock), serviceID: "no-such-service", amount: 100 }, "012"],
      [{ ...base, requestId: newRequestId(clock), serviceID: "mtn", amount: 10 }, "013"],
      [{ ...base, requestId: newRequestId(clock), serviceID: "mtn", amount: 10_000_000 }, "017"],
      [{ ...base, requestId: newRequestId(clock), serviceID: "mtn-data", variationCode: "nope", amount: 100 }, "010"],
    ];
    for (const [req, code] of cases) expect(await biller.pay(req), code).toMatchObject({ state: "failed", code });
    const reused = newRequestId(clock);
    await biller.pay({ ...base, requestId: reused, serviceID: "mtn", amount: 100 });
    expect(await biller.pay({ ...base, requestId: reused, serviceID: "mtn", amount: 100 })).toMatchObject({ state: "pending", reason: expect.stringContaining("request id already used") });
    expect(await biller.requery(newRequestId(clock))).toMatchObject({ state: "pending", unknownRequest: true });
  });

  it("answers 019 for the same product and number within 30 seconds, which the client reads as pending (requery decides)", async () => {
    const strict = await listen(billerSandboxApp({ ...keys, duplicateWindowMs: 30_000, now: () => clock }).fetch);
    try {
      const client = new VtpassClient({ baseUrl: strict.url, ...keys, timeoutMs: 500 });
      const pay = () => client.pay({ requestId: newRequestId(clock), serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" });
      expect(await pay()).toMatchObject({ state: "delivered" });
      const duplicate = await pay();
      expect(duplicate).toMatchObject({ state: "pending", reason: expect.stringContaining("019") });
      clock = new Date(clock.getTime() + 31_000);
      expect(await pay()).toMatchObject({ state: "delivered" });
    } finally {
      clock = new Date();
      await strict.close();
    }
  });
});
