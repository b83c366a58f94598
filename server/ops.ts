/**
 * The operators' routes, read by `npm run audit` to reconcile the service's orders with the
 * ledger: every order (a page at a time), every orphan record and every operator's review
 * action, with their money fields and never a purchased code or secret. And the review
 * routes `npm run review` acts through (orders/review.ts): what waits for an operator, and
 * their decisions on it. Guarded as every operators' surface is (operator/auth.ts); a
 * decision is a POST of JSON with an X-Operator header, never from another site (operator/csrf.ts).
 */
import type { Context, Hono, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { z } from "zod";
import { problemResponse, validationFailed } from "./errors.ts";
import { jsonBody } from "./http-body.ts";
import { operatorIdentity, requireOperator } from "./operator/auth.ts";
import { crossSite } from "./operator/csrf.ts";
import type { Orphans } from "./orders/ledger-pass.ts";
import { ledgerUnderKeyCaughtUp } from "./orders/ledger-view.ts";
import { MAX_REASON, ORPHAN_ACTIONS, resolveOrder, resolveOrphanPayment, REVIEW_ACTIONS, validOrphanKey, whyNot, type ReviewDeps, type ReviewRecord, type ReviewResult } from "./orders/review.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND, type Order, type OrderStore } from "./orders/store.ts";
import { MAX_PAGE, opsOrder } from "./audit/order-record.ts";
import { errorText } from "./log-safety.ts";
import { amountIn, describeAmount, tokenAt } from "../lib/token-amounts.ts";

const refundTxHash = z.string().regex(/^0x[0-9a-fA-F]{64}$/, "a 0x-prefixed 32-byte transaction hash");
const orderDecision = z
  .object({ action: z.enum(REVIEW_ACTIONS), reason: z.string().trim().min(1, "a reason is required").max(MAX_REASON), refund_tx_hash: refundTxHash.optional() })
  .strict();
const orphanDecision = z
  .object({
    chain: z.string(),
    token_address: z.string(),
    payer: z.string(),
    auth_nonce: z.string(),
    action: z.enum(ORPHAN_ACTIONS).default("close"),
    reason: z.string().trim().min(1, "a reason is required").max(MAX_REASON),
    refund_tx_hash: refundTxHash.optional(),
  })
  .strict();

/** A decision's answer: 200 when it was taken (done, under way, or tried and back in review), 409 when refused with nothing moved. */
/** An operator's action with its amount as an operator reads it, given how to name the amount. */
function namedAction(record: ReviewRecord, name: (units: string) => string) {
  return { ...record, amount_text: record.amount ? name(record.amount) : null };
}

function decided(c: Context, result: ReviewResult, name: (units: string) => string) {
  const body = { action: namedAction(result.record, name), ...(result.order ? { order: opsOrder(result.order) } : {}) };
  if (result.record.outcome === "REFUSED") return problemResponse("REVIEW_REFUSED", result.record.detail ?? "refused", body);
  return c.json(body, 200, { "cache-control": "no-store" });
}

export function mountOps(app: Hono, deps: { token?: string; public: boolean; publicUrl?: string; orders: OrderStore; orphans: Orphans; review: ReviewDeps }): void {
  app.use("/ops/*", requireOperator(deps.token, deps.public));

  /** A decision comes from a script: JSON, an X-Operator header, and nothing that says another site sent it. */
  const fromScript: MiddlewareHandler = async (c, next) => {
    const why = crossSite(c, deps.publicUrl);
    if (why) return problemResponse("OPS_CROSS_SITE", why);
    if (!(c.req.header("content-type") ?? "").toLowerCase().startsWith("application/json")) return problemResponse("UNSUPPORTED_MEDIA_TYPE", "a decision is sent as application/json");
    if (!c.req.header("x-operator")) return problemResponse("OPS_OPERATOR_NAME", "send the operator's name in the X-Operator header");
    await next();
  };
  const small = bodyLimit({ maxSize: 8_192, onError: () => problemResponse("BODY_TOO_LARGE", "a decision's body is at most 8192 bytes") });
  const operator = (c: Context) => operatorIdentity(c, deps.token);

  app.get("/ops/reviews", async (c) => c.json({ actions: await deps.review.reviews.all() }, 200, { "cache-control": "no-store" }));

  // What waits for an operator: orders held for review and x402 payments no order accounts for.
  app.get("/ops/review", async (c) => {
    const ids = await deps.review.db.query<{ request_id: string }>(`SELECT request_id FROM bill_order WHERE status = 'NEEDS_REVIEW' ORDER BY updated_at LIMIT 500`);
    const orders = (await Promise.all(ids.map((r) => deps.orders.get(r.request_id)))).filter((o): o is Order => !!o);
    const orphans = (await deps.orphans.all()).payments
      .filter((p) => p.status === "NEEDS_REVIEW" || p.status === ORPHAN_HELD_FOR_HAND_REFUND)
      .map((p) => ({ ...p, token: tokenAt(deps.review.deployments, String(p.chain), String(p.token_address))?.symbol ?? null, amount_text: describeAmount(deps.review.deployments, String(p.chain), String(p.token_address), String(p.amount)) }));
    return c.json({ orders: orders.map(opsOrder), orphans }, 200, { "cache-control": "no-store" });
  });

  app.get("/ops/review/orders/:requestId", async (c) => {
    const order = await deps.orders.get(c.req.param("requestId"));
    if (!order) return problemResponse("ORDER_NOT_FOUND", `no order ${c.req.param("requestId")}`);
    const actions = (await deps.review.reviews.forOrder(order.requestId)).map((a) => namedAction(a, (units) => amountIn(order.chain, order.token, units)));
    try {
      const view = await ledgerUnderKeyCaughtUp(deps.review, order);
      // Each amount as an operator reads it, in the token the ledger saw (which may not be the order's).
      const named = <T extends { chainId: number; token: string; amount: string }>(x: T) => ({ ...x, amount_text: describeAmount(deps.review.deployments, x.chainId, x.token, x.amount) });
      const ledger = { payment: view.payment && named(view.payment), refunds: view.refunds.map(named) };
      return c.json({ order: opsOrder(order), ledger, refused: whyNot(order, view), actions }, 200, { "cache-control": "no-store" });
    } catch (err) {
      return c.json({ order: opsOrder(order), ledger: { error: errorText(err) }, actions }, 200, { "cache-control": "no-store" });
    }
  });

  app.post("/ops/review/orders/:requestId", fromScript, small, async (c) => {
    const name = operator(c);
    if (!name) return problemResponse("OPS_OPERATOR_NAME", "send the operator's name in the X-Operator header");
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const parsed = orderDecision.safeParse(body);
    if (!parsed.success) throw validationFailed(parsed.error);
    const { refund_tx_hash, ...decision } = parsed.data;
    const result = await resolveOrder(deps.review, { requestId: c.req.param("requestId"), ...decision, operator: name, refundTxHash: refund_tx_hash });
    return decided(c, result, (units) => (result.order ? amountIn(result.order.chain, result.order.token, units) : units));
  });

  app.post("/ops/review/orphans", fromScript, small, async (c) => {
    const name = operator(c);
    if (!name) return problemResponse("OPS_OPERATOR_NAME", "send the operator's name in the X-Operator header");
    const body = await jsonBody(c);
    if (body instanceof Response) return body;
    const parsed = orphanDecision.safeParse(body);
    if (!parsed.success) throw validationFailed(parsed.error);
    if (!validOrphanKey(parsed.data)) return problemResponse("VALIDATION_FAILED", "chain, token_address, payer and auth_nonce must name an x402 payment (addresses and a 32-byte nonce)");
    const { refund_tx_hash, ...key } = parsed.data;
    const result = await resolveOrphanPayment(deps.review, { ...key, operator: name, refundTxHash: refund_tx_hash });
    return decided(c, result, (units) => describeAmount(deps.review.deployments, key.chain, key.token_address, units));
  });

  app.get("/ops/orders", async (c) => {
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 200) || 200, 1), MAX_PAGE);
    const after = c.req.query("after");
    const page = await deps.orders.page(limit + 1, after);
    const orders = page.slice(0, limit).map(opsOrder);
    return c.json({ orders, next: page.length > limit ? orders[orders.length - 1]!.request_id : null }, 200, { "cache-control": "no-store" });
  });
  app.get("/ops/orphans", async (c) => c.json(await deps.orphans.all(), 200, { "cache-control": "no-store" }));
}
