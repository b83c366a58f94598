import { decodePaymentRequiredHeader, x402HTTPClient } from "@x402/core/http";
import type { PaymentRequired } from "@x402/core/types";
import {
  extractDiscoveryInfo,
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
  type BodyDiscoveryExtension,
  type DiscoveryExtension,
  type McpDiscoveryExtension,
} from "@x402/extensions/bazaar";
import { PAYMENT_IDENTIFIER } from "@x402/extensions/payment-identifier";
import { Ajv2020 } from "ajv/dist/2020.js";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { toolInputSchema } from "../../server/agent/tool-definition.ts";
import { agentTools } from "../../server/agent/tools.ts";
import { payableToolDiscovery, x402PayableDescription, x402PayableSchema } from "../../server/agent/x402-tools.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { openDb, type Db } from "../../server/db.ts";
import { BILL_EXAMPLES, BILL_JSON_SCHEMAS } from "../../server/openapi.ts";
import { readHttpRate } from "../../server/pricing/rates.ts";
import { buildFlow } from "../../server/services.ts";
import { mcpToolDiscovery } from "../../server/x402/challenge.ts";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { listen } from "../support/http-server.ts";
import { x402Bill } from "../support/bills.ts";
import { leaseSharedChains, type SharedChains } from "../support/stack.ts";

const payer = hardhatAccount(8);
const bill = x402Bill(payer.address);

interface ManifestItem {
  resource: { url: string; description?: string; mimeType?: string };
  type: string;
  accepts: unknown[];
  input: Record<string, unknown>;
  output?: { mimeType?: string; example?: unknown; schema?: Record<string, unknown> };
}
interface Manifest {
  x402Version: number;
  lastUpdated: number;
  items: ManifestItem[];
}

/** A JSON-schema validator for the declared schemas (formats are not asserted: the service checks them itself). */
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
const accepts = (schema: Record<string, unknown>, value: unknown) => ajv.compile(schema)(value);

