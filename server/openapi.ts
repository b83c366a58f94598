/**
 * The OpenAPI 3.1 document (API version 1.0.0) of every route the service serves, and of
 * the ledger's read API (served by the Ponder process, its own server), built from the same
 * zod schemas the routes validate with. `x-x402` names the payment protocol and the options
 * this deployment accepts. Operations are grouped by tag (`TAGS`). `servers` is not here: it
 * depends on where the document is fetched from, so docs.ts adds it per request. The
 * reference's own routes (this document, /docs and its script) are not operations of the API
 * and stay out. `test/server/openapi.test.ts` validates it and checks that every route the
 * app serves is in it.
 */
import { z } from "zod";
import { chainInfo, x402TransferOf, type ChainKey } from "../lib/chains.ts";
import type { Deployments } from "../lib/deployments.ts";
import { ERRORS } from "./errors.ts";
import { customerQuestionSchema, internationalOptionsSchema, linkRequestSchema, linkResultSchema, paymentRequestSchema } from "./schemas.ts";

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ "application/json": { schema } });

const problemResponses = (statuses: number[]) =>
  Object.fromEntries(statuses.map((status) => [String(status), { description: "Problem (see the code)", content: { "application/problem+json": { schema: ref("Problem") } } }]));

const schemas = {
  Problem: {
    type: "object",
    required: ["type", "title", "status", "code", "detail"],
    properties: {
      type: { type: "string" },
      title: { type: "string" },
      status: { type: "integer" },
      code: { type: "string", enum: Object.keys(ERRORS) },
      detail: { type: "string" },
      retry_after_seconds: { type: "integer", description: "With 429, 423 and 503 refusals: when to come back (also Retry-After)" },
    },
  },
  PaymentRequest: z.toJSONSchema(paymentRequestSchema, { io: "input" }),
  PaymentResult: {
    type: "object",
    description: "The interface's result shape; status is SUCCESS, FAILED_VENDING (with refund) or TIMEOUT (still being worked)",
    required: ["success", "status", "purchased_code", "units", "request_id", "tx_hash"],
    properties: {
      success: { type: "boolean" },
      status: { type: "string", enum: ["SUCCESS", "FAILED_VENDING", "TIMEOUT"] },
      purchased_code: { type: ["string", "null"], description: "Token or PIN: in the paying response, and on the order route only with proof" },
      units: { type: ["string", "null"] },
      request_id: { type: "string", pattern: "^req_\\d{12}[0-9a-f]{20}$" },
      tx_hash: { type: ["string", "null"] },
      order_secret: { type: "string", description: "Only in the first paying response: Bearer proof for the order route" },
      purchased_codes: {
        type: "array",
        description: "Every code with its label, when the biller handed over several (a WAEC card's Serial and PIN, Eko's Token and Bonus Token); shown as purchased_code is",
        items: { type: "object", required: ["label", "value"], properties: { label: { type: ["string", "null"] }, value: { type: "string" } } },
      },
      purchased_code_withheld: { type: "boolean" },
      refund: {
        type: "object",
        properties: { status: { type: "string", enum: ["PENDING", "REFUNDED"] }, tx_hash: { type: ["string", "null"] }, reason: { type: ["string", "null"] } },
      },
      review: { type: "object", properties: { reason: { type: ["string", "null"] }, detail: { type: "string" } } },
      receipt: {
        type: "object",
        description: "Once the payment is settled: the bill's receipt, EIP-712, signed by the key GET /api/receipts/signer publishes (order, bill hash, payer, network, token, amount, transaction, outcome, refund transaction)",
        required: ["format", "primaryType", "signer", "payload", "signature"],
        properties: { format: { const: "eip712" }, primaryType: { const: "Receipt" }, signer: { type: "string" }, payload: { type: "object" }, signature: { type: "string" } },
      },
    },
  },
  PaymentChallenge: {
    type: "object",
    description: "The x402 challenge, v1 body (the v2 form is base64 JSON in the PAYMENT-REQUIRED header)",
    required: ["x402Version", "error", "accepts"],
    properties: {
      x402Version: { const: 1 },
      error: { type: "string" },
      code: { type: "string", description: "Why a presented payment did not fit (see x402-protocol/payment.ts)" },
      accepts: {
        type: "array",
        items: {
          type: "object",
          required: ["scheme", "network", "maxAmountRequired", "asset", "payTo", "resource", "maxTimeoutSeconds"],
          properties: {
            scheme: { const: "exact" },
            network: { type: "string", description: "CAIP-2 (eip155:42220) or, with ?networks=v1, the protocol-1 name" },
            maxAmountRequired: { type: "string", description: "Token units" },
            asset: { type: "string" },
            payTo: { type: "string", description: "BillPay" },
            resource: { type: "string" },
            description: { type: "string" },
            mimeType: { type: "string" },
            maxTimeoutSeconds: { type: "integer" },
            extra: { type: "object", properties: { name: { type: "string" }, version: { type: "string" }, primaryType: { type: "string" } } },
          },
        },
      },
    },
  },
  Quote: {
    type: "object",
    properties: {
      quotes: {
        type: "array",
        items: {
          type: "object",
          properties: {
            chain: { type: "string" },
            token: { type: "string" },
            amount: { type: "object", properties: { units: { type: "string" }, formatted: { type: "string" } } },
            expires_at: { type: "string", format: "date-time" },
            breakdown: { type: "object" },
          },
        },
      },
      pay_with: { type: "string" },
    },
  },
  LinkRequest: z.toJSONSchema(linkRequestSchema, { io: "input" }),
  LinkResult: z.toJSONSchema(linkResultSchema),
  JsonRpc: { type: "object", description: "JSON-RPC 2.0" },
};

