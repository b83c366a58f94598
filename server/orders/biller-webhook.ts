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
 * what the callback asked for is done (or there is nothing to do), so a failure is sent again:
 *   - an order someone else is working on (a request, the worker, an operator) is not acted
 *     on now: the webhook is asked for again, since the worker asks only the order's latest
 *     attempt, and a delivery or reversal of another would go unseen;
 *   - a requery that does not show what the body says (it timed out, or lags the callback:
 *     a reversal the requery still calls delivered) is asked for again. A served order is
 *     otherwise asked again only a few times on a schedule (reversal-checks.ts), so a reversal
 *     acknowledged unseen could wait hours to be refunded, or never be. A body the requery
 *     never confirms (a forgery) costs one requery a time, within the order's webhook limit.
 */
import type { Hono } from "hono";
import { sameSecret } from "../../lib/same-secret.ts";
import { webhookRequestId } from "../biller/vtpass/answers.ts";
import { problemResponse } from "../errors.ts";
import type { Limits } from "../limits.ts";
import { errorText } from "../log-safety.ts";
import { outcomeOf, type AttemptOutcome } from "./attempts.ts";
import { actOnBillerState, type FlowDeps } from "./fulfil.ts";
import { paymentRequestSchema } from "../schemas.ts";

export const BILLER_WEBHOOK_PATH = "/api/biller/webhook";
/** The acknowledgement VTpass waits for. */
const SUCCESS = { response: "success" } as const;

/** The statuses in which actOnBillerState requeries the attempt a webhook names. */
const ASKED: ReadonlySet<string> = new Set(["PAID", "PENDING", "SUCCESS", "REFUNDING", "REFUNDED", "NEEDS_REVIEW"]);

/** Whether what a requery last showed of an attempt (`seen`) confirms what the webhook's body said of it. */
function confirms(said: AttemptOutcome, seen: AttemptOutcome | null | undefined): boolean {
  if (said === "pending" || said === "unknown") return true; // the body claims nothing final
  if (said === "failed") return seen === "failed" || seen === "reversed";
  return seen === said;
}

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
    const { type, requestId, says } = webhookRequestId(body);
    if (type === "variations-update") {
      // Only a product's name as bills name it (trimmed, a slug of at most 64): anything else
      // (a key too long for the limits' table) is passed over.
      const named = paymentRequestSchema.shape.serviceID.safeParse((body as { serviceID?: unknown }).serviceID);
      if (named.success) {
        const serviceID = named.data;
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
      // Whoever holds it asks the order's latest attempt at most, not necessarily this one:
      // the biller is asked to send it again, as VTpass does for an answer other than success.
      return problemResponse("BILLER_UNAVAILABLE", "the order is being worked on right now; send the webhook again");
    }
    try {
      // The attempt the webhook names is requeried by its own id (not the order's latest).
      const now = await actOnBillerState(flow, order, attempt);
      // Orders in other states (never vended: settling, refused, failed unpaid) are not asked about.
      const seen = (await flow.attempts.byBillerRequestId(attempt.billerRequestId))?.outcome;
      if (ASKED.has(order.status) && !confirms(outcomeOf(says), seen)) {
        flow.log.warn("the biller's requery does not show what its webhook says yet; asked to send it again", { requestId: order.requestId, billerRequestId: attempt.billerRequestId, says: outcomeOf(says), seen });
        return problemResponse("BILLER_UNAVAILABLE", "the biller's requery does not show this update yet; send the webhook again");
      }
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
