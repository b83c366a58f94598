/**
 * The service's HTTP surface (Hono). Routes stay thin: parse and validate, call the
 * module that does the work, answer; every failure leaves as problem+json from errors.ts.
 */
import { Hono, type Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import { cors } from "hono/cors";
import { z } from "zod";
import type { Deployments } from "../lib/deployments.ts";
import type { Config } from "./config.ts";
import type { Db } from "./db.ts";
import { problemResponse, ServiceError, validationFailed } from "./errors.ts";
import { openApiDocument } from "./openapi.ts";
import { mountDocs } from "./docs.ts";
import type { RateSource } from "./pricing/rates.ts";
import { internationalOptionsSchema, paymentRequestSchema, type PaymentRequest } from "./schemas.ts";
import { encodePaymentResponseHeader } from "@x402/core/http";
import { CHAINS } from "../lib/chains.ts";
import { orderResult, type FlowDeps } from "./orders/fulfil.ts";
import { replayOf, startX402Order } from "./orders/x402-flow.ts";
import { orderProof } from "./orders/proof.ts";
import { Orphans } from "./orders/ledger-pass.ts";
import { mountOps } from "./ops.ts";
import { clientAddress } from "./limits.ts";
import { quoteView } from "./pricing/quote-view.ts";
import { publicClientFor } from "../lib/chain-client.ts";
import { rpcUrlFor } from "../lib/deployments.ts";
import { buildHub, callbackOptions } from "./services.ts";
import { log, requestContext } from "./log.ts";
import { mountConsole } from "./console/routes.tsx";
import { OperatorState } from "./operator/state.ts";
import { requestId } from "hono/request-id";
import { Callbacks, checkCallbackUrl } from "./callbacks.ts";
import type { Order } from "./orders/store.ts";
import { buildChallenge, probeChallenge, requirement, resolveOption, type ChallengeContext } from "./x402/challenge.ts";
import { billHash, quoteBill } from "./pricing/quote.ts";
import { checkPayment, checkSignature, decodePayment, PaymentRejected, type DecodedPayment, type PaymentHeader } from "./x402/payment.ts";
import { agentCard, mountA2a } from "./agent/a2a.ts";
import type { AgentHub } from "./agent/hub.ts";
import { LINK_NONCE_PATH, LINK_PATH, LINK_STATEMENT } from "../lib/agent-link.ts";
import { linkWallet, readWalletHeaders } from "./agent/link.ts";
import { mcpHandler } from "./agent/mcp.ts";
import { agentTools } from "./agent/tools.ts";
import { jsonBody, parseJsonBody } from "./http-body.ts";

export interface AppDeps {
  config: Config;
  db: Db;
  deployments: Deployments;
  rates: RateSource;
  /** Settlement, vending and refunds (the orders' store lives in it). */
  flow: FlowDeps;
  /** The agent hub behind /api/agent/link, /api/mcp and /api/a2a; built from the rest when absent. */
  hub?: AgentHub;
}

const PAYMENT_HEADERS: PaymentHeader[] = ["X-PAYMENT", "PAYMENT-SIGNATURE"];
const EXPOSED_HEADERS = ["PAYMENT-REQUIRED", "PAYMENT-RESPONSE", "X-PAYMENT-RESPONSE", "X-Token-Fallback"];
// (a 402 for a payment that did not fit carries `code`: see server/x402/payment.ts, plus PAYMENT_NOT_SETTLED)

/** The fields a bill must have; a JSON object lacking any of them is a probe, not a bill. */
const REQUIRED_BILL_FIELDS = Object.entries(paymentRequestSchema.shape)
  .filter(([, schema]) => !schema.safeParse(undefined).success)
  .map(([name]) => name);

function isProbe(json: unknown): boolean {
  return typeof json === "object" && json !== null && !Array.isArray(json) && REQUIRED_BILL_FIELDS.some((f) => !(f in json));
}

function validationProblem(error: z.ZodError) {
  const e = validationFailed(error);
  return problemResponse(e.code, e.detail, e.extra);
}

export function createApp(deps: AppDeps): Hono {
  const { config } = deps;
  const app = new Hono();
  const hub = deps.hub ?? buildHub(config, deps.deployments, deps.db, deps.flow, deps.rates);
  // One store of locked quotes (and its cache) for both rails, and one set of rate limits.
  const quotes = hub.quotes;
  const limits = hub.deps.limits;
  const callbacks = new Callbacks(deps.db, deps.flow.orders, callbackOptions(config), log());

  /** The order this payment's (chain, token, payer, nonce) already locked, if the header decodes and one exists. */
  const orderOfPayment = async (payment: DecodedPayment | undefined, chain: string, tokenAddress: string) =>
    payment && (await deps.flow.orders.findByPayment(chain, tokenAddress, payment.authorization.from, payment.authorization.nonce));

  /** 200 with the order's result and, once settled, the settlement header of the payment's protocol. */
  const orderResponse = (c: Context, order: Order, header: PaymentHeader, extraHeaders: Record<string, string> = {}, secret?: string) => {
    if (order.status === "PAYMENT_FAILED" || order.status === "REFUSED") {
      // The payer's own order, so its id is theirs to see: GET it to follow a late landing.
      // The order's fields beside the problem's own (its status stays the HTTP status, 402).
      const { status: _outcome, success: _success, ...fields } = orderResult(order);
      return problemResponse("PAYMENT_NOT_SETTLED", order.failureReason ?? "the payment did not settle; sign a new one", fields);
    }
    const headers: Record<string, string> = { ...extraHeaders, "cache-control": "no-store" };
    if (order.txHash) {
      headers[header === "X-PAYMENT" ? "X-PAYMENT-RESPONSE" : "PAYMENT-RESPONSE"] = encodePaymentResponseHeader({
        success: true,
        transaction: order.txHash,
        network: CHAINS[order.chain as keyof typeof CHAINS].caip2,
        payer: order.payer,
      });
    }
    // The paying response is the payer's: the code, and (the first time) the order's secret.
    return c.json({ ...orderResult(order), ...(secret ? { order_secret: secret } : {}) }, 200, headers);
  };

  const challengeContext = (c: Context): ChallengeContext => ({
    deployments: deps.deployments,
    catalogue: deps.flow.catalogue,
    quotes,
    rates: deps.rates,
    fees: config.SERVICE_FEES_USD,
    ttlSeconds: config.QUOTE_TTL_SECONDS,
    resourceUrl: `${config.PUBLIC_URL ?? new URL(c.req.url).origin}/api/pay/x402`,
  });

  /** The 402: the v1 body, and the v2 header unless the client asked for protocol 1 only (`?networks=v1`). */
  const challengeResponse = (challenge: { v1Body: unknown; v2Header: string }, extraHeaders: Record<string, string> = {}, v1Only = false) =>
    new Response(JSON.stringify(challenge.v1Body), {
      status: 402,
      headers: { "content-type": "application/json", ...(v1Only ? {} : { "PAYMENT-REQUIRED": challenge.v2Header }), ...extraHeaders },
    });

  // Every request has an id (X-Request-Id, kept from the caller when well formed), and every
  // log line written while serving it carries it (server/log.ts).
  app.use(requestId({ headerName: "X-Request-Id" }));
  app.use((c, next) => requestContext.run({ reqId: c.get("requestId") }, next));
  // One structured line per request (never headers or bodies: they carry payments and keys).
  if (config.LOG_REQUESTS) {
    app.use(async (c, next) => {
      const started = performance.now();
      await next();
      log().info("request", { method: c.req.method, path: c.req.path, status: c.res.status, ms: Math.round(performance.now() - started) });
    });
  }

  app.onError((err) => {
    if (err instanceof ServiceError) return problemResponse(err.code, err.detail, err.extra);
    console.error(JSON.stringify({ level: "error", msg: "unhandled error", error: err.message }));
    return problemResponse(
      "INTERNAL",
      "an unexpected error occurred; if a payment was attached, retry with the same payment or GET /api/orders/{request_id} to see where it stands",
    );
  });
  app.notFound((c) => problemResponse("NOT_FOUND", `no route ${c.req.method} ${c.req.path}`));

  app.get("/healthz", (c) => c.json({ ok: true }));
  app.get("/readyz", async (c) => {
    await deps.db.query("SELECT 1");
    return c.json({ ok: true });
  });
  const openApi = openApiDocument({ deployments: deps.deployments, ledgerUrl: config.LEDGER_URL });
  app.get("/openapi.json", (c) => c.json(openApi));
  mountDocs(app);

  // The x402 route is public and probed from browsers: CORS open, x402 headers exposed.
  app.use(
    "/api/pay/x402",
    cors({
      origin: "*",
      allowMethods: ["GET", "POST", "OPTIONS"],
      allowHeaders: ["Content-Type", ...PAYMENT_HEADERS],
      exposeHeaders: EXPOSED_HEADERS,
      maxAge: 600,
    }),
  );

  const v1NetworkNames = (c: Context) => c.req.query("networks") === "v1";
  const billBodyLimit = bodyLimit({
    maxSize: config.MAX_BODY_BYTES,
    onError: () => problemResponse("BODY_TOO_LARGE", `the body must be at most ${config.MAX_BODY_BYTES} bytes`),
  });
  /** The bill's chain and token; UNSUPPORTED_CHAIN when this environment has no deployment for the chain. */
  const deployedOption = (bill: Pick<PaymentRequest, "blockchain" | "token">) => {
    const option = resolveOption(bill);
    if (!deps.deployments.chains[option.chain]) throw new ServiceError("UNSUPPORTED_CHAIN", `${option.chain} has no deployment in this environment`);
    return option;
  };
  /** A bill with no live quote writes one: those are counted per caller (repeats of a quoted bill are not). */
  const countNewQuote = async (c: Context, hash: string, option: { chain: string; token: string }) => {
    if (!(await quotes.live(hash, option.chain, option.token))) await limits.take("challengeAddress", clientAddress(c));
  };

  app.get("/api/pay/x402", (c) => challengeResponse(probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c)));

  app.post(
    "/api/pay/x402",
    billBodyLimit,
    async (c) => {
      const text = await c.req.text();
      // A probing POST without a bill gets the probe challenge, as a GET does.
      if (text.trim() === "") return challengeResponse(probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c));
      const json = parseJsonBody(c.req.header("content-type"), text);
      if (json instanceof Response) return json;
      // So is `{}` or a partial bill (one missing any of the bill's required fields): the
      // interface's probing POST. A complete bill with a bad field is refused with its 4xx.
      if (isProbe(json)) return challengeResponse(probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c));
      const parsed = paymentRequestSchema.safeParse(json);
      if (!parsed.success) return validationProblem(parsed.error);
      const bill = parsed.data;
      checkCallbackUrl(bill.callback_url, config.CALLBACK_ALLOW_PRIVATE);
      const option = deployedOption(bill);

      const ctx = challengeContext(c);
      const d = deps.deployments.chains[option.chain]!;
      const tokenAddress = d.tokens.find((t) => t.symbol === option.token)!.address;
      const header = PAYMENT_HEADERS.find((h) => c.req.header(h) !== undefined) as PaymentHeader | undefined;

      const bodyHash = billHash(bill, option);
      let presented: DecodedPayment | undefined;
      try {
        presented = header ? decodePayment(header, c.req.header(header)!) : undefined;
      } catch (err) {
        if (!(err instanceof PaymentRejected)) throw err; // a malformed header is answered with the challenge below
      }
      // A payment seen before gets its order's result, whatever its quote or clock says now,
      // but only the very payment stored, signature included, for the same bill (replayOf).
      const seen = await orderOfPayment(presented, option.chain, tokenAddress);
      if (seen) {
        let replayed: Order;
        try {
          replayed = replayOf(seen, presented!, bodyHash);
        } catch (err) {
          // A payment copied from the chain with guessed bills: each wrong guess counts.
          await limits.take("challengeAddress", clientAddress(c));
          throw err;
        }
        return orderResponse(c, replayed, header!);
      }

      // Calls carrying a payment are never counted (it may be settling).
      if (!presented) await countNewQuote(c, bodyHash, option);
      const { hash, quote } = await quoteBill(bill, ctx, option);
      const description = `${bill.serviceCategory} ${bill.serviceID} for ${bill.billersCode}: ${bill.nairaAmount} NGN`;
      const challenge = buildChallenge(ctx, [{ ...option, amount: quote.amount }], description, v1NetworkNames(c));
      const extraHeaders: Record<string, string> = option.warning ? { "X-Token-Fallback": option.warning } : {};

      const v1Only = v1NetworkNames(c);
      if (!header) return challengeResponse(challenge, extraHeaders, v1Only);
      const rejected = (code: string, detail: string) =>
        challengeResponse({ v1Body: { ...challenge.v1Body, error: detail, code }, v2Header: challenge.v2Header }, extraHeaders, v1Only);

      // A payment that does not fit this bill's locked quote, or is not the payer's
      // signature, is answered like no payment: 402 with the challenge, plus the reason.
      // Nothing is locked or settled.
      let payment: DecodedPayment;
      let fit: { notSettleable?: string };
      try {
        payment = presented ?? decodePayment(header, c.req.header(header)!);
        fit = checkPayment(payment, {
          chain: option.chain,
          asset: tokenAddress,
          payTo: d.billPay.address,
          amount: quote.amount,
          wallet: bill.wallet_address,
          maxTimeoutSeconds: config.QUOTE_TTL_SECONDS,
          nowSeconds: BigInt(Math.floor(Date.now() / 1000)),
        });
        const token = d.tokens.find((t) => t.symbol === option.token)!;
        await checkSignature(
          payment,
          { name: token.name, version: token.eip712Version ?? "", chainId: CHAINS[option.chain].chainId, address: token.address },
          publicClientFor(option.chain, rpcUrlFor(option.chain, d)),
        );
      } catch (err) {
        if (!(err instanceof PaymentRejected)) throw err;
        return rejected(err.code, err.detail);
      }

      const { description: _d, ...requirements } = requirement(ctx, { ...option, amount: quote.amount }, description);
      const { order, secret } = await startX402Order(deps.flow, {
        bill,
        bodyHash: hash,
        chain: option.chain,
        token: option.token,
        tokenAddress,
        amount: quote.amount,
        payment,
        requirements,
        resourceUrl: ctx.resourceUrl,
        notSettleable: fit.notSettleable,
      });
      return orderResponse(c, order, header, extraHeaders, secret);
    },
  );

  // A bill's price before paying it: the same checks and the same locked quote as the 402.
  app.use("/api/quote", cors({ origin: "*", allowMethods: ["POST", "OPTIONS"], allowHeaders: ["Content-Type"], exposeHeaders: ["X-Token-Fallback"], maxAge: 600 }));
  app.post(
    "/api/quote",
    billBodyLimit,
    async (c) => {
      const json = parseJsonBody(c.req.header("content-type"), await c.req.text());
      if (json instanceof Response) return json;
      const parsed = paymentRequestSchema.safeParse(json);
      if (!parsed.success) return validationProblem(parsed.error);
      const bill = parsed.data;
      const option = deployedOption(bill);
      await countNewQuote(c, billHash(bill, option), option);
      const ctx = challengeContext(c);
      const { quote } = await quoteBill(bill, ctx, option);
      const headers: Record<string, string> = { "cache-control": "no-store", ...(option.warning ? { "X-Token-Fallback": option.warning } : {}) };
      return c.json(
        { quotes: [quoteView(bill, quote, config.SERVICE_FEES_USD, deps.rates.source ?? "configured")], pay_with: ctx.resourceUrl },
        200,
        headers,
      );
    },
  );

  // The agent routes answer only the hosts configured, against DNS rebinding (the SDKs leave it to the app).
  const allowedHosts = new Set([...config.ALLOWED_HOSTS, ...(config.PUBLIC_URL ? [new URL(config.PUBLIC_URL).hostname.toLowerCase()] : [])]);
  const hostGuard = async (c: Context, next: () => Promise<void>) => {
    const hostname = (value: string) => {
      try {
        return new URL(value.includes("://") ? value : `http://${value}`).hostname.toLowerCase();
      } catch {
        return "";
      }
    };
    const host = c.req.header("host");
    const origin = c.req.header("origin");
    if (!host || !allowedHosts.has(hostname(host))) return problemResponse("HOST_NOT_ALLOWED", `host "${host ?? ""}" is not served here`);
    if (origin && origin !== "null" && !allowedHosts.has(hostname(origin))) return problemResponse("HOST_NOT_ALLOWED", `origin "${origin}" is not allowed`);
    await next();
  };
  for (const path of [LINK_PATH, LINK_NONCE_PATH, "/api/mcp", "/api/a2a", "/.well-known/agent-card.json"]) app.use(path, hostGuard);
  /** Where clients reach this service: PUBLIC_URL, or (served locally only) the allowed Host they used. */
  const serviceOrigin = (c: Context) => new URL(config.PUBLIC_URL ?? new URL(c.req.url).origin);

  // Sign-In with Ethereum links: the nonce to sign, with the fields the message must carry.
  app.get(LINK_NONCE_PATH, async (c) => {
    await limits.take("linkAddress", clientAddress(c));
    const origin = serviceOrigin(c);
    return c.json(
      {
        nonce: await hub.deps.links.issueNonce(),
        domain: origin.host,
        uri: `${origin.origin}${LINK_PATH}`,
        statement: LINK_STATEMENT,
        version: "1",
        chain_ids: Object.fromEntries(Object.keys(deps.deployments.chains).map((k) => [k, CHAINS[k as keyof typeof CHAINS].chainId])),
        expires_in_seconds: config.LINK_SIGNATURE_WINDOW_SECONDS,
      },
      200,
      { "cache-control": "no-store" },
    );
  });

  const tools = agentTools(config.BATCH_MAX_BILLS);
  const toolContext = { hub, tools };
  const agentBodyLimit = bodyLimit({
    maxSize: config.MAX_BODY_BYTES * 4,
    onError: () => problemResponse("BODY_TOO_LARGE", `the body must be at most ${config.MAX_BODY_BYTES * 4} bytes`),
  });

  // A full link queue is refused first of all, before the body is read: a flood costs little.
  app.post(LINK_PATH, async (_c, next) => {
    hub.deps.gates.link.admit();
    await next();
  });
  app.post(LINK_PATH, billBodyLimit, async (c) => {
    // Counted per caller before the signature check and the PIN hash; per wallet only once
    // the wallet's signature verifies (else a stranger could keep a victim from re-linking).
    await limits.take("linkAddress", clientAddress(c));
    const headers = readWalletHeaders((name) => c.req.header(name));
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const linked = await hub.deps.gates.link.run(() =>
      linkWallet(
        {
          serviceName: config.SERVICE_NAME,
          windowSeconds: config.LINK_SIGNATURE_WINDOW_SECONDS,
          deployments: deps.deployments,
          links: hub.deps.links,
          origin: serviceOrigin(c),
          verified: (wallet) => limits.take("linkWallet", wallet.toLowerCase()),
        },
        headers,
        body,
      ),
    );
    return c.json(linked, 200, { "cache-control": "no-store" });
  });

  const mcp = mcpHandler({ name: config.SERVICE_NAME, version: "1.0.0", tools, ctx: toolContext, log: log(), baseUrl: config.PUBLIC_URL });
  app.post("/api/mcp", agentBodyLimit, (c) => mcp(c.req.raw));
  // Stateless: no session to resume (GET) or end (DELETE).
  app.on(["GET", "DELETE"], "/api/mcp", () => new Response(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "Method not allowed: POST JSON-RPC to /api/mcp" } }), { status: 405, headers: { "content-type": "application/json", allow: "POST" } }));

  app.use("/api/a2a", agentBodyLimit);
  mountA2a(app, {
    card: (baseUrl) => agentCard({ name: config.SERVICE_NAME, version: "1.0.0", baseUrl, tools }),
    tools,
    ctx: toolContext,
    log: log(),
    baseUrl: config.PUBLIC_URL,
  });

  mountOps(app, { token: config.OPS_TOKEN, public: config.PUBLIC_URL !== undefined, orders: deps.flow.orders, orphans: new Orphans(deps.db) });
  const operatorState = new OperatorState({
    db: deps.db,
    deployments: deps.deployments,
    ledgerUrl: config.LEDGER_URL,
    rates: deps.rates,
    biller: deps.flow.biller,
    facilitators: {
      CELO: { url: config.FACILITATOR_URL_CELO, client: deps.flow.facilitators.CELO! },
      BASE: { url: config.FACILITATOR_URL_BASE, client: deps.flow.facilitators.BASE! },
    },
    keys: deps.flow.operator.addresses,
    stuckAfterSeconds: config.STUCK_AFTER_SECONDS,
  });
  mountConsole(app, {
    state: operatorState,
    metrics: deps.flow.metrics,
    deployments: deps.deployments,
    ledgerUrl: config.LEDGER_URL,
    token: config.OPS_TOKEN,
    isPublic: config.PUBLIC_URL !== undefined,
    callbacks,
  });

  // International airtime and data, step by step to a payable bill: the same answers as list_international_options.
  app.get("/api/international", async (c) => {
    const parsed = internationalOptionsSchema.strict().safeParse(c.req.query());
    if (!parsed.success) throw validationFailed(parsed.error, "(query)");
    return c.json(await hub.internationalOptions(parsed.data));
  });

  app.get("/api/orders/:requestId", async (c) => {
    await limits.take("orderAddress", clientAddress(c));
    const requestId = c.req.param("requestId");
    if (!/^req_\d{12}[0-9a-f]{20}$/.test(requestId)) {
      return problemResponse("VALIDATION_FAILED", "request_id must look like req_ followed by the id a payment returned");
    }
    const order = await deps.flow.orders.get(requestId);
    if (!order) return problemResponse("ORDER_NOT_FOUND", `no order ${requestId}`);
    // Anyone holding the id sees where the order stands; the purchased code needs proof (orders/proof.ts).
    const showCode = await orderProof(c.req.header("authorization"), order, hub.deps.links);
    const callback = await callbacks.status(order.requestId);
    return c.json({ ...orderResult(order, { showCode }), ...(callback ? { callback } : {}) }, 200, { "cache-control": "no-store" });
  });

  return app;
}
