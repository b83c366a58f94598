/**
 * `pay_bill` paid per call with x402, with no link, api_key or PIN, over MCP and over A2A
 * (agent/a2a-x402.ts maps the same outcomes onto a2a-x402's task states). Over MCP: x402's MCP
 * transport, its tool-result binding (x402-foundation/x402 specs/transports-v2/mcp.md), which
 * works on every MCP revision the SDK speaks:
 *   - a call without a payment answers a tool result with `isError: true` and the x402 v2
 *     PaymentRequired both in `structuredContent` and as JSON in `content[0].text`;
 *   - the client retries with the same arguments and its PaymentPayload in
 *     `params._meta["x402/payment"]`;
 *   - a paid call answers the tool's result with the SettlementResponse in
 *     `result._meta["x402/payment-response"]`; a payment that does not fit, or that did not
 *     settle, answers `isError: true` with the PaymentRequired again and the reason.
 * The page's extension binding (`resultType: "payment_required"`) needs MCP 2026-07-28,
 * which the SDK here does not speak; the page lets a server offer the tool-result binding
 * alone.
 *
 * The bill is paid by x402/pay.ts, as the REST route pays it: the same price, checks,
 * replay and payment-id rules, settlement, ledger confirmation, vend and refund.
 *
 * Where the page is silent, the safe readings taken here:
 *   - Only protocol 2 payloads are read (the page's `PaymentPayload`); a v1 one is refused.
 *   - The unpaid call may name no chain or token: then every chain and token that settles
 *     x402 is offered, each priced, and the payment's own `accepted` says which it chose.
 *   - The bill's wallet is the payment's signer unless the call names `wallet_address`. A
 *     call naming none is priced for a bill of no wallet, and the signed offer its payment
 *     echoes is read for that bill (x402/pay.ts offerWallet): the same product's price,
 *     honoured until the offer expires; an offer for any other bill is worth nothing.
 *   - One payment pays one bill: `pay_bill_batch` is not paid with x402.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { SettleResponse } from "@x402/core/types";
import { z } from "zod";
import { CHAINS, chainInfo, resolveTokenSymbol, type ChainKey } from "../../lib/chains.ts";
import { problemBody, ServiceError, validationFailed } from "../errors.ts";
import { orderResult } from "../orders/fulfil.ts";
import { paymentRequestSchema, type PaymentRequest } from "../schemas.ts";
import { BILL_OUTPUT, mcpToolDiscovery, settleableOptions, type Challenge } from "../x402/challenge.ts";
import { paymentRequiredOf, settlementOf, type PayOutcome, type X402Payments } from "../x402/pay.ts";
import { PaymentRejected, readPayment, type DecodedPayment } from "../x402-protocol/payment.ts";
import { PAYMENT_META as X402_PAYMENT_META, PAYMENT_RESPONSE_META as X402_PAYMENT_RESPONSE_META } from "../../lib/mcp-x402-client.ts";
import { toolInputSchema, type ToolDefinition } from "./tool-definition.ts";
import { placeOf, restPlaceFields } from "./bill-place.ts";
import { checkCallbackUrl } from "../orders/callbacks.ts";

/** Where the payment and its settlement travel in an MCP message (the page's metadata keys; one place, lib/mcp-x402-client.ts). */
export { PAYMENT_META as X402_PAYMENT_META, PAYMENT_RESPONSE_META as X402_PAYMENT_RESPONSE_META } from "../../lib/mcp-x402-client.ts";

/** The tools x402 can pay for over MCP. */
export const X402_PAYABLE_TOOLS = new Set(["pay_bill"]);

/** The resource an MCP payment is for, as its challenge names it (the page's form). */
export const mcpResourceUrl = (tool: string) => `mcp://tool/${tool}`;

const ZERO_ADDRESS = `0x${"0".repeat(40)}`;

