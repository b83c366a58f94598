/**
 * The service's HTTP surface (Hono): composes the routes. The x402 rail's are in
 * x402/route.ts, the console and /metrics in console/, the operators' in ops.ts. Routes
 * stay thin: parse and validate, call the module that does the work, answer; every failure
 * leaves as problem+json from errors.ts.
 */
import { Hono, type Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { Deployments } from "../lib/deployments.ts";
import type { Config } from "./config.ts";
import type { Db } from "./db.ts";
import { problemResponse, ServiceError, validationFailed } from "./errors.ts";
import { openApiDocument } from "./openapi.ts";
import { mountDocs, trustedServiceOrigin } from "./docs.ts";
import { didWebFor } from "../lib/receipt-verifier.ts";
import { mountLanding } from "./landing.ts";
import type { RateSource } from "./pricing/rates.ts";
import { internationalOptionsSchema } from "./schemas.ts";
import { chainInfo } from "../lib/chains.ts";
import { ledgerHealthy } from "../lib/ledger-watch.ts";
import { orderResult, type FlowDeps } from "./orders/fulfil.ts";
import { orderProof } from "./x402/proof.ts";
import { Orphans } from "./orders/ledger-pass.ts";
import { ReviewRecords, type ReviewDeps } from "./orders/review.ts";
import { BILLER_WEBHOOK_PATH, mountBillerWebhook } from "./orders/biller-webhook.ts";
import { opsRecords } from "./audit/orders.ts";
import { mountOps } from "./ops.ts";
import { operatorAllowed } from "./operator/auth.ts";
import { clientAddress, clientAddressMiddleware } from "./limits.ts";
import { buildHub, callbackOptions } from "./services.ts";
import { log, requestContext } from "./log.ts";
import { errorText } from "./log-safety.ts";
import { mountConsole } from "./console/routes.tsx";
import { OperatorState } from "./operator/state.ts";
import { requestId } from "hono/request-id";
import { Callbacks } from "./orders/callbacks.ts";
import { mountX402Routes } from "./x402/route.ts";
import { mountDiscovery } from "./discovery.ts";
import { x402Payments } from "./x402/pay.ts";
import { agentCard, mountA2a } from "./agent/a2a.ts";
import { DbTaskStore } from "./agent/a2a-tasks.ts";
import { a2aX402 } from "./agent/a2a-x402.ts";
import type { AgentHub } from "./agent/hub.ts";
import { LINK_NONCE_PATH, LINK_PATH, LINK_STATEMENT } from "../lib/agent-link.ts";
import { linkWallet, readWalletHeaders } from "./agent/link.ts";
import { mcpHandler } from "./agent/mcp.ts";
import { x402ToolPayments } from "./agent/x402-tools.ts";
import { agentTools } from "./agent/tools.ts";
import { bodyLimitFast, jsonBody } from "./http-body.ts";
import { customerQuestionSchema } from "./schemas.ts";

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

export function createApp(deps: AppDeps): Hono {
  const { config } = deps;
  const app = new Hono();
  const hub = deps.hub ?? buildHub(config, deps.deployments, deps.db, deps.flow, deps.rates);
  // One set of rate versions (and its in-memory current version) for both rails, and one set of rate limits.
  const versions = hub.versions;
  const limits = hub.deps.limits;
  const callbacks = new Callbacks(deps.db, deps.flow.orders, callbackOptions(config), log());

  // Every request has an id (X-Request-Id, kept from the caller when well formed), and every
  // log line written while serving it carries it (server/log.ts).
  app.use(requestId({ headerName: "X-Request-Id" }));
  // Who is calling, once per request: behind TRUSTED_PROXIES, the client the proxy names.
  app.use(clientAddressMiddleware(config.TRUSTED_PROXIES));
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
    log().error("unhandled error", { error: errorText(err) });
    return problemResponse(
      "INTERNAL",
      "an unexpected error occurred; if a payment was attached, retry with the same payment or GET /api/orders/{request_id} to see where it stands",
    );
  });
  // A path served by other methods says which (and sets Allow), so `GET /api/pay/x402` is not a dead end.
  app.notFound((c) => {
    const allowed = methodsServing(app, c.req.path);
    if (allowed.length === 0) return problemResponse("NOT_FOUND", `no route ${c.req.method} ${c.req.path}`);
    const res = problemResponse("NOT_FOUND", `no route ${c.req.method} ${c.req.path}: it is served by ${allowed.join(", ")} (see /docs)`);
    res.headers.set("allow", allowed.join(", "));
    return res;
  });

  app.get("/healthz", (c) => c.json({ ok: true }));
  // Ready when the database answers and the ledger keeps up with every chain (server/ledger-health.ts).
  app.get("/readyz", async (c) => {
    await deps.db.query("SELECT 1");
    const health = deps.flow.ledgerHealth;
    const ledger = health.latest().length > 0 ? health.latest() : await health.check();
    const ok = ledgerHealthy(ledger);
    return c.json(
      {
        ok,
        database: "ok",
        ledger: ledger.map((p) => ({
          chain: p.chain,
          state: p.state,
          head: p.head?.toString() ?? null,
          indexed: p.indexed?.toString() ?? null,
          lag_blocks: p.lagBlocks,
          still_seconds: Math.round(p.stillMs / 1000),
          ...(p.problem ? { problem: p.problem } : {}),
        })),
      },
      ok ? 200 : 503,
      { "cache-control": "no-store" },
    );
  });
  mountDocs(app, { document: openApiDocument({ deployments: deps.deployments, ledgerUrl: config.LEDGER_URL }), config });
  mountLanding(app, config.SERVICE_NAME);

  const billBodyLimit = bodyLimitFast(config.MAX_BODY_BYTES, () =>
    problemResponse("BODY_TOO_LARGE", `the body must be at most ${config.MAX_BODY_BYTES} bytes`),
  );

  const proofDeps = { deployments: deps.deployments, windowSeconds: config.LINK_SIGNATURE_WINDOW_SECONDS };
  const payments = x402Payments({ config, deployments: deps.deployments, flow: deps.flow, versions, limits, offers: hub.deps.offers, proof: proofDeps, receipts: hub.deps.receipts });
  mountX402Routes(app, { config, payments, billBodyLimit });
  mountDiscovery(app, { config, payments });

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
  // Without OPS_TOKEN the operator routes trust a loopback caller, and a page that rebinds its
  // own name to 127.0.0.1 is one: they answer the configured hosts only. With it, a rebound
  // page has no credentials for them.
  if (!config.OPS_TOKEN) {
    const isPublic = config.PUBLIC_URL !== undefined;
    // A caller the operator routes refuse anyway is refused there, with their own answer.
    const operatorHosts = async (c: Context, next: () => Promise<void>) => (operatorAllowed(c, undefined, isPublic) ? hostGuard(c, next) : next());
    for (const path of ["/console", "/console/*", "/ops", "/ops/*", "/metrics"]) app.use(path, operatorHosts);
  }
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
        chain_ids: Object.fromEntries(Object.keys(deps.deployments.chains).map((k) => [k, chainInfo(k).chainId])),
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

  // pay_bill paid per call with x402, over MCP and A2A alike.
  const x402Tools = x402ToolPayments(payments, tools);
  const mcp = mcpHandler({ name: config.SERVICE_NAME, version: "1.0.0", tools, ctx: toolContext, log: log(), baseUrl: config.PUBLIC_URL, x402: x402Tools });
  // Every MCP and A2A request is counted per client address before its body is read.
  const agentAddressLimit = async (c: Context, next: () => Promise<void>) => {
    if (c.req.method === "POST") await limits.take("agentAddress", clientAddress(c));
    await next();
  };
  app.use("/api/mcp", agentAddressLimit);
  app.use("/api/a2a", agentAddressLimit);
  app.post("/api/mcp", agentBodyLimit, (c) => mcp(c.req.raw, { client: clientAddress(c), header: (name) => c.req.header(name) }));
  // Stateless: no session to resume (GET) or end (DELETE).
  app.on(["GET", "DELETE"], "/api/mcp", () => new Response(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "Method not allowed: POST JSON-RPC to /api/mcp" } }), { status: 405, headers: { "content-type": "application/json", allow: "POST" } }));

  app.use("/api/a2a", agentBodyLimit);
  mountA2a(app, {
    card: (baseUrl) => agentCard({ name: config.SERVICE_NAME, version: "1.0.0", baseUrl, tools, payPerCall: true }),
    x402: a2aX402(x402Tools),
    tools,
    ctx: toolContext,
    log: log(),
    baseUrl: config.PUBLIC_URL,
    tasks: new DbTaskStore(deps.db),
    mcp: (request, c) => mcp(request, { client: clientAddress(c), header: (name) => c.req.header(name) }),
  });

  app.use(BILLER_WEBHOOK_PATH, billBodyLimit);
  mountBillerWebhook(app, { flow: deps.flow, limits, token: config.BILLER_WEBHOOK_TOKEN });

  const orphans = new Orphans(deps.db);
  // Operators' decisions on what is held for review (orders/review.ts), from the console and /ops.
  const review: ReviewDeps = { ...deps.flow, reviews: new ReviewRecords(deps.db), db: deps.db };
  mountOps(app, { token: config.OPS_TOKEN, public: config.PUBLIC_URL !== undefined, publicUrl: config.PUBLIC_URL, orders: deps.flow.orders, orphans, review });
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
    ledgerHealth: deps.flow.ledgerHealth,
  });
  mountConsole(app, {
    state: operatorState,
    metrics: deps.flow.metrics,
    deployments: deps.deployments,
    ledgerUrl: config.LEDGER_URL,
    token: config.OPS_TOKEN,
    isPublic: config.PUBLIC_URL !== undefined,
    callbacks,
    records: () => opsRecords(deps.flow.orders, orphans, review.reviews),
    review,
    publicUrl: config.PUBLIC_URL,
  });

  // International airtime and data, step by step to a payable bill: the same answers as list_international_options.
  app.get("/api/international", async (c) => {
    const parsed = internationalOptionsSchema.strict().safeParse(c.req.query());
    if (!parsed.success) throw validationFailed(parsed.error, "(query)");
    return c.json(await hub.internationalOptions(parsed.data));
  });

  // The biller's number check before paying (verify_customer): free, cached, limited per client address.
  app.post("/api/verify-customer", billBodyLimit, async (c) => {
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const parsed = customerQuestionSchema.safeParse(body);
    if (!parsed.success) throw validationFailed(parsed.error);
    return c.json(await hub.verifyCustomer(parsed.data, `address:${clientAddress(c)}`), 200, { "cache-control": "no-store" });
  });

  app.get("/api/orders/:requestId", async (c) => {
    await limits.take("orderAddress", clientAddress(c));
    const requestId = c.req.param("requestId");
    if (!/^req_\d{12}[0-9a-f]{20}$/.test(requestId)) {
      return problemResponse("VALIDATION_FAILED", "request_id must look like req_ followed by the id a payment returned");
    }
    const order = await deps.flow.orders.get(requestId);
    if (!order) return problemResponse("ORDER_NOT_FOUND", `no order ${requestId}`);
    // Anyone holding the id sees where the order stands; the purchased code needs proof (x402/proof.ts).
    const showCode = await orderProof((name) => c.req.header(name), order, proofDeps);
    // Where the result is sent is the payer's to see (a receiver's URL may carry its own token), as the code is.
    const status = await callbacks.status(order.requestId);
    const callback = status && !showCode ? (({ url: _url, ...rest }) => rest)(status) : status;
    // Signed for the order as it stands, so a refunded order's receipt names the refund (orders/receipts.ts).
    const receipt = await hub.deps.receipts.billReceipt(order);
    return c.json({ ...orderResult(order, { showCode }), ...(callback ? { callback } : {}), ...(receipt ? { receipt } : {}) }, 200, { "cache-control": "no-store" });
  });

  // The key receipts are signed with, and how to check one offline.
  app.get("/api/receipts/signer", (c) => {
    const origin = trustedServiceOrigin(c.req.raw, config);
    return c.json(hub.deps.receipts.published(origin ? didWebFor(origin) : undefined), 200, { "cache-control": "public, max-age=300", "access-control-allow-origin": "*", ...(config.PUBLIC_URL ? {} : { vary: "Host" }) });
  });
  // did:web: the receipt key, bound to the host a receipt's resourceUrl names (orders/receipts.ts).
  app.get("/.well-known/did.json", (c) => {
    const origin = trustedServiceOrigin(c.req.raw, config);
    if (!origin) return problemResponse("NOT_FOUND", "this service has no DID under that host: ask it at PUBLIC_URL, or at a host in ALLOWED_HOSTS");
    return c.body(JSON.stringify(hub.deps.receipts.didDocument(didWebFor(origin))), 200, {
      "content-type": "application/did+json",
      "cache-control": "public, max-age=300",
      "access-control-allow-origin": "*",
      ...(config.PUBLIC_URL ? {} : { vary: "Host" }),
    });
  });

  return app;
}

/** The methods the app's own routes (not its middleware) serve `path` with. */
function methodsServing(app: Hono, path: string): string[] {
  const methods = new Set<string>();
  for (const route of app.routes) {
    if (route.method === "ALL" || route.path.includes("*")) continue;
    const pattern = new RegExp(`^${route.path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/:[A-Za-z_]+/g, "[^/]+")}$`);
    if (pattern.test(path)) methods.add(route.method);
  }
  return [...methods].sort();
}
