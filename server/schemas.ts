/** The request and result shapes of the REST route, in zod: one source for validation and the OpenAPI document. */
import { z } from "zod";
import { toScaled } from "./pricing/decimal.ts";
import { CATEGORIES } from "./pricing/price.ts";

/** The most a single bill may be, in NGN (the upstream's largest product limit). */
export const MAX_NAIRA_AMOUNT = 1_000_000;

/** The biller's numeric ids, which it writes as numbers or strings: kept as strings. */
const idLike = z
  .union([z.string().trim().regex(/^\d{1,10}$/, "must be the biller's numeric id"), z.number().int().positive().max(9_999_999_999)])
  .transform(String);

export const paymentRequestSchema = z.object({
  serviceID: z
    .string()
    .trim()
    .min(1)
    .max(64)
    .regex(/^[a-z0-9][a-z0-9-]*$/, "must be a lower-case slug such as mtn or ikeja-electric")
    .describe("The biller's product id, e.g. mtn, mtn-data, ikeja-electric, dstv, waec, jamb, bank-deposit"),
  serviceCategory: z
    .string()
    .trim()
    .transform((s) => s.toUpperCase())
    .pipe(z.enum(CATEGORIES, { error: `must be one of ${CATEGORIES.join(", ")}` }))
    .describe(`One of ${CATEGORIES.join(", ")}`),
  network: z.string().trim().min(1).max(64).describe("The provider's name, upper case, e.g. MTN, IKEJA-ELECTRIC, DSTV"),
  billersCode: z
    .string()
    .trim()
    .min(1)
    .max(32)
    .regex(/^[0-9A-Za-z-]+$/, "must be a phone, meter, smartcard or account number")
    .describe("The phone, meter, smartcard/IUC, profile or account number being paid for"),
  nairaAmount: z
    .number()
    .positive()
    .max(MAX_NAIRA_AMOUNT, `must be at most ${MAX_NAIRA_AMOUNT} NGN`)
    .refine((n) => toScaled(n, 2) !== undefined, "has at most 2 decimals (kobo), written plainly")
    .describe("The bill in NGN (at most 2 decimals): the source of truth for the price"),
  token: z.string().trim().min(1).max(16),
  blockchain: z.string().trim().min(1).max(16),
  wallet_address: z.string().regex(/^0x[0-9a-fA-F]{40}$/, "must be a 0x-prefixed 20-byte hex address"),
  /** The plan, where the product has plans (data bundles, bouquets, prepaid/postpaid, exam type, bank); resolved from the bill when absent. */
  variation_code: z
    .string()
    .trim()
    .min(1)
    .max(64)
    .optional()
    .describe("The plan (see list_plans). Optional: a fixed-price plan is found by nairaAmount, a meter type by the meter's check, a bank by network"),
  /** DStv and GOtv: change to a bouquet, or renew the current one (see list_plans); resolved from the amount when absent. */
  subscription_type: z
    .string()
    .trim()
    .transform((s) => s.toLowerCase())
    .pipe(z.enum(["change", "renew"], { error: "must be change or renew" }))
    .optional()
    .describe("DStv and GOtv: change (to the bouquet in variation_code, or the one priced at nairaAmount) or renew (the current bouquet at its renewal amount)"),
  /** The customer's phone for products that are not themselves a phone number. */
  phone: z.string().trim().regex(/^\+?\d{7,15}$/).optional().describe("The customer's phone, for products that are not a phone number"),
  // International bills (serviceID foreign-airtime): the biller's own fields, from list_international_options.
  foreignAmount: z
    .number()
    .positive()
    .refine((n) => toScaled(n, 2) !== undefined, "has at most 2 decimals, written plainly")
    .optional()
    .describe("International bills: the amount in the country's currency (what the biller's pay sends); nairaAmount must be it at the biller's rate"),
  country_code: z
    .string()
    .trim()
    .transform((s) => s.toUpperCase())
    .pipe(z.string().regex(/^[A-Z]{2}$/, "must be a two-letter country code such as GH"))
    .optional()
    .describe("International bills: the country (ISO 3166 alpha-2, e.g. GH)"),
  product_type_id: idLike.optional().describe("International bills: the product type (e.g. 1 Mobile Top Up, 4 Mobile Data)"),
  operator_id: idLike.optional().describe("International bills: the operator, from list_international_options"),
  /** Where the order's final result is POSTed, signed (server/orders/callbacks.ts). */
  callback_url: z
    .string()
    .trim()
    .max(2048)
    .url()
    .refine((u) => /^https?:\/\//i.test(u), "must be an https URL (http only where a local run allows it)")
    .optional()
    .describe("An https URL where the order's final result is POSTed, signed with HMAC-SHA256 (see docs/x402.md, callbacks)"),
});

export type PaymentRequest = z.infer<typeof paymentRequestSchema>;
/** A bill as an agent names it: its chain, token and wallet come from its link. */
export type AgentBill = Omit<PaymentRequest, "token" | "blockchain" | "wallet_address">;

/** The query of list_international_options and GET /api/international: each step narrows the next. */
/** A number to check with the biller before paying (verify_customer): the bill's own fields for it. */
export const customerQuestionSchema = paymentRequestSchema.pick({ serviceCategory: true, serviceID: true, billersCode: true, variation_code: true }).strict();

export const internationalOptionsSchema = z.object({
  country_code: paymentRequestSchema.shape.country_code,
  product_type_id: paymentRequestSchema.shape.product_type_id,
  operator_id: paymentRequestSchema.shape.operator_id,
  variation_code: paymentRequestSchema.shape.variation_code,
  foreignAmount: z.coerce
    .number()
    .positive()
    .refine((n) => toScaled(n, 2) !== undefined, "has at most 2 decimals, written plainly")
    .optional()
    .describe("For a plan without a fixed price: the amount in the country's currency, to get the bill's nairaAmount"),
});

/** Body of POST /api/agent/link. */
export const linkRequestSchema = z.object({
  wallet_address: z.string().regex(/^0x[0-9a-fA-F]{40}$/, "must be a 0x-prefixed 20-byte hex address"),
  channel: z
    .string()
    .trim()
    .transform((s) => s.toUpperCase())
    .pipe(z.enum(["MCP", "A2A"], { error: "must be MCP or A2A" }))
    .default("MCP"),
  pin: z.string().regex(/^\d{4,6}$/, "must be 4 to 6 digits, as a string"),
  approved_chain: z.string().trim().min(1).max(16).default("CELO"),
  approved_token: z.string().trim().min(1).max(16).default("USDC"),
});

export type LinkRequest = z.infer<typeof linkRequestSchema>;

export const linkResultSchema = z.object({
  success: z.boolean(),
  api_key: z.string(),
  /** The wallet's schedules this link cancelled (they were authorised under the old key). */
  cancelled_schedules: z.array(z.string()),
  /** Set for a contract wallet: the only chain the key pays on (its signature was checked there). */
  scope_chain: z.string().nullable(),
});
