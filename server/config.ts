/** The service's configuration, from the environment, validated once at start-up. */
import { LOCAL_PORTS, localUrl } from "../lib/local-ports.ts";
import { z } from "zod";
import { isIP } from "node:net";
import { parseRpcBatchSize, RPC_BATCH_SIZE_RULE } from "../lib/chain-client.ts";
import { defaultDeploymentsFile } from "../lib/deployments.ts";
import { activeNetwork, FACILITATOR_AUTH_MODES, type ChainKey } from "../lib/networks.ts";
import { ledgerBoundsSettings } from "../lib/ledger-watch.ts";
import { CATEGORIES, RATE_SCALE } from "./pricing/price.ts";
import { toScaled } from "./pricing/decimal.ts";

const decimal = (scale: number, what: string) =>
  z.string().transform((s, ctx) => {
    const v = toScaled(s, scale);
    if (v === undefined) {
      ctx.addIssue({ code: "custom", message: `${what} must be a non-negative decimal with at most ${scale} decimals` });
      return z.NEVER;
    }
    return v;
  });

const port = z.coerce.number().int().min(0).max(65535);

/** The local facilitator's default address (stack/start.ts serves it there). */
const LOCAL_FACILITATOR = { url: localUrl("facilitator", {}), auth: "none" as const };
const profileFacilitator = (chain: ChainKey) => activeNetwork().chains[chain]?.facilitator ?? LOCAL_FACILITATOR;
/** The profile facilitator's authentication when `url` is that facilitator; none for any other. */
const facilitatorAuthFor = (chain: ChainKey, url: string) => {
  const profile = profileFacilitator(chain);
  return new URL(url).href === new URL(profile.url).href ? profile.auth : "none";
};

/** Service fee per category in USD, as "AIRTIME=0,DATA=0,ELECTRICITY=0.10,...". */
const fees = z.string().transform((s, ctx) => {
  const out = Object.fromEntries(CATEGORIES.map((c) => [c, 0n])) as Record<(typeof CATEGORIES)[number], bigint>;
  for (const part of s.split(",").map((p) => p.trim()).filter(Boolean)) {
    const [name, value] = part.split("=");
    const category = name?.trim().toUpperCase() as (typeof CATEGORIES)[number];
    const micro = value === undefined ? undefined : toScaled(value.trim(), 6);
    if (!CATEGORIES.includes(category) || micro === undefined) {
      ctx.addIssue({ code: "custom", message: `"${part}" is not CATEGORY=USD (categories: ${CATEGORIES.join(", ")})` });
      return z.NEVER;
    }
    out[category] = micro;
  }
  return out;
});

/** A rate limit, "<requests>/<seconds>" (for example "30/60"); "0/60" turns it off. */
const rateLimit = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((v, ctx) => {
      const m = /^(\d+)\/(\d+)$/.exec(v.trim());
      if (!m || Number(m[2]) === 0) {
        ctx.addIssue({ code: "custom", message: `expected "<requests>/<seconds>", got "${v}"` });
        return z.NEVER;
      }
      return { points: Number(m[1]), seconds: Number(m[2]) };
    });

/** x402's receipt formats (orders/receipts.ts). */
export const X402_RECEIPT_FORMATS = ["eip712", "jws"] as const;

