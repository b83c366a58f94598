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
  PAYMENT_ALREADY_USED: { status: 409, title: "This payment already paid for another bill" },
  PAYMENT_NOT_SETTLED: { status: 402, title: "The payment did not settle; nothing was taken" },
  RATE_UNAVAILABLE: { status: 503, title: "The exchange rate could not be obtained" },
  NOT_FOUND: { status: 404, title: "No such resource" },
  ORDER_NOT_FOUND: { status: 404, title: "No order with that request_id" },
  INTERNAL: { status: 500, title: "Internal error" },
} as const;

export type ErrorCode = keyof typeof ERRORS;

export class ServiceError extends Error {
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(`${code}: ${detail}`);
  }
}

export function problemResponse(code: ErrorCode, detail: string, extra: Record<string, unknown> = {}): Response {
  const { status, title } = ERRORS[code];
  return new Response(JSON.stringify({ type: "about:blank", title, status, code, detail, ...extra }), {
    status,
    headers: { "content-type": "application/problem+json" },
  });
}