/**
 * The REST route's bill and result as self-contained JSON Schemas (no $ref, no dialect of
 * their own), for the x402 `bazaar` declaration (x402/challenge.ts), which nests them in
 * its own 2020-12 schema.
 */
export const BILL_JSON_SCHEMAS = {
  request: (({ $schema: _dialect, ...schema }) => schema)(schemas.PaymentRequest) as Record<string, unknown>,
  result: schemas.PaymentResult as Record<string, unknown>,
};

/** A bill and its paid result, as examples of the REST route's call (the result's ids are made up). */
export const BILL_EXAMPLES = {
  request: {
    serviceID: "mtn",
    serviceCategory: "AIRTIME",
    network: "MTN",
    billersCode: "08011111111",
    nairaAmount: 500,
    token: "USDC",
    blockchain: "BASE",
    wallet_address: "0x52908400098527886E0F7030069857D2E4169EE7",
  },
  result: {
    success: true,
    status: "SUCCESS",
    purchased_code: null,
    units: null,
    request_id: "req_2026010112000123456789abcdef0123",
    tx_hash: "0x8f2c6a1d9b3e4f5a6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b",
  },
};

const paymentHeaders = [
  { name: "PAYMENT-SIGNATURE", in: "header", required: false, schema: { type: "string" }, description: "x402 v2 payment (base64 JSON)" },
  { name: "X-PAYMENT", in: "header", required: false, schema: { type: "string" }, description: "x402 v1 payment (base64 JSON)" },
];
const challenge402 = {
  description: "Payment required: the challenge (v1 body, v2 PAYMENT-REQUIRED header), or PAYMENT_NOT_SETTLED for a payment that did not settle",
  headers: { "PAYMENT-REQUIRED": { schema: { type: "string" }, description: "x402 v2 challenge, base64 JSON" } },
  content: { "application/json": { schema: ref("PaymentChallenge") }, "application/problem+json": { schema: ref("Problem") } },
};
const ops = { security: [{ opsToken: [] }] };
/** The console and /metrics: the same token, also as the basic-auth password (browsers). */
const operator = { security: [{ opsToken: [] }, { opsBasic: [] }] };

/** The document's tags, in the order the reference lists them: every operation has one. */
export const TAGS = [
  { name: "x402", description: "Pay a bill with an x402 payment: discover the options, quote a bill, POST it for its 402 challenge, then POST it again with the signed payment (v2: PAYMENT-SIGNATURE; v1: X-PAYMENT)." },
  { name: "Orders", description: "Where an order stands, on either rail; the purchased code (token, PIN) only with proof of being its payer." },
  { name: "Biller", description: "The biller's side: international products step by step, the customer-number check before paying, and the biller's callbacks." },
  { name: "Agent hub", description: "Link a wallet once (a PIN and an api_key), then let an agent pay from the wallet's on-chain allowance with the tools, over MCP or as A2A skills." },
  { name: "Ledger", description: "The ledger's read API (Ponder): indexed payments, refunds and balances. Served by the ledger process, at its own server URL." },
  { name: "Operators", description: "For the service's operators: orders and orphan payments, Prometheus metrics and the console. OPS_TOKEN as a bearer token (or the basic-auth password)." },
  { name: "Health", description: "Liveness and readiness, for load balancers and orchestrators." },
] as const;
type Tag = (typeof TAGS)[number]["name"];

const METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);
/** Puts every operation of these paths under one tag (path-level fields such as `servers` stay as they are). */
function tagged<P extends Record<string, Record<string, unknown>>>(tag: Tag, paths: P): P {
  return Object.fromEntries(
    Object.entries(paths).map(([path, item]) => [
      path,
      Object.fromEntries(Object.entries(item).map(([key, value]) => [key, METHODS.has(key) ? { tags: [tag], ...(value as object) } : value])),
    ]),
  ) as P;
}

/** The ledger's read API (Ponder), for the same document. */
const ledgerPaths = (ledgerUrl: string) => {
  const servers = [{ url: ledgerUrl, description: "the ledger (Ponder)" }];
  const get = (summary: string, parameters: string[] = []) => ({
    servers,
    get: {
      summary,
      parameters: parameters.map((name) => ({ name, in: "path", required: true, schema: { type: "string" } })),
      responses: { "200": { description: "JSON" }, "400": { description: "Bad parameters" }, "404": { description: "Not found" } },
    },
  });
  return {
    "/ledger/wallets/{address}": get("A wallet's accounts (per chain and token) and latest payments and refunds", ["address"]),
    "/ledger/orders/{orderId}": get("A BillPay order's pull and refunds", ["orderId"]),
    "/ledger/authorizations/{chainId}/{token}/{payer}/{nonce}": get("An x402 payment by its key, and its refunds", ["chainId", "token", "payer", "nonce"]),
    "/ledger/payers/{address}/records": get("One payer's payments and refunds under given order ids and nonces (query: orderIds, nonces; comma-separated, at most 100 each)", ["address"]),
    "/ledger/payers/{address}/unbooked-inflows": get("One payer's transfers of a token into BillPay that no payment accounts for, newest first (query: chainId, token, amount, limit)", ["address"]),
    "/ledger/readable": get("Per chain, the block through which every event can be read from these routes"),
    "/ledger/treasury": get("BillPay's indexed balances and flows per chain and token"),
    "/ledger/payments": get("Payments in a time range, paged (query: from, to, chainId, token, payer, rail, limit, cursor)"),
    "/status": get("How far the ledger has indexed each chain"),
  };
};

