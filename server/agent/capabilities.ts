/**
 * describe_capabilities: what an agent needs to use the service with nothing else in hand.
 * Built from the one source of each fact: chains and tokens (lib/chains.ts), the deployed
 * addresses, the configuration (fees, limits), the tool definitions and the error catalogue.
 *
 * The default answer is compact (a few KB), so an agent can read it before its first call
 * without spending its context on it: tools by name, errors by pointer. `detail` adds the
 * long forms by section ("full" for all of them): each tool's arguments as tools/list gives
 * them, the whole error catalogue, the biller's products with names and limits, the set-up
 * at length.
 */
import { encodeFunctionData, formatUnits, type Hex } from "viem";
import { z } from "zod";
import { billPayAbi, eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { LINK_NONCE_PATH, LINK_PATH, linkMessage } from "../../lib/agent-link.ts";
import { chainInfo, x402TransferOf, type ChainKey } from "../../lib/chains.ts";
import { ERRORS, type ErrorCode } from "../errors.ts";
import { CATEGORIES, FACILITATOR_FEE_MICRO_USD, MIN_PRICE_MICRO_USD } from "../pricing/price.ts";
import { MAX_NAIRA_AMOUNT } from "../schemas.ts";
import type { AgentHub } from "./hub.ts";
import type { Link } from "./links.ts";
import { toolInputSchema, type ToolDefinition } from "./tool-definition.ts";
import { X402_PAYABLE_TOOLS, x402PayableSchema } from "./x402-tools.ts";

const usd = (micro: bigint) => formatUnits(micro, 6);
const WEEK_SECONDS = 7n * 86_400n;

/** The parts `detail` can ask for at length; "full" asks for all of them. */
export const CAPABILITY_SECTIONS = ["tools", "errors", "products", "setup"] as const;
type CapabilitySection = (typeof CAPABILITY_SECTIONS)[number];
const detailValue = z.enum(["full", ...CAPABILITY_SECTIONS]);

/** describe_capabilities' `detail` argument: one section name, or a list of them. */
export const capabilityDetail = z
  .union([detailValue, z.array(detailValue).min(1).max(CAPABILITY_SECTIONS.length + 1)], {
    error: `must be "full", or one or a list of ${CAPABILITY_SECTIONS.join(", ")}`,
  })
  .describe(
    `Add the long form of sections: "full" for all, or one or a list of ${CAPABILITY_SECTIONS.join(", ")} ` +
      "(tools: each tool's arguments as JSON Schema, as tools/list gives them; errors: the whole catalogue; " +
      "products: the biller's products with names and naira limits; setup: every step at length). Default: the compact answer.",
  );

/** The sections a `detail` value asks for. */
function sectionsOf(detail: z.infer<typeof capabilityDetail> | undefined): Set<CapabilitySection> {
  const asked = detail === undefined ? [] : Array.isArray(detail) ? detail : [detail];
  return new Set(asked.includes("full") ? CAPABILITY_SECTIONS : (asked as CapabilitySection[]));
}

/** The refusals an agent most often has to act on; the rest come with `detail: ["errors"]`. */
const COMMON_ERRORS: ErrorCode[] = [
  "VALIDATION_FAILED",
  "PLAN_REQUIRED",
  "PAYMENT_NOT_SETTLED",
  "API_KEY_INVALID",
  "PIN_INVALID",
  "PIN_LOCKED",
  "SPENDING_ALLOWANCE_INSUFFICIENT",
  "SPENDING_LIMIT_EXCEEDED",
  "TOKEN_ALLOWANCE_INSUFFICIENT",
  "BALANCE_INSUFFICIENT",
  "RATE_LIMITED",
  "BILLER_UNAVAILABLE",
];

/** A tool's description cut to one line: its first sentence, at most `max` characters, cut at a word. */
function oneLine(description: string, max = 72): string {
  const first = description.split(/(?<=[.!?])\s/)[0]!.replace(/\.$/, "");
  if (first.length <= max) return first;
  const cut = first.slice(0, max);
  return `${cut.slice(0, cut.lastIndexOf(" ")).replace(/[,;:(]$/, "")}…`;
}

/** The on-chain set-up for a linked wallet, ready to sign: approve BillPay on the token, set the spending allowance, and optionally a periodic limit. */
function setupCalls(hub: AgentHub, link: Link) {
  const option = hub.pullOption(link);
  const billPay = hub.deps.deployments.chains[option.chain]!.billPay.address as Hex;
  const allowance = 100n * 10n ** 6n; // 100 tokens (6 decimals); encode another amount the same way
  const weeklyLimit = 25n * 10n ** 6n;
  return {
    chain: option.chain,
    chain_id: chainInfo(option.chain).chainId,
    token: option.token,
    note:
      "Send from the linked wallet, in order. The token approval and the spending allowance are the budget, never unlimited " +
      "(100 tokens here: encode approve(BillPay, amount) and setSpendingAllowance(token, amount) for another; 0 revokes).",
    calls: [
      { to: option.tokenAddress, data: encodeFunctionData({ abi: eip3009TokenAbi, functionName: "approve", args: [billPay, allowance] }), what: `token.approve(BillPay, ${allowance})` },
      {
        to: billPay,
        data: encodeFunctionData({ abi: billPayAbi, functionName: "setSpendingAllowance", args: [option.tokenAddress, allowance] }),
        what: `BillPay.setSpendingAllowance(${option.token}, ${allowance})`,
      },
    ],
    optional: [
      {
        to: billPay,
        data: encodeFunctionData({ abi: billPayAbi, functionName: "setSpendingLimit", args: [option.tokenAddress, weeklyLimit, WEEK_SECONDS] }),
        what: `BillPay.setSpendingLimit(${option.token}, ${weeklyLimit}, ${WEEK_SECONDS}): at most ${formatUnits(weeklyLimit, 6)} tokens per week`,
      },
    ],
  };
}

/** The set-up of a linked wallet, step by step; `long` adds what each on-chain limit does in full. */
function setupSteps(hub: AgentHub, chains: Array<{ chain: string; tokens: Array<{ token: string; agent_hub: boolean }> }>, long: boolean) {
  const { config } = hub.deps;
  const pullable = [...new Set(chains.flatMap((c) => c.tokens.filter((t) => t.agent_hub).map((t) => t.token)))];
  const link = {
    step: 1,
    what: `Link the wallet once: POST ${LINK_PATH}`,
    headers: {
      "x-wallet-address": "<wallet>",
      "x-wallet-timestamp": "<now in milliseconds since epoch>",
      "x-wallet-signature": `personal_sign by the wallet of the text "${linkMessage(config.SERVICE_NAME, "<the same timestamp>")}"`,
    },
    body: { wallet_address: "<wallet>", channel: "MCP or A2A", pin: "4 to 6 digits", approved_chain: chains.map((c) => c.chain).join(" or "), approved_token: pullable.join(", ") },
    returns: long
      ? "{ success, api_key }: the api_key is shown once; linking again mints a new key and retires the old one. Each signature works once."
      : "{ success, api_key }: shown once; a new link retires the old key",
  };
  const approve = "token.approve(address spender = billpay_contract, uint256 amount)";
  const allowance = "BillPay.setSpendingAllowance(address token, uint256 amount)";
  const limit = "BillPay.setSpendingLimit(address token, uint256 amountPerPeriod, uint256 periodSeconds)";
  if (!long) {
    return [
      link,
      { step: 2, call: approve },
      { step: 3, call: allowance, what: "the budget; 0 revokes" },
      { step: 4, call: limit, what: "optional cap per fixed period; (0, 0) removes it" },
    ];
  }
  return [
    link,
    { step: 2, what: "Approve BillPay on the token (from the wallet, on chain)", call: approve },
    { step: 3, what: "Set the most BillPay may pull (from the wallet, on chain); 0 revokes at any time", call: allowance },
    {
      step: 4,
      what:
        "Optionally cap what BillPay may pull per period (from the wallet, on chain), on top of the spending allowance: " +
        "periods are fixed windows of periodSeconds from when the limit is set, and each starts again at zero. A refunded " +
        "bill gives back what it used if its period is still running. Changing the limit keeps what the current period " +
        "has used; (0, 0) removes it. A bill beyond what the period leaves is refused with SPENDING_LIMIT_EXCEEDED and " +
        "its period_ends, and nothing is charged.",
      call: limit,
      read: "BillPay.spendingLimit(address payer, address token) returns (amountPerPeriod, period, periodStart, spent, available)",
    },
    {
      step: 5,
      what:
        "check_balance shows spendable_now: the least of balance, token allowance, spending allowance and what the periodic " +
        "limit leaves this period (period_limit: amount, period, when it ends, spent and left)",
    },
    { step: 6, what: "pay_bill, pay_bill_batch or schedule_bill with the api_key and PIN" },
  ];
}

/** What a tool needs from the caller: nothing, the api_key, or the api_key and the PIN; a pay-per-call tool takes an x402 payment instead. */
const needs = (t: ToolDefinition) => ({
  needs: [...(t.authenticated ? ["api_key"] : []), ...(t.paying ? ["pin"] : [])],
  ...(X402_PAYABLE_TOOLS.has(t.name) ? { or: "an x402 payment instead (ways_to_pay.pay_per_call)" } : {}),
});
/** A tool's arguments as tools/list shows them (a pay-per-call tool's api_key and PIN optional). */
const argumentsOf = (t: ToolDefinition) => (X402_PAYABLE_TOOLS.has(t.name) ? x402PayableSchema(t) : toolInputSchema(t));

export async function describeCapabilities(
  hub: AgentHub,
  tools: ToolDefinition[],
  options: { baseUrl?: string; link?: Link | null; detail?: z.infer<typeof capabilityDetail> } = {},
) {
  const { config, deployments, rates } = hub.deps;
  const base = options.baseUrl ?? config.PUBLIC_URL ?? "";
  const long = sectionsOf(options.detail);
  const rate = await rates.ngnPerUsdMilli().catch(() => null);
  // The biller's products by category, so an agent knows the serviceIDs; left out if the biller is unreachable.
  const products = await Promise.all(
    CATEGORIES.map(async (category) => {
      const services = await hub.deps.flow.catalogue.services(category);
      return [category, services.map((s) => ({ serviceID: s.serviceID, name: s.name, min_naira: s.minimumAmount, max_naira: s.maximumAmount }))] as const;
    }),
  ).then(Object.fromEntries, () => null) as Record<string, Array<{ serviceID: string }>> | null;
  const chains = (Object.keys(deployments.chains) as ChainKey[]).map((key) => {
    const d = deployments.chains[key]!;
    return {
      chain: key,
      chain_id: chainInfo(key).chainId,
      caip2: chainInfo(key).caip2,
      billpay_contract: d.billPay.address,
      tokens: chainInfo(key).tokens.map((t) => ({
        token: t.symbol,
        address: d.tokens.find((x) => x.symbol === t.symbol)?.address ?? null,
        decimals: t.decimals,
        agent_hub: t.acceptedForPulls,
        x402: x402TransferOf(t),
      })),
    };
  });
  const x402Pay = `${base}/api/pay/x402`;
  return {
    service: config.SERVICE_NAME,
    what: "Pays real-world bills (airtime, data, electricity, cable TV, bank transfer, exam PINs) in stablecoins; refunds on chain when vending fails.",
    // Link-free first: an agent holding a wallet can pay its first bill without any set-up.
    ways_to_pay: {
      pay_per_call: {
        for: "a wallet that signs; no link, api_key or PIN",
        how:
          "pay_bill without api_key and PIN: the unpaid call answers isError with an x402 PaymentRequired (x402Version 2) in " +
          'structuredContent; sign one of accepts[] (EIP-3009; Permit2, approved once, where extra.assetTransferMethod is permit2) and call again with the same arguments and the payment in params._meta["x402/payment"]; ' +
          'the result carries _meta["x402/payment-response"] and a signed receipt.',
        a2a: 'the same call as a skill: an input-required task with x402.payment.required; send x402.payment.status "payment-submitted" and x402.payment.payload on the task',
        rest: `POST ${x402Pay}`,
        receipts: `${base}/api/receipts/signer (the key receipts are signed with)`,
      },
      linked_allowance: {
        for: "paying often from an on-chain budget, no signature per call",
        how: "setup below once; then check_balance (spendable_now) and pay_bill, pay_bill_batch or schedule_bill with the api_key and PIN",
      },
    },
    categories: CATEGORIES,
    products: !products
      ? "the biller is unreachable right now; list_plans takes a serviceID such as mtn-data or dstv"
      : long.has("products")
        ? products
        : Object.fromEntries(Object.entries(products).map(([category, list]) => [category, list.map((p) => p.serviceID)])),
    bill_fields:
      "serviceID, serviceCategory, network, billersCode, nairaAmount; optionally variation_code (a plan from list_plans; without it a fixed-price plan " +
      "is found by nairaAmount, a meter's type by its check, a bank by network), subscription_type (dstv, gotv: change or renew) and phone; " +
      "a bill whose plan cannot be told is refused with the options",
    international: long.has("products")
      ? "International airtime and data: serviceID foreign-airtime (category AIRTIME) with country_code, product_type_id, operator_id, " +
        "variation_code and, for an open amount, foreignAmount in the destination's currency (what the biller is sent); nairaAmount must be " +
        "what the biller charges: foreignAmount at the plan's rate, or a fixed bundle's price. " +
        "list_international_options (or GET /api/international) walks country, product type, operator and plan to a ready bill."
      : "serviceID foreign-airtime; list_international_options walks country, product type, operator and plan to a ready bill",
    post_settlement_verification:
      "ELECTRICITY, BANK, EDUCATION (jamb) and CABLE (except showmax) numbers are checked with the biller after payment; a wrong number is refunded automatically.",
    chains,
    token_aliases: { USDT: "USD₮" },
    amounts: "Token amounts are integers in raw units (6 decimals: 1000000 = 1 USD); nairaAmount is NGN with at most 2 decimals.",
    pricing: {
      formula: "price = nairaAmount / NGN-per-USD rate + service fee (per category) + facilitator fee, at least the minimum, rounded up to a raw unit",
      ngn_per_usd: rate === null ? null : (Number(rate) / 1000).toString(),
      service_fee_usd: Object.fromEntries(Object.entries(config.SERVICE_FEES_USD).map(([k, v]) => [k, usd(v)])),
      facilitator_fee_usd: usd(FACILITATOR_FEE_MICRO_USD),
      minimum_price_usd: usd(MIN_PRICE_MICRO_USD),
    },
    limits: {
      max_naira_amount: MAX_NAIRA_AMOUNT,
      batch_max_bills: config.BATCH_MAX_BILLS,
      pin:
        `4 to 6 digits; ${config.PIN_MAX_ATTEMPTS} wrong PINs lock paying tools for ${config.PIN_LOCK_SECONDS} seconds, each ` +
        `further lockout twice as long; after ${config.PIN_MAX_LOCKOUTS} lockouts the api_key is retired (link again)`,
      duplicate_window_seconds: config.DUPLICATE_WINDOW_SECONDS,
      paying_calls_per_key: `${config.RATE_LIMIT_PAYING_KEY.points} per ${config.RATE_LIMIT_PAYING_KEY.seconds} s`,
      link_signature_window_seconds: config.LINK_SIGNATURE_WINDOW_SECONDS,
      schedule_min_interval_seconds: config.SCHEDULE_MIN_INTERVAL_SECONDS,
      schedules_per_wallet: config.SCHEDULE_MAX_PER_WALLET,
    },
    setup: setupSteps(hub, chains, long.has("setup")),
    urls: {
      base,
      x402_pay: x402Pay,
      order_status: `${base}/api/orders/{request_id}`,
      link: `${base}${LINK_PATH}`,
      link_nonce: `${base}${LINK_NONCE_PATH}`,
      openapi: `${base}/openapi.json`,
    },
    ...(options.link ? { your_setup: setupCalls(hub, options.link) } : {}),
    transports: {
      mcp: { url: `${base}/api/mcp`, how: "streamable HTTP, stateless; tools/call answers in structuredContent, and its JSON in result.content[0].text (describe_capabilities: a short summary after it)" },
      a2a: {
        url: `${base}/api/a2a`,
        agent_card: `${base}/.well-known/agent-card.json`,
        how: 'message/send (0.3) or SendMessage (1.0) with a data part {"skill": "<tool>", "arguments": {...}}',
      },
      auth: "the api_key as an argument, or the header Authorization: Bearer <api_key>",
    },
    tools: long.has("tools")
      ? tools.map((t) => ({ name: t.name, description: t.description, ...needs(t), arguments: argumentsOf(t) }))
      : tools.map((t) => ({ name: t.name, does: oneLine(t.description), ...needs(t) })),
    errors: long.has("errors")
      ? Object.fromEntries(Object.entries(ERRORS).map(([code, e]) => [code, { status: e.status, title: e.title }]))
      : {
          shape: 'a refusal is isError: true with {"error": {code, status, title, detail}}',
          common: COMMON_ERRORS,
          all: `${Object.keys(ERRORS).length} codes with status and title: detail ["errors"]`,
        },
    detail: {
      shown: CAPABILITY_SECTIONS.filter((s) => long.has(s)),
      more: `describe_capabilities with detail "full", or a list of ${CAPABILITY_SECTIONS.join(", ")}; each tool's arguments are also in MCP tools/list and the A2A Agent Card`,
    },
  };
}

/** describe_capabilities' MCP summary: a few lines a text-only client can act on, pointing at the answer for the rest. */
export function capabilitiesSummary(answer: Record<string, unknown>): string {
  const a = answer as {
    service: string;
    what: string;
    urls: { x402_pay: string; link: string };
    chains: Array<{ chain: string; tokens: Array<{ token: string }> }>;
    tools: Array<{ name: string }>;
    detail: { shown: string[] };
  };
  return [
    `${a.service}: ${a.what}`,
    `Pay per call: pay_bill without api_key; the unpaid call answers an x402 PaymentRequired; sign it and call again with params._meta["x402/payment"] (REST: POST ${a.urls.x402_pay}).`,
    `Or link a wallet once (${a.urls.link}), approve its allowance, then pay with api_key and PIN.`,
    `Chains: ${a.chains.map((c) => `${c.chain} (${c.tokens.map((t) => t.token).join(", ")})`).join("; ")}.`,
    `Tools: ${a.tools.map((t) => t.name).join(", ")}.`,
    `Everything else (addresses, fees, limits, set-up calls, errors${a.detail.shown.length ? `, and the long ${a.detail.shown.join(", ")}` : ""}) is this result's structuredContent; detail "full" adds the long forms.`,
  ].join("\n");
}
