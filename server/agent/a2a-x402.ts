/**
 * `pay_bill` paid per call with x402 over A2A, as a2a-x402 v0.2 has it
 * (google-agentic-commerce/a2a-x402 spec/v0.2/spec.md, its Standalone Flow):
 *   1. A pay_bill call with no api_key becomes a Task in `input-required`, whose status
 *      message carries `x402.payment.status: "payment-required"` and the x402
 *      PaymentRequired in `x402.payment.required`.
 *   2. The client sends a message on that task (`taskId`) with
 *      `x402.payment.status: "payment-submitted"` and its PaymentPayload in
 *      `x402.payment.payload`.
 *   3. The payment is checked, settled and the bill vended exactly as the REST route does it
 *      (x402/pay.ts through agent/x402-tools.ts). The task completes with
 *      `payment-completed`, the settlement in `x402.payment.receipts` and the bill's result as
 *      an artifact; or fails with `payment-failed`, `x402.payment.error` and a receipt that
 *      says why. A client that turns the price down sends `payment-rejected`: the task is
 *      canceled.
 *
 * Where the page leaves room, the readings taken here:
 *   - Its examples show `x402Version: 1` objects; the service sends and reads x402 version 2
 *     (what x402's clients sign today). A version 1 payload fails with its reason.
 *   - The extension is declared `required: false`: pay_bill with an api_key and PIN still
 *     works without it, so a client that does not activate it is not refused.
 *   - The task remembers the bill it priced (`task.metadata`), as the page asks the merchant to
 *     keep the task's state. Tasks are kept in the service's database (agent/a2a-tasks.ts), so
 *     the submission may reach any instance; one on a task the store no longer has (past its
 *     lifetime) is refused by the SDK as an unknown task, and nothing is charged.
 *   - A failure is terminal (`failed`); the page lets the merchant choose. A new task pays anew.
 *   - Error codes: the page's common codes where one says the same thing, the service's own
 *     code otherwise; the service's code is in the answer's data part either way.
 */
import { randomUUID } from "node:crypto";
import { Role, TaskState, type Artifact, type Message, type Part } from "@a2a-js/sdk";
import { AgentEvent, type ExecutionEventBus, type RequestContext } from "@a2a-js/sdk/server";
import { paymentRequiredOf } from "../x402/pay.ts";
import type { CallerContext, ToolPayment, X402ToolPayments } from "./x402-tools.ts";

/** The extension's URI, which declares and activates it. */
export const A2A_X402_EXTENSION = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2";

/** The page's metadata keys (its section 7). */
export const X402_META = {
  status: "x402.payment.status",
  required: "x402.payment.required",
  payload: "x402.payment.payload",
  receipts: "x402.payment.receipts",
  error: "x402.payment.error",
} as const;

/** Where a task keeps the call it priced. */
const CALL_KEY = "billpay.x402.call";

/** The page's common error codes (its 9.1), for the service's reasons that mean the same. */
const PAGE_CODES: Record<string, string> = {
  SIGNATURE_INVALID: "INVALID_SIGNATURE",
  AMOUNT_MISMATCH: "INVALID_AMOUNT",
  PAYMENT_NETWORK_MISMATCH: "NETWORK_MISMATCH",
  AUTHORIZATION_EXPIRED: "EXPIRED_PAYMENT",
  PAYMENT_ALREADY_USED: "DUPLICATE_NONCE",
  PAYMENT_NOT_SETTLED: "SETTLEMENT_FAILED",
};

const dataPart = (value: unknown): Part => ({ content: { $case: "data", value }, metadata: undefined, filename: "", mediaType: "application/json" });
const textPart = (value: string): Part => ({ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "text/plain" });

/** Whether a message speaks this extension (it carries a payment status). */
export function x402StatusOf(message: Message): string | undefined {
  const status = message.metadata?.[X402_META.status];
  return typeof status === "string" ? status : undefined;
}

/** The call a task priced, if it is one of ours. */
export function pricedCallOf(request: RequestContext): { tool: string; arguments: Record<string, unknown> } | undefined {
  const call = request.task?.metadata?.[CALL_KEY] as { tool?: unknown; arguments?: unknown } | undefined;
  return call && typeof call.tool === "string" && typeof call.arguments === "object" && call.arguments !== null
    ? { tool: call.tool, arguments: call.arguments as Record<string, unknown> }
    : undefined;
}

