/**
 * International bills against the biller sandbox's international API: the client's reads,
 * the guided options down to a payable bill, and every refusal of a bill that could not vend
 * at the price it states.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { Catalogue } from "../../server/biller/catalogue.ts";
import { koboFor } from "../../server/biller/international.ts";
import { newBillerRequestId, VtpassClient } from "../../server/biller/vtpass.ts";
import { ServiceError } from "../../server/errors.ts";
import type { PaymentRequest } from "../../server/schemas.ts";
import { paymentRequestSchema } from "../../server/schemas.ts";
import { listen } from "../support/http-server.ts";

const keys = { apiKey: "k", secretKey: "s", publicKey: "p" };

/** A Ghana top-up of 20 GHS at the sandbox's 105.50 NGN per GHS: 2,110 NGN. */
const ghanaTopUp = (extra: Record<string, unknown> = {}) =>
  ({
    serviceID: "foreign-airtime",
    serviceCategory: "AIRTIME",
    network: "MTN GHANA",
    billersCode: "233241234567",
    nairaAmount: 2110,
    foreignAmount: 20,
    country_code: "GH",
    product_type_id: "1",
    operator_id: "1",
    variation_code: "1-topup",
    ...extra,
  }) as PaymentRequest;

describe("international bills", () => {
  let sandbox: Awaited<ReturnType<typeof listen>>;
  let biller: VtpassClient;
  let catalogue: Catalogue;

  beforeAll(async () => {
    sandbox = await listen(billerSandboxApp({ ...keys }).fetch);
    biller = new VtpassClient({ baseUrl: sandbox.url, ...keys, timeoutMs: 2_000 });
    catalogue = new Catalogue(biller, 60_000);
  });
  afterAll(() => sandbox?.close());

  async function refusal(bill: PaymentRequest): Promise<ServiceError> {
    try {
      await catalogue.check(bill);
    } catch (err) {
      if (err instanceof ServiceError) return err;
      throw err;
    }
    throw new Error(`the bill was accepted: ${JSON.stringify(bill)}`);
  }

  it("reads the biller's international API: countries, product types, operators, plans with their rate", async () => {
    expect((await biller.internationalCountries()).map((c) => c.code)).toEqual(["GH", "KE", "US"]);
    expect(await biller.internationalProductTypes("GH")).toEqual([
      { product_type_id: "1", name: "Mobile Top Up" },
      { product_type_id: "4", name: "Mobile Data" },
    ]);
    expect(await biller.internationalOperators("GH", "1")).toEqual([
      { operator_id: "1", name: "MTN Ghana" },
      { operator_id: "2", name: "AirtelTigo Ghana" },
    ]);
    expect(await biller.internationalVariations("1", "4")).toContainEqual(
      expect.objectContaining({ variation_code: "1-1gb30days", fixedPrice: "Yes", variation_amount: "1055.00", variation_rate: "105.50" }),
    );
    await expect(biller.internationalProductTypes("ZZ")).rejects.toThrow(/no product types/);
  });

  it("converts to the kobo, rounding half up, without floats", () => {
    expect(koboFor(20, "105.50")).toBe(211_000n);
    expect(koboFor(0.01, "105.5")).toBe(106n); // 1.055 NGN -> 1.06
    expect(koboFor(0.01, "11.8")).toBe(12n); // 0.118 NGN -> 0.12
    expect(koboFor(1.005, "1")).toBeUndefined();
  });

  it("leads step by step to a bill the catalogue accepts", async () => {
    const countries = await catalogue.international.options({});
    expect(countries).toMatchObject({ countries: expect.arrayContaining([expect.objectContaining({ code: "KE", currency: "KES" })]) });
    expect(await catalogue.international.options({ country_code: "GH" })).toMatchObject({ product_types: [{ product_type_id: "1" }, { product_type_id: "4" }] });
    expect(await catalogue.international.options({ country_code: "GH", product_type_id: "1" })).toMatchObject({ operators: [{ operator_id: "1" }, { operator_id: "2" }] });
    const plans = await catalogue.international.options({ country_code: "GH", product_type_id: "1", operator_id: "1" });
    expect(plans).toMatchObject({ plans: [{ variation_code: "1-topup", fixed_price: false, ngn_per_unit: "105.50" }], next: expect.stringContaining("foreignAmount") });
    const topUp = await catalogue.international.options({ country_code: "GH", product_type_id: "1", operator_id: "1", foreignAmount: 20 });
    const bill = (topUp as { bill: Record<string, unknown> }).bill;
    expect(bill).toMatchObject({ serviceID: "foreign-airtime", nairaAmount: 2110, foreignAmount: 20, country_code: "GH", operator_id: "1", product_type_id: "1", variation_code: "1-topup" });
    // The template, with its number filled in, is a bill the route's schema and the catalogue accept.
    const parsed = paymentRequestSchema.parse({ ...bill, billersCode: "233241234567", token: "USDC", blockchain: "CELO", wallet_address: `0x${"1".repeat(40)}` });
    expect((await catalogue.check(parsed)).plan).toMatchObject({ variation_code: "1-topup" });

    // A fixed-price bundle needs no foreignAmount: the plan has both figures.
    const bundle = await catalogue.international.options({ country_code: "GH", product_type_id: "4", operator_id: "1", variation_code: "1-5gb30days" });
    expect((bundle as { bill: Record<string, unknown> }).bill).toMatchObject({ nairaAmount: 4220, foreignAmount: 40, variation_code: "1-5gb30days" });
    await expect(catalogue.international.options({ country_code: "ZZ" })).rejects.toMatchObject({ code: "INTERNATIONAL_OPTION_UNKNOWN" });
  });

  it("refuses an international bill that could not vend at its stated price, naming the figure that would pass", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ foreignAmount: undefined }, "INTERNATIONAL_FIELDS_INVALID"],
      [{ operator_id: undefined, country_code: undefined }, "INTERNATIONAL_FIELDS_INVALID"],
      [{ country_code: "ZZ" }, "INTERNATIONAL_OPTION_UNKNOWN"],
      [{ product_type_id: "7" }, "INTERNATIONAL_OPTION_UNKNOWN"],
      [{ operator_id: "5" }, "INTERNATIONAL_OPTION_UNKNOWN"], // Safaricom is Kenyan, not Ghanaian
      [{ variation_code: undefined }, "PLAN_REQUIRED"],
      [{ variation_code: "5-topup" }, "PLAN_UNKNOWN"],
      [{ nairaAmount: 2000 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ foreignAmount: 21 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ product_type_id: "4", variation_code: "1-1gb30days", foreignAmount: 10, nairaAmount: 1000 }, "PLAN_AMOUNT_MISMATCH"],
      [{ product_type_id: "4", variation_code: "1-1gb30days", foreignAmount: 11, nairaAmount: 1055 }, "FOREIGN_AMOUNT_MISMATCH"],
      [{ foreignAmount: 0.5, nairaAmount: 52.75 }, "AMOUNT_OUT_OF_RANGE"],
      [{ serviceCategory: "DATA" }, "SERVICE_UNKNOWN"],
    ];
    for (const [change, code] of cases) {
      const err = await refusal(ghanaTopUp(change));
      expect(err.code, JSON.stringify(change)).toBe(code);
    }
    expect((await refusal(ghanaTopUp({ nairaAmount: 2000 }))).extra).toMatchObject({ naira_amount: 2110, currency: "GHS" });
    // A domestic bill may not carry international fields.
    const domestic = { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 500 } as PaymentRequest;
    expect((await refusal({ ...domestic, country_code: "GH" })).code).toBe("INTERNATIONAL_FIELDS_INVALID");
    expect((await catalogue.check(domestic)).plan).toBeNull();
  });

  it("pays the biller with the international fields; the sandbox refuses an operator outside the country", async () => {
    const pay = (extra: Record<string, unknown>) =>
      biller.pay({
        requestId: newBillerRequestId(),
        serviceID: "foreign-airtime",
        billersCode: "233241234567",
        variationCode: "1-topup",
        amount: 2110,
        phone: "08011111111",
        international: { country_code: "GH", operator_id: "1", product_type_id: "1", email: "bills@billpay.local", ...extra },
      });
    expect(await pay({})).toMatchObject({ state: "delivered", amount: "2110" });
    expect(await pay({ operator_id: "5" })).toMatchObject({ state: "failed", code: "011" });
    expect(await pay({ email: "nobody" })).toMatchObject({ state: "failed", code: "011" });
  });
});
