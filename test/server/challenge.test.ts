import { x402HTTPClient } from "@x402/core/http";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { buildFlow } from "../../server/services.ts";
import { openDb, type Db } from "../../server/db.ts";
import { readHttpRate } from "../../server/pricing/rates.ts";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { listen } from "../support/http-server.ts";
import { startTestChains } from "../support/stack.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";

const payer = hardhatAccount(8);
const bill = {
  serviceID: "mtn",
  serviceCategory: "AIRTIME",
  network: "MTN",
  billersCode: "08011111111",
  nairaAmount: 1550,
  token: "USDC",
  blockchain: "CELO",
  wallet_address: payer.address,
};

describe("x402 route: the 402 challenge", () => {
  let stack: Awaited<ReturnType<typeof startTestChains>>;
  let db: Db;
  let app: Hono;
  let rateServer: Awaited<ReturnType<typeof listen>>;
  let biller: Awaited<ReturnType<typeof listen>>;
  let rate = "1550";

  beforeAll(async () => {
    stack = await startTestChains();
    rateServer = await listen(new Hono().get("/rate", (c) => c.json({ ngnPerUsd: rate })).fetch);
    db = await openDb({ pgliteDir: undefined }); // in-memory PGlite
    const defaults = loadConfig({});
    // Bills are checked against the biller's catalogue before they are priced.
    biller = await listen(billerSandboxApp({ apiKey: defaults.BILLER_API_KEY, secretKey: defaults.BILLER_SECRET_KEY, publicKey: defaults.BILLER_PUBLIC_KEY }).fetch);
    const config = loadConfig({ PUBLIC_URL: "http://billpay.test", LOG_REQUESTS: "0", BILLER_BASE_URL: biller.url });
    app = createApp({
      config,
      db,
      deployments: stack.deployments,
      // The raw source, unguarded: this suite moves the rate further than any band allows (the band has its own test).
      rates: { ngnPerUsdMilli: () => readHttpRate(`${rateServer.url}/rate`, "ngnPerUsd", 1_000) },
      flow: buildFlow(config, stack.deployments, db),
    });
  });
  afterAll(async () => {
    await db?.close();
    await rateServer?.close();
    await biller?.close();
    await stack?.close();
  });

  const post = (body: unknown, headers: Record<string, string> = {}) =>
    app.request("/api/pay/x402", {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  const quoteCount = async () => Number((await db.query<{ n: number }>("SELECT count(*)::int AS n FROM quote"))[0]!.n);
  const celoToken = (symbol: string) => stack.deployments.chains.CELO!.tokens.find((t) => t.symbol === symbol)!;

  it("answers a bill without payment with a v1 body and a v2 header, at the bill's price", async () => {
    const res = await post(bill);
    expect(res.status).toBe(402);
    const body = (await res.json()) as { x402Version: number; error: string; accepts: Record<string, unknown>[] };
    const usdc = celoToken("USDC");
    // 1550 NGN at 1550 NGN/USD = 1 USD, no airtime fee, + 0.001 USD facilitator fee.
    expect(body).toEqual({
      x402Version: 1,
      error: expect.stringMatching(/payment required/i),
      accepts: [
        {
          scheme: "exact",
          network: "eip155:42220",
          asset: usdc.address,
          payTo: stack.deployments.chains.CELO!.billPay.address,
          maxTimeoutSeconds: 86400,
          maxAmountRequired: "1001000",
          resource: "http://billpay.test/api/pay/x402",
          mimeType: "application/json",
          description: "AIRTIME mtn for 08011111111: 1550 NGN",
          extra: { name: "USDC", version: "2", primaryType: "TransferWithAuthorization" },
        },
      ],
    });
    const v2 = decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!);
    expect(v2.x402Version).toBe(2);
    expect(v2.accepts).toEqual([
      expect.objectContaining({ scheme: "exact", network: "eip155:42220", amount: "1001000", asset: usdc.address }),
    ]);
  });

  it("is accepted by the official x402 client, which signs exactly the quoted amount to BillPay", async () => {
    const res = await post({ ...bill, billersCode: "08022222222" });
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    const required = client.getPaymentRequiredResponse((name) => res.headers.get(name), await res.json());
    const payload = await client.createPaymentPayload(required);
    const auth = (payload.payload as { authorization: Record<string, string> }).authorization;
    expect(auth).toMatchObject({ from: payer.address, to: stack.deployments.chains.CELO!.billPay.address, value: "1001000" });
  });

  it("honours the token spellings: USDT is USD₮, USA₮ settles on CELO, an unknown token falls back to USDC visibly", async () => {
    for (const [token, symbol] of [["USDT", "USD₮"], ["USD₮", "USD₮"], ["usa₮", "USA₮"], ["usdc", "USDC"]] as const) {
      const res = await post({ ...bill, token });
      expect(res.status, token).toBe(402);
      const { accepts } = (await res.json()) as { accepts: Array<{ asset: string; extra: { name: string } }> };
      expect(accepts[0]!.asset, token).toBe(celoToken(symbol).address);
      expect(accepts[0]!.extra.name, token).toBe(celoToken(symbol).name);
      expect(res.headers.get("X-Token-Fallback")).toBeNull();
    }
    const fallback = await post({ ...bill, token: "DAI" });
    expect(fallback.status).toBe(402);
    expect(((await fallback.json()) as { accepts: Array<{ asset: string }> }).accepts[0]!.asset).toBe(celoToken("USDC").address);
    expect(fallback.headers.get("X-Token-Fallback")).toMatch(/"DAI" is not recognised.*USDC/);
  });

  it("settles on BASE in USDC only, and refuses unknown chains", async () => {
    const base = await post({ ...bill, blockchain: "base" });
    expect(base.status).toBe(402);
    expect(((await base.json()) as { accepts: Array<{ network: string }> }).accepts[0]!.network).toBe("eip155:8453");
    for (const [change, code] of [
      [{ blockchain: "BASE", token: "USDT" }, "TOKEN_NOT_SETTLEABLE"],
      [{ blockchain: "BASE", token: "USA₮" }, "TOKEN_NOT_SETTLEABLE"],
      [{ blockchain: "SOLANA" }, "UNSUPPORTED_CHAIN"],
    ] as const) {
      const res = await post({ ...bill, ...change });
      expect(res.status).toBe(422);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(((await res.json()) as { code: string }).code).toBe(code);
    }
  });

  it("locks the quote for the same bill while the rate moves; another bill gets today's rate", async () => {
    const first = (await (await post({ ...bill, billersCode: "08033333333" })).json()) as { accepts: Array<{ maxAmountRequired: string }> };
    rate = "775"; // the naira doubles in value
    try {
      const again = (await (await post({ ...bill, billersCode: "08033333333" })).json()) as typeof first;
      expect(again.accepts[0]!.maxAmountRequired).toBe(first.accepts[0]!.maxAmountRequired);
      const other = (await (await post({ ...bill, billersCode: "08044444444" })).json()) as typeof first;
      expect(other.accepts[0]!.maxAmountRequired).toBe("2001000");
    } finally {
      rate = "1550";
    }
  });

  it("quotes a bill before payment: the 402's amount, its breakdown and expiry; bad bills refused the same way", async () => {
    const quoteOf = (body: unknown) =>
      app.request("/api/quote", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const electricity = {
      ...bill,
      serviceID: "ikeja-electric",
      serviceCategory: "ELECTRICITY",
      network: "IKEJA",
      billersCode: "1111111111111",
      variation_code: "prepaid",
      nairaAmount: 3100.5,
    };
    const res = await quoteOf(electricity);
    expect(res.status).toBe(200);
    const { quotes } = (await res.json()) as { quotes: Array<Record<string, any>> };
    expect(quotes).toHaveLength(1);
    expect(quotes[0]).toMatchObject({
      chain: "CELO",
      token: "USDC",
      amount: { units: "2101323", formatted: "2.101323" },
      breakdown: {
        bill_naira: 3100.5,
        bill_usd: "2.000323",
        ngn_per_usd: "1550",
        service_fee_usd: "0.1",
        facilitator_fee_usd: "0.001",
        minimum_applied: false,
      },
    });
    expect(Date.parse(quotes[0]!.expires_at)).toBeGreaterThan(Date.now() + 86_000_000);
    // The 402 for the same bill asks exactly the quoted amount (one locked quote).
    const challenged = (await (await post(electricity)).json()) as { accepts: Array<{ maxAmountRequired: string }> };
    expect(challenged.accepts[0]!.maxAmountRequired).toBe("2101323");
    const small = (await (await quoteOf({ ...bill, nairaAmount: 50, billersCode: "08077777777" })).json()) as { quotes: Array<Record<string, any>> };
    expect(small.quotes[0]).toMatchObject({ amount: { units: "50000" }, breakdown: { minimum_applied: true } });
    // Refused as the pay route refuses them.
    expect((await quoteOf({ ...bill, nairaAmount: -1 })).status).toBe(400);
    expect(((await (await quoteOf({ ...bill, serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-data-1000", nairaAmount: 50 })).json()) as { code: string }).code).toBe(
      "PLAN_AMOUNT_MISMATCH",
    );
    expect((await app.request("/api/quote", { method: "POST", headers: { "content-type": "text/plain" }, body: "x" })).status).toBe(415);
  });

  it("charges at least 0.05 and adds the category's fee", async () => {
    const small = (await (await post({ ...bill, nairaAmount: 50, billersCode: "08055555555" })).json()) as {
      accepts: Array<{ maxAmountRequired: string }>;
    };
    expect(small.accepts[0]!.maxAmountRequired).toBe("50000");
    const electricity = (await (await post({
      ...bill,
      serviceID: "ikeja-electric",
      serviceCategory: "ELECTRICITY",
      network: "IKEJA",
      billersCode: "1111111111111",
      variation_code: "prepaid",
      nairaAmount: 3100.5,
    })).json()) as { accepts: Array<{ maxAmountRequired: string }> };
    // 3100.50 / 1550 = 2.000322.. USD, rounded up; + 0.10 fee + 0.001.
    expect(electricity.accepts[0]!.maxAmountRequired).toBe("2101323");
  });

  it("answers the probing GET, the empty POST, {} and a partial bill with every option at the minimum price", async () => {
    const before = await quoteCount();
    const probes = [
      await app.request("/api/pay/x402"),
      await app.request("/api/pay/x402", { method: "POST" }),
      await post({}),
      await post({ serviceID: "mtn", nairaAmount: 100 }),
      await post({ ...bill, serviceID: undefined }),
    ];
    expect(await quoteCount()).toBe(before); // a probe locks no quote
    for (const res of probes) {
      expect(res.status).toBe(402);
      const { accepts } = (await res.json()) as { accepts: Array<{ network: string; asset: string; maxAmountRequired: string }> };
      expect(accepts.map((a) => a.network)).toEqual(["eip155:42220", "eip155:42220", "eip155:42220", "eip155:8453"]);
      expect(new Set(accepts.map((a) => a.maxAmountRequired))).toEqual(new Set(["50000"]));
      expect(decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!).accepts).toHaveLength(4);
    }
  });

  it("refuses bad input with a clear problem and stores nothing", async () => {
    const before = await quoteCount();
    const cases: Array<[string | Record<string, unknown>, Record<string, string>, number, string, RegExp?]> = [
      ["{not json", {}, 400, "INVALID_JSON"],
      [JSON.stringify(bill), { "content-type": "text/plain" }, 415, "UNSUPPORTED_MEDIA_TYPE"],
      [{ ...bill, nairaAmount: -5 }, {}, 400, "VALIDATION_FAILED", /nairaAmount/],
      [{ ...bill, nairaAmount: 1e12 }, {}, 400, "VALIDATION_FAILED", /nairaAmount: must be at most/],
      [{ ...bill, nairaAmount: 10.001 }, {}, 400, "VALIDATION_FAILED", /2 decimals/],
      [{ ...bill, nairaAmount: 10.000000001 }, {}, 400, "VALIDATION_FAILED", /2 decimals/],
      [{ ...bill, nairaAmount: "100" }, {}, 400, "VALIDATION_FAILED", /nairaAmount/],
      [{ ...bill, serviceCategory: "GROCERIES" }, {}, 400, "VALIDATION_FAILED", /serviceCategory/],
      [{ ...bill, wallet_address: "0x123" }, {}, 400, "VALIDATION_FAILED", /wallet_address/],
      [{ ...bill, serviceID: "MTN Airtime" }, {}, 400, "VALIDATION_FAILED", /slug/],
      [[1, 2, 3] as unknown as Record<string, unknown>, {}, 400, "VALIDATION_FAILED"],
      [{ ...bill, billersCode: "x".repeat(20_000) }, {}, 413, "BODY_TOO_LARGE"],
    ];
    for (const [body, headers, status, code, detail] of cases) {
      const res = await post(body, headers);
      expect(res.status, code).toBe(status);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      const problem = (await res.json()) as { code: string; detail: string; status: number };
      expect(problem).toMatchObject({ code, status });
      if (detail) expect(problem.detail).toMatch(detail);
    }
    expect(await quoteCount()).toBe(before);
  });

  it("answers a payment that does not fit the bill with 402 and the reason, taking nothing", async () => {
    const challenged = await post({ ...bill, billersCode: "08066666666" });
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    const required = client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json());
    const paymentHeaders = client.encodePaymentSignatureHeader(await client.createPaymentPayload(required));

    // The same payment offered for a bill of another price.
    const dearer = await post({ ...bill, billersCode: "08066666666", nairaAmount: 3100 }, paymentHeaders);
    expect(dearer.status).toBe(402);
    expect(((await dearer.json()) as { code: string }).code).toBe("AMOUNT_MISMATCH");

    const otherPayer = await post({ ...bill, billersCode: "08066666666", wallet_address: hardhatAccount(10).address }, paymentHeaders);
    expect(otherPayer.status).toBe(402);
    expect(((await otherPayer.json()) as { code: string }).code).toBe("PAYER_MISMATCH");

    const garbage = await post(bill, { "X-PAYMENT": "not-a-payment" });
    expect(garbage.status).toBe(402);
    expect(((await garbage.json()) as { code: string; accepts: unknown[] })).toMatchObject({ code: "INVALID_PAYMENT_HEADER" });
    expect(Number((await db.query<{ n: number }>("SELECT count(*)::int AS n FROM bill_order"))[0]!.n)).toBe(0);
  });

  it("is open to browsers: CORS with the x402 headers exposed", async () => {
    const res = await app.request("/api/pay/x402", {
      method: "OPTIONS",
      headers: { origin: "https://agent.example", "access-control-request-method": "POST", "access-control-request-headers": "x-payment" },
    });
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-allow-headers")).toMatch(/X-PAYMENT/i);
    const probe = await app.request("/api/pay/x402", { headers: { origin: "https://agent.example" } });
    expect(probe.headers.get("access-control-expose-headers")).toMatch(/PAYMENT-REQUIRED/);
  });

  it("serves health, readiness and an OpenAPI 3.1 document built from the schemas", async () => {
    expect((await app.request("/healthz")).status).toBe(200);
    expect((await app.request("/readyz")).status).toBe(200);
    const doc = (await (await app.request("/openapi.json")).json()) as Record<string, any>;
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info.version).toBe("1.0.0");
    const body = doc.paths["/api/pay/x402"].post.requestBody.content["application/json"].schema as { $ref: string };
    expect(body.$ref).toBe("#/components/schemas/PaymentRequest");
    const schema = doc.components.schemas.PaymentRequest;
    expect(schema.required).toEqual(
      expect.arrayContaining(["serviceID", "serviceCategory", "network", "billersCode", "nairaAmount", "token", "blockchain", "wallet_address"]),
    );
    const missing = await app.request("/nope");
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { code: string }).code).toBe("NOT_FOUND");
  });
});

describe("configuration", () => {
  it("names every bad variable at start-up", () => {
    expect(() => loadConfig({ NGN_PER_USD: "abc", PORT: "70000", SERVICE_FEES_USD: "FOOD=1" })).toThrow(
      /NGN_PER_USD[\s\S]*PORT|PORT[\s\S]*NGN_PER_USD/,
    );
    expect(() => loadConfig({ SERVICE_FEES_USD: "FOOD=1" })).toThrow(/FOOD=1/);
    const config = loadConfig({ SERVICE_FEES_USD: "bank=0.5" });
    expect(config.SERVICE_FEES_USD.BANK).toBe(500_000n);
    expect(config.SERVICE_FEES_USD.AIRTIME).toBe(0n);
    expect(config.NGN_PER_USD).toBe(1_550_000n);
  });
});
