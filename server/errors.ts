/**
 * Every error the service answers with: one catalogue of stable codes, each with its HTTP
 * status and title. Bodies are RFC 9457 application/problem+json with the `code`.
 */
export const ERRORS = {
  INVALID_JSON: { status: 400, title: "The body is not valid JSON" },
  VALIDATION_FAILED: { status: 400, title: "The request is missing fields or has malformed ones" },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, title: "The body must be application/json" },
  BODY_TOO_LARGE: { status: 413, title: "The body is larger than the service accepts" },
  UNSUPPORTED_CHAIN: { status: 422, title: "The blockchain is not one the service settles on" },
  TOKEN_NOT_SETTLEABLE: { status: 422, title: "The token cannot settle an x402 payment on that chain" },
  // The bill against the biller's catalogue (server/biller/catalogue.ts), before any price is shown
  CALLBACK_URL_NOT_ALLOWED: { status: 422, title: "The callback_url is a private or loopback address, or not https" },
  SERVICE_UNKNOWN: { status: 422, title: "The serviceID is not a product of the bill's category" },
  PLAN_REQUIRED: { status: 422, title: "The bill names no plan and its amount or network picks none; choose one of the options" },
  PLAN_AMBIGUOUS: { status: 422, title: "Several plans fit the bill, or the biller lists the plan at two prices; choose one of the options" },
  PLAN_UNKNOWN: { status: 422, title: "The variation_code is not one of the product's plans" },
  SUBSCRIPTION_TYPE_INVALID: { status: 422, title: "subscription_type is for DStv and GOtv only, and a renewal takes no variation_code" },
  PLAN_AMOUNT_MISMATCH: { status: 422, title: "The plan has a fixed price and nairaAmount is not it" },
  AMOUNT_OUT_OF_RANGE: { status: 422, title: "nairaAmount is outside the product's limits" },
  INTERNATIONAL_FIELDS_INVALID: { status: 422, title: "An international bill needs foreignAmount, country_code, product_type_id and operator_id; a domestic one takes none" },
  INTERNATIONAL_OPTION_UNKNOWN: { status: 422, title: "The country_code, product_type_id or operator_id is not one the biller offers" },
  FOREIGN_AMOUNT_MISMATCH: { status: 422, title: "nairaAmount is not foreignAmount at the biller's rate" },
  CUSTOMER_NOT_VERIFIED: { status: 422, title: "The bill's number was checked before payment and the biller says it is wrong; nothing was charged" },
  RENEWAL_AMOUNT_MISMATCH: { status: 422, title: "The bill was checked before payment, and the biller says the smartcard's renewal costs another amount; nothing was charged" },
  VERIFY_NOT_OFFERED: { status: 422, title: "The product has no number check" },
  BILL_ABOVE_REFUND_LIMIT: { status: 422, title: "The bill costs more than BillPay's refund budget in that token could ever refund" },
  PAYMENT_ALREADY_USED: { status: 402, title: "This payment already paid for another bill" },
  PAYMENT_NONCE_SPENT: { status: 402, title: "The chain shows this authorization's nonce already spent: it can pay for no bill; sign a new one" },
  // x402 scheme_exact_evm.md, Permit2: the payer's one-time approval of Permit2 is missing. Nothing was charged.
  PERMIT2_ALLOWANCE_REQUIRED: { status: 412, title: "Approve Permit2 for the token once (approval.calldata from the payer's wallet), then pay again; nothing was charged" },
  PAYMENT_NOT_SETTLED: { status: 402, title: "The payment did not settle; nothing was taken" },
  // Idempotent x402 (server/orders/payment-id.ts): the payment-identifier extension or Idempotency-Key
  PAYMENT_ID_INVALID: { status: 400, title: "The payment id (payment-identifier or Idempotency-Key) is malformed, or the two differ" },
  PAYMENT_ID_REUSED: { status: 409, title: "This payment id already paid for a different bill" },
  PAYMENT_ID_IN_FLIGHT: { status: 409, title: "The first request under this payment id is still being processed; ask again shortly" },
  // The chain's facilitator refused the service itself (server/x402-protocol/facilitator-answer.ts): nothing was settled
  FACILITATOR_UNAUTHORIZED: { status: 503, title: "The facilitator refused the service's credentials; nothing was charged" },
  FACILITATOR_OUT_OF_CREDITS: { status: 503, title: "The facilitator has no settlement credits left for the service; nothing was charged" },
  FACILITATOR_UNAVAILABLE: { status: 503, title: "The facilitator could not be reached to verify the payment; nothing was charged, sign a new authorization later" },
  FACILITATOR_RATE_LIMITED: { status: 503, title: "The facilitator is rate-limiting the service; nothing was charged, retry later" },
  RATE_UNAVAILABLE: { status: 503, title: "The exchange rate could not be obtained" },
  // Linking a wallet (POST /api/agent/link)
  WALLET_HEADERS_INVALID: { status: 400, title: "The x-wallet-address, x-wallet-signature and x-wallet-timestamp (or x-wallet-siwe) headers are missing or malformed" },
  SIWE_MESSAGE_INVALID: { status: 401, title: "The Sign-In with Ethereum message does not name this service, link URI, chain or a nonce it issued" },
  CHAIN_NOT_LINKED: { status: 403, title: "This api_key was verified by a contract wallet on another chain and pays only there" },
  WALLET_MISMATCH: { status: 400, title: "The body's wallet_address is not the wallet that signed" },
  SIGNATURE_STALE: { status: 401, title: "The signed timestamp is outside the freshness window" },
  SIGNATURE_INVALID: { status: 401, title: "The signature was not made by the wallet over the expected message" },
  SIGNATURE_REPLAYED: { status: 409, title: "This signature was used before; sign a new message" },
  TOKEN_NOT_PULLABLE: { status: 422, title: "The token cannot be paid through the agent hub on that chain" },
  // Agent tools (MCP and A2A): the same codes come back in a tool's error result
  API_KEY_MISSING: { status: 401, title: "The tool needs the wallet's api_key: send Authorization: Bearer <api_key>, or the api_key argument" },
  API_KEY_INVALID: { status: 401, title: "The api_key is unknown" },
  API_KEY_RETIRED: { status: 401, title: "The api_key was retired by a newer link; use the newest key" },
  PIN_MISSING: { status: 401, title: "A paying tool needs the PIN set when linking, as the pin argument" },
  PIN_INVALID: { status: 401, title: "The PIN is wrong" },
  PIN_LOCKED: { status: 423, title: "Too many wrong PINs: paying is locked for a while" },
  PIN_BUSY: { status: 429, title: "As many PIN checks are under way for this wallet as attempts are left; retry in a moment" },
  SPENDING_ALLOWANCE_INSUFFICIENT: { status: 402, title: "The BillPay spending allowance left is less than the price" },
  SPENDING_LIMIT_EXCEEDED: { status: 402, title: "The wallet's periodic spending limit leaves less than the price in this period" },
  TOKEN_ALLOWANCE_INSUFFICIENT: { status: 402, title: "The token allowance to BillPay is less than the price" },
  BALANCE_INSUFFICIENT: { status: 402, title: "The wallet's token balance is less than the price" },
  PULL_REFUSED: { status: 402, title: "BillPay refused the pull; nothing was taken" },
  PULL_REVERTED: { status: 402, title: "BillPay's pull reverted on chain: the wallet's allowance or balance moved after it was checked; nothing was taken" },
  PULL_BUDGET_EXHAUSTED: { status: 503, title: "BillPay's pull budget for the token is spent for now (it refills over its period); nothing was taken, try again later" },
  IDEMPOTENCY_KEY_REUSED: { status: 409, title: "This idempotency_key already paid for, or scheduled, a different bill" },
  BATCH_TOO_LARGE: { status: 400, title: "The batch has more bills than one transaction takes" },
  SCHEDULE_NOT_FOUND: { status: 404, title: "No such schedule for this wallet" },
  SCHEDULE_NOT_ACTIVE: { status: 409, title: "The schedule has already finished or been cancelled" },
  CURSOR_INVALID: { status: 400, title: "The cursor is not one this wallet's history returned" },
  BILLER_UNAVAILABLE: { status: 503, title: "The biller could not be reached; try again" },
  LEDGER_UNAVAILABLE: { status: 503, title: "The ledger could not be reached; try again" },
  CHAIN_UNAVAILABLE: { status: 503, title: "The chain could not be read; try again" },
  WEBHOOK_TOKEN_INVALID: { status: 401, title: "The biller webhook URL's token is not the one configured (BILLER_WEBHOOK_TOKEN)" },
  HOST_NOT_ALLOWED: { status: 403, title: "The Host or Origin header is not one this service answers" },
  NOT_FOUND: { status: 404, title: "No such resource" },
  ORDER_NOT_FOUND: { status: 404, title: "No order with that request_id" },
  OPS_FORBIDDEN: { status: 403, title: "The operators' routes need OPS_TOKEN, or a loopback caller when none is set and the service is not public" },
  OPS_UNAUTHORIZED: { status: 401, title: "The operators' routes need OPS_TOKEN, as a bearer token or the basic-auth password" },
  OPS_CROSS_SITE: { status: 403, title: "A state-changing operators' request must come from the console's own form (with its token) or from a script, never from another site" },
  OPS_OPERATOR_NAME: { status: 400, title: "An operator's action needs the operator's name: the basic-auth user name, or the X-Operator header" },
  REVIEW_REFUSED: { status: 409, title: "The operator's action was refused: what the ledger and the chain show does not allow it, and nothing was moved" },
  SERVICE_BUSY: { status: 503, title: "Too much of this kind of work is in progress; retry in a moment" },
  RATE_LIMITED: { status: 429, title: "Too many requests of this kind; retry after the time given" },
  ORDER_PROOF_INVALID: { status: 401, title: "The proof presented is not this order's secret nor its payer's signature" },
  INTERNAL: { status: 500, title: "Internal error" },
} as const;

