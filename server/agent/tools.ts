/**
 * The twelve agent tools, each defined once: name, description, zod input and handler. MCP
 * (agent/mcp.ts) and A2A (agent/a2a.ts) are thin adapters over this list, and
 * describe_capabilities reads it too. A handler returns a JSON object; a refusal is a
 * ServiceError whose code comes from the one catalogue (server/errors.ts).
 */
import { z } from "zod";
import { CHAINS } from "../../lib/chains.ts";
import { API_KEY_PATTERN, PIN_PATTERN } from "../credentials.ts";
import type { AgentHub } from "./hub.ts";
import type { AgentBill } from "../schemas.ts";
import type { Link } from "./links.ts";
import { ServiceError } from "../errors.ts";
import { internationalOptionsSchema, paymentRequestSchema } from "../schemas.ts";
import { placeOf, restPlaceFields } from "./bill-place.ts";
import { capabilitiesSummary, capabilityDetail, describeCapabilities } from "./capabilities.ts";
import type { ToolContext, ToolDefinition } from "./tool-definition.ts";

const apiKey = z.string().regex(API_KEY_PATTERN, "must be the api_key POST /api/agent/link returned (bpk_...)").describe("The api_key from linking the wallet");
const pin = z.string().regex(PIN_PATTERN, "must be the 4 to 6 digit PIN set when linking").describe("The PIN set when linking (4 to 6 digits)");
const chain = z.string().min(1).max(16).optional().describe(`Chain to pay on (${Object.keys(CHAINS).join(" or ")}); default: the chain approved at linking`);
const token = z.string().min(1).max(16).optional().describe("Token to pay in (USDC, USDT/USD₮, USA₮); default: the token approved at linking");

const idempotencyKey = z.string().min(1).max(64).regex(/^[\w.:-]+$/, "letters, digits and . _ : - only").optional();

/** A bill, as the REST route takes it minus the wallet, chain and token. */
const billFields = paymentRequestSchema.omit({ token: true, blockchain: true, wallet_address: true }).shape;
/** A bill and where to pay it: the tools' names, and the REST bill's (agent/bill-place.ts). */
const placedBill = { ...billFields, chain, token, ...restPlaceFields };
/** A batch's bill: the REST bill's eight fields and more; a token or chain it names is the batch's. */
const bill = z.object(placedBill);
/** What a paying tool takes for one bill: the credentials, the bill, and where to pay it. */
const payingBill = { api_key: apiKey, pin, ...placedBill };

/** The api_key sent as `Authorization: Bearer bpk_...` on /api/mcp or /api/a2a, if any. */
export function bearerApiKey(authorization: string | null | undefined): string | undefined {
  return /^Bearer\s+(bpk_[A-Za-z0-9_-]{43})\s*$/i.exec(authorization ?? "")?.[1];
}

/** A tool call's arguments with the bearer key filled in where the call names none (the argument wins). */
export function withBearer(args: Record<string, unknown>, bearer: string | undefined): Record<string, unknown> {
  return bearer && args.api_key === undefined ? { ...args, api_key: bearer } : args;
}

/**
 * The refusal for a call that leaves out a credential its tool needs, named with how to send it,
 * before the arguments are checked (else it reads as a bad argument: "api_key: expected string").
 * `authorization` is the request's header, so a malformed one is called out rather than ignored.
 */
export function missingCredential(tool: ToolDefinition, args: Record<string, unknown>, authorization: string | null | undefined): ServiceError | undefined {
  if (tool.authenticated && args.api_key === undefined) {
    const sent = authorization ? " (an Authorization header came, but not as `Bearer bpk_...`)" : "";
    return new ServiceError(
      "API_KEY_MISSING",
      `${tool.name} needs the wallet's api_key${sent}: send the header Authorization: Bearer <api_key>, or the argument api_key. ` +
        "POST /api/agent/link gives one (describe_capabilities shows the steps).",
    );
  }
  if (tool.paying && args.pin === undefined) {
    return new ServiceError("PIN_MISSING", `${tool.name} needs the PIN set when linking: send it as the argument pin (4 to 6 digits)`);
  }
  return undefined;
}

/** A PIN checked: counted per key before it is compared (locked out after too many). Paying tools' and any tool's that was sent one. */
async function checkSentPin(link: Link, pin: string, ctx: ToolContext): Promise<void> {
  await ctx.hub.deps.limits.take("payingKey", link.apiKeyHash!);
  await ctx.hub.checkPin(link, pin);
}

const define = <S extends z.ZodRawShape>(t: ToolDefinition<S>) => t as unknown as ToolDefinition;

const billOf = (args: object): AgentBill => {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(billFields)) if ((args as Record<string, unknown>)[key] !== undefined) out[key] = (args as Record<string, unknown>)[key];
  return out as AgentBill;
};

