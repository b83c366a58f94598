/**
 * The catalogue against the biller sandbox: every category's bill resolved from the
 * interface's eight fields (no variation_code) into what the biller's pay will be sent, or
 * refused with the options when the choice is truly ambiguous or impossible; and
 * international bills priced as the biller charges them, in the destination's currency.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { Catalogue, type BillToCheck } from "../../server/biller/catalogue/catalogue.ts";
import { koboFor } from "../../server/biller/catalogue/international.ts";
import { completePlan } from "../../server/biller/catalogue/vend-plan.ts";
import { VtpassClient } from "../../server/biller/vtpass/client.ts";
import { ServiceError } from "../../server/errors.ts";
import { paymentRequestSchema, type PaymentRequest } from "../../server/schemas.ts";
import { listen } from "../support/http-server.ts";

const keys = { apiKey: "k", secretKey: "s", publicKey: "p" };

/** A bill in the interface's eight fields (less the three that name the payment). */
const eight = (serviceCategory: BillToCheck["serviceCategory"], serviceID: string, network: string, billersCode: string, nairaAmount: number): BillToCheck => ({
  serviceCategory,
  serviceID,
  network,
  billersCode,
  nairaAmount,
});

/** A Ghana top-up of 20 GHS at the sandbox's 105.50 NGN per GHS: 2,110 NGN. */
const ghanaTopUp = (extra: Record<string, unknown> = {}) =>
  ({
    serviceID: "foreign-airtime",
    serviceCategory: "AIRTIME",
    network: "GHANA MTN",
    billersCode: "233241234567",
    nairaAmount: 2110,
    foreignAmount: 20,
    country_code: "GH",
    product_type_id: "1",
    operator_id: "5",
    variation_code: "5-topup",
    ...extra,
  }) as PaymentRequest;