/** A bill as pay_bill takes it for x402: the REST bill, with chain (or blockchain) and token optional and the wallet the payer's. */
export const x402BillArguments = paymentRequestSchema
  .omit({ blockchain: true, token: true, wallet_address: true })
  .extend({
    chain: z.string().trim().min(1).max(16).optional(),
    token: z.string().trim().min(1).max(16).optional(),
    ...restPlaceFields,
  });
type X402BillArguments = z.infer<typeof x402BillArguments>;

/**
 * How tools/list (and the discovery list) show a tool x402 can pay for: the api_key and PIN
 * become optional (leave both out to pay per call), and the payer's wallet may be named.
 */
export function x402PayableSchema(tool: ToolDefinition): Record<string, unknown> & { type: "object" } {
  const schema = toolInputSchema(tool) as { properties?: Record<string, unknown>; required?: string[] };
  const wallet = (z.toJSONSchema(x402BillArguments, { target: "draft-2020-12", io: "input" }) as { properties: Record<string, unknown> }).properties.wallet_address;
  return {
    ...schema,
    type: "object" as const,
    properties: { ...schema.properties, wallet_address: { ...(wallet as object), description: "x402 only: the paying wallet (default: the payment's signer)" } },
    required: (schema.required ?? []).filter((name) => name !== "api_key" && name !== "pin"),
  };
}

/** The tool's description, with how to pay it per call. */
export const x402PayableDescription = (tool: ToolDefinition) =>
  tool.description +
  " Without an api_key and PIN it is paid per call with x402: the call answers isError with an x402 PaymentRequired; " +
  `sign one of accepts[] and call again with the same arguments and the payment in params._meta["${X402_PAYMENT_META}"]. ` +
  `The result carries the settlement in _meta["${X402_PAYMENT_RESPONSE_META}"].`;

/** What the transport knows of the call besides its arguments. */
export interface CallerContext {
  /** The caller's network address, for the per-address budgets. */
  client: string;
  /** The HTTP request's headers, for the payer's proof on a replay. */
  header: (name: string) => string | undefined;
}

/** What paying a tool with x402 came to, whatever carried it (MCP here, A2A in agent/a2a-x402.ts). */
export type ToolPayment =
  /** Pay this: no payment, or one that does not fit (`reason`); nothing was locked or charged. */
  | { kind: "required"; challenge: Challenge; reason?: { code: string; detail: string; extra?: Record<string, unknown> } }
  /** The tool's result; `settlement` once the payment is settled on chain. */
  | { kind: "done"; body: Record<string, unknown>; settlement?: SettleResponse }
  /** The payment did not settle: nothing was taken (`challenge` to pay anew, when there is one). */
  | { kind: "not-settled"; reason: { code: "PAYMENT_NOT_SETTLED"; detail: string }; fields: Record<string, unknown>; challenge?: Challenge }
  /** Refused before any payment was looked at (a bad bill, a limit), with the catalogue's code. */
  | { kind: "refused"; error: ServiceError };

const result = (structured: Record<string, unknown>, isError = false, meta?: Record<string, unknown>): CallToolResult => ({
  ...(isError ? { isError: true } : {}),
  content: [{ type: "text", text: JSON.stringify(structured) }],
  structuredContent: structured,
  ...(meta ? { _meta: meta } : {}),
});

/** A payment required (again): the page's tool-result binding, with the service's code and detail beside it when there is a reason. */
function paymentRequired(challenge: Challenge, reason?: { code: string; detail: string }, extra: Record<string, unknown> = {}): CallToolResult {
  const required = paymentRequiredOf(challenge, reason?.detail);
  return result({ ...required, ...(reason ? { code: reason.code } : {}), ...extra }, true);
}

/** The MCP tool result for a payment's outcome, as the transport's page has each. */
export function toolResultOf(payment: ToolPayment): CallToolResult {
  switch (payment.kind) {
    case "required":
      return paymentRequired(payment.challenge, payment.reason, payment.reason?.extra);
    case "done":
      return result(payment.body, false, payment.settlement ? { [X402_PAYMENT_RESPONSE_META]: payment.settlement } : undefined);
    case "not-settled":
      // Settlement failed: the page's answer is the PaymentRequired again, no tool content.
      if (payment.challenge) return paymentRequired(payment.challenge, payment.reason, payment.fields);
      return result({ error: problemBody("PAYMENT_NOT_SETTLED", payment.reason.detail, payment.fields) }, true);
    case "refused":
      return result({ error: problemBody(payment.error.code, payment.error.detail, payment.error.extra) }, true);
  }
}

