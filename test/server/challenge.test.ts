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
import { leaseSharedChains, type SharedChains } from "../support/stack.ts";
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
  let stack: SharedChains;
  let db: Db;
  let app: Hono;
  let rateServer: Awaited<ReturnType<typeof listen>>;
  let biller: Awaited<ReturnType<typeof listen>>;
  let rate = "1550";

  beforeAll(async () => {
    stack = await leaseSharedChains();
    rateServer = await listen(new Hono().get("/rate", (c) => c.json({ ngnPerUsd: rate })).fetch);
    db = await openDb({ pgliteDir: undefined }); // in-memory PGlite
    const defaults = loadConfig({});
    // Bills are checked against the biller's catalogue before they are priced.
    biller = await listen(billerSandboxApp({ apiKey: defaults.BILLER_API_KEY, secretKey: defaults.BILLER_SECRET_KEY, publicKey: defaults.BILLER_PUBLIC_KEY }).fetch);
    // No ledger runs beside this suite: its URL is a port nothing listens on (readiness says so).
    const config = loadConfig({ PUBLIC_URL: "http://billpay.test", LOG_REQUESTS: "0", BILLER_BASE_URL: biller.url, LEDGER_URL: "http://127.0.0.1:9" });
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
  /** Rows in every table of the service's database: a 402 must change none of them. */
  const rowCounts = async () => {
    const tables = await db.query<{ name: string }>(`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`);
    const out: Record<string, number> = {};
    for (const { name } of tables) out[name] = (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${name}"`))[0]!.n;
    return out;
  };
  const versionCount = async () => (await rowCounts()).rate_version!;
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
      terms: expect.objectContaining({ vend_deadline_seconds: expect.any(Number) }), // x402/terms.ts; asserted in discovery.test.ts
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
          description: "Bill payment", // nothing of the bill goes to the facilitator
          extra: {
            name: "USDC",
            version: "2",
            primaryType: "TransferWithAuthorization",
            rateVersion: expect.stringMatching(/^\d+$/),
            // The signed offer of this price for this bill: its version, expiry (a day on) and MAC.
            offer: expect.stringMatching(/^\d+\.\d+\.[A-Za-z0-9_-]{43}$/),
          },
        },
      ],
    });
    const v2 = decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!);
    expect(v2.x402Version).toBe(2);
    expect(v2.accepts).toEqual([
      expect.objectContaining({ scheme: "exact", network: "eip155:42220", amount: "1001000", asset: usdc.address }),
    ]);
    // Each form names the header its protocol version retries in: v1 X-PAYMENT, v2 PAYMENT-SIGNATURE.
    expect(body.error).toMatch(/retry with it in X-PAYMENT$/);
    expect(v2.error).toMatch(/retry with it in PAYMENT-SIGNATURE$/);
    expect(v2.error).not.toContain("X-PAYMENT");
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

  it("settles on BASE in USDC by EIP-3009 and USD₮ through Permit2, and refuses tokens and chains it does not carry", async () => {
    const base = await post({ ...bill, blockchain: "base" });
    expect(base.status).toBe(402);
    expect(((await base.json()) as { accepts: Array<{ network: string }> }).accepts[0]!.network).toBe("eip155:8453");
    const tether = await post({ ...bill, blockchain: "BASE", token: "USDT" });
    expect(tether.status).toBe(402);
    const [offer] = decodePaymentRequiredHeader(tether.headers.get("PAYMENT-REQUIRED")!).accepts;
    expect(offer).toMatchObject({ network: "eip155:8453", extra: { assetTransferMethod: "permit2" } });
    expect(offer!.extra).not.toHaveProperty("name");
    for (const [change, code] of [
      [{ blockchain: "BASE", token: "USA₮" }, "TOKEN_NOT_SETTLEABLE"],
      [{ blockchain: "SOLANA" }, "UNSUPPORTED_CHAIN"],
    ] as const) {
      const res = await post({ ...bill, ...change });
      expect(res.status).toBe(422);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(((await res.json()) as { code: string }).code).toBe(code);
    }
  });

  it("writes nothing for a new bill's 402: every table keeps its row count", async () => {
    await post({ ...bill, billersCode: "08030000000" }); // the current rate version exists from here on
    const before = await rowCounts();
    expect(before.rate_version).toBeGreaterThan(0);
    for (let i = 1; i <= 5; i++) expect((await post({ ...bill, billersCode: `0803000000${i}` })).status).toBe(402);
    expect(await rowCounts()).toEqual(before);
    expect(before).not.toHaveProperty("quote"); // the per-bill quote table is gone
  });

  it("prices under the current rate version, named in extra; a new version is written only when the rate moves", async () => {
    type Challenge = { accepts: Array<{ maxAmountRequired: string; extra: { rateVersion: string } }> };
    const first = (await (await post({ ...bill, billersCode: "08033333333" })).json()) as Challenge;
    expect(first.accepts[0]!.extra.rateVersion).toMatch(/^\d+$/);
    const versions = await versionCount();
    rate = "775"; // the naira doubles in value
    try {
      // The same bill is shown today's price under a new version; other bills share that version.
      const again = (await (await post({ ...bill, billersCode: "08033333333" })).json()) as Challenge;
      expect(again.accepts[0]!.maxAmountRequired).toBe("2001000");
      expect(again.accepts[0]!.extra.rateVersion).not.toBe(first.accepts[0]!.extra.rateVersion);
      const other = (await (await post({ ...bill, billersCode: "08044444444" })).json()) as Challenge;
      expect(other.accepts[0]!.extra.rateVersion).toBe(again.accepts[0]!.extra.rateVersion);
      expect(await versionCount()).toBe(versions + 1);
      const [previous] = await db.query<{ live_until: Date | null }>(`SELECT live_until FROM rate_version WHERE id = $1`, [first.accepts[0]!.extra.rateVersion]);
      expect(previous!.live_until).not.toBeNull(); // superseded, with the time it stopped being live
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
    // The 402 for the same bill asks exactly the quoted amount, under the same rate version.
    const challenged = (await (await post(electricity)).json()) as { accepts: Array<{ maxAmountRequired: string }> };
    expect(challenged.accepts[0]!.maxAmountRequired).toBe("2101323");
    const small = (await (await quoteOf({ ...bill, nairaAmount: 50, billersCode: "08077777777" })).json()) as { quotes: Array<Record<string, any>> };
    expect(small.quotes[0]).toMatchObject({ amount: { units: "50000" }, breakdown: { minimum_applied: true } });
    // Refused as the pay route refuses them.
    expect((await quoteOf({ ...bill, nairaAmount: -1 })).status).toBe(400);
    expect(((await (await quoteOf({ ...bill, serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-100mb-1000", nairaAmount: 50 })).json()) as { code: string }).code).toBe(
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
    const before = await rowCounts();
    const probes = [
      await app.request("/api/pay/x402"),
      await app.request("/api/pay/x402", { method: "POST" }),
      await post({}),
      await post({ serviceID: "mtn", nairaAmount: 100 }),
      await post({ ...bill, serviceID: undefined }),
    ];
    expect(await rowCounts()).toEqual(before); // a probe writes nothing
    for (const res of probes) {
      expect(res.status).toBe(402);
      const { accepts } = (await res.json()) as { accepts: Array<{ network: string; asset: string; maxAmountRequired: string }> };
      expect(accepts.map((a) => a.network)).toEqual(["eip155:42220", "eip155:42220", "eip155:42220", "eip155:8453", "eip155:8453"]);
      expect(new Set(accepts.map((a) => a.maxAmountRequired))).toEqual(new Set(["50000"]));
      expect(decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!).accepts).toHaveLength(5);
    }
  });

  it("refuses bad input with a clear problem and stores nothing", async () => {
    const before = await rowCounts();
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
    expect(await rowCounts()).toEqual(before);
  });

  it("limits the body over a socket whether its length is declared or chunked", async () => {
    const served = await listen(app.fetch);
    try {
      const send = (body: string | ReadableStream<Uint8Array>) =>
        fetch(`${served.url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body, duplex: "half" } as RequestInit);
      const big = JSON.stringify({ ...bill, billersCode: "x".repeat(20_000) });
      const declared = await send(big); // Content-Length: refused without reading it
      expect(declared.status).toBe(413);
      expect(((await declared.json()) as { code: string }).code).toBe("BODY_TOO_LARGE");
      const chunked = await send(new Blob([big]).stream()); // no length: counted as it arrives
      expect(chunked.status).toBe(413);
      expect((await send(JSON.stringify({ ...bill, billersCode: "08012121212" }))).status).toBe(402);
    } finally {
      await served.close();
    }
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

  it("refuses an amount priced by a rate version not live within the challenge's lifetime, whatever extra.rateVersion claims", async () => {
    const body = { ...bill, billersCode: "08088888888" };
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    rate = "775";
    let signed: Awaited<ReturnType<typeof client.createPaymentPayload>>;
    try {
      const challenged = await post(body);
      signed = await client.createPaymentPayload(client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json()));
    } finally {
      rate = "1550";
    }
    const old = signed.accepted as unknown as { amount: string; extra: { rateVersion: string } };
    expect(old.amount).toBe("2001000");
    const now = (await (await post(body)).json()) as { accepts: Array<{ maxAmountRequired: string; extra: { rateVersion: string } }> };
    expect(now.accepts[0]!.maxAmountRequired).toBe("1001000");
    // Every version at 775 (this one, and an earlier test's) stopped being live longer ago than the challenge's lifetime (a day).
    const aged = await db.query(
      `UPDATE rate_version SET live_from = now() - interval '3 days', live_until = now() - interval '2 days' WHERE rate_milli = 775000 RETURNING id::text AS id`,
    );
    expect(aged).toContainEqual({ id: old.extra.rateVersion });
    const orders = async () => (await rowCounts()).bill_order;
    const ordersBefore = await orders();

    const refused = await post(body, client.encodePaymentSignatureHeader(signed));
    expect(refused.status).toBe(402);
    expect((await refused.json()) as { code: string; accepts: unknown[] }).toMatchObject({ code: "AMOUNT_MISMATCH", accepts: [{ maxAmountRequired: "1001000" }] });

    // The same payment naming the current version (or any id) in its unsigned `accepted.extra` is refused alike.
    for (const rateVersion of [now.accepts[0]!.extra.rateVersion, "999999", "1 OR 1=1"]) {
      const forged = { ...signed, accepted: { ...signed.accepted, extra: { ...signed.accepted.extra, rateVersion } } };
      const res = await post(body, client.encodePaymentSignatureHeader(forged));
      expect(res.status, rateVersion).toBe(402);
      expect(((await res.json()) as { code: string }).code, rateVersion).toBe("AMOUNT_MISMATCH");
    }
    expect(await orders()).toBe(ordersBefore);
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
    // Every answer, a bill's 402 and a refusal alike, is readable cross-origin and carries its request id.
    for (const res of [await post({ ...bill, billersCode: "08010101010" }), await post({ ...bill, blockchain: "SOLANA" }), await post("{not json")]) {
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
      expect(res.headers.get("access-control-expose-headers")).toMatch(/PAYMENT-REQUIRED/);
      expect(res.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it("serves health, readiness and an OpenAPI 3.1 document built from the schemas", async () => {
    expect((await app.request("/healthz")).status).toBe(200);
    // Ready means the database answers and the ledger keeps up: without a ledger, not ready, per chain.
    const ready = await app.request("/readyz");
    expect(ready.status).toBe(503);
    const readiness = (await ready.json()) as { ok: boolean; database: string; ledger: Array<{ chain: string; state: string; problem: string }> };
    expect(readiness).toMatchObject({ ok: false, database: "ok" });
    expect(readiness.ledger.map((l) => [l.chain, l.state])).toEqual([
      ["CELO", "unreadable"],
      ["BASE", "unreadable"],
    ]);
    expect(readiness.ledger[0]!.problem).toMatch(/^the ledger could not be read: /);
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

  it("reads the delivered bills' ask schedule: empty is never, a value out of a minute to a week is refused", () => {
    expect(loadConfig({}).BILLER_REVERSAL_CHECKS_SECONDS).toEqual([600, 3_600, 21_600, 86_400]);
    expect(loadConfig({ BILLER_REVERSAL_CHECKS_SECONDS: "" }).BILLER_REVERSAL_CHECKS_SECONDS).toEqual([]);
    for (const bad of ["0,3600", "60,604801", "ten", "60,,60"]) expect(() => loadConfig({ BILLER_REVERSAL_CHECKS_SECONDS: bad }), bad).toThrow(/BILLER_REVERSAL_CHECKS_SECONDS/);
  });
});
