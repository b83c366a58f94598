/**
 * The 402 challenge for a bill: one payment option per chain and token that can settle
 * it, priced under the current rate version (quote/quote.ts), whose id the option carries
 * in `extra.rateVersion` (for the record: a payment is checked against the server's own
 * versions, never this field). Served two ways at once, as the published interface
 * asks: an x402 v1-style JSON body (`x402Version: 1`, `accepts[]` with CAIP-2 networks)
 * and the x402 v2 `PAYMENT-REQUIRED` header.
 */
import { declarePaymentIdentifierExtension, PAYMENT_IDENTIFIER } from "@x402/extensions/payment-identifier";
import { BAZAAR, declareDiscoveryExtension, type BodyDiscoveryExtension, type DiscoveryExtension, type McpDiscoveryExtension } from "@x402/extensions/bazaar";
import type { PaymentRequired } from "@x402/core/types";
import { chainInfo, CHAINS, chainByKey, resolveTokenSymbol, x402TransferOf, type ChainKey, type TokenSymbol } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { ServiceError } from "../errors.ts";
import { BILL_EXAMPLES, BILL_JSON_SCHEMAS } from "../openapi.ts";
import { termsSentence, type PaymentTerms } from "./terms.ts";
import { MIN_PRICE_MICRO_USD } from "../pricing/price.ts";
import type { QuoteContext } from "../quote/quote.ts";
import type { PaymentRequest } from "../schemas.ts";

/**
 * The challenge's human text, per protocol version: it names the header the retry carries
 * the payment in, which x402 v2 renamed (v1: X-PAYMENT; v2: PAYMENT-SIGNATURE).
 */
export const PAYMENT_REQUIRED_ERROR = {
  v1: "Payment required: sign one of accepts[] (EIP-3009, or Permit2 where extra.assetTransferMethod says so) and retry with it in X-PAYMENT",
  v2: "Payment required: sign one of accepts[] (EIP-3009, or Permit2 where extra.assetTransferMethod says so) and retry with it in PAYMENT-SIGNATURE",
} as const;

export interface Option {
  chain: ChainKey;
  token: TokenSymbol;
  amount: bigint;
  /** The rate version that priced it (none for the probe's minimum price). */
  rateVersion?: string;
  /** The signed offer of this price for this bill (pricing/offers.ts), echoed back by x402 v2 payments. */
  offer?: string;
}

/** A 402 in both of the interface's forms: the v1 body, and v2 as an object and as its header. */
export interface Challenge {
  v1Body: Record<string, unknown>;
  v2: PaymentRequired;
  v2Header: string;
}

export interface ChallengeContext extends QuoteContext {
  deployments: Deployments;
  resourceUrl: string;
  /** What the payer is promised (x402/terms.ts): in the v2 resource's description and the body's `terms`. */
  terms: PaymentTerms;
}

/**
 * Base64 of the JSON, as @x402/core's encodePaymentRequiredHeader makes it (UTF-8, standard
 * alphabet), but through Buffer: its btoa path builds a string per byte, about a sixth of a
 * 402's whole cost when profiled.
 */
function encodeHeader(paymentRequired: PaymentRequired): string {
  return Buffer.from(JSON.stringify(paymentRequired), "utf8").toString("base64");
}

/** Every deployed chain and token pair: each settles x402, by EIP-3009 or Permit2 (x402TransferOf). */
export function settleableOptions(deployments: Deployments): Array<{ chain: ChainKey; token: TokenSymbol }> {
  return Object.values(CHAINS).flatMap((chain) => (deployments.chains[chain.key] ? chain.tokens.map((t) => ({ chain: chain.key, token: t.symbol })) : []));
}