export function openApiDocument(options: { deployments?: Deployments; ledgerUrl?: string } = {}) {
  const options402 = options.deployments
    ? (Object.keys(options.deployments.chains) as ChainKey[]).flatMap((key) =>
        chainInfo(key).tokens.map((t) => ({
            network: chainInfo(key).caip2,
            asset: options.deployments!.chains[key]!.tokens.find((x) => x.symbol === t.symbol)?.address,
            token: t.symbol,
            payTo: options.deployments!.chains[key]!.billPay.address,
            assetTransferMethod: x402TransferOf(t),
          })),
      )
    : [];
  return {
    openapi: "3.1.0",
    info: { title: "Bill payment service", version: "1.0.0", description: "Stablecoin-settled bill payment: x402 and agent-hub rails, on-chain refunds, a Ponder ledger. This reference: /docs; the document: /openapi.json." },
    tags: TAGS.map((t) => ({ ...t })),
    "x-x402": {
      versions: [1, 2],
      scheme: "exact",
      transfer: "EIP-3009 transferWithAuthorization to BillPay, or for a token without it (options[].assetTransferMethod permit2) a Permit2 witness transfer through x402's exact proxy; settled through a facilitator",
      headers: { v1: "X-PAYMENT / X-PAYMENT-RESPONSE", v2: "PAYMENT-SIGNATURE / PAYMENT-REQUIRED / PAYMENT-RESPONSE" },
      options: options402,
    },
    components: {
      schemas,
      securitySchemes: {
        opsToken: { type: "http", scheme: "bearer", description: "OPS_TOKEN (without one: loopback callers only, and nobody once PUBLIC_URL is set)" },
        opsBasic: { type: "http", scheme: "basic", description: "OPS_TOKEN as the password, any user name (the console in a browser)" },
        apiKey: { type: "http", scheme: "bearer", description: "An agent's api_key (bpk_...), instead of the api_key argument" },
      },
    },
    paths: {
      ...tagged("x402", {
        "/api/pay/x402": {
          get: { summary: "Discover payment options (402 challenge at the minimum price)", responses: { "402": challenge402 } },
          post: {
            summary: "Pay a bill with x402 (no payment: the bill's 402 challenge; {} or a partial bill: the probe challenge)",
            parameters: [...paymentHeaders, { name: "networks", in: "query", required: false, schema: { const: "v1" }, description: "Protocol-1 network names in the body" }],
            requestBody: { required: false, content: json(ref("PaymentRequest")) },
            responses: {
              "200": {
                description: "Paid: the result (and X-PAYMENT-RESPONSE or PAYMENT-RESPONSE)",
                headers: { "PAYMENT-RESPONSE": { schema: { type: "string" } }, "X-PAYMENT-RESPONSE": { schema: { type: "string" } } },
                content: json(ref("PaymentResult")),
              },
              "402": challenge402,
              ...problemResponses([400, 409, 413, 415, 422, 429, 500, 503]),
            },
          },
        },
        ...Object.fromEntries(
          ["/.well-known/x402", "/.well-known/x402.json"].map((path) => [
            path,
            { get: { summary: "The paid resources (the REST route and the MCP tool pay_bill): how to call them and their payment options (x402/discovery.ts)", responses: { "200": { description: "Discovery manifest", content: json({ type: "object" }) } } } },
          ]),
        ),
        "/api/quote": {
          post: {
            summary: "A bill's price before paying it: amount, breakdown and expiry (the same price the 402 shows, honoured for a payment within its lifetime)",
            requestBody: { required: true, content: json(ref("PaymentRequest")) },
            responses: { "200": { description: "The quote, per payable option", content: json(ref("Quote")) }, ...problemResponses([400, 413, 415, 422, 429, 503]) },
          },
        },
      }),
      ...tagged("Orders", {
        "/.well-known/did.json": {
          get: {
            summary: "The service's did:web document: the receipts' key as a JWK (JWS kid) and as the address EIP-712 signatures recover to, for the host asked at",
            responses: { "200": { description: "DID document", content: { "application/did+json": { schema: { type: "object" } } } }, ...problemResponses([404]) },
          },
        },
        "/api/receipts/signer": {
          get: {
            summary: "The key paid bills' receipts are signed with, and their EIP-712 domains and types, to check a receipt offline (orders/receipts.ts)",
            responses: { "200": { description: "The signer and the receipts' typed-data definitions", content: json({ type: "object" }) } },
          },
        },
        "/api/orders/{requestId}": {
          get: {
            summary: "Where an order stands (either rail); the purchased code only with proof",
            parameters: [
              { name: "requestId", in: "path", required: true, schema: { type: "string" }, description: "The request_id a payment returned" },
              {
                name: "authorization",
                in: "header",
                required: false,
                schema: { type: "string" },
                description: "Bearer <order_secret from the paying response>: shows purchased_code (as does the paying wallet's signed proof, X-Wallet-Signature and X-Wallet-Timestamp)",
              },
              {
                name: "x-wallet-signature",
                in: "header",
                required: false,
                schema: { type: "string" },
                description: "Or the paying wallet's signature of 'BillPay: show order <request_id> to its payer at <x-wallet-timestamp>' (EIP-191): shows purchased_code",
              },
              { name: "x-wallet-timestamp", in: "header", required: false, schema: { type: "string" }, description: "Milliseconds since the epoch, as signed" },
            ],
            responses: { "200": { description: "Payment result", content: json(ref("PaymentResult")) }, ...problemResponses([400, 401, 404, 429]) },
          },
        },
      }),
      ...tagged("Biller", {
        "/api/international": {
          get: {
            summary: "International airtime and data, step by step: countries, product types, operators, plans, then a bill to pay",
            description:
              "Each parameter narrows the next answer (the same as the list_international_options tool). With operator_id and a plan " +
              "(and foreignAmount for an open amount) the answer carries `bill`: fill its billersCode and POST it to /api/pay/x402 with " +
              "token, blockchain and wallet_address. nairaAmount is foreignAmount at the biller's rate, to the kobo.",
            parameters: Object.entries(z.toJSONSchema(internationalOptionsSchema, { io: "input" }).properties ?? {}).map(([name, schema]) => ({
              name,
              in: "query",
              required: false,
              schema,
            })),
            responses: { "200": { description: "The next step's choices, or a payable bill", content: json({ type: "object" }) }, ...problemResponses([400, 422, 503]) },
          },
        },
        "/api/verify-customer": {
          post: {
            summary: "The biller's check of a meter, smartcard, bank account or JAMB profile number, before paying",
            description:
              "Free (the same as the verify_customer tool): `valid`, the customer's name and what else the biller tells (meter type, " +
              "current bouquet and renewal amount), or the reason the number is wrong. Answers are reused for a while; calls are " +
              "rate-limited per client address. A wallet whose bills failed this check lately has every checkable bill checked like " +
              "this before its price is shown, and a wrong number refused unpaid (422 CUSTOMER_NOT_VERIFIED).",
            requestBody: { required: true, content: json(z.toJSONSchema(customerQuestionSchema, { io: "input" })) },
            responses: { "200": { description: "The biller's answer", content: json({ type: "object" }) }, ...problemResponses([400, 413, 415, 422, 429, 503]) },
          },
        },
        "/api/biller/webhook": {
          post: {
            summary: "The biller's callbacks (VTpass transaction-update and variations-update): register this URL on the biller's dashboard",
            description:
              "VTpass POSTs {type, data} and expects {\"response\":\"success\"}, sending again (5 times in all) until it gets it. The body is " +
              "never trusted: data.requestId only points at the order, whose state is read from a requery; a pending order is finished, a " +
              "served one the biller reversed is refunded on chain once. variations-update makes the product's plans be read afresh. " +
              "With BILLER_WEBHOOK_TOKEN set, the URL must carry it as ?token=.",
            parameters: [{ name: "token", in: "query", required: false, schema: { type: "string" }, description: "BILLER_WEBHOOK_TOKEN, when set" }],
            requestBody: { required: true, content: json({ type: "object", properties: { type: { type: "string" }, data: { type: "object" } } }) },
            responses: {
              "200": { description: "Acted on (or nothing to act on)", content: json({ type: "object", properties: { response: { const: "success" } } }) },
              ...problemResponses([400, 401, 413, 429, 503]),
            },
          },
        },
      }),
      ...tagged("Agent hub", {
        "/api/agent/link/nonce": {
          get: {
            summary: "A one-time nonce, domain, URI and chain ids for a Sign-In with Ethereum link",
            responses: { "200": { description: "Nonce", content: json({ type: "object" }) }, ...problemResponses([403, 429]) },
          },
        },
        "/api/agent/link": {
          post: {
            summary: "Link a wallet to the agent hub: set its PIN and get an api_key (shown once)",
            parameters: [
              { name: "x-wallet-address", in: "header", required: true, schema: { type: "string" } },
              { name: "x-wallet-signature", in: "header", required: true, schema: { type: "string" }, description: "personal_sign of the link message (or of the SIWE message)" },
              { name: "x-wallet-timestamp", in: "header", required: false, schema: { type: "string" }, description: "Milliseconds since the epoch: the message is '<Service> Agent Action: POST:/api/agent/link: <timestamp>'" },
              { name: "x-wallet-siwe", in: "header", required: false, schema: { type: "string" }, description: "Base64 Sign-In with Ethereum message (the safer form; see /api/agent/link/nonce)" },
            ],
            requestBody: { required: true, content: json(ref("LinkRequest")) },
            responses: { "200": { description: "Linked", content: json(ref("LinkResult")) }, ...problemResponses([400, 401, 403, 409, 413, 415, 422, 429, 503]) },
          },
        },
        "/api/mcp": {
          post: {
            summary: "Agent tools over MCP (JSON-RPC 2.0, stateless): tools/list, tools/call; api_key as an argument or Authorization: Bearer",
            security: [{ apiKey: [] }, {}],
            requestBody: { required: true, content: json(ref("JsonRpc")) },
            responses: {
              "200": { description: "JSON-RPC response; a refused tool call has result.isError and the error in content[0].text", content: json(ref("JsonRpc")) },
              ...problemResponses([403, 413]),
            },
          },
          get: { summary: "Not served (stateless: no session stream)", responses: { "405": { description: "Method not allowed" } } },
          delete: { summary: "Not served (stateless: no session to end)", responses: { "405": { description: "Method not allowed" } } },
        },
        "/api/a2a": {
          post: {
            summary: "Agent tools as A2A skills (JSON-RPC: SendMessage with A2A-Version 1.0, or message/send for 0.3)",
            security: [{ apiKey: [] }, {}],
            requestBody: { required: true, content: json(ref("JsonRpc")) },
            responses: { "200": { description: "JSON-RPC response with a message whose data part holds the result", content: json(ref("JsonRpc")) }, ...problemResponses([403, 413]) },
          },
        },
        "/.well-known/agent-card.json": { get: { summary: "The A2A Agent Card", responses: { "200": { description: "Agent Card", content: json({ type: "object" }) } } } },
      }),
      ...tagged("Operators", {
        "/ops/orders": {
          get: {
            summary: "Operators: every order with its money fields (no codes, no secrets), paged",
            ...ops,
            parameters: [
              { name: "limit", in: "query", required: false, schema: { type: "integer", minimum: 1, maximum: 500 } },
              { name: "after", in: "query", required: false, schema: { type: "string" } },
            ],
            responses: { "200": { description: "A page of orders", content: json({ type: "object" }) }, ...problemResponses([403]) },
          },
        },
        "/ops/orphans": {
          get: { summary: "Operators: payments no order accounts for", ...ops, responses: { "200": { description: "Orphan pulls and x402 payments", content: json({ type: "object" }) }, ...problemResponses([403]) } },
        },
        "/ops/reviews": {
          get: { summary: "Operators: every review action (who, when, why, outcome), for the audit", ...ops, responses: { "200": { description: "The actions, oldest first", content: json({ type: "object" }) }, ...problemResponses([403]) } },
        },
        "/ops/review": {
          get: { summary: "Operators: what waits for review (NEEDS_REVIEW orders, x402 payments without an order)", ...ops, responses: { "200": { description: "Orders and payments held for an operator", content: json({ type: "object" }) }, ...problemResponses([403]) } },
        },
        "/ops/review/orders/{requestId}": {
          get: {
            summary: "Operators: an order held for review, what the ledger shows under its key, what each decision would meet, the actions taken",
            ...ops,
            parameters: [{ name: "requestId", in: "path", required: true, schema: { type: "string" } }],
            responses: { "200": { description: "The order and its review", content: json({ type: "object" }) }, ...problemResponses([403, 404]) },
          },
          post: {
            summary: "Operators: refund, serve, close or hold a NEEDS_REVIEW order, as the ledger allows (JSON with an X-Operator header; recorded with who and why)",
            ...ops,
            parameters: [
              { name: "requestId", in: "path", required: true, schema: { type: "string" } },
              { name: "X-Operator", in: "header", required: true, schema: { type: "string" }, description: "Who decides (recorded)" },
            ],
            requestBody: {
              required: true,
              content: json({
                type: "object",
                required: ["action", "reason"],
                properties: {
                  action: { type: "string", enum: ["refund", "serve", "close", "hold"], description: "hold: a Permit2 order held for its payer's transfer into BillPay that no payment accounts for, held for a refund by hand of that transfer before one is sent" },
                  reason: { type: "string", maxLength: 500 },
                  refund_tx_hash: { type: "string", description: "With close only: closes as refunded by hand a Permit2 order held so (the transaction checked on chain)" },
                },
              }),
            },
            responses: { "200": { description: "The decision was taken (its action record and the order)", content: json({ type: "object" }) }, ...problemResponses([400, 403, 404, 409, 415]) },
          },
        },
        "/ops/review/orphans": {
          post: {
            summary: "Operators: decide an x402 payment without an order: hold it for a refund by hand (before sending one), close it as refunded by hand (once held; the transaction checked on chain), or close it as kept",
            ...ops,
            parameters: [{ name: "X-Operator", in: "header", required: true, schema: { type: "string" }, description: "Who decides (recorded)" }],
            requestBody: {
              required: true,
              content: json({
                type: "object",
                required: ["chain", "token_address", "payer", "auth_nonce", "reason"],
                properties: { chain: { type: "string" }, token_address: { type: "string" }, payer: { type: "string" }, auth_nonce: { type: "string" }, action: { type: "string", enum: ["hold", "close"], default: "close" }, reason: { type: "string", maxLength: 500 }, refund_tx_hash: { type: "string" } },
              }),
            },
            responses: { "200": { description: "The decision was taken or refused (its action record)", content: json({ type: "object" }) }, ...problemResponses([400, 403, 404, 409, 415]) },
          },
        },
        "/metrics": {
          get: {
            summary: "Operators: Prometheus metrics (orders, vend latency, refunds, stuck and held orders, ledger lag, gas, treasury, upstreams)",
            ...operator,
            responses: { "200": { description: "Prometheus text format", content: { "text/plain": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) },
          },
        },
        "/console": { get: { summary: "Operators: the console overview (treasury and audit, chains, health, volume, orders, attention)", ...operator, responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) } } },
        "/console/orders": { get: { summary: "Operators: orders by status and rail, paged", ...operator, parameters: [{ name: "status", in: "query", required: false, schema: { type: "string" } }, { name: "rail", in: "query", required: false, schema: { type: "string", enum: ["x402", "pull"] } }, { name: "before", in: "query", required: false, schema: { type: "string" } }], responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) } } },
        "/console/orders/{requestId}": { get: { summary: "Operators: one order's path (payment, vend, refund)", ...operator, parameters: [{ name: "requestId", in: "path", required: true, schema: { type: "string" } }], responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) } } },
        "/console/orders/{requestId}/review": {
          post: {
            summary: "Operators: the order page's decision form (refund, serve or close a NEEDS_REVIEW order): the form's token and a reason; never from another site",
            ...operator,
            parameters: [{ name: "requestId", in: "path", required: true, schema: { type: "string" } }],
            requestBody: { required: true, content: { "application/x-www-form-urlencoded": { schema: { type: "object", required: ["csrf", "action", "reason"], properties: { csrf: { type: "string" }, action: { type: "string", enum: ["refund", "serve", "close", "hold"] }, reason: { type: "string" }, refund_tx_hash: { type: "string" } } } } } },
            responses: { "303": { description: "Recorded: back to the order's page, with the outcome" }, "400": { description: "No reason, or no such action: nothing recorded", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403, 404]) },
          },
        },
        "/console/orphans/{chain}/{token}/{payer}/{nonce}": {
          get: {
            summary: "Operators: an x402 payment without an order, its review and the actions taken",
            ...operator,
            parameters: ["chain", "token", "payer", "nonce"].map((name) => ({ name, in: "path", required: true, schema: { type: "string" } })),
            responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) },
          },
          post: {
            summary: "Operators: close an x402 payment without an order from its page (the form's token, a reason, and the hand refund's transaction when there is one)",
            ...operator,
            parameters: ["chain", "token", "payer", "nonce"].map((name) => ({ name, in: "path", required: true, schema: { type: "string" } })),
            requestBody: { required: true, content: { "application/x-www-form-urlencoded": { schema: { type: "object", required: ["csrf", "action", "reason"], properties: { csrf: { type: "string" }, action: { type: "string", enum: ["close"] }, reason: { type: "string" }, refund_tx_hash: { type: "string" } } } } } },
            responses: { "303": { description: "Recorded: back to the payment's page, with the outcome" }, "400": { description: "No reason: nothing recorded", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403, 404]) },
          },
        },
        "/console/money": { get: { summary: "Operators: refunds, orphan payments and what was done", ...operator, responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) } } },
        "/console/wallets": { get: { summary: "Operators: wallets with allowances and periodic limits", ...operator, responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) } } },
        "/console/schedules": { get: { summary: "Operators: schedules and their last runs", ...operator, responses: { "200": { description: "HTML", content: { "text/html": { schema: { type: "string" } } } }, ...problemResponses([401, 403]) } } },
      }),
      ...tagged("Health", {
        "/": {
          get: {
            summary: "Where to go from here: the API reference, the paid routes, discovery, MCP, A2A, the console (HTML, or JSON when asked for JSON)",
            responses: { "200": { description: "Links", content: { "text/html": { schema: { type: "string" } }, "application/json": { schema: { type: "object" } } } } },
          },
        },
        "/healthz": { get: { summary: "Liveness", responses: { "200": { description: "Up", content: json({ type: "object" }) } } } },
        "/readyz": {
          get: {
            summary: "Readiness: the database answers and the ledger keeps up with every chain (a `ledger` item per chain: state, head, indexed, lag)",
            responses: { "200": { description: "Ready", content: json({ type: "object" }) }, "503": { description: "Not ready: the ledger is stalled, behind its bound or away (the item says which)", content: json({ type: "object" }) } },
          },
        },
      }),
      ...tagged("Ledger", ledgerPaths(options.ledgerUrl ?? "http://127.0.0.1:42069")),
    },
  };
}
