/**
 * The x402 rail's routes: GET and POST /api/pay/x402 (the 402 challenge, then the paid
 * retry: the payment's amount is checked against what the server's own rate versions priced
 * the bill at, with the payer's signature; then settled, and the bill vended) and POST
 * /api/quote (the same price before paying). The challenge writes nothing. It is built in
 * challenge.ts, the payment checked in payment.ts and paid in pay.ts (shared with the MCP
 * tool), the price made in quote/quote.ts, the order run in orders/x402-flow.ts.
 */
import { encodePaymentResponseHeader } from "@x402/core/http";
import type { Context, Hono, MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import { z } from "zod";
import type { Config } from "../config.ts";
import { problemBody, problemResponse, validationFailed } from "../errors.ts";
import { parseJsonBody } from "../http-body.ts";
import { clientAddress } from "../limits.ts";
import { orderResult } from "../orders/fulfil.ts";
import type { Order } from "../orders/store.ts";
import { billHash, quoteBill } from "../quote/quote.ts";
import { quoteView } from "../quote/quote-view.ts";
import { paymentRequestSchema } from "../schemas.ts";
import { probeChallenge, type Challenge } from "./challenge.ts";
import { settlementOf, type OrderReceipts, type X402Payments } from "./pay.ts";
import { decodePayment, type PaymentHeader } from "../x402-protocol/payment.ts";
import { withStageClock } from "../stage-timing.ts";

const PAYMENT_HEADERS: PaymentHeader[] = ["X-PAYMENT", "PAYMENT-SIGNATURE"];
const EXPOSED_HEADERS = ["PAYMENT-REQUIRED", "PAYMENT-RESPONSE", "X-PAYMENT-RESPONSE", "X-Token-Fallback"];
/** What every answer of the route carries besides its request id: open to browsers, the x402 headers readable. */
const ROUTE_HEADERS = { "Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": EXPOSED_HEADERS.join(",") };
/** Answers made with every header the route gives already in place (challengeResponse): left as they are. */
const answeredWhole = new WeakSet<Response>();
// (a 402 for a payment that did not fit carries `code`: see server/x402-protocol/payment.ts, plus PAYMENT_NOT_SETTLED)

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

export interface X402RouteDeps {
  config: Config;
  /** Pays a bill with x402 (x402/pay.ts), shared with the MCP tool. */
  payments: X402Payments;
  billBodyLimit: MiddlewareHandler;
}

export function mountX402Routes(app: Hono, deps: X402RouteDeps): void {
  const { config, billBodyLimit } = deps;
  const payments = deps.payments;

  /** 200 with the order's result and, once settled, the settlement header of the payment's protocol. */
  const orderResponse = (
    c: Context,
    order: Order,
    header: PaymentHeader,
    extraHeaders: Record<string, string> = {},
    secret?: string,
    showCode = true,
    note?: Record<string, string>,
    receipts?: OrderReceipts,
    challenge?: Challenge,
    v1Only = false,
  ) => {
    if (order.status === "PAYMENT_FAILED" || order.status === "REFUSED") {
      // The payer's own order, so its id is theirs to see: GET it to follow a late landing.
      // The order's fields beside the problem's own (its status stays the HTTP status, 402).
      const { status: _outcome, success: _success, ...fields } = orderResult(order);
      const detail = order.failureReason ?? "the payment did not settle; sign a new one";
      if (!challenge) return problemResponse("PAYMENT_NOT_SETTLED", detail, fields);
      // A 402 is a payment challenge (the interface, and x402's clients, read one from it): the
      // bill's challenge, to sign anew, with the problem's fields beside it.
      const v1Body = { ...(challenge.v1Body as object), error: detail, ...problemBody("PAYMENT_NOT_SETTLED", detail, fields) };
      return challengeResponse(c, { v1Body, v2Header: challenge.v2Header }, { ...extraHeaders, "content-type": "application/problem+json" }, v1Only);
    }
    const headers: Record<string, string> = { ...extraHeaders, "cache-control": "no-store" };
    const settlement = settlementOf(order, receipts);
    if (settlement) headers[header === "X-PAYMENT" ? "X-PAYMENT-RESPONSE" : "PAYMENT-RESPONSE"] = encodePaymentResponseHeader(settlement);
    // The paying response is the payer's: the code, and (the first time) the order's secret.
    // A replay shows the code only with a proof: a settled payment is public on chain.
    return c.json({ ...orderResult(order, { showCode }), ...(secret ? { order_secret: secret } : {}), ...note, ...(receipts ? { receipt: receipts.bill } : {}) }, 200, headers);
  };

  const resourceUrl = (c: Context) => `${config.PUBLIC_URL ?? new URL(c.req.url).origin}/api/pay/x402`;
  const challengeContext = (c: Context) => payments.context(resourceUrl(c));

  /**
   * The 402: the v1 body, and the v2 header unless the client asked for protocol 1 only
   * (`?networks=v1`). Its headers are all in place, the route's own below included, in a plain
   * object: @hono/node-server writes one as it is, where a Headers object (what hono's c.body
   * makes of several headers, and what the route's answers get below) is built and then copied
   * header by header: 9% of a 402's CPU when profiled, the commonest answer of a public route.
   */
  const challengeResponse = (c: Context, challenge: { v1Body: unknown; v2Header: string }, extraHeaders: Record<string, string> = {}, v1Only = false) => {
    const res = new Response(JSON.stringify(challenge.v1Body), {
      status: 402,
      headers: {
        "content-type": "application/json",
        ...(v1Only ? {} : { "PAYMENT-REQUIRED": challenge.v2Header }),
        ...extraHeaders,
        ...ROUTE_HEADERS,
        "X-Request-Id": String(c.get("requestId")),
      },
    });
    answeredWhole.add(res);
    return res;
  };

  // The x402 route is public and probed from browsers: CORS open, x402 headers exposed.
  // hono's cors writes its headers to c.res before the handler runs, after which
  // @hono/node-server copies every answer through a web stream (profiled: about a quarter
  // of a 402's cost); so only the preflight goes through it, and every other answer gets
  // the same headers (and its request id, as hono's copy gave it) once it is made, or is
  // made with them (the 402, above).
  const preflight = cors({
    origin: "*",
    allowMethods: ["GET", "POST", "OPTIONS"],
    allowHeaders: ["Content-Type", "Authorization", "X-Wallet-Signature", "X-Wallet-Timestamp", "Idempotency-Key", ...PAYMENT_HEADERS],
    exposeHeaders: EXPOSED_HEADERS,
    maxAge: 600,
  });
  app.use("/api/pay/x402", async (c, next) => {
    if (c.req.method === "OPTIONS") return preflight(c, next);
    const timing = config.SERVER_TIMING ? await withStageClock(next) : (await next(), undefined);
    if (!timing && answeredWhole.has(c.res)) return;
    const headers = c.res.headers;
    if (timing) headers.set("Server-Timing", timing);
    for (const [name, value] of Object.entries(ROUTE_HEADERS)) headers.set(name, value);
    if (!headers.has("X-Request-Id")) headers.set("X-Request-Id", String(c.get("requestId")));
  });

  const v1NetworkNames = (c: Context) => c.req.query("networks") === "v1";

  app.get("/api/pay/x402", (c) => challengeResponse(c, probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c)));

  app.post(
    "/api/pay/x402",
    billBodyLimit,
    async (c) => {
      const text = await c.req.text();
      // A probing POST without a bill gets the probe challenge, as a GET does.
      if (text.trim() === "") return challengeResponse(c, probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c));
      const json = parseJsonBody(c.req.header("content-type"), text);
      if (json instanceof Response) return json;
      // So is `{}` or a partial bill (one missing any of the bill's required fields): the
      // interface's probing POST. A complete bill with a bad field is refused with its 4xx.
      if (isProbe(json)) return challengeResponse(c, probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c));
      const parsed = paymentRequestSchema.safeParse(json);
      if (!parsed.success) return validationProblem(parsed.error);
      const bill = parsed.data;

      const header = PAYMENT_HEADERS.find((h) => c.req.header(h) !== undefined) as PaymentHeader | undefined;
      const v1Only = v1NetworkNames(c);
      const outcome = await payments.pay({
        bill,
        resourceUrl: resourceUrl(c),
        presentedPayment: header !== undefined,
        ...(header ? { decode: () => decodePayment(header, c.req.header(header)!) } : {}),
        idempotencyKey: c.req.header("idempotency-key"),
        client: clientAddress(c),
        header: (name) => c.req.header(name),
        v1NetworkNames: v1Only,
      });
      const extraHeaders: Record<string, string> = outcome.warning ? { "X-Token-Fallback": outcome.warning } : {};
      switch (outcome.kind) {
        case "challenge": {
          const { challenge, rejected } = outcome;
          // A payment that did not fit: the same 402, plus the reason (code, error).
          const v1Body = rejected ? { ...challenge.v1Body, error: rejected.detail, code: rejected.code, detail: rejected.detail, ...rejected.extra } : challenge.v1Body;
          return challengeResponse(c, { v1Body, v2Header: challenge.v2Header }, extraHeaders, v1Only);
        }
        case "settling":
          return c.json({ ...orderResult(outcome.order, { showCode: false }), ...outcome.note }, 200, { "cache-control": "no-store" });
        case "order":
          return orderResponse(c, outcome.order, header!, extraHeaders, outcome.secret, outcome.showCode, outcome.note, outcome.receipts, outcome.challenge, v1Only);
      }
    },
  );

  // A bill's price before paying it: the same checks and the same price as the 402.
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
      const option = payments.deployedOption(bill);
      await payments.countNewBill(clientAddress(c), billHash(bill, option));
      const ctx = challengeContext(c);
      const { quote } = await quoteBill(bill, ctx, option);
      const headers: Record<string, string> = { "cache-control": "no-store", ...(option.warning ? { "X-Token-Fallback": option.warning } : {}) };
      return c.json(
        { quotes: [quoteView(bill, quote)], pay_with: ctx.resourceUrl },
        200,
        headers,
      );
    },
  );

}
