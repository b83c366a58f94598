/**
 * VTpass's documented request and answer samples (test/fixtures/vtpass/, each naming its
 * page) replayed against the wire client: a stand-in answers each call with the documented
 * answer, and records what the client sent. Whatever the sandbox does, the client must read
 * what VTpass publishes, quirks included, and send what its pages ask for.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Catalogue } from "../../server/biller/catalogue/catalogue.ts";
import { purchasedCodeText, type VendResult } from "../../server/biller/upstream.ts";
import { codesFromText, readTransactionAnswer, readVariations, toInternationalVariation, toVariation, webhookRequestId } from "../../server/biller/vtpass/answers.ts";
import { InternationalCatalogue } from "../../server/biller/catalogue/international.ts";
import { TtlCache } from "../../server/biller/catalogue/ttl-cache.ts";
import { VtpassClient } from "../../server/biller/vtpass/client.ts";
import { ServiceError } from "../../server/errors.ts";
import { listen } from "../support/http-server.ts";

const DIR = join(import.meta.dirname, "../fixtures/vtpass");
interface Fixture {
  page: string;
  /** "copied": not read from the page (its note says from where); absent: the page's own sample. */
  source?: "copied";
  operation: string;
  note: string;
  request?: Record<string, unknown>;
  answer: Record<string, unknown>;
}
const fixture = (name: string): Fixture => JSON.parse(readFileSync(join(DIR, `${name}.json`), "utf8"));