export function agentTools(batchMax: number): ToolDefinition[] {
  return [
    define({
      name: "describe_capabilities",
      title: "Describe capabilities",
      description:
        "What an agent needs to start, in a few KB: the ways to pay (per call by x402, or from a linked wallet's allowance), " +
        "bill categories and products, chains, tokens and contract addresses, fees and limits, how to link a wallet and set its " +
        "on-chain allowance, and every tool by name. Needs no api_key. detail adds the long form of sections: \"full\", or a " +
        "list of tools (arguments as JSON Schema), errors (the whole catalogue), products, setup.",
      input: { api_key: apiKey.optional(), detail: capabilityDetail.optional() },
      paying: false,
      authenticated: false,
      examples: ['{"skill":"describe_capabilities","arguments":{}}', '{"skill":"describe_capabilities","arguments":{"detail":["tools","errors"]}}'],
      summary: capabilitiesSummary,
      run: async (args, link, ctx) => describeCapabilities(ctx.hub, ctx.tools, { baseUrl: ctx.baseUrl, link, detail: args.detail }),
    }),
    define({
      name: "check_balance",
      title: "Check balance",
      description:
        "The linked wallet's token balance, token allowance to BillPay, BillPay spending allowance left, its periodic limit " +
        "(setSpendingLimit: amount per period, when the period ends, spent and left in it) and what can be spent now (the least " +
        "of them), per chain and token, read from the chain; plus the ledger's indexed figures: allowance, period left, totals paid and refunded.",
      input: { api_key: apiKey, chain },
      paying: false,
      authenticated: true,
      examples: ['{"skill":"check_balance","arguments":{"api_key":"bpk_...","chain":"CELO"}}'],
      run: (args, link, ctx) => ctx.hub.balance(link!, args.chain),
    }),
    define({
      name: "get_quote",
      title: "Get a quote",
      description:
        "The price of a bill before paying it, on the link's chain and token (or those given): the amount in token units, its " +
        "breakdown (bill value at the rate, the rate and its source, service fee, facilitator fee, whether the minimum applied) " +
        "and its expiry. The price is locked until then: pay_bill for the same bill pays exactly it.",
      input: { api_key: apiKey, ...placedBill },
      paying: false,
      authenticated: true,
      examples: ['{"skill":"get_quote","arguments":{"api_key":"bpk_...","serviceID":"mtn","serviceCategory":"AIRTIME","network":"MTN","billersCode":"08011111111","nairaAmount":500}}'],
      run: (args, link, ctx) => ctx.hub.quote(link!, billOf(args), placeOf([args], link!.wallet)),
    }),
    define({
      name: "list_plans",
      title: "List plans",
      description:
        "The plans (variation_code, name, nairaAmount; null for an open amount) of a product with plans: data bundles (mtn-data, ...), " +
        "cable bouquets (dstv, gotv, ...), electricity meter types, exam types (waec, jamb), banks (bank-deposit). variation_code is " +
        "optional in pay_bill: a fixed-price plan is found by nairaAmount, a meter's type by its check, a bank by network. " +
        "DStv and GOtv also take subscription_type: change (to a bouquet) or renew (the current bouquet at its renewal amount).",
      input: { api_key: apiKey.optional(), serviceID: billFields.serviceID },
      paying: false,
      authenticated: false,
      examples: ['{"skill":"list_plans","arguments":{"serviceID":"mtn-data"}}'],
      run: (args, _link, ctx) => ctx.hub.plans(args.serviceID),
    }),
    define({
      name: "verify_customer",
      title: "Verify a customer",
      description:
        "The biller's check of a number before paying: a meter (ELECTRICITY), a smartcard (CABLE), a bank account (BANK, with the bank's " +
        "code as variation_code) or a JAMB profile ID. Answers valid, the customer's name, and what else the biller tells (meter type, " +
        "current bouquet and its renewal amount), or why the number is wrong. Free and needs no api_key; answers are reused for a while " +
        "and calls are rate-limited. Airtime, data and exam PINs have no check.",
      input: {
        api_key: apiKey.optional(),
        serviceCategory: billFields.serviceCategory,
        serviceID: billFields.serviceID,
        billersCode: billFields.billersCode,
        variation_code: billFields.variation_code,
      },
      paying: false,
      authenticated: false,
      examples: ['{"skill":"verify_customer","arguments":{"serviceCategory":"ELECTRICITY","serviceID":"ikeja-electric","billersCode":"1111111111111","variation_code":"prepaid"}}'],
      // A linked wallet has its own budget; a caller with no key, its address's, shared with
      // the REST route's (so one client cannot spend every keyless caller's).
      run: ({ api_key: _key, ...q }, link, ctx) => ctx.hub.verifyCustomer(q, link ? `wallet:${link.wallet}` : ctx.client ? `address:${ctx.client}` : "keyless"),
    }),
    define({
      name: "list_international_options",
      title: "List international options",
      description:
        "International airtime and data, step by step: with no arguments the countries (code, name, currency, dialling prefix); " +
        "with country_code its product types; then with product_type_id the operators; then with operator_id the plans and their " +
        "rate (NGN per unit of the local currency); with a plan (variation_code) and, for an open amount, foreignAmount, a " +
        "ready bill whose nairaAmount is foreignAmount at the rate. Fill its billersCode and pay it with pay_bill or the x402 route.",
      input: { api_key: apiKey.optional(), ...internationalOptionsSchema.shape },
      paying: false,
      authenticated: false,
      examples: [
        '{"skill":"list_international_options","arguments":{}}',
        '{"skill":"list_international_options","arguments":{"country_code":"GH","product_type_id":"1","operator_id":"5","foreignAmount":20}}',
      ],
      run: ({ api_key: _key, ...query }, _link, ctx) => ctx.hub.internationalOptions(query),
    }),
    define({
      name: "transaction_history",
      title: "Transaction history",
      description:
        "The linked wallet's orders, newest first, each with its result and its on-chain payment and refund from the ledger. " +
        "Purchased codes (tokens, exam PINs) are shown only with the PIN; with the key alone they are withheld " +
        "(purchased_code null, purchased_code_withheld true). Pass next_cursor back as cursor for the next page.",
      input: {
        api_key: apiKey,
        pin: pin.optional().describe("The PIN set when linking: with it, purchased codes are shown"),
        limit: z.number().int().min(1).max(50).default(20).describe("Orders per page (1 to 50, default 20)"),
        cursor: z.string().max(200).optional().describe("next_cursor from the previous page"),
      },
      paying: false,
      authenticated: true,
      examples: ['{"skill":"transaction_history","arguments":{"api_key":"bpk_...","limit":10}}', '{"skill":"transaction_history","arguments":{"api_key":"bpk_...","pin":"2468","limit":10}}'],
      run: async (args, link, ctx) => {
        // A PIN given is checked as a paying call's is (counted, locked out): codes are worth as much.
        if (args.pin !== undefined) await checkSentPin(link!, args.pin, ctx);
        return ctx.hub.history(link!, args.limit, args.cursor, { showCode: args.pin !== undefined });
      },
    }),
    define({
      name: "pay_bill",
      title: "Pay a bill",
      description:
        "Pays one bill from the wallet's pre-approved allowance (no signature): prices it like the REST route, pulls the price " +
        "through BillPay, vends it, and refunds on chain if vending fails. Returns success, status (SUCCESS, FAILED_VENDING, " +
        "TIMEOUT: still being worked, see transaction_history), purchased_code, units, request_id, tx_hash. Pass an idempotency_key " +
        "to make a retry safe: the same key returns the first order instead of paying again. Without one, the same bill " +
        "paid again from the same wallet within a short window (see describe_capabilities) also returns the first order, " +
        "with replayed: true; pass allow_duplicate: true to pay it again on purpose.",
      input: {
        ...payingBill,
        idempotency_key: idempotencyKey.describe("Your key for this bill: a retry with it never pays twice"),
        allow_duplicate: z.boolean().optional().describe("Pay again although the same bill was just paid (no idempotency_key)"),
      },
      paying: true,
      authenticated: true,
      examples: [
        '{"skill":"pay_bill","arguments":{"api_key":"bpk_...","pin":"1234","serviceID":"mtn","serviceCategory":"AIRTIME","network":"MTN","billersCode":"08011111111","nairaAmount":500}}',
      ],
      run: (args, link, ctx) =>
        ctx.hub.payBill(link!, billOf(args), { ...placeOf([args], link!.wallet), idempotencyKey: args.idempotency_key, allowDuplicate: args.allow_duplicate }),
    }),
    define({
      name: "pay_bill_batch",
      title: "Pay bills in one batch",
      description:
        `Pays up to ${batchMax} bills with one on-chain pullBatch transaction (one chain and token for all). All are pulled or ` +
        "none; then each bill is vended by itself and each failed bill is refunded by itself. Returns a result per bill, in order. " +
        "Pass an idempotency_key to make a retry safe.",
      input: {
        api_key: apiKey,
        pin,
        chain,
        token,
        bills: z.array(bill).min(1).max(batchMax).describe(`1 to ${batchMax} bills, each as pay_bill takes it`),
        idempotency_key: idempotencyKey.describe("Your key for this batch: a retry with it returns the first batch's results, never pays twice"),
      },
      paying: true,
      authenticated: true,
      examples: ['{"skill":"pay_bill_batch","arguments":{"api_key":"bpk_...","pin":"1234","bills":[{"serviceID":"mtn","serviceCategory":"AIRTIME","network":"MTN","billersCode":"08011111111","nairaAmount":100}]}}'],
      run: (args, link, ctx) =>
        ctx.hub.payBatch(link!, args.bills.map(billOf), { ...placeOf([args, ...args.bills], link!.wallet), idempotencyKey: args.idempotency_key }),
    }),
    define({
      name: "schedule_bill",
      title: "Schedule a bill",
      description:
        "Schedules a bill to be paid later through the same path as pay_bill: once at run_at (ISO 8601 time), or recurring on a " +
        "cron pattern in UTC (5 fields, or 6 with seconds first), optionally at most max_runs times. Each run is priced when it " +
        "runs and needs the allowance then; the PIN is checked now.",
      input: {
        ...payingBill,
        run_at: z.iso.datetime({ offset: true }).optional().describe("When to pay once, e.g. 2026-12-01T09:00:00Z"),
        cron: z.string().min(9).max(100).optional().describe('Recurring: cron pattern in UTC, e.g. "0 9 1 * *" (09:00 on the 1st)'),
        max_runs: z.number().int().min(1).max(1000).optional().describe("Recurring: stop after this many runs"),
        idempotency_key: idempotencyKey.describe("Your key for this schedule: a retry with it never schedules the bill twice"),
        allow_duplicate: z.boolean().optional().describe("Schedule again although the same schedule was just made (no idempotency_key)"),
      },
      paying: true,
      authenticated: true,
      examples: ['{"skill":"schedule_bill","arguments":{"api_key":"bpk_...","pin":"1234","serviceID":"mtn","serviceCategory":"AIRTIME","network":"MTN","billersCode":"08011111111","nairaAmount":200,"cron":"0 9 1 * *"}}'],
      run: async (args, link, ctx) => {
        if ((args.run_at === undefined) === (args.cron === undefined)) {
          throw new ServiceError("VALIDATION_FAILED", "give exactly one of run_at (once) or cron (recurring)");
        }
        return ctx.hub.scheduleBill(
          link!,
          billOf(args),
          { runAt: args.run_at, cron: args.cron, maxRuns: args.max_runs },
          { ...placeOf([args], link!.wallet), idempotencyKey: args.idempotency_key, allowDuplicate: args.allow_duplicate },
        );
      },
    }),
    define({
      name: "list_schedules",
      title: "List schedules",
      description: "The linked wallet's schedules (newest first), with their next run and last runs' outcomes.",
      input: { api_key: apiKey, status: z.enum(["ACTIVE", "COMPLETED", "CANCELLED"]).optional().describe("Only schedules in this state") },
      paying: false,
      authenticated: true,
      examples: ['{"skill":"list_schedules","arguments":{"api_key":"bpk_..."}}'],
      run: (args, link, ctx) => ctx.hub.listSchedules(link!, args.status),
    }),
    define({
      name: "cancel_schedule",
      title: "Cancel a schedule",
      // The interface asks the PIN of the three tools that pay, and the api_key alone here:
      // cancelling moves no money. A PIN sent is checked (counted, locked out) as a paying call's.
      description: "Cancels one of the wallet's active schedules: it never runs again (a run already under way finishes). A pin, if sent, is checked.",
      input: { api_key: apiKey, pin: pin.optional(), schedule_id: z.string().regex(/^sch_[0-9a-f]{20}$/, "must be a schedule_id from schedule_bill") },
      paying: false,
      changes: true,
      authenticated: true,
      examples: ['{"skill":"cancel_schedule","arguments":{"api_key":"bpk_...","schedule_id":"sch_..."}}'],
      run: async (args, link, ctx) => {
        if (args.pin !== undefined) await checkSentPin(link!, args.pin, ctx);
        return ctx.hub.cancelSchedule(link!, args.schedule_id);
      },
    }),
  ];
}

/**
 * Runs a tool on already-validated arguments: the key (when the tool needs one), then the
 * PIN (paying tools), then the handler.
 */
export async function runTool(tool: ToolDefinition, args: Record<string, unknown>, ctx: ToolContext): Promise<unknown> {
  let link: Link | null = null;
  if (tool.authenticated || typeof args.api_key === "string") link = await ctx.hub.authenticate(String(args.api_key));
  // Reading tools per key; paying ones are counted under payingKey instead (one count a call).
  if (link?.apiKeyHash && !tool.paying) await ctx.hub.deps.limits.take("toolKey", link.apiKeyHash);
  if (tool.paying) {
    // Counted per key before the PIN is checked: a flood of calls (or guesses) is cut off early.
    await checkSentPin(link!, String(args.pin), ctx);
  }
  return tool.run(args as never, link, ctx);
}