/** The chain and token a bill names, resolving aliases; an unrecognised token falls back to USDC, with a warning. */
export function resolveOption(req: Pick<PaymentRequest, "blockchain" | "token">): {
  chain: ChainKey;
  token: TokenSymbol;
  warning?: string;
} {
  const chain = chainByKey(req.blockchain);
  if (!chain) {
    throw new ServiceError("UNSUPPORTED_CHAIN", `blockchain "${req.blockchain}" is not supported; use ${Object.keys(CHAINS).join(" or ")}`);
  }
  const resolved = resolveTokenSymbol(req.token);
  const token = resolved ?? "USDC";
  const info = chain.tokens.find((t) => t.symbol === token);
  if (!info) {
    const settles = chain.tokens.map((t) => t.symbol);
    throw new ServiceError("TOKEN_NOT_SETTLEABLE", `${token} cannot settle an x402 payment on ${chain.key}; use ${settles.join(" or ")}`);
  }
  return resolved
    ? { chain: chain.key, token }
    : { chain: chain.key, token, warning: `token "${req.token}" is not recognised; the bill is priced and settled in USDC` };
}

/** One payment option as x402 requirements (the server's own, rebuilt for every check). */
export function requirement(ctx: ChallengeContext, option: Option, description: string) {
  const d = ctx.deployments.chains[option.chain]!;
  const token = d.tokens.find((t) => t.symbol === option.token)!;
  // A token without EIP-3009 is paid through Permit2 (x402 scheme_exact_evm.md): the option
  // says so, and names no EIP-712 domain (that is only for tokens with EIP-2612, which the
  // service does not use to sponsor the approval).
  const signing =
    x402TransferOf(token) === "permit2"
      ? { assetTransferMethod: "permit2" as const }
      : { name: token.name, version: token.eip712Version!, primaryType: "TransferWithAuthorization" };
  return {
    scheme: "exact" as const,
    network: chainInfo(option.chain).caip2,
    asset: token.address,
    payTo: d.billPay.address,
    maxTimeoutSeconds: ctx.ttlSeconds,
    amount: option.amount.toString(),
    description,
    extra: {
      ...signing,
      ...(option.rateVersion ? { rateVersion: option.rateVersion } : {}),
      ...(option.offer ? { offer: option.offer } : {}),
    },
  };
}

/**
 * How to call the REST route, as x402's `bazaar` extension declares it in a 402 (spec:
 * x402-foundation/x402 specs/extensions/bazaar.md), so an agent or a facilitator's catalogue
 * learns the call from the challenge itself: POST, a JSON bill (and a JSON result). Built
 * once, with the extension's own helper: it names no origin and no price.
 *
 * Two forms, because the v2 challenge travels in a header. Measured (test/server/discovery.test.ts's
 * app, PUBLIC_URL http://billpay.test): before the output and the terms were added, a bill's
 * PAYMENT-REQUIRED (one option) was 1,244 bytes of base64 without the declaration, 2,200 with
 * the compact form and 7,912 with the full one, the probe's (four options) 9,004 with the full
 * form; with the example result in the compact form and the terms sentence, a bill's is 2,968
 * and the probe's 10,248. A client echoes the extensions in its payment, so the paid request's
 * header grows as much. Hence a bill's 402, served for every bill, carries the compact form
 * (the method, an example bill and an example result, no schemas), and the probe's 402, which
 * a client reads to learn the route, the full one: the bill's and the result's JSON Schemas
 * (openapi.ts) and an example result. (A proxy in front must pass a 10 KB response header.)
 */
function billDiscovery(full: boolean): Record<string, DiscoveryExtension> {
  const declared = declareDiscoveryExtension({
    bodyType: "json",
    input: BILL_EXAMPLES.request,
    // The compact form keeps what a bill returns (an example result) and leaves the schemas to the probe's.
    ...(full ? { inputSchema: BILL_JSON_SCHEMAS.request, output: BILL_OUTPUT } : { output: { example: BILL_EXAMPLES.result } }),
  });
  // x402's own resource server fills the method in per request; this route does not run
  // through it, and it is paid by POST only.
  const bazaar = declared[BAZAAR.key] as BodyDiscoveryExtension;
  return { [BAZAAR.key]: { ...bazaar, info: { ...bazaar.info, input: { ...bazaar.info.input, method: "POST" } } } };
}

/** What a paid bill returns, for catalogues: the REST route's answer and pay_bill's result are the same object. */
export const BILL_OUTPUT = { example: BILL_EXAMPLES.result, schema: BILL_JSON_SCHEMAS.result };