export type ErrorCode = keyof typeof ERRORS;

/** The error as a JSON object: the problem+json body, also what a tool's error result carries. */
export function problemBody(code: ErrorCode, detail: string, extra: Record<string, unknown> = {}) {
  const { status, title } = ERRORS[code];
  return { type: "about:blank", title, status, code, detail, ...extra };
}

export class ServiceError extends Error {
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(`${code}: ${detail}`);
  }
}

/** A zod refusal as VALIDATION_FAILED: every issue named by its field, in `detail` and in `issues`. */
export function validationFailed(error: { issues: Array<{ path: PropertyKey[]; message: string }> }, whole = "(body)"): ServiceError {
  const issues = error.issues.map((i) => ({ field: i.path.map(String).join(".") || whole, message: i.message }));
  return new ServiceError("VALIDATION_FAILED", issues.map((i) => `${i.field}: ${i.message}`).join("; "), { issues });
}

export function problemResponse(code: ErrorCode, detail: string, extra: Record<string, unknown> = {}): Response {
  const headers: Record<string, string> = { "content-type": "application/problem+json" };
  // A refusal that names when to come back says it in the standard header too.
  if (typeof extra.retry_after_seconds === "number") headers["retry-after"] = String(Math.max(1, Math.ceil(extra.retry_after_seconds)));
  return new Response(JSON.stringify(problemBody(code, detail, extra)), { status: ERRORS[code].status, headers });
}
