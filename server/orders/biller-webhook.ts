/**
 * POST /api/biller/webhook: the biller's callbacks, as VTpass documents them
 * (callback-api-integration, transaction-update-webhook-api). VTpass POSTs JSON with `type`
 * and `data`, expects `{"response":"success"}`, and sends it again, 5 times in all, until it
 * gets that answer. Two types:
 *   - transaction-update: a pending transaction resolved, or a delivered one reversed; `data`
 *     is requery-shaped. The body is never trusted: its request id only points at an attempt
 *     and its order, and that very attempt is requeried by its own id and acted on
 *     (orders/fulfil.ts actOnBillerState): a pending order is finished at once, a served
 *     order the biller reversed is refunded on chain, once, bounded by the ledger's payment
 *     like every refund; a delivery of an attempt that did not settle its order (an earlier
 *     one, late) is recorded on the order and alerted.
 *   - variations-update: a product's plans changed; they are read afresh for the next bill.
 * VTpass documents no signature for its callbacks, so anyone can POST here; what a stranger
 * can make the service do is one requery per known order, at most RATE_LIMIT_WEBHOOK_ORDER a
 * minute (past it: 429, and VTpass sends again later). BILLER_WEBHOOK_TOKEN, when set, must
 * come as `?token=` on the URL registered with the biller. The answer is "success" only once
 * what the callback asked for is done (or there is nothing to do), so a failure is sent again.
 */
import type { Hono } from "hono";
import { sameSecret } from "../../lib/same-secret.ts";
import { webhookRequestId } from "../biller/vtpass/answers.ts";
import { problemResponse } from "../errors.ts";
import type { Limits } from "../limits.ts";
import { errorText } from "../log-safety.ts";
import { actOnBillerState, FINISHED, type FlowDeps } from "./fulfil.ts";

export const BILLER_WEBHOOK_PATH = "/api/biller/webhook";
/** The acknowledgement VTpass waits for. */
const SUCCESS = { response: "success" } as const;

export function mountBillerWebhook(app: Hono, deps: { flow: FlowDeps; limits: Limits; token?: string }): void {
  const { flow } = deps;
  app.post(BILLER_WEBHOOK_PATH, async (c) => {
    if (deps.token !== undefined) {
      const given = c.req.query("token") ?? "";
      if (!sameSecret(given, deps.token)) return problemResponse("WEBHOOK_TOKEN_INVALID", "the webhook URL's token is not this service's");
    }
    let body: unknown;
    try {
      body = JSON.parse(await c.req.text());
    } catch (err) {
      return problemResponse("INVALID_JSON", (err as Error).message);
    }
    const { type, requestId } = webhookRequestId(body);
    if (type === "variations-update") {
      const serviceID = (body as { serviceID?: unknown }).serviceID;
      if (typeof serviceID === "string") {
        // Each costs the next bill one read of the plans: counted like an order's webhooks.
        await deps.limits.take("webhookOrder", `variations:${serviceID}`);
        flow.catalogue.forgetPlans(serviceID);
      }
      return c.json(SUCCESS);
    }
    if (type !== "transaction-update" || requestId === null) {
      flow.log.info("biller webhook of no kind this service acts on", { type });
      return c.json(SUCCESS);
    }
    const attempt = await flow.attempts.byBillerRequestId(requestId);
    if (!attempt) {
      flow.log.info("biller webhook for a request id this service never sent", { billerRequestId: requestId });
      return c.json(SUCCESS);
    }
    await deps.limits.take("webhookOrder", attempt.requestId);
    const order = await flow.orders.claim(attempt.requestId, flow.leaseSeconds, "webhook");
    if (!order) {
      // The worker or a request finishing an unfinished order asks the biller itself. A final
      // order is held only for other work (an operator's decision, the payment watch) that will
      // not: the biller is asked to send it again, as VTpass does for an answer other than success.
      const now = await flow.orders.get(attempt.requestId);
      if (now && FINISHED.has(now.status)) return problemResponse("BILLER_UNAVAILABLE", "the order is being decided right now; send the webhook again");
      return c.json(SUCCESS);
    }
    try {
      // The attempt the webhook names is requeried by its own id (not the order's latest).
      const now = await actOnBillerState(flow, order, attempt);
      flow.log.info("biller webhook acted on", { requestId: order.requestId, before: order.status, after: now.status });
      return c.json(SUCCESS);
    } catch (err) {
      flow.log.warn("biller webhook could not be acted on; the biller will send it again", { requestId: order.requestId, error: errorText(err) });
      return problemResponse("BILLER_UNAVAILABLE", "the webhook could not be acted on now; send it again");
    } finally {
      await flow.orders.release(order.requestId, order.leaseToken);
    }
  });
}