describe("the catalogue", () => {
  let sandbox: Awaited<ReturnType<typeof listen>>;
  let biller: VtpassClient;
  let catalogue: Catalogue;

  beforeAll(async () => {
    sandbox = await listen(billerSandboxApp({ ...keys }).fetch);
    biller = new VtpassClient({ baseUrl: sandbox.url, ...keys, timeoutMs: 2_000 });
    catalogue = new Catalogue(biller, 60_000);
  });
  afterAll(() => sandbox?.close());

  async function refusal(bill: BillToCheck): Promise<ServiceError> {
    try {
      await catalogue.check(bill);
    } catch (err) {
      if (err instanceof ServiceError) return err;
      throw err;
    }
    throw new Error(`the bill was accepted: ${JSON.stringify(bill)}`);
  }

  it("resolves a bill in the interface's eight fields for every category", async () => {
    const cases: Array<[BillToCheck, Record<string, unknown>]> = [
      [eight("AIRTIME", "mtn", "MTN", "08011111111", 500), { amount: "500", phone: "08011111111", verify: null }],
      [eight("DATA", "mtn-data", "MTN", "08011111111", 1000), { variationCode: "mtn-100mb-1000", chargeKobo: "100000" }],
      [eight("ELECTRICITY", "ikeja-electric", "IKEJA-ELECTRIC", SANDBOX_NUMBERS.postpaidMeter, 3000), { meterTypeFromVerify: true, verify: { type: "prepaid" }, amount: "3000" }],
      [eight("CABLE", "dstv", "DSTV", SANDBOX_NUMBERS.smartcard, 2565), { subscription: "either", variationCode: "dstv-yanga", verify: {} }],
      [eight("CABLE", "dstv", "DSTV", SANDBOX_NUMBERS.smartcard, 2500), { subscription: "renew", verify: {} }],
      [eight("CABLE", "startimes", "STARTIMES", SANDBOX_NUMBERS.smartcard, 1700), { variationCode: "basic" }],
      [eight("CABLE", "showmax", "SHOWMAX", "08011111111", 2900), { variationCode: "full", verify: null, phone: "08011111111" }],
      [eight("BANK", "bank-deposit", "GTBANK", SANDBOX_NUMBERS.bankAccount, 25_000), { variationCode: "gtb", verify: { type: "gtb" } }],
      [eight("BANK", "bank-deposit", "ZENITH BANK PLC", SANDBOX_NUMBERS.bankAccount, 25_000), { variationCode: "zenith" }],
      [eight("EDUCATION", "waec", "WAEC", "08011111111", 900), { variationCode: "waecdirect", verify: null }],
      [eight("EDUCATION", "jamb", "JAMB", SANDBOX_NUMBERS.jambProfile, 6200), { variationCode: "utme-no-mock", verify: { type: "utme-no-mock" } }],
    ];
    for (const [bill, plan] of cases) expect((await catalogue.check(bill)).vend, `${bill.serviceID} ${bill.nairaAmount}`).toMatchObject(plan);
  });

  it("refuses only what is ambiguous or impossible, listing the options", async () => {
    const ambiguous = await refusal(eight("CABLE", "dstv", "DSTV", SANDBOX_NUMBERS.smartcard, 12_400));
    expect(ambiguous).toMatchObject({ code: "PLAN_AMBIGUOUS", extra: { options: [{ variation_code: "dstv7", nairaAmount: 12400 }, { variation_code: "dstv80", nairaAmount: 12400 }] } });
    const noPlan = await refusal(eight("DATA", "mtn-data", "MTN", "08011111111", 1234));
    expect(noPlan.code).toBe("PLAN_REQUIRED");
    expect((noPlan.extra.options as Array<{ variation_code: string }>).map((o) => o.variation_code)).toContain("mtn-100mb-1000");
    expect((await refusal(eight("BANK", "bank-deposit", "BANK", SANDBOX_NUMBERS.bankAccount, 25_000))).code).toBe("PLAN_REQUIRED");
    expect((await refusal({ ...eight("CABLE", "dstv", "DSTV", SANDBOX_NUMBERS.smartcard, 2565), subscription_type: "renew", variation_code: "dstv-yanga" })).code).toBe("SUBSCRIPTION_TYPE_INVALID");
    expect((await refusal({ ...eight("DATA", "mtn-data", "MTN", "08011111111", 1000), subscription_type: "renew" })).code).toBe("SUBSCRIPTION_TYPE_INVALID");
    expect((await refusal({ ...eight("DATA", "mtn-data", "MTN", "08011111111", 50), variation_code: "mtn-100mb-1000" })).extra).toMatchObject({ plan_amount: 1000 });
    expect((await refusal({ ...eight("ELECTRICITY", "ikeja-electric", "IKEJA", SANDBOX_NUMBERS.prepaidMeter, 3000), variation_code: "smart" })).code).toBe("PLAN_UNKNOWN");
    // An international bill cannot be told in eight fields: refused with the countries to start from.
    const intl = await refusal(eight("AIRTIME", "foreign-airtime", "MTN", "233241234567", 2110));
    expect(intl).toMatchObject({ code: "INTERNATIONAL_FIELDS_INVALID", extra: { options: expect.arrayContaining([expect.objectContaining({ country_code: "GH" })]) } });
  });

  it("names a cable subscription explicitly, and decides an unnamed one from the smartcard's renewal amount", async () => {
    const dstv = (nairaAmount: number, extra: Partial<BillToCheck> = {}) => catalogue.check({ ...eight("CABLE", "dstv", "DSTV", SANDBOX_NUMBERS.smartcard, nairaAmount), ...extra });
    expect((await dstv(2565, { subscription_type: "change" })).vend).toMatchObject({ subscription: "change", variationCode: "dstv-yanga" });
    expect((await dstv(1850, { subscription_type: "renew" })).vend).toMatchObject({ subscription: "renew" });
    expect((await dstv(4615, { variation_code: "dstv-confam" })).vend).toMatchObject({ subscription: "change", variationCode: "dstv-confam" });
    const defaults = { phone: "08011111111", email: "a@b.c" };
    const verified = (renewal: bigint | null) => ({ ok: true as const, customerName: "x", meterType: null, renewalKobo: renewal, currentBouquet: "dstv-padi" });
    // Priced at one bouquet: renew when the smartcard's renewal costs that, else change to the bouquet.
    const either = (await dstv(1850)).vend;
    expect(completePlan(either, verified(185_000n), defaults)).toMatchObject({ pay: { subscriptionType: "renew", amount: 1850 } });
    expect((completePlan(either, verified(185_000n), defaults) as { pay: Record<string, unknown> }).pay.variationCode).toBeUndefined();
    expect(completePlan(either, verified(200_000n), defaults)).toMatchObject({ pay: { subscriptionType: "change", variationCode: "dstv-padi" } });
    // A renewal at another amount than the smartcard's is refused after the check (and refunded).
    const renew = (await dstv(2500, { subscription_type: "renew" })).vend;
    expect(completePlan(renew, verified(185_000n), defaults)).toEqual({ refuse: expect.stringContaining("costs 1850 NGN") });
    // A check naming no renewal amount renews at the bill's, flagged for operators.
    expect(completePlan(renew, verified(null), defaults)).toMatchObject({ pay: { subscriptionType: "renew", amount: 2500 }, flag: expect.stringContaining("no renewal amount") });
    // A meter's type comes from the check, prepaid when it names none.
    const meter = (await catalogue.check(eight("ELECTRICITY", "ikeja-electric", "IKEJA", SANDBOX_NUMBERS.postpaidMeter, 3000))).vend;
    expect(completePlan(meter, { ...verified(null), meterType: "postpaid" }, defaults)).toMatchObject({ pay: { variationCode: "postpaid" } });
    expect(completePlan(meter, { ...verified(null), meterType: null }, defaults)).toMatchObject({ pay: { variationCode: "prepaid" } });
  });

  it("answers list_plans from its cache: an unknown product costs the biller nothing, a known one one read", async () => {
    const counting = Object.create(biller) as VtpassClient;
    let variationReads = 0;
    counting.variations = (id: string) => (variationReads++, biller.variations(id));
    const cached = new Catalogue(counting, 60_000);
    for (let i = 0; i < 20; i++) await expect(cached.plans(`no-such-${i}`)).rejects.toMatchObject({ code: "SERVICE_UNKNOWN" });
    expect(variationReads).toBe(0);
    for (let i = 0; i < 5; i++) expect((await cached.plans("mtn-data")).plans.length).toBeGreaterThan(0);
    expect(variationReads).toBe(1);
  });

  it("forgets the plans a bill was priced from: an international one's operator and product type, a domestic one's product", async () => {
    const counting = Object.create(biller) as VtpassClient;
    const reads = { domestic: 0, international: 0 };
    counting.variations = (id: string) => (reads.domestic++, biller.variations(id));
    counting.internationalVariations = (operator: string, type: string) => (reads.international++, biller.internationalVariations(operator, type));
    const cached = new Catalogue(counting, 60_000);
    const abroad = (await cached.check(ghanaTopUp())).vend;
    await cached.check(ghanaTopUp());
    expect(reads.international).toBe(1);
    cached.forgetPlansOf(abroad);
    await cached.check(ghanaTopUp());
    expect(reads.international).toBe(2);
    const home = (await cached.check(eight("DATA", "mtn-data", "MTN", "08011111111", 100))).vend;
    expect(reads.domestic).toBe(1);
    cached.forgetPlansOf(home);
    await cached.check(eight("DATA", "mtn-data", "MTN", "08011111111", 100));
    expect(reads.domestic).toBe(2);
  });

  it("converts to the kobo, rounding half up, without floats", () => {
    expect(koboFor(20, "105.50")).toBe(211_000n);
    expect(koboFor(0.01, "105.5")).toBe(106n); // 1.055 NGN -> 1.06
    expect(koboFor(0.01, "11.8")).toBe(12n); // 0.118 NGN -> 0.12
    expect(koboFor(1.005, "1")).toBeUndefined();
  });

  it("leads step by step to an international bill sent in the destination's currency", async () => {
    expect(await catalogue.international.options({})).toMatchObject({ countries: expect.arrayContaining([expect.objectContaining({ code: "CM", currency: "XAF" })]) });
    expect(await catalogue.international.options({ country_code: "GH" })).toMatchObject({ product_types: [{ product_type_id: "1" }, { product_type_id: "4" }] });
    const plans = await catalogue.international.options({ country_code: "GH", product_type_id: "1", operator_id: "5" });
    expect(plans).toMatchObject({ plans: [{ variation_code: "5-topup", fixed_price: false, ngn_per_unit: "105.50", min_foreign_amount: 1, max_foreign_amount: 500 }] });
    const topUp = await catalogue.international.options({ country_code: "GH", product_type_id: "1", operator_id: "5", foreignAmount: 20 });
    const bill = (topUp as { bill: Record<string, unknown> }).bill;
    expect(bill).toMatchObject({ serviceID: "foreign-airtime", nairaAmount: 2110, foreignAmount: 20, country_code: "GH", operator_id: "5", product_type_id: "1", variation_code: "5-topup" });
    const parsed = paymentRequestSchema.parse({ ...bill, billersCode: "233241234567", token: "USDC", blockchain: "CELO", wallet_address: `0x${"1".repeat(40)}` });
    // The pay sends 20 (GHS), never the 2,110 NGN.
    expect((await catalogue.check(parsed)).vend).toMatchObject({ amount: "20", chargeKobo: "211000", international: { country_code: "GH", operator_id: "5", product_type_id: "1" } });

    // A fixed bundle is priced at its charged_amount (its variation_amount is 0.00), with its local price.
    const bundle = await catalogue.international.options({ country_code: "GH", product_type_id: "4", operator_id: "5", variation_code: "13062" });
    expect((bundle as { bill: Record<string, unknown> }).bill).toMatchObject({ nairaAmount: 4220, foreignAmount: 40, variation_code: "13062" });
    expect((await catalogue.check(ghanaTopUp({ product_type_id: "4", variation_code: "13062", nairaAmount: 4220, foreignAmount: undefined }))).vend).toMatchObject({ amount: "40", chargeKobo: "422000" });
  });

  it("refuses an international bill that could not vend at its stated price, naming the figure that would pass", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ foreignAmount: undefined }, "INTERNATIONAL_FIELDS_INVALID"],
      [{ operator_id: undefined, country_code: undefined }, "INTERNATIONAL_FIELDS_INVALID"],
      [{ country_code: "ZZ" }, "INTERNATIONAL_OPTION_UNKNOWN"],
      [{ product_type_id: "7" }, "INTERNATIONAL_OPTION_UNKNOWN"],
      [{ operator_id: "21" }, "INTERNATIONAL_OPTION_UNKNOWN"], // Orange is Cameroonian, not Ghanaian
      [{ variation_code: undefined }, "PLAN_REQUIRED"],
      [{ variation_code: "21-topup" }, "PLAN_UNKNOWN"],
      [{ nairaAmount: 2000 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ foreignAmount: 21 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ product_type_id: "4", variation_code: "13056", foreignAmount: undefined, nairaAmount: 1000 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ product_type_id: "4", variation_code: "13056", foreignAmount: 11, nairaAmount: 1055 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ foreignAmount: 0.5, nairaAmount: 52.75 }, "AMOUNT_OUT_OF_RANGE"],
      [{ foreignAmount: 600, nairaAmount: 63_300 }, "AMOUNT_OUT_OF_RANGE"],
      [{ serviceCategory: "DATA" }, "SERVICE_UNKNOWN"],
    ];
    for (const [change, code] of cases) {
      const err = await refusal(ghanaTopUp(change));
      expect(err.code, JSON.stringify(change)).toBe(code);
    }
    expect((await refusal(ghanaTopUp({ nairaAmount: 2000 }))).extra).toMatchObject({ naira_amount: 2110, currency: "GHS" });
    const domestic = eight("AIRTIME", "mtn", "MTN", "08011111111", 500);
    expect((await refusal({ ...domestic, country_code: "GH" })).code).toBe("INTERNATIONAL_FIELDS_INVALID");
    expect((await refusal({ ...domestic, foreignAmount: 5 })).code).toBe("INTERNATIONAL_FIELDS_INVALID");
    expect((await refusal({ ...ghanaTopUp(), subscription_type: "renew" })).code).toBe("SUBSCRIPTION_TYPE_INVALID");
  });
});