export const configSchema = z.object({
  PORT: port.default(LOCAL_PORTS.service.defaultPort),
  HOST: z.string().default("127.0.0.1"),
  SERVICE_NAME: z.string().min(1).default("BillPay"),
  PUBLIC_URL: z.string().url().optional(),
  /** Bearer token for the operators' routes (/ops/*); without it they answer loopback callers only. */
  OPS_TOKEN: z.string().min(16).optional(),
  /** Default: deployments/<NETWORK>.json. */
  DEPLOYMENTS_FILE: z.string().default(() => defaultDeploymentsFile()),
  SERVER_DATABASE_URL: z.string().url().optional(),
  SERVER_PGLITE_DIR: z.string().default(".data/server-pglite"),
  /** Connections each instance keeps to PostgreSQL (instances x this must stay under the server's max_connections). */
  SERVER_DB_POOL_SIZE: z.coerce.number().int().min(1).max(200).default(10),
  /** Read by the shared chain clients (lib/chain-client.ts); checked here so a bad value stops the start, not a pay. */
  RPC_BATCH_SIZE: z.string().optional().refine((v) => parseRpcBatchSize(v) !== undefined, RPC_BATCH_SIZE_RULE),
  NGN_PER_USD: decimal(RATE_SCALE, "NGN_PER_USD").prefault("1550"),
  RATE_SOURCE_URL: z.string().url().optional(),
  /** Prices at NGN_PER_USD on purpose, without a rate source: a real network refuses to start on neither (startup-checks.ts). */
  RATE_FIXED: z.enum(["0", "1"]).default("0").transform((v) => v === "1"),
  RATE_SOURCE_FIELD: z.string().default("ngnPerUsd"),
  RATE_TIMEOUT_MS: z.coerce.number().int().positive().default(3_000),
  RATE_CACHE_MS: z.coerce.number().int().nonnegative().default(60_000),
  /** A rate reading more than this percent from the reference (the good rate RATE_REFERENCE_SECONDS ago) is refused. */
  RATE_MAX_DEVIATION_PCT: z.coerce.number().positive().max(100).default(5),
  /** How far back the band's reference is: within any such window the rate moves at most RATE_MAX_DEVIATION_PCT. */
  RATE_REFERENCE_SECONDS: z.coerce.number().int().min(60).default(86_400),
  /** How long the last good rate serves while readings fail or are refused; past it quoting answers 503. */
  RATE_MAX_STALENESS_SECONDS: z.coerce.number().int().positive().default(3_600),
  SERVICE_FEES_USD: fees.prefault("AIRTIME=0,DATA=0,ELECTRICITY=0.10,CABLE=0.10,BANK=0.25,EDUCATION=0.10"),
  QUOTE_TTL_SECONDS: z.coerce.number().int().min(30).max(86_400).default(86_400),
  /**
   * A payment that cannot echo its bill's signed offer (x402 v1 sends none; an MCP call that
   * named no wallet was offered a bill of no wallet) is honoured at a price other than today's
   * only when a rate version live within this many seconds gave it.
   */
  PRICE_GRACE_SECONDS: z.coerce.number().int().min(0).max(3_600).default(300),
  MAX_BODY_BYTES: z.coerce.number().int().min(1024).max(1_048_576).default(16_384),
  /** Default: the network profile's facilitator for the chain (lib/networks.ts), else the local one. */
  FACILITATOR_URL_CELO: z.string().url().default(() => profileFacilitator("CELO").url),
  FACILITATOR_URL_BASE: z.string().url().default(() => profileFacilitator("BASE").url),
  /** The facilitator on this machine is run on purpose (self-hosted): a real network does not refuse it. */
  FACILITATOR_SELF_HOSTED: z.enum(["0", "1"]).default("0").transform((v) => v === "1"),
  FACILITATOR_TIMEOUT_MS: z.coerce.number().int().positive().default(60_000),
  /**
   * How each chain's facilitator is authenticated (server/x402/facilitator-auth.ts). Default:
   * the profile's, for the profile's facilitator; none for a URL set in its place.
   */
  FACILITATOR_AUTH_CELO: z.enum(FACILITATOR_AUTH_MODES).optional(),
  FACILITATOR_AUTH_BASE: z.enum(FACILITATOR_AUTH_MODES).optional(),
  /** The key sent as X-API-Key (FACILITATOR_AUTH_<CHAIN>=api-key): Celo's facilitator issues it on its dashboard. */
  FACILITATOR_API_KEY_CELO: z.string().min(1).optional(),
  FACILITATOR_API_KEY_BASE: z.string().min(1).optional(),
  FACILITATOR_TOKEN_CELO: z.string().min(1).optional(),
  FACILITATOR_TOKEN_BASE: z.string().min(1).optional(),
  CDP_API_KEY_ID: z.string().min(1).optional(),
  CDP_API_KEY_SECRET: z.string().min(1).optional(),
  /** A pull or refund unmined this long is sent again at a higher fee (same nonce), at most TX_MAX_REPLACEMENTS times. */
  TX_REPLACE_AFTER_MS: z.coerce.number().int().positive().default(60_000),
  TX_MAX_REPLACEMENTS: z.coerce.number().int().min(0).max(10).default(3),
  /** The least native gas (wei) the operator and refunder keys must hold for the service to start. */
  MIN_GAS_WEI: z
    .string()
    .regex(/^\d+$/, "a whole number of wei")
    .default("1000000000000000")
    .transform((v) => BigInt(v)),
  BILLER_BASE_URL: z.string().url().default(localUrl("biller", {})),
  BILLER_API_KEY: z.string().min(1).default("sandbox-api-key"),
  BILLER_SECRET_KEY: z.string().min(1).default("sandbox-secret-key"),
  BILLER_PUBLIC_KEY: z.string().min(1).default("sandbox-public-key"),
  BILLER_TIMEOUT_MS: z.coerce.number().int().positive().default(15_000),
  BILLER_DEFAULT_PHONE: z.string().regex(/^\+?\d{7,15}$/).default("08011111111"),
  /** The e-mail sent with international bills, which the biller's pay call requires. */
  BILLER_DEFAULT_EMAIL: z.string().email().default("bills@billpay.local"),
  /** How long the biller's products and plans are kept before they are read again. */
  CATALOGUE_TTL_MS: z.coerce.number().int().min(0).default(600_000),
  /**
   * How long a pay the biller has no record of (requery answers "unknown request id") may
   * still appear before another attempt is sent under a new id; well past BILLER_TIMEOUT_MS.
   */
  BILLER_UNKNOWN_GRACE_MS: z.coerce.number().int().min(0).default(120_000),
  /** Pay attempts one order may make (each under its own request id) before it waits for an operator. */
  BILLER_MAX_PAY_ATTEMPTS: z.coerce.number().int().min(1).max(10).default(3),
  /**
   * When a delivered bill is asked again, in seconds after its order was made, then after each
   * ask: a reversal the biller's webhooks never brought is still refunded (orders/reversal-checks.ts).
   * Empty: never. Each a minute to a week apart, at most ten asks.
   */
  BILLER_REVERSAL_CHECKS_SECONDS: z
    .string()
    .default("600,3600,21600,86400")
    .transform((v, ctx) => {
      if (v.trim() === "") return [];
      const each = v.split(",").map((s) => Number(s.trim()));
      if (each.length > 10 || each.some((n) => !Number.isInteger(n) || n < 60 || n > 604_800)) {
        ctx.addIssue({ code: "custom", message: `expected at most ten whole seconds from 60 to 604800, separated by commas, got "${v}"` });
        return z.NEVER;
      }
      return each;
    }),
  /** Optional secret the biller's webhook URL must carry as ?token= (set it in the URL registered with the biller). */
  BILLER_WEBHOOK_TOKEN: z.string().min(16).optional(),
  VEND_DEADLINE_MS: z.coerce.number().int().min(0).default(20_000),
  REQUERY_INTERVAL_MS: z.coerce.number().int().positive().default(2_000),
  LEDGER_URL: z.string().url().default(localUrl("ledger", {})),
  /** An unfinished order nobody holds for longer than this is reported stuck (console, /metrics). */
  STUCK_AFTER_SECONDS: z.coerce.number().int().positive().default(600),
  WORKER_INTERVAL_MS: z.coerce.number().int().positive().default(2_000),
  WORKER_GRACE_SECONDS: z.coerce.number().int().nonnegative().default(30),
  /** Longer than a request's worst case (facilitator, verification, vend deadline). */
  ORDER_LEASE_SECONDS: z.coerce.number().int().min(10).default(300),
  /**
   * The most of a token's refund budget (its limit, as a percentage) one payer's refunds may
   * take within one budget period, from the first refund; a refund past it waits until the
   * payer's earlier ones age out, so one payer's failed bills cannot starve everyone else's
   * refunds. A bill priced above it is refused (orders/refund-share.ts, refund-budget.ts).
   */
  REFUND_PAYER_SHARE_PERCENT: z.coerce.number().int().min(1).max(100).default(25),
  /**
   * What refunds of payments landed after their refusal (the payer's doing) may take of a
   * token's refund budget together, per period, as a percentage of its limit: the rest is
   * always there for honest failed vends.
   */
  REFUND_LATE_SLICE_PERCENT: z.coerce.number().int().min(1).max(100).default(20),
  /**
   * What the refund of a refusal kept at intake that landed anyway keeps back to pay for its own
   * gas, in the token (every accepted token is a dollar): the service never sent that payment,
   * so its payer (or whoever he showed it to) landed it, and its refund costs BillPay about twice
   * the gas the landing did (orders/late-landing.ts). A refund takes 136,000 gas (`npm run
   * bench:gas`): about $0.002 at 25 gwei and $0.50 a CELO, about $0.005 at 0.01 gwei and
   * $3,500 an ETH on Base. 0.02 covers it four to ten times over; raise it if gas grows dearer.
   */
  LATE_LANDING_FEE: z.string().regex(/^\d{1,6}(\.\d{1,6})?$/, "a decimal amount of the token, e.g. 0.02").default("0.02"),
  /** Orders that moved no money (PAYMENT_FAILED) are deleted this many days after they ended (server/storage-purge.ts). */
  ORDER_UNPAID_RETENTION_DAYS: z.coerce.number().int().min(1).default(30),
  /** A paid bill whose number check the biller cannot answer is checked again this often... */
  VERIFY_RETRY_SECONDS: z.coerce.number().int().min(1).default(30),
  /** ...and refunded only once it still cannot be checked this long after its payment. */
  VERIFY_UNAVAILABLE_DEADLINE_SECONDS: z.coerce.number().int().min(10).default(1_800),
  /** Below this percentage of a token's refund budget left, every checkable bill is checked before payment. */
  REFUND_PRESSURE_PERCENT: z.coerce.number().int().min(0).max(100).default(50),
  /** How long BillPay's refund budget, read from the chain, is reused before it is read again. */
  REFUND_BUDGET_CACHE_MS: z.coerce.number().int().min(0).default(30_000),
  /** How long a refund may wait for the budget (or the payer's share) before it goes to an operator. */
  REFUND_WAIT_REVIEW_SECONDS: z.coerce.number().int().min(60).default(86_400),
  /**
   * A payer with this many bills refunded for a wrong number (the biller's number check)
   * within VERIFY_UPFRONT_WINDOW_SECONDS has every checkable bill verified before it is paid.
   */
  VERIFY_UPFRONT_AFTER_FAILURES: z.coerce.number().int().min(1).default(1),
  VERIFY_UPFRONT_WINDOW_SECONDS: z.coerce.number().int().min(60).default(30 * 86_400),
  /** How long the biller's definite answer to a number check is reused (verify_customer, upfront checks). */
  VERIFY_CACHE_MS: z.coerce.number().int().min(0).default(600_000),
  /** Host names (no port) the agent routes answer (and the operator routes, without OPS_TOKEN), against DNS rebinding; PUBLIC_URL's host is added. */
  ALLOWED_HOSTS: z
    .string()
    .default("localhost,127.0.0.1,[::1]")
    .transform((s) => s.split(",").map((h) => h.trim().toLowerCase()).filter(Boolean)),
  /** How far a link signature's timestamp may be from now, either way. */
  LINK_SIGNATURE_WINDOW_SECONDS: z.coerce.number().int().min(10).max(3_600).default(300),
  PIN_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(20).default(5),
  /** The server-side secret PINs are hashed under (credentials.ts); required away from the local chains. */
  PIN_PEPPER: z.string().min(32, "PIN_PEPPER must be at least 32 characters (openssl rand -hex 32)").optional(),
  /** Where the local stack keeps the pepper it generates when PIN_PEPPER is unset (local chains only). */
  PIN_PEPPER_FILE: z.string().default(".data/pin-pepper"),
  /** x402's receipt in a settlement: EIP-712 (what most clients read) or JWS with a did:web kid (verifiable from the kid alone). */
  X402_RECEIPT_FORMAT: z.enum(X402_RECEIPT_FORMATS).default("eip712"),
  PIN_LOCK_SECONDS: z.coerce.number().int().min(1).default(900),
  /** Bills in one pay_bill_batch (one pullBatch transaction). */
  BATCH_MAX_BILLS: z.coerce.number().int().min(1).max(50).default(20),
  /** How long a pay (pull or x402) waits for the ledger to show its payment before answering TIMEOUT. */
  LEDGER_WAIT_MS: z.coerce.number().int().min(0).default(15_000),
  /** When the ledger is stalled or behind (lib/ledger-watch.ts): reported in the log, /readyz, the console and the metrics. */
  ...ledgerBoundsSettings,
  /** How often the service holds the ledger against each chain's head. */
  LEDGER_WATCH_INTERVAL_MS: z.coerce.number().int().min(100).max(60_000).default(1_000),
  /** Blocks on top of a payment's before its bill is vended; the profile's figure when unset (lib/networks.ts `confirmations`). */
  CONFIRMATIONS_CELO: z.coerce.number().int().min(0).max(64).optional(),
  CONFIRMATIONS_BASE: z.coerce.number().int().min(0).max(64).optional(),
  /** How long after its payment was reorganised away a served bill's collection may keep failing before it goes to an operator. */
  RECOLLECT_REVIEW_SECONDS: z.coerce.number().int().min(1).default(600),
  /** The shortest gap allowed between two runs of a recurring schedule. */
  SCHEDULE_MIN_INTERVAL_SECONDS: z.coerce.number().int().min(1).default(300),
  SCHEDULE_MAX_PER_WALLET: z.coerce.number().int().min(1).default(50),
  /**
   * Runs in a row a schedule may fail for want of the wallet's funds or allowances before it is
   * cancelled: a schedule costs nothing to make, and each run costs the service a price and a
   * read of the chain.
   */
  SCHEDULE_MAX_UNPAID_RUNS: z.coerce.number().int().min(1).default(3),
  LOG_REQUESTS: z.enum(["0", "1"]).default("1").transform((v) => v === "1"),
  /** A Server-Timing header on the x402 route's answers: where each request's time went, stage by stage (server/stage-timing.ts). */
  SERVER_TIMING: z.enum(["0", "1"]).default("0").transform((v) => v === "1"),
  /** Links (each a signature check), per client address and per wallet. */
  RATE_LIMIT_LINK_ADDRESS: rateLimit("30/60"),
  RATE_LIMIT_LINK_WALLET: rateLimit("10/60"),
  /** Paying tool calls (pay_bill, pay_bill_batch, schedule_bill), and calls sending a PIN, per api_key. */
  RATE_LIMIT_PAYING_KEY: rateLimit("120/60"),
  /** 402 challenges and quotes for bills this instance has not priced lately, per client address (kept per instance). */
  RATE_LIMIT_CHALLENGE_ADDRESS: rateLimit("600/60"),
  /** Biller webhooks acted on (each a requery), per order; past it the webhook answers 429 and the biller sends it again later. */
  RATE_LIMIT_WEBHOOK_ORDER: rateLimit("6/60"),
  /**
   * Paid x402 calls whose payment did not settle (rejected, refused, not settleable), counted
   * per payer and per client address (several payers may share an address); past either, a
   * paid call is 429 before its payment is checked. Payments that settle are never counted.
   */
  RATE_LIMIT_UNSETTLED_PAYER: rateLimit("20/600"),
  /**
   * Agent-hub pulls that reverted on chain, at BillPay's gas, per payer: one small transaction
   * of his (a lower allowance, a transfer out) after the service's estimate makes a whole
   * pullBatch revert. Past it his paying calls are refused before anything is sent. Kept per
   * instance (server/limits.ts PER_INSTANCE): it is checked on every agent pay.
   */
  RATE_LIMIT_REVERTED_PAYER: rateLimit("2/3600"),
  /**
   * A payer's bills the biller failed (each refunded on chain at the service's gas), within the
   * window; past it his payments are refused before anything is paid (orders/failing-payers.ts).
   * Read from the orders, so shared by every instance. "0/<seconds>": never refused.
   */
  RATE_LIMIT_FAILED_VENDS_PAYER: rateLimit("20/3600"),
  RATE_LIMIT_UNSETTLED_ADDRESS: rateLimit("120/600"),
  /** Number checks (verify_customer), per client address on REST and per wallet (or, with no key, per client address) on the agent tools. */
  RATE_LIMIT_VERIFY: rateLimit("30/60"),
  /** Requests to /api/mcp and /api/a2a, per client address (each may reach the chain, the ledger or the biller). */
  RATE_LIMIT_AGENT_ADDRESS: rateLimit("1200/60"),
  /** Reading tool calls with an api_key, per key (paying ones count under RATE_LIMIT_PAYING_KEY). */
  RATE_LIMIT_TOOL_KEY: rateLimit("600/60"),
  /**
   * Reverse proxies in front of the service (comma-separated IP addresses): a request from
   * one of them is counted under the client address its X-Forwarded-For names, not under
   * the proxy's. Unset: the socket's peer is the client.
   */
  TRUSTED_PROXIES: z
    .string()
    .default("")
    .transform((s) => s.split(",").map((x) => x.trim()).filter((x) => x !== ""))
    .refine((list) => list.every((x) => isIP(x) !== 0), "TRUSTED_PROXIES must be IP addresses, comma-separated"),
  /** GET /api/orders/{request_id}, per client address. */
  RATE_LIMIT_ORDER_ADDRESS: rateLimit("600/60"),
  /** Links worked at once (a signature check each), and how many may wait; beyond, 503 SERVICE_BUSY. */
  LINK_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(1),
  LINK_QUEUE: z.coerce.number().int().min(0).default(16),
  /** Links started per second by one instance (0: unbounded); a wallet links once, so this is generous. */
  LINK_PER_SECOND: z.coerce.number().int().min(0).default(50),
  /** PIN checks run at once, and how many may wait (an old scrypt hash costs 50 ms until it is rewritten). */
  PIN_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(2),
  PIN_QUEUE: z.coerce.number().int().min(0).default(64),
  /** Callbacks (server/orders/callbacks.ts): private and loopback hosts, and plain http, allowed (local development only). */
  CALLBACK_ALLOW_PRIVATE: z.enum(["0", "1"]).default("0").transform((v) => v === "1"),
  /** One delivery's whole exchange: DNS, connect, request and (capped) answer. */
  CALLBACK_TIMEOUT_MS: z.coerce.number().int().positive().default(5_000),
  /** Deliveries in flight at once, on their own loop: a receiver that never answers holds one slot, never the worker. */
  CALLBACK_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(4),
  CALLBACK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(30).default(8),
  /** The first retry's wait; each further one doubles it (1 s, 2 s, 4 s, ... about 2 minutes in all by default). */
  CALLBACK_BACKOFF_MS: z.coerce.number().int().min(1).default(1_000),
  /** A pay_bill without idempotency_key for a bill the wallet paid this recently answers with the first order. */
  DUPLICATE_WINDOW_SECONDS: z.coerce.number().int().min(1).max(86_400).default(60),
  /** Lockouts of one link, each PIN_LOCK_SECONDS times 2^(n-1), before its key is retired. */
  PIN_MAX_LOCKOUTS: z.coerce.number().int().min(1).max(20).default(3),
});

