/**
 * An MCP client paying a tool per call with x402, as x402's MCP transport has it (its
 * tool-result binding): call the tool; if the result is an error carrying a PaymentRequired
 * (in `structuredContent`, else as JSON in `content[0].text`), sign one of its accepts with
 * the official x402 client and call again with the same arguments and the payment in
 * `params._meta["x402/payment"]`. The settlement comes back in `result._meta["x402/payment-response"]`.
 * Used by `npm run agent:x402-example` and the tests; any x402-aware MCP client does the same.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { x402Client } from "@x402/core/client";
import { PaymentRequiredV2Schema } from "@x402/core/schemas";
import type { PaymentRequired, SettleResponse } from "@x402/core/types";

/** x402's MCP metadata keys (specs/transports-v2/mcp.md), for the client here and the server (server/agent/x402-tools.ts). */
export const PAYMENT_META = "x402/payment";
export const PAYMENT_RESPONSE_META = "x402/payment-response";

/** The PaymentRequired a tool result carries, if it is one. */
export function paymentRequiredIn(result: CallToolResult): PaymentRequired | undefined {
  if (result.isError !== true) return undefined;
  const text = (result.content as Array<{ type: string; text?: string }>)[0]?.text;
  let parsed: unknown = result.structuredContent;
  if (parsed === undefined && text !== undefined) {
    try {
      parsed = JSON.parse(text);
    } catch {
      return undefined;
    }
  }
  const required = PaymentRequiredV2Schema.safeParse(parsed);
  return required.success ? (required.data as unknown as PaymentRequired) : undefined;
}

export interface PaidCall {
  /** The tool's final result. */
  result: CallToolResult;
  /** What the first, unpaid call asked for, if it asked for payment. */
  required?: PaymentRequired;
  /** The settlement of the payment, once the tool answered paid. */
  settlement?: SettleResponse;
}

export async function callToolPaid(mcp: Client, payer: x402Client, name: string, args: Record<string, unknown>, timeoutMs = 120_000): Promise<PaidCall> {
  const first = (await mcp.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs })) as CallToolResult;
  const required = paymentRequiredIn(first);
  if (!required) return { result: first };
  const payment = await payer.createPaymentPayload(required);
  const result = (await mcp.callTool({ name, arguments: args, _meta: { [PAYMENT_META]: payment } }, undefined, { timeout: timeoutMs })) as CallToolResult;
  const settlement = (result._meta as Record<string, unknown> | undefined)?.[PAYMENT_RESPONSE_META] as SettleResponse | undefined;
  return { result, required, ...(settlement ? { settlement } : {}) };
}