describe("the VTpass client against VTpass's documented samples", () => {
  let server: Awaited<ReturnType<typeof listen>>;
  let client: VtpassClient;
  let next: unknown;
  let seen: { method: string; path: string; headers: Record<string, string>; body: Record<string, unknown> | null } | undefined;

  beforeAll(async () => {
    const app = new Hono();
    app.all("*", async (c) => {
      const text = await c.req.text();
      seen = { method: c.req.method, path: c.req.path + (new URL(c.req.url).search || ""), headers: Object.fromEntries(c.req.raw.headers), body: text ? JSON.parse(text) : null };
      return c.json(next);
    });
    server = await listen(app.fetch);
    client = new VtpassClient({ baseUrl: server.url, apiKey: "the-api-key", secretKey: "SK_the-secret", publicKey: "PK_the-public", timeoutMs: 2_000 });
  });
  afterAll(() => server?.close());

  const serving = (name: string) => {
    next = fixture(name).answer;
  };
  const delivered = (r: VendResult) => {
    expect(r.state).toBe("delivered");
    return r as Extract<VendResult, { state: "delivered" }>;
  };

  it("every fixture names its page and parses", () => {
    const names = readdirSync(DIR).filter((f) => f.endsWith(".json"));
    expect(names.length).toBeGreaterThanOrEqual(30);
    for (const name of names) {
      const f = fixture(name.replace(/\.json$/, ""));
      expect(f.page, name).toMatch(/^https:\/\/www\.vtpass\.com\/documentation\//);
      expect(f.note, name).not.toBe("");
      // A sample not read from its page (the store lacks it, or no page has one) says so twice: in its note and as copied.
      expect(f.source, name).toBe(/^NOT /.test(f.note) ? "copied" : undefined);
    }
  });

  it("pays as the pages ask: api-key and secret-key on POST, the documented field names, and reads the answer", async () => {
    const f = fixture("pay-mtn-airtime");
    serving("pay-mtn-airtime");
    const r = delivered(await client.pay({ requestId: "2025031010146932932", serviceID: "mtn", billersCode: "08011111111", amount: 20, phone: "08011111111" }));
    expect(seen!.headers).toMatchObject({ "api-key": "the-api-key", "secret-key": "SK_the-secret" });
    expect(seen!.headers["public-key"]).toBeUndefined();
    expect(seen!.body).toMatchObject(f.request!);
    expect(r).toMatchObject({ transactionId: "17415980564672211596777904", codes: [], units: null, charge: { amountKobo: 2_000n, totalKobo: 1_930n, feeKobo: 0n } });
  });

  it("sends a cable change with subscription_type, and reads DStv's and GOtv's answers (a float commission included)", async () => {
    serving("pay-dstv-change");
    const r = delivered(await client.pay({ requestId: "2025031011029125930", serviceID: "dstv", billersCode: "1212121212", variationCode: "dstv-padi", amount: 1850, phone: "08011111111", subscriptionType: "change" }));
    expect(seen!.body).toMatchObject(fixture("pay-dstv-change").request!);
    expect(r.charge).toEqual({ amountKobo: 185_000n, totalKobo: 182_225n, feeKobo: 0n });
    serving("requery-dstv");
    expect(delivered(await client.requery("2025031011029125930")).charge.amountKobo).toBe(185_000n);
    expect(seen!.body).toEqual({ request_id: "2025031011029125930" });
    serving("pay-gotv-change");
    expect(delivered(await client.pay({ requestId: "x", serviceID: "gotv", billersCode: "1212121212", variationCode: "gotv-lite", phone: "1", subscriptionType: "change" })).charge.amountKobo).toBe(41_000n);
  });

  it("reads requeries, whose numbers are numbers and commission rounded", async () => {
    for (const name of ["requery-mtn-airtime", "requery-glo-airtime"]) {
      serving(name);
      expect(delivered(await client.requery("2025031010146932932")).charge.amountKobo, name).toBeGreaterThan(0n);
    }
    // The requery page's own older sample: the top-level amount a string, the date an object.
    serving("requery-dstv-old");
    expect(delivered(await client.requery("34762wj2iiwiwjjjajahhhaa768whjjdhshdddsh"))).toMatchObject({ transactionId: "1586355735881", charge: { amountKobo: 100_000n, totalKobo: 98_500n, feeKobo: 0n } });
  });

  it("reads electricity tokens and units whole: IKEDC's 'Token : ...', its requery's extras, Eko's two tokens", async () => {
    serving("pay-ikedc-prepaid");
    const ikedc = delivered(await client.pay({ requestId: "2025031013366434255", serviceID: "ikeja-electric", billersCode: "1111111111111", variationCode: "prepaid", amount: 2000, phone: "08011111111" }));
    expect(ikedc).toMatchObject({ codes: [{ label: "Token", value: "26362054405982757802" }], units: "79.9 kWh" });
    expect(purchasedCodeText(ikedc.codes)).toBe("26362054405982757802");
    serving("requery-ikedc-prepaid");
    expect(delivered(await client.requery("2025031011443091397")).codes).toEqual([{ label: "Token", value: "26362054405982757802" }]);
    serving("pay-ikedc-postpaid");
    expect(delivered(await client.requery("2025031012574292285")).codes).toEqual([]);
    serving("pay-eko-bonus-token");
    const eko = delivered(await client.requery("hg3hgh3gdiud4w2wb33"));
    expect(eko.codes).toEqual([
      { label: "Token", value: "42167939781206619049" },
      { label: "Bonus Token", value: "62881559799402440206" },
    ]);
    expect(eko.units).toBe("16666.666");
    expect(purchasedCodeText(eko.codes)).toBe("Token: 42167939781206619049, Bonus Token: 62881559799402440206");
  });

  it("keeps a token written in groups whole, and every labelled code of a text", () => {
    expect(codesFromText("Token : 1234 5678 9012 3456 7890")).toEqual([{ label: "Token", value: "1234 5678 9012 3456 7890" }]);
    expect(codesFromText("Token : 1234-5678 Bonus Token : 9999 0000")).toEqual([
      { label: "Token", value: "1234-5678" },
      { label: "Bonus Token", value: "9999 0000" },
    ]);
    expect(codesFromText("Serial No:WRN1, pin: 111||Serial No:WRN2, pin: 222").map((c) => c.value)).toEqual(["WRN1", "111", "WRN2", "222"]);
    expect(codesFromText("SHMVHXQ9L3RXGPU")).toEqual([{ label: null, value: "SHMVHXQ9L3RXGPU" }]);
  });

  it("reads exam PINs and vouchers whole: WAEC's card, WAEC registration's token, JAMB's Pin, Showmax's voucher and its fee", async () => {
    serving("pay-waec");
    const waec = delivered(await client.requery("20250218124018-c3pwwi49eid"));
    expect(waec.codes).toEqual([
      { label: "Serial", value: "WRN123456790" },
      { label: "PIN", value: "098765432112" },
    ]);
    expect(purchasedCodeText(waec.codes)).toBe("Serial: WRN123456790, PIN: 098765432112");
    serving("pay-waec-registration");
    expect(delivered(await client.requery("20250218130312-78654567")).codes).toEqual([{ label: "Token", value: "0100070365657400875" }]);
    serving("pay-jamb");
    expect(delivered(await client.requery("20250218131720-0rjx1p27xnj")).codes).toEqual([{ label: "PIN", value: "3678251321392432" }]);
    for (const name of ["pay-showmax", "requery-showmax"]) {
      serving(name);
      const showmax = delivered(await client.requery("2025031013486732084"));
      expect(showmax.codes, name).toEqual([{ label: "Voucher", value: "SHMVHXQ9L3RXGPU" }]);
      expect(showmax.charge, name).toEqual({ amountKobo: 840_000n, totalKobo: 841_600n, feeKobo: 10_000n });
    }
  });

  it("verifies as merchant-verify answers: the meter's type, a renewal amount where given, and a wrong number with or without its error text", async () => {
    serving("verify-ikedc");
    expect(await client.verify({ serviceID: "ikeja-electric", billersCode: "1111111111111", type: "prepaid" })).toEqual({
      ok: true,
      customerName: "TESTMETER1",
      meterType: "prepaid",
      renewalKobo: null,
      currentBouquet: null,
    });
    expect(seen!.body).toEqual(fixture("verify-ikedc").request);
    serving("verify-dstv");
    expect(await client.verify({ serviceID: "dstv", billersCode: "1212121212" })).toMatchObject({ ok: true, customerName: "TEST METER", renewalKobo: null });
    serving("verify-dstv-renewal");
    expect(await client.verify({ serviceID: "dstv", billersCode: "1212121212" })).toMatchObject({ ok: true, renewalKobo: 250_000n, currentBouquet: "dstv10, dstv5, dstv9" });
    serving("verify-startimes");
    expect(await client.verify({ serviceID: "startimes", billersCode: "1212121212" })).toMatchObject({ ok: true, customerName: "TestMan Decoder" });
    serving("verify-jamb");
    expect(await client.verify({ serviceID: "jamb", billersCode: "0123456789", type: "utme-mock" })).toMatchObject({ ok: true, customerName: "Capital James" });
    // WrongBillersCode alone is a refusal, never a pass.
    serving("verify-wrong-number");
    expect(await client.verify({ serviceID: "ikeja-electric", billersCode: "9", type: "prepaid" })).toMatchObject({ ok: false });
  });

  it("reads plan lists under `variations`, `varations` or both, and the services' limits under `minimium_amount`", async () => {
    for (const [name, codes] of [
      ["variations-mtn-data", ["mtn-10mb-100", "mtn-50mb-200", "mtn-100mb-1000", "mtn-xtratalk-300", "mtn-xtratalk-300"]],
      ["variations-mtn-data-old", ["mtn-10mb-100", "mtn-50mb-200"]],
      ["variations-bank-deposit", ["providus", "gtb"]],
      ["variations-jamb", ["utme-mock", "utme-no-mock"]],
      ["variations-gotv", ["gotv-lite", "gotv-max", "gotv-jolli", "gotv-jinja", "gotv-lite-3months", "gotv-lite-1year", "gotv-supa-plus"]],
    ] as const) {
      serving(name);
      expect((await client.variations("x")).map((v) => v.variation_code), name).toEqual(codes);
      expect(seen!.method).toBe("GET");
      expect(seen!.headers).toMatchObject({ "api-key": "the-api-key", "public-key": "PK_the-public" });
      expect(seen!.headers["secret-key"]).toBeUndefined();
    }
    serving("services-data");
    expect(await client.services("data")).toEqual([
      { serviceID: "airtel-data", name: "Airtel Data", minimumAmount: 1, maximumAmount: 1_000_000 },
      { serviceID: "mtn-data", name: "MTN Data", minimumAmount: 1, maximumAmount: 1_000_000 },
      { serviceID: "glo-data", name: "GLO Data", minimumAmount: 1, maximumAmount: 200_000 },
    ]);
    expect(seen!.path).toBe("/api/services?identifier=data");
  });

  it("resolves bills from the documented plan lists: a price, a bank by name, and never a code listed at two prices", async () => {
    const catalogue = new Catalogue(
      {
        services: async () => [{ serviceID: "mtn-data", name: "MTN Data", minimumAmount: 1, maximumAmount: 1_000_000 }, { serviceID: "bank-deposit", name: "Bank Deposit", minimumAmount: 1, maximumAmount: 1_000_000 }],
        variations: async (id) => {
          serving(id === "bank-deposit" ? "variations-bank-deposit" : "variations-mtn-data");
          return client.variations(id);
        },
        internationalCountries: () => client.internationalCountries(),
        internationalProductTypes: (c) => client.internationalProductTypes(c),
        internationalOperators: (c, t) => client.internationalOperators(c, t),
        internationalVariations: (o, t) => client.internationalVariations(o, t),
      },
      0,
    );
    const data = { serviceCategory: "DATA" as const, serviceID: "mtn-data", network: "MTN", billersCode: "08011111111" };
    expect((await catalogue.check({ ...data, nairaAmount: 1000 })).vend).toMatchObject({ variationCode: "mtn-100mb-1000", amount: "1000", chargeKobo: "100000" });
    // 200 NGN: mtn-50mb-200, not the 200 NGN entry of mtn-xtratalk-300 (the list prices that code twice).
    expect((await catalogue.check({ ...data, nairaAmount: 200 })).vend.variationCode).toBe("mtn-50mb-200");
    await expect(catalogue.check({ ...data, nairaAmount: 300, variation_code: "mtn-xtratalk-300" })).rejects.toMatchObject({ code: "PLAN_AMBIGUOUS" });
    const bank = { serviceCategory: "BANK" as const, serviceID: "bank-deposit", billersCode: "0123456789", nairaAmount: 25_000 };
    // A bank plan "fixed" at 0.00 takes any amount; the bank comes from network when variation_code is absent.
    expect((await catalogue.check({ ...bank, network: "GTBANK" })).vend).toMatchObject({ variationCode: "gtb", amount: "25000", verify: { type: "gtb" } });
    expect((await catalogue.check({ ...bank, network: "Providus Bank" })).vend.variationCode).toBe("providus");
    const unnamed = await catalogue.check({ ...bank, network: "BANK" }).catch((e: ServiceError) => e);
    expect(unnamed).toMatchObject({ code: "PLAN_REQUIRED", extra: { options: [{ variation_code: "providus", nairaAmount: null }, { variation_code: "gtb", nairaAmount: null }] } });

    // International: the page's own sample lists every plan fixed at 0.00 with neither a rate
    // nor a charged_amount; such a plan cannot be priced, so it is not sold.
    serving("countries");
    expect((await client.internationalCountries()).map((c) => c.code)).toEqual(["CM", "GH", "NG", "RW", "SZ", "YE"]);
    serving("product-types-gh");
    expect(await client.internationalProductTypes("GH")).toEqual([
      { product_type_id: "4", name: "Mobile Data" },
      { product_type_id: "1", name: "Mobile Top Up" },
    ]);
    serving("operators-gh");
    expect(await client.internationalOperators("GH", "4")).toEqual([{ operator_id: "5", name: "Ghana MTN" }]);
    serving("variations-foreign-airtime");
    const plans = await client.internationalVariations("5", "4");
    expect(plans.plans[0]).toMatchObject({ variation_code: "4987", fixedPrice: "Yes", charged_amount: null, variation_rate: null });
  });

  it("never sells a plan the biller fixes at a price it cannot read: such a plan is no open amount", async () => {
    // VTpass's shape (vtpass.com/documentation/variation-codes/), with prices it does not document.
    const body = {
      response_description: "000",
      content: {
        serviceID: "mtn-data",
        variations: [
          { variation_code: "float", name: "1GB", variation_amount: "6.1499999999999995", fixedPrice: "Yes" },
          { variation_code: "sign", name: "2GB", variation_amount: "N1,000", fixedPrice: "Yes" },
          { variation_code: "no-price", name: "3GB", fixedPrice: "Yes" },
          { variation_code: "unsaid", name: "4GB", variation_amount: "1500.00" },
          { variation_code: "open", name: "Any", variation_amount: "0.00", fixedPrice: "No" },
        ],
      },
    };
    const none = async () => [];
    const catalogue = new Catalogue(
      {
        services: async () => [{ serviceID: "mtn-data", name: "MTN Data", minimumAmount: 1, maximumAmount: 1_000_000 }],
        variations: async () => readVariations(body)!.map(toVariation),
        internationalCountries: none,
        internationalProductTypes: none,
        internationalOperators: none,
        internationalVariations: async () => ({ plans: [] }) as never,
      },
      0,
    );
    const data = { serviceCategory: "DATA" as const, serviceID: "mtn-data", network: "MTN", billersCode: "08011111111", nairaAmount: 1 };
    for (const code of ["float", "sign", "no-price"]) {
      const refused = await catalogue.check({ ...data, variation_code: code }).catch((e: ServiceError) => e);
      expect(refused, code).toMatchObject({ code: "PLAN_AMBIGUOUS", message: expect.stringMatching(/fixed price that cannot be read/) });
      // Offered as what is sold: never as a plan of open amount.
      expect((refused as ServiceError).extra.options).toEqual([
        { variation_code: "unsaid", name: "4GB", nairaAmount: 1500 },
        { variation_code: "open", name: "Any", nairaAmount: null },
      ]);
    }
    // A plan that does not say whether its price is fixed is held to the price it lists.
    await expect(catalogue.check({ ...data, variation_code: "unsaid" })).rejects.toMatchObject({ code: "PLAN_AMOUNT_MISMATCH" });
    expect((await catalogue.check({ ...data, nairaAmount: 1500, variation_code: "unsaid" })).vend).toMatchObject({ variationCode: "unsaid", amount: "1500" });
    // An open plan still takes the bill's amount.
    expect((await catalogue.check({ ...data, variation_code: "open" })).vend).toMatchObject({ variationCode: "open", amount: "1" });
  });

  it("never sells an international plan code the biller lists twice at different charges", async () => {
    const plan = (code: string, charged: string) =>
      toInternationalVariation({ variation_code: code, name: code, variation_amount: "0.00", fixedPrice: "Yes", charged_amount: charged, charged_currency: "NGN", variation_rate: null });
    const international = new InternationalCatalogue(
      {
        internationalCountries: async () => [{ code: "GH", name: "Ghana", currency: "GHS", prefix: "233" }],
        internationalProductTypes: async () => [{ product_type_id: "4", name: "Mobile Data" }],
        internationalOperators: async () => [{ operator_id: "5", name: "Ghana MTN" }],
        internationalVariations: async () => ({ currency: "GHS", plans: [plan("twice", "1000.00"), plan("twice", "1500.00"), plan("once", "1000.00")] }),
      },
      new TtlCache(0),
    );
    const bill = { serviceID: "foreign-airtime", billersCode: "233241234567", country_code: "GH", product_type_id: "4", operator_id: "5", nairaAmount: 1000 };
    await expect(international.check({ ...bill, variation_code: "twice" })).rejects.toMatchObject({ code: "PLAN_AMBIGUOUS" });
    expect(await international.check({ ...bill, variation_code: "once" })).toMatchObject({ variationCode: "once", chargeKobo: "100000" });
  });

  it("takes a processed transaction of a status the page does not list (\"failed\") as pending, to be asked again: never refunded on that word", () => {
    const processed = (status: string) => ({ code: "000", content: { transactions: { status, transactionId: "17" } }, response_description: "TRANSACTION PROCESSED" });
    for (const kind of ["pay", "requery"] as const) {
      expect(readTransactionAnswer(processed("failed"), kind)).toEqual({ state: "pending", reason: "transaction failed" });
      expect(readTransactionAnswer(processed("reversed"), kind)).toMatchObject({ state: "failed", reversed: true });
    }
  });

  it("tells a refusal of the bill from one of the merchant's account or the biller's state, as the response-codes page names them", () => {
    const answer = (code: string, description: string) => ({ code, response_description: description });
    // The bill's own: counted against its payer (orders/failing-payers.ts).
    for (const [code, text] of [["016", "TRANSACTION FAILED"], ["013", "BELOW MINIMUM AMOUNT ALLOWED"], ["017", "ABOVE MAXIMUM AMOUNT ALLOWED"]]) {
      const read = readTransactionAnswer(answer(code!, text!), "pay");
      expect(read, code).toMatchObject({ state: "failed", code });
      expect(read, code).not.toHaveProperty("merchantSide");
    }
    // The merchant's wallet, account or credentials, or the biller unreachable: not the payer's doing.
    for (const [code, text] of [["018", "LOW WALLET BALANCE"], ["022", "ACCOUNT SUSPENDED"], ["030", "BILLER NOT REACHABLE AT THIS POINT"], ["087", "INVALID CREDENTIALS"], ["091", "TRANSACTION NOT PROCESSED"]]) {
      expect(readTransactionAnswer(answer(code!, text!), "pay"), code).toMatchObject({ state: "failed", code, merchantSide: true });
    }
  });

  it("reads an international pay answer, both `amount` and `Amount`", async () => {
    serving("pay-foreign-airtime");
    expect(delivered(await client.requery("2025031016099807136")).charge.amountKobo).toBe(200n);
  });

  it("takes the request id from a webhook as a pointer, and what it says as what a requery must confirm: delivered, or reversed", async () => {
    const delivered = fixture("webhook-delivered").answer;
    expect(webhookRequestId(delivered)).toMatchObject({ type: "transaction-update", requestId: "ELAET1RA7PC06250-12S5962-2102P", says: { state: "delivered" } });
    expect(readTransactionAnswer(delivered.data, "requery")).toMatchObject({ state: "delivered" });
    const reversal = fixture("webhook-reversal").answer;
    expect(webhookRequestId(reversal)).toMatchObject({ type: "transaction-update", requestId: "ELAET1A7PC06250-12S592-2102P", says: { state: "failed", reversed: true } });
    expect(readTransactionAnswer(reversal.data, "requery")).toMatchObject({ state: "failed", reversed: true });
    // A body that says nothing final (no data, an unreadable one) claims nothing.
    expect(webhookRequestId({ type: "transaction-update" }).says).toMatchObject({ state: "pending" });
  });
});