/** Pays an x402-payable tool per call, for any transport. */
export function x402ToolPayments(payments: X402Payments, tools: readonly ToolDefinition[]) {
  // What a tool's PaymentRequired declares for catalogues (x402's bazaar, MCP form), made once per tool.
  const declared = new Map<string, ReturnType<typeof mcpToolDiscovery>>();
  const discoveryOf = (name: string) => {
    let d = declared.get(name);
    if (!d) {
      const tool = tools.find((t) => t.name === name)!;
      d = payableToolDiscovery(tool);
      declared.set(name, d);
    }
    return d;
  };
  const chainKeyOf = (caip2: string) => (Object.keys(CHAINS) as ChainKey[]).find((key) => chainInfo(key).caip2 === caip2);

  /** The chain and token the payment says it accepted, when the call named neither. */
  const acceptedOption = (payment: DecodedPayment): { chain?: string; token?: string } => {
    const chain = payment.accepted && chainKeyOf(payment.accepted.network);
    const deployed = chain && payments.deps.deployments.chains[chain];
    const token = deployed?.tokens.find((t) => t.address.toLowerCase() === payment.accepted!.asset.toLowerCase());
    return { chain, token: token?.symbol };
  };

  /** The bill in REST's form, for one chain and token. */
  const billFor = (args: X402BillArguments, chain: string, token: string, wallet: string): PaymentRequest => {
    const { chain: _c, blockchain: _b, token: _t, wallet_address: _w, ...fields } = args;
    return { ...fields, blockchain: chain, token, wallet_address: wallet } as PaymentRequest;
  };

  /** Every chain and token the unpaid call could be paid in: the ones it names, else all that settle x402. */
  const optionsFor = (args: X402BillArguments) => {
    if (args.chain) return [{ chain: args.chain, token: args.token ?? "USDC" }];
    const all = settleableOptions(payments.deps.deployments);
    const symbol = args.token === undefined ? undefined : resolveTokenSymbol(args.token);
    const named = args.token === undefined ? all : all.filter((o) => o.token === symbol);
    if (named.length === 0) throw new ServiceError("TOKEN_NOT_SETTLEABLE", `${args.token} cannot settle an x402 payment on any chain here`);
    return named;
  };

  function outcomeOf(outcome: PayOutcome): ToolPayment {
    switch (outcome.kind) {
      case "challenge":
        return { kind: "required", challenge: outcome.challenge, ...(outcome.rejected ? { reason: outcome.rejected } : {}) };
      case "settling":
        return { kind: "done", body: { ...orderResult(outcome.order, { showCode: false }), ...outcome.note } };
      case "order": {
        const { order } = outcome;
        if (order.status === "PAYMENT_FAILED" || order.status === "REFUSED") {
          const { status: _s, success: _ok, ...fields } = orderResult(order);
          const reason = { code: "PAYMENT_NOT_SETTLED" as const, detail: order.failureReason ?? "the payment did not settle; sign a new one" };
          return { kind: "not-settled", reason, fields, ...(outcome.challenge ? { challenge: outcome.challenge } : {}) };
        }
        const settlement = settlementOf(order, outcome.receipts);
        const body = {
          ...orderResult(order, { showCode: outcome.showCode }),
          ...(outcome.secret ? { order_secret: outcome.secret } : {}),
          ...outcome.note,
          ...(outcome.receipts ? { receipt: outcome.receipts.bill } : {}),
        };
        return { kind: "done", body, ...(settlement ? { settlement } : {}) };
      }
    }
  }

  /** A call of an x402-payable tool with no api_key: unpaid (the challenge) or paid (`_meta["x402/payment"]`). */
  async function call(tool: string, rawArgs: Record<string, unknown>, paymentMeta: unknown, ctx: CallerContext): Promise<ToolPayment> {
    try {
      const parsed = x402BillArguments.safeParse(rawArgs);
      if (!parsed.success) throw validationFailed(parsed.error, "(arguments)");
      // The REST bill's `blockchain` names the chain as `chain` does (agent/bill-place.ts).
      const args = { ...parsed.data, ...placeOf([parsed.data]) };
      const resourceUrl = mcpResourceUrl(tool);

      if (paymentMeta === undefined) {
        // Refused when the bill arrives, as on REST (a paid call is checked in pay(), past its replay look-up).
        checkCallbackUrl(args.callback_url, payments.deps.config.CALLBACK_ALLOW_PRIVATE);
        const wallet = args.wallet_address ?? ZERO_ADDRESS;
        const bills = optionsFor(args).map((o) => billFor(args, o.chain, o.token, wallet));
        return { kind: "required", challenge: await payments.challengeFor(bills, resourceUrl, ctx.client, discoveryOf(tool)) };
      }

      let payment: DecodedPayment | undefined;
      let malformed: PaymentRejected | undefined;
      try {
        payment = readPayment("PAYMENT-SIGNATURE", paymentMeta);
        if (payment.x402Version !== 2) throw new PaymentRejected("INVALID_PAYMENT_HEADER", `_meta["${X402_PAYMENT_META}"] must be an x402 version 2 PaymentPayload`);
      } catch (err) {
        if (!(err instanceof PaymentRejected)) throw err;
        malformed = err;
        payment = undefined;
      }
      if (!payment) {
        // Nothing to read the chain or the payer from: the challenge again, with why, counted
        // against the caller's unsettled budget as a malformed payment header is on REST.
        await payments.unreadPayment(ctx.client);
        const bills = optionsFor(args).map((o) => billFor(args, o.chain, o.token, args.wallet_address ?? ZERO_ADDRESS));
        return { kind: "required", challenge: await payments.challengeFor(bills, resourceUrl, ctx.client, discoveryOf(tool)), ...(malformed ? { reason: malformed } : {}) };
      }
      const accepted = acceptedOption(payment);
      const chain = args.chain ?? accepted.chain;
      const token = args.token ?? accepted.token;
      if (!chain || !token) {
        await payments.unreadPayment(ctx.client);
        const bills = optionsFor(args).map((o) => billFor(args, o.chain, o.token, args.wallet_address ?? payment.authorization.from));
        return {
          kind: "required",
          challenge: await payments.challengeFor(bills, resourceUrl, ctx.client, discoveryOf(tool)),
          reason: { code: "PAYMENT_ASSET_MISMATCH", detail: "the payment's accepted network and asset are not one of accepts[]; pay one of them" },
        };
      }
      const paid = payment;
      const outcome = await payments.pay({
        bill: billFor(args, chain, token, args.wallet_address ?? payment.authorization.from),
        resourceUrl,
        presentedPayment: true,
        decode: () => paid,
        client: ctx.client,
        header: ctx.header,
        // Its challenge priced the bill for no wallet: the offer it echoes was signed for that bill.
        ...(args.wallet_address === undefined ? { offerWallet: ZERO_ADDRESS } : {}),
      });
      return outcomeOf(outcome);
    } catch (err) {
      if (err instanceof ServiceError) return { kind: "refused", error: err };
      throw err;
    }
  }

  return { call };
}

export type X402ToolPayments = ReturnType<typeof x402ToolPayments>;

/** An x402-payable tool's `bazaar` declaration (MCP form): its arguments, and what a paid call returns. */
export function payableToolDiscovery(tool: ToolDefinition): ReturnType<typeof mcpToolDiscovery> {
  return mcpToolDiscovery(tool.name, x402PayableSchema(tool), { description: x402PayableDescription(tool), output: BILL_OUTPUT });
}