export type Config = z.output<typeof servedSafely>;

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);

/**
 * Served beyond this machine, the 402's resource URL must come from PUBLIC_URL: otherwise
 * it would be built from the request's Host header, which any client can set.
 */
const servedSafely = configSchema
  .refine((c) => LOOPBACK.has(c.HOST.toLowerCase()) || c.PUBLIC_URL !== undefined, {
    message: "PUBLIC_URL is required when HOST is not a loopback address (the payment resource URL must not come from the Host header)",
    path: ["PUBLIC_URL"],
  })
  .transform((c) => ({
    ...c,
    FACILITATOR_AUTH_CELO: c.FACILITATOR_AUTH_CELO ?? facilitatorAuthFor("CELO", c.FACILITATOR_URL_CELO),
    FACILITATOR_AUTH_BASE: c.FACILITATOR_AUTH_BASE ?? facilitatorAuthFor("BASE", c.FACILITATOR_URL_BASE),
  }))
  .superRefine((c, ctx) => {
    // Each facilitator's chosen authentication has its credentials.
    for (const chain of ["CELO", "BASE"] as const) {
      const auth = c[`FACILITATOR_AUTH_${chain}`];
      if (auth === "api-key" && !c[`FACILITATOR_API_KEY_${chain}`]) {
        ctx.addIssue({ code: "custom", path: [`FACILITATOR_API_KEY_${chain}`], message: `FACILITATOR_AUTH_${chain}=api-key needs FACILITATOR_API_KEY_${chain}` });
      }
      if (auth === "bearer" && !c[`FACILITATOR_TOKEN_${chain}`]) {
        ctx.addIssue({ code: "custom", path: [`FACILITATOR_TOKEN_${chain}`], message: `FACILITATOR_AUTH_${chain}=bearer needs FACILITATOR_TOKEN_${chain}` });
      }
      if (auth === "cdp" && (!c.CDP_API_KEY_ID || !c.CDP_API_KEY_SECRET)) {
        ctx.addIssue({ code: "custom", path: ["CDP_API_KEY_ID"], message: `FACILITATOR_AUTH_${chain}=cdp needs CDP_API_KEY_ID and CDP_API_KEY_SECRET` });
      }
    }
  });

/** Parses the environment; throws one error naming every bad variable. */
/**
 * The local stack's addresses follow its ports (lib/local-ports.ts) unless set outright: the
 * ledger's (LEDGER_PORT), and on the local profile the facilitator's (FACILITATOR_PORT) and
 * the biller sandbox's (BILLER_SANDBOX_PORT).
 */
function withLocalPorts(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out = { ...env };
  out.LEDGER_URL ??= localUrl("ledger", env);
  if (!activeNetwork().local) return out;
  out.FACILITATOR_URL_CELO ??= localUrl("facilitator", env);
  out.FACILITATOR_URL_BASE ??= localUrl("facilitator", env);
  out.BILLER_BASE_URL ??= localUrl("biller", env);
  return out;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = servedSafely.safeParse(withLocalPorts(env));
  if (!parsed.success) throw new Error(`invalid configuration:\n${z.prettifyError(parsed.error)}`);
  return parsed.data;
}