describe("x402 discovery: the bazaar declaration in the 402 and the /.well-known/x402 list", () => {
  let stack: SharedChains;
  let db: Db;
  let app: Hono;
  let localApp: Hono;
  let rateServer: Awaited<ReturnType<typeof listen>>;
  let biller: Awaited<ReturnType<typeof listen>>;

  beforeAll(async () => {
    stack = await leaseSharedChains();
    rateServer = await listen(new Hono().get("/rate", (c) => c.json({ ngnPerUsd: "1550" })).fetch);
    db = await openDb({ pgliteDir: undefined });
    const defaults = loadConfig({});
    biller = await listen(billerSandboxApp({ apiKey: defaults.BILLER_API_KEY, secretKey: defaults.BILLER_SECRET_KEY, publicKey: defaults.BILLER_PUBLIC_KEY }).fetch);
    const appWith = (env: Record<string, string>) => {
      const config = loadConfig({ LOG_REQUESTS: "0", BILLER_BASE_URL: biller.url, ...env });
      return createApp({
        config,
        db,
        deployments: stack.deployments,
        rates: { ngnPerUsdMilli: () => readHttpRate(`${rateServer.url}/rate`, "ngnPerUsd", 1_000) },
        flow: buildFlow(config, stack.deployments, db),
      });
    };
    app = appWith({ PUBLIC_URL: "http://billpay.test" });
    localApp = appWith({});
  });
  afterAll(async () => {
    await db?.close();
    await rateServer?.close();
    await biller?.close();
    await stack?.close();
  });

  const post = (body: unknown) => app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const paymentRequired = (res: Response) => decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!);
  const bazaarOf = (required: PaymentRequired) => required.extensions!.bazaar as DiscoveryExtension;
  /** The bill's JSON Schema, as a declaration nests it under input.body. */
  const bodySchema = (ext: DiscoveryExtension) => (ext.schema.properties.input.properties as { body: Record<string, unknown> }).body;
  /** What a facilitator catalogues from a payment the official client made for this 402 (it echoes the extensions). */
  const catalogued = async (res: Response) => {
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((name) => res.headers.get(name), await res.json()));
    return extractDiscoveryInfo(payload, payload.accepted);
  };

  it("declares the full call on the probe's 402: POST, the bill's JSON Schema, the result's; payment-identifier still declared", async () => {
    for (const res of [await app.request("/api/pay/x402"), await post({})]) {
      expect(res.status).toBe(402);
      const required = paymentRequired(res.clone());
      expect(required.extensions).toHaveProperty(PAYMENT_IDENTIFIER);
      const bazaar = bazaarOf(required);
      expect(validateDiscoveryExtension(bazaar)).toEqual({ valid: true });
      expect(validateDiscoveryExtensionSpec(bazaar as unknown as Record<string, unknown>)).toEqual({ valid: true });
      expect(bazaar.info.input).toMatchObject({ type: "http", method: "POST", bodyType: "json" });
      // The schemas are the ones the OpenAPI document publishes; they accept a real bill and its example, and refuse a bad one.
      const schema = bodySchema(bazaar);
      expect(schema).toEqual(BILL_JSON_SCHEMAS.request);
      expect(schema).not.toHaveProperty("$ref");
      expect(accepts(schema, bill)).toBe(true);
      expect(accepts(schema, (bazaar.info.input as { body: unknown }).body)).toBe(true);
      expect(accepts(schema, { ...bill, nairaAmount: -5 })).toBe(false);
      expect(accepts(schema, { ...bill, wallet_address: undefined })).toBe(false);
      expect(accepts(bazaar.schema.properties.output!.properties!.example as Record<string, unknown>, BILL_EXAMPLES.result)).toBe(true);
      expect(await catalogued(res)).toMatchObject({ resourceUrl: "http://billpay.test/api/pay/x402", method: "POST", x402Version: 2 });
    }
  });

  it("declares the compact call on a bill's 402: POST and an example bill the full schema accepts, no schemas", async () => {
    const res = await post(bill);
    expect(res.status).toBe(402);
    const required = paymentRequired(res.clone());
    expect(required.extensions).toHaveProperty(PAYMENT_IDENTIFIER);
    const bazaar = bazaarOf(required) as BodyDiscoveryExtension;
    expect(validateDiscoveryExtension(bazaar)).toEqual({ valid: true });
    expect(bazaar.info.input).toMatchObject({ type: "http", method: "POST", bodyType: "json" });
    expect(accepts(BILL_JSON_SCHEMAS.request, bazaar.info.input.body)).toBe(true);
    expect(validateDiscoveryExtensionSpec(bazaar as unknown as Record<string, unknown>)).toEqual({ valid: true });
    expect(bodySchema(bazaar)).not.toHaveProperty("properties.serviceID");
    // What a paid bill returns, as an example (the schemas are the probe's and the list's).
    expect(bazaar.info.output).toMatchObject({ example: BILL_EXAMPLES.result });
    expect(accepts(BILL_JSON_SCHEMAS.result, bazaar.info.output!.example)).toBe(true);
    // Every bill's header stays small: under 3 KB of base64 here; the full declaration would make it about 8.
    expect(res.headers.get("PAYMENT-REQUIRED")!.length).toBeLessThan(3 * 1024);
    // The promise, before paying: in the resource's description (v2) and as `terms` in the body.
    expect(required.resource.description).toMatch(/^Bill payment\. Answered within 20 s of settlement .* refunded in full on chain to the paying wallet \(GET \/api\/orders\/\{request_id\}\)\.$/);
    expect(((await res.clone().json()) as { terms: unknown }).terms).toEqual({
      vend_deadline_seconds: 20,
      operator_alert_seconds: 600,
      refund: { when: expect.stringContaining("cannot vend"), amount: "the whole payment, in the token paid", to: expect.stringContaining("the wallet that paid"), how: expect.any(String), check: "GET /api/orders/{request_id}: refund.status and refund.tx_hash" },
    });
    expect(await catalogued(res)).toMatchObject({ resourceUrl: "http://billpay.test/api/pay/x402", method: "POST" });
  });

  it("lists the REST route and the MCP tool at /.well-known/x402 and x402.json, accepting what the probe shows", async () => {
    const probe = paymentRequired(await app.request("/api/pay/x402"));
    const payBill = agentTools(10).find((t) => t.name === "pay_bill")!;
    for (const path of ["/.well-known/x402", "/.well-known/x402.json"]) {
      const res = await app.request(path, { headers: { origin: "https://agent.example" } });
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
      expect(res.headers.get("cache-control")).toMatch(/^public, max-age=\d+$/);
      const manifest = (await res.json()) as Manifest;
      expect(manifest).toMatchObject({ x402Version: 2, lastUpdated: expect.any(Number) });
      expect(manifest.items.map((i) => [i.type, i.resource.url])).toEqual([
        ["http", "http://billpay.test/api/pay/x402"],
        ["mcp", "http://billpay.test/api/mcp"],
      ]);
      const [rest, mcp] = manifest.items as [ManifestItem, ManifestItem];
      for (const item of manifest.items) expect(item.accepts).toEqual(probe.accepts);
      expect(rest.input).toEqual({ method: "POST", bodyType: "json", body: BILL_JSON_SCHEMAS.request });
      expect(accepts(rest.input.body as Record<string, unknown>, bill)).toBe(true);
      expect(rest.output).toMatchObject({ mimeType: "application/json", example: BILL_EXAMPLES.result });
      expect(accepts(rest.output!.schema!, BILL_EXAMPLES.result)).toBe(true);
      expect(mcp.input).toEqual({ toolName: "pay_bill", inputSchema: x402PayableSchema(payBill), transport: "streamable-http" });
      expect(mcp.resource.description).toBe(x402PayableDescription(payBill));
      // The tool returns what the route returns: the same example and schema.
      expect(mcp.output).toEqual(rest.output);
      // Both promise the same, with where to check an order's refund.
      for (const item of [rest, mcp]) {
        expect((item as ManifestItem & { terms: { vend_deadline_seconds: number; refund: { check: string } } }).terms).toMatchObject({
          vend_deadline_seconds: 20,
          refund: { check: "GET http://billpay.test/api/orders/{request_id}: refund.status and refund.tx_hash" },
        });
      }
    }
  });

  it("names the request's origin without PUBLIC_URL", async () => {
    const manifest = (await (await localApp.request("http://127.0.0.1:8080/.well-known/x402")).json()) as Manifest;
    expect(manifest.items.map((i) => i.resource.url)).toEqual(["http://127.0.0.1:8080/api/pay/x402", "http://127.0.0.1:8080/api/mcp"]);
  });

  it("answers a preflight, and refuses other methods clearly", async () => {
    const preflight = await app.request("/.well-known/x402", { method: "OPTIONS", headers: { origin: "https://agent.example", "access-control-request-method": "GET" } });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get("access-control-allow-origin")).toBe("*");
    for (const method of ["POST", "PUT", "DELETE"]) {
      const res = await app.request("/.well-known/x402", { method, headers: { "content-type": "application/json" }, body: method === "DELETE" ? undefined : "{}" });
      expect(res.status, method).toBe(404);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(res.headers.get("allow")).toMatch(/^GET\b/);
      expect(await res.json()).toMatchObject({ code: "NOT_FOUND", detail: expect.stringMatching(new RegExp(`${method} /\\.well-known/x402: .*GET`)) });
    }
    const head = await app.request("/.well-known/x402.json", { method: "HEAD" });
    expect(head.status).toBe(200);
  });

  it("declares an MCP tool in the extension's MCP form, for the tool's PaymentRequired", async () => {
    const payBill = agentTools(10).find((t) => t.name === "pay_bill")!;
    const extensions = mcpToolDiscovery(payBill.name, toolInputSchema(payBill), { description: "Pay a bill", example: BILL_EXAMPLES.request });
    const bazaar = extensions.bazaar as McpDiscoveryExtension;
    expect(validateDiscoveryExtension(bazaar)).toEqual({ valid: true });
    expect(validateDiscoveryExtensionSpec(bazaar as unknown as Record<string, unknown>)).toEqual({ valid: true });
    // The one pay_bill's PaymentRequired carries: with what a paid call returns, valid against both validators.
    const declared = payableToolDiscovery(payBill).bazaar as McpDiscoveryExtension;
    expect(validateDiscoveryExtension(declared)).toEqual({ valid: true });
    expect(validateDiscoveryExtensionSpec(declared as unknown as Record<string, unknown>)).toEqual({ valid: true });
    expect(declared.info.output).toMatchObject({ example: BILL_EXAMPLES.result });
    expect(declared.schema.properties.output).toBeDefined();
    expect(accepts(declared.schema.properties.output!.properties!.example as Record<string, unknown>, BILL_EXAMPLES.result)).toBe(true);
    // A result that is not the declared shape fails the extension's own validation.
    const wrong = { ...declared, info: { ...declared.info, output: { ...declared.info.output, example: { status: 42 } } } };
    expect(validateDiscoveryExtension(wrong as McpDiscoveryExtension).valid).toBe(false);
    expect(bazaar.info.input).toMatchObject({ type: "mcp", toolName: "pay_bill", transport: "streamable-http", description: "Pay a bill" });
    // As a facilitator catalogues it from a payment that echoes it: the tuple (url, toolName).
    const probe = paymentRequired(await app.request("/api/pay/x402"));
    const payload = { x402Version: 2, resource: { ...probe.resource, url: "http://billpay.test/api/mcp" }, accepted: probe.accepts[0]!, payload: {}, extensions };
    expect(extractDiscoveryInfo(payload, probe.accepts[0]!)).toMatchObject({ resourceUrl: "http://billpay.test/api/mcp", toolName: "pay_bill" });
  });
});
