import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { VERIFIABLE } from "../../services/biller-sandbox/catalog.ts";
import { newBillerRequestId, VtpassClient } from "../../server/biller/vtpass.ts";
import { listen } from "../support/http-server.ts";

const keys = { apiKey: "k", secretKey: "s", publicKey: "p" };

describe("biller client against the local sandbox", () => {
  let sandbox: Awaited<ReturnType<typeof listen>>;
  let biller: VtpassClient;

  beforeAll(async () => {
    sandbox = await listen(billerSandboxApp({ ...keys, slowAnswerMs: 1_500, pendingRequeries: 1 }).fetch);
    biller = new VtpassClient({ baseUrl: sandbox.url, ...keys, timeoutMs: 500 });
  });
  afterAll(() => sandbox?.close());

  const airtime = (phone: string) =>
    biller.pay({ requestId: newBillerRequestId(), serviceID: "mtn", billersCode: phone, amount: 100, phone });

  it("makes request ids that start with the Lagos time (GMT+1)", () => {
    expect(newBillerRequestId(new Date("2026-11-21T23:30:00Z"))).toMatch(/^202611220030[0-9a-f]{20}$/);
  });

  it("delivers on the success number and fails on any other", async () => {
    expect(await airtime("08011111111")).toMatchObject({ state: "delivered" });
    expect(await airtime("08099999999")).toEqual({ state: "failed", code: "016", reason: "TRANSACTION FAILED" });
  });

  it("reads a requery as a requery: only a failed or reversed transaction is failed, anything unclear stays pending", async () => {
    const id = newBillerRequestId();
    await biller.pay({ requestId: id, serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" });
    // Bad credentials say nothing about the transaction: 087 on a requery is pending, not a refund.
    const locked = new VtpassClient({ baseUrl: sandbox.url, apiKey: "k", secretKey: "wrong", publicKey: "p", timeoutMs: 500 });
    expect(await locked.requery(id)).toMatchObject({ state: "pending", reason: expect.stringContaining("087") });
    expect(await biller.requery(id)).toMatchObject({ state: "delivered" });
    // On a pay, the same code means this bill was refused: nothing was delivered.
    expect(await locked.pay({ requestId: newBillerRequestId(), serviceID: "mtn", billersCode: "08011111111", amount: 100, phone: "08011111111" })).toMatchObject({
      state: "failed",
      code: "087",
    });
  });

  it("charges a fixed-price plan its own price whatever amount is sent, and says so in the answer", async () => {
    const paid = await biller.pay({ requestId: newBillerRequestId(), serviceID: "mtn-data", billersCode: "08011111111", variationCode: "mtn-data-1000", amount: 50, phone: "08011111111" });
    expect(paid).toMatchObject({ state: "delivered" });
    expect(Number((paid as { amount: string }).amount)).toBe(1000);
    const open = await biller.pay({ requestId: newBillerRequestId(), serviceID: "mtn", billersCode: "08011111111", amount: 150, phone: "08011111111" });
    expect(open).toMatchObject({ state: "delivered" });
    expect(Number((open as { amount: string }).amount)).toBe(150);
  });

  it("reports pending, then requery settles it: delivered, or reversed as failed", async () => {
    const delivered = newBillerRequestId();
    const pay = { serviceID: "mtn", amount: 100 };
    expect(await biller.pay({ ...pay, requestId: delivered, billersCode: "201000000000", phone: "201000000000" })).toMatchObject({
      state: "pending",
    });
    expect(await biller.requery(delivered)).toMatchObject({ state: "pending" });
    expect(await biller.requery(delivered)).toMatchObject({ state: "delivered" });

    const reversed = newBillerRequestId();
    await biller.pay({ ...pay, requestId: reversed, billersCode: "202000000000", phone: "202000000000" });
    await biller.requery(reversed);
    expect(await biller.requery(reversed)).toMatchObject({ state: "failed" });
  });

  it("treats an unexpected answer, no answer and a late answer as pending; requery finds them delivered", async () => {
    for (const phone of ["500000000000", "400000000000", "300000000000"]) {
      const requestId = newBillerRequestId();
      const result = await biller.pay({ requestId, serviceID: "mtn", billersCode: phone, amount: 100, phone });
      expect(result, phone).toMatchObject({ state: "pending" });
      expect(await biller.requery(requestId), phone).toMatchObject({ state: "delivered" });
    }
  });

  it("verifies meters, smartcards, profiles and accounts, and rejects wrong ones", async () => {
    const ok = [
      { serviceID: "ikeja-electric", billersCode: VERIFIABLE.prepaidMeter, type: "prepaid" },
      { serviceID: "eko-electric", billersCode: VERIFIABLE.postpaidMeter, type: "postpaid" },
      { serviceID: "dstv", billersCode: VERIFIABLE.smartcard },
      { serviceID: "jamb", billersCode: VERIFIABLE.jambProfile, type: "utme" },
      { serviceID: "bank-deposit", billersCode: VERIFIABLE.bankAccount, type: "gtb" },
    ];
    for (const req of ok) expect(await biller.verify(req), req.serviceID).toMatchObject({ ok: true });
    const wrong = [
      { serviceID: "ikeja-electric", billersCode: "9999999999999", type: "prepaid" },
      { serviceID: "ikeja-electric", billersCode: VERIFIABLE.prepaidMeter, type: "postpaid" },
      { serviceID: "dstv", billersCode: "1234567890" },
    ];
    for (const req of wrong) expect(await biller.verify(req), req.billersCode).toMatchObject({ ok: false });
  });

  it("returns electricity tokens and units whichever field the disco uses, and exam PINs", async () => {
    for (const serviceID of ["ikeja-electric", "eko-electric", "abuja-electric"]) {
      const result = await biller.pay({
        requestId: newBillerRequestId(),
        serviceID,
        billersCode: VERIFIABLE.prepaidMeter,
        variationCode: "prepaid",
        amount: 1000,
        phone: "08011111111",
      });
      expect(result, serviceID).toMatchObject({ state: "delivered", units: "10.0" });
      expect((result as { purchasedCode: string }).purchasedCode, serviceID).toMatch(/^\d{20}$/);
    }
    const pin = await biller.pay({
      requestId: newBillerRequestId(),
      serviceID: "waec",
      billersCode: "08011111111",
      variationCode: "waecdirect",
      amount: 3500,
      phone: "08011111111",
    });
    expect((pin as { purchasedCode: string }).purchasedCode).toMatch(/^\d{20}$/);
  });

  it("reports the biller's refusals as failed with their codes", async () => {
    const base = { billersCode: "08011111111", phone: "08011111111" };
    const cases: Array<[Parameters<VtpassClient["pay"]>[0], string]> = [
      [{ ...base, requestId: newBillerRequestId(), serviceID: "no-such-service", amount: 100 }, "012"],
      [{ ...base, requestId: newBillerRequestId(), serviceID: "mtn", amount: 10 }, "013"],
      [{ ...base, requestId: newBillerRequestId(), serviceID: "mtn", amount: 10_000_000 }, "017"],
      [{ ...base, requestId: newBillerRequestId(), serviceID: "mtn-data", variationCode: "nope", amount: 100 }, "010"],
      [{ ...base, requestId: "short", serviceID: "mtn", amount: 100 }, "085"],
    ];
    for (const [req, code] of cases) expect(await biller.pay(req), code).toMatchObject({ state: "failed", code });
    const reused = newBillerRequestId();
    await biller.pay({ ...base, requestId: reused, serviceID: "mtn", amount: 100 });
    // A reused request id means our own earlier attempt exists: pending, for requery to decide.
    expect(await biller.pay({ ...base, requestId: reused, serviceID: "mtn", amount: 100 })).toMatchObject({
      state: "pending",
      reason: expect.stringContaining("request id already used"),
    });
    // 015, no record of the request: not a failure (a late pay may still land); sent again by the caller.
    expect(await biller.requery(newBillerRequestId())).toMatchObject({ state: "pending", unknownRequest: true });
    const wrongKeys = new VtpassClient({ baseUrl: sandbox.url, ...keys, secretKey: "wrong", timeoutMs: 500 });
    expect(await wrongKeys.pay({ ...base, requestId: newBillerRequestId(), serviceID: "mtn", amount: 100 })).toMatchObject({
      code: "087",
    });
  });

  it("lists plans and international options", async () => {
    expect((await biller.variations("mtn-data")).map((v) => v.variation_code)).toEqual(["mtn-data-100", "mtn-data-1000"]);
    await expect(biller.variations("nope")).rejects.toThrow(/no variations/);
    expect((await biller.internationalCountries()).map((c) => c.code)).toContain("GH");
  });
});
