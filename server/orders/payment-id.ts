/**
 * Idempotent x402: a paid request may carry a client's id for the operation, in the x402
 * `payment-identifier` extension of its payment (x402-foundation/x402,
 * specs/extensions/payment_identifier.md) or in an `Idempotency-Key` header (the same id, for
 * clients that speak plain HTTP idempotency as ACP and Stripe do). A client that times out and
 * signs again under the same id pays once.
 *
 * As the extension's page has it:
 *   - the id is 16 to 128 characters of letters, digits, `-` and `_`;
 *   - a new id is processed normally;
 *   - the same id for the same operation returns the first one's response;
 *   - the same id for another operation is 409 (PAYMENT_ID_REUSED);
 *   - an id whose first request is still being processed is not processed again: its own
 *     answer, one the client can retry (409 PAYMENT_ID_IN_FLIGHT, with Retry-After).
 *
 * Binding. The page asks that an id be bound to a fingerprint of the paid operation, and
 * scoped by route. Here the id is looked up only after the new payment's signature is checked,
 * so only the payer can reach its own ids; it is scoped to (payer, this route) and bound to
 * the bill's identity (its fields, chain and token: the bill hash), not to the price, which is
 * the service's to set. The page's lookup before verification, for a resend of the very same
 * payload, is the route's replay of a payment it has seen (orders/x402-flow.ts replayOf).
 *
 * The page is silent on a first request that failed. Here the same id answers that failure
 * again (nothing was charged); a new id pays anew.
 */
import { extractAndValidatePaymentIdentifier, PAYMENT_IDENTIFIER } from "@x402/extensions/payment-identifier";
import type { PaymentPayload } from "@x402/core/types";
import { ServiceError } from "../errors.ts";
import type { Order, OrderStatus } from "./store.ts";
import type { DecodedPayment } from "../x402-protocol/payment.ts";

/** How long a client waits before asking again about an id still being processed. */
export const IN_FLIGHT_RETRY_SECONDS = 2;
const ID_PATTERN = /^[A-Za-z0-9_-]{16,128}$/;

/** Still being paid or vended: its answer is not known yet. (A refusal or a refund under way was already answered.) */
const IN_FLIGHT = new Set<OrderStatus>(["SETTLING", "PAID", "PENDING"]);

/** The route's scope in the order table's idempotency keys (pulls use the bare key). */
export const storedKey = (id: string) => `x402:${id}`;

/** The client's id for this paid request, if it gave one; PAYMENT_ID_INVALID when it is malformed or the two disagree. */
export function paymentIdOf(payment: DecodedPayment, idempotencyKey: string | undefined): string | undefined {
  let fromPayload: string | undefined;
  const extension = payment.x402Version === 2 ? (payment.raw as { extensions?: Record<string, unknown> }).extensions?.[PAYMENT_IDENTIFIER] : undefined;
  if (extension !== undefined) {
    // The client's copy of the extension is validated without the JSON schema it carries:
    // that schema is the client's echo of ours, and the library compiles whatever schema it is
    // given with a new Ajv on every call (about 10 ms of CPU per paid bill, measured, and as
    // much as a client cares to make it). What the schema says of `info` is checked anyway:
    // `required` a boolean, `id` a string of the id's pattern.
    const { schema: _theirs, ...checked } = typeof extension === "object" && extension !== null ? (extension as Record<string, unknown>) : { info: undefined };
    const { id, validation } = extractAndValidatePaymentIdentifier({ extensions: { [PAYMENT_IDENTIFIER]: checked } } as unknown as PaymentPayload);
    if (!validation.valid) throw new ServiceError("PAYMENT_ID_INVALID", `the payment-identifier extension is malformed: ${(validation.errors ?? []).join("; ")}`);
    fromPayload = id ?? undefined;
  }
  if (idempotencyKey !== undefined && !ID_PATTERN.test(idempotencyKey)) {
    throw new ServiceError("PAYMENT_ID_INVALID", "Idempotency-Key must be 16 to 128 letters, digits, '-' or '_'");
  }
  if (fromPayload && idempotencyKey && fromPayload !== idempotencyKey) {
    throw new ServiceError("PAYMENT_ID_INVALID", "the Idempotency-Key header and the payment's payment-identifier name different ids; send one, or the same in both");
  }
  return fromPayload ?? idempotencyKey;
}

/**
 * What a request under an id already used gets: the first order, for the same bill once it
 * is finished; else why not. Throws the 409s; returns the order to answer with.
 */
export function earlierUnderId(earlier: Order, billHash: string): Order {
  if (earlier.bodyHash !== billHash) {
    // Names no order: the id is the payer's, but the answer stays as plain as a replay's.
    throw new ServiceError("PAYMENT_ID_REUSED", "this payment id already paid for a different bill; use a new id for a new bill");
  }
  if (IN_FLIGHT.has(earlier.status)) {
    throw new ServiceError("PAYMENT_ID_IN_FLIGHT", "the first request under this payment id is still being processed; this payment was not used. Ask again shortly, with the same id", {
      request_id: earlier.requestId,
      retry_after_seconds: IN_FLIGHT_RETRY_SECONDS,
    });
  }
  return earlier;
}