/** How the service serves MCP: stateless JSON-RPC over POST (agent/mcp.ts). */
const MCP_TRANSPORT = "streamable-http";

export interface McpToolDiscoveryOptions {
  /** What the tool does, for a catalogue. */
  description?: string;
  /** Example `arguments` of a tools/call. */
  example?: Record<string, unknown>;
  /** An example result (and its JSON Schema); without an example the extension declares no output. */
  output?: { example: unknown; schema?: Record<string, unknown> };
}

/**
 * The `extensions` entry an MCP tool's PaymentRequired carries: x402's `bazaar` declaration
 * in its MCP form (input.type "mcp", the tool's name and its arguments' JSON Schema), made
 * with the extension's own helper. Spread it into `extensions` beside payment-identifier's.
 *
 * @param inputSchema the tool's inputSchema as tools/list shows it (the bazaar spec asks for the same schema)
 */
export function mcpToolDiscovery(toolName: string, inputSchema: Record<string, unknown>, options: McpToolDiscoveryOptions = {}): Record<string, McpDiscoveryExtension> {
  return declareDiscoveryExtension({ toolName, inputSchema, transport: MCP_TRANSPORT, ...options }) as Record<string, McpDiscoveryExtension>;
}

/** The REST route's `bazaar` declarations: `full` for the probe, `compact` for a bill's 402 (see billDiscovery). */
export const BILL_DISCOVERY = { full: billDiscovery(true), compact: billDiscovery(false) } as const;

/**
 * @param v1NetworkNames the v1 body names networks as legacy x402@1 clients do ("base")
 *   instead of the interface's CAIP-2 ids: those clients refuse a body with CAIP-2 ids, so
 *   they opt in with `?networks=v1`. The v2 header always carries CAIP-2 ids.
 * @param discovery the `bazaar` declaration the v2 form carries: the REST route's compact one
 *   unless told (the probe's full one; an MCP tool's, from mcpToolDiscovery).
 */
export function buildChallenge(
  ctx: ChallengeContext,
  options: Option[],
  description: string,
  v1NetworkNames = false,
  discovery: Record<string, DiscoveryExtension> = BILL_DISCOVERY.compact,
): Challenge {
  const reqs = options.map((o) => requirement(ctx, o, description));
  const resource = { url: ctx.resourceUrl, description: `${description}. ${termsSentence(ctx.terms)}`, mimeType: "application/json" };
  const v1Body = {
    x402Version: 1,
    error: PAYMENT_REQUIRED_ERROR.v1,
    terms: ctx.terms,
    accepts: reqs.map(({ amount, ...r }, i) => ({
      ...r,
      ...(v1NetworkNames ? { network: chainInfo(options[i]!.chain).x402V1Network ?? chainInfo(options[i]!.chain).caip2 } : {}),
      maxAmountRequired: amount,
      resource: ctx.resourceUrl,
      mimeType: "application/json",
    })),
  };
  const v2: PaymentRequired = {
    x402Version: 2,
    error: PAYMENT_REQUIRED_ERROR.v2,
    resource,
    accepts: reqs.map(({ description: _d, ...r }) => r),
    // Optional: a client may name its payment so a retry pays once (orders/payment-id.ts).
    extensions: { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false), ...discovery },
  };
  return { v1Body, v2, v2Header: encodeHeader(v2) };
}

/** What the probe's 402 (and the well-known list, discovery.ts) says of the route. */
export const PROBE_DESCRIPTION = "Pay a bill: POST the bill to get its exact price (the minimum price is shown)";

/** The probe: every option at the minimum price, for discovery without a bill. */
export function probeChallenge(ctx: ChallengeContext, v1NetworkNames = false) {
  const options = settleableOptions(ctx.deployments).map((o) => ({ ...o, amount: MIN_PRICE_MICRO_USD }));
  return buildChallenge(ctx, options, PROBE_DESCRIPTION, v1NetworkNames, BILL_DISCOVERY.full);
}