export function a2aX402(tools: X402ToolPayments) {
  /** Publishes the task in its new state: the first event of every turn must be the task. */
  function publish(request: RequestContext, bus: ExecutionEventBus, state: TaskState, text: string, metadata: Record<string, unknown>, extra: { data?: unknown; artifacts?: Artifact[]; call?: unknown } = {}) {
    const status: Message = {
      messageId: randomUUID(),
      contextId: request.contextId,
      taskId: request.taskId,
      role: Role.ROLE_AGENT,
      parts: [textPart(text), ...(extra.data === undefined ? [] : [dataPart(extra.data)])],
      metadata,
      extensions: [A2A_X402_EXTENSION],
      referenceTaskIds: [],
    };
    bus.publish(
      AgentEvent.task({
        id: request.taskId,
        contextId: request.contextId,
        status: { state, message: status, timestamp: new Date().toISOString() },
        artifacts: [...(request.task?.artifacts ?? []), ...(extra.artifacts ?? [])],
        history: [...(request.task?.history ?? []), request.userMessage],
        metadata: extra.call === undefined ? request.task?.metadata : { ...request.task?.metadata, [CALL_KEY]: extra.call },
      }),
    );
    bus.finished();
  }

  /** A failed payment: the page's `payment-failed`, a receipt saying why, and the service's own answer as data. */
  function failed(request: RequestContext, bus: ExecutionEventBus, code: string, detail: string, network: string, data: unknown) {
    publish(
      request,
      bus,
      TaskState.TASK_STATE_FAILED,
      `Payment failed: ${detail}`,
      {
        [X402_META.status]: "payment-failed",
        [X402_META.error]: PAGE_CODES[code] ?? code,
        [X402_META.receipts]: [{ success: false, errorReason: detail, network, transaction: "" }],
      },
      { data },
    );
  }

  /** Step 1: the call, priced; or, refused before any price, the service's error as a plain answer. */
  async function request(requestContext: RequestContext, bus: ExecutionEventBus, tool: string, args: Record<string, unknown>, ctx: CallerContext, refuse: (error: unknown) => void) {
    const outcome = await tools.call(tool, args, undefined, ctx);
    if (outcome.kind === "refused") return refuse(outcome.error);
    if (outcome.kind !== "required") throw new Error(`an unpaid ${tool} call came to ${outcome.kind}`);
    publish(
      requestContext,
      bus,
      TaskState.TASK_STATE_INPUT_REQUIRED,
      `Payment is required: sign one of x402.payment.required's accepts and send it on this task with ${X402_META.status} "payment-submitted".`,
      { [X402_META.status]: "payment-required", [X402_META.required]: paymentRequiredOf(outcome.challenge) },
      { call: { tool, arguments: args } },
    );
  }

  /** Step 3: a submission (or a rejection) on a task this service priced. */
  async function submit(requestContext: RequestContext, bus: ExecutionEventBus, ctx: CallerContext) {
    const call = pricedCallOf(requestContext)!;
    const metadata = requestContext.userMessage.metadata ?? {};
    if (x402StatusOf(requestContext.userMessage) === "payment-rejected") {
      return publish(requestContext, bus, TaskState.TASK_STATE_CANCELED, "The payment was declined; nothing was charged.", { [X402_META.status]: "payment-rejected" });
    }
    // A submission without a payload reads as a malformed one (null), never as a new request.
    const payload = metadata[X402_META.payload] ?? null;
    const network = String((payload as { accepted?: { network?: unknown } } | null)?.accepted?.network ?? "");
    const outcome: ToolPayment = await tools.call(call.tool, call.arguments, payload, ctx);
    switch (outcome.kind) {
      case "done": {
        const artifact: Artifact = { artifactId: randomUUID(), name: call.tool, description: "The bill's result", parts: [dataPart(outcome.body)], metadata: undefined, extensions: [] };
        if (!outcome.settlement) {
          // Not settled yet (an earlier payment for this bill is still settling): working, with the order to follow.
          return publish(requestContext, bus, TaskState.TASK_STATE_WORKING, "The payment is being settled; follow request_id.", { [X402_META.status]: "payment-submitted", [X402_META.receipts]: [] }, { data: outcome.body, artifacts: [artifact] });
        }
        return publish(
          requestContext,
          bus,
          TaskState.TASK_STATE_COMPLETED,
          `Payment settled; the bill's status is ${String(outcome.body.status)}.`,
          { [X402_META.status]: "payment-completed", [X402_META.receipts]: [outcome.settlement] },
          { data: outcome.body, artifacts: [artifact] },
        );
      }
      case "required": {
        const reason = outcome.reason ?? { code: "INVALID_PAYMENT_HEADER", detail: `${X402_META.payload} holds no payment` };
        return failed(requestContext, bus, reason.code, reason.detail, network, { ...paymentRequiredOf(outcome.challenge, reason.detail), code: reason.code });
      }
      case "not-settled":
        return failed(requestContext, bus, outcome.reason.code, outcome.reason.detail, network, { code: outcome.reason.code, detail: outcome.reason.detail, ...outcome.fields });
      case "refused":
        return failed(requestContext, bus, outcome.error.code, outcome.error.detail, network, { error: { code: outcome.error.code, detail: outcome.error.detail, ...outcome.error.extra } });
    }
  }

  return { request, submit };
}

export type A2aX402 = ReturnType<typeof a2aX402>;
