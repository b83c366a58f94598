/**
 * What a facilitator's verify or settle call came to, read from what @x402/core's HTTP
 * client returns or throws. Four kinds, because each asks something different of the order:
 *   - answered: the facilitator spoke about the payment (valid or not, settled or not,
 *     or pending under the hash it broadcast: isSettlementPending), on a 2xx or a non-2xx
 *     with a verify/settle body (VerifyError / SettleError);
 *   - refused the service: 401 (credentials), 402 (out of settlement credits) or 429 (rate
 *     limit), the answers Celo's hosted facilitator documents for /settle (celo-org/docs,
 *     build/agents/x402, "If a call to /settle fails, the status code tells you why"). It
 *     says nothing about the payment and submitted nothing;
 *   - not sent: the request never reached a facilitator (the connection was refused, the
 *     host not found, the connect timed out): nothing can have been submitted;
 *   - no answer: a timeout, a connection lost once open, a 5xx without a settle body. Whether
 *     a settle landed is then unknown, and only the chain can tell.
 * Celo documents those three statuses but not their bodies, so the status alone decides.
 * @x402/core 2.27.0 (pinned) keeps the status on VerifyError/SettleError; for any other body
 * it throws a plain Error whose message starts "Facilitator <op> failed (<status>)", which is
 * read here (test/facilitator/celo-facilitator.test.ts holds that to the installed client).
 */
import { SettleError, VerifyError, type SettleResponse, type VerifyResponse } from "@x402/core/types";

/** The statuses by which a facilitator refuses the service itself, not the payment. */
export const SERVICE_REFUSALS = { 401: "FACILITATOR_UNAUTHORIZED", 402: "FACILITATOR_OUT_OF_CREDITS", 429: "FACILITATOR_RATE_LIMITED" } as const;
export type ServiceRefusalStatus = keyof typeof SERVICE_REFUSALS;

/** @x402/evm's facilitator's non-terminal settle outcome: broadcast, its receipt not seen in time. */
export const SETTLEMENT_PENDING = "settlement_pending";

export type FacilitatorAnswer<T> =
  | { kind: "answered"; response: T }
  | { kind: "refused-service"; status: ServiceRefusalStatus; detail: string }
  | { kind: "not-sent"; error: unknown }
  | { kind: "no-answer"; error: unknown };

/**
 * Errors (Node's fetch puts them in `cause.code`) raised before a request is written: no
 * connection was ever open, so the facilitator received nothing. A reset or a timeout once
 * connected is not among them: the request may have been read and acted on.
 */
const NEVER_CONNECTED = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

function unanswered(err: unknown): FacilitatorAnswer<never> {
  const code = (err as { cause?: { code?: unknown } } | undefined)?.cause?.code;
  return typeof code === "string" && NEVER_CONNECTED.has(code) ? { kind: "not-sent", error: err } : { kind: "no-answer", error: err };
}

const STATUS_IN_MESSAGE = /^Facilitator (?:verify|settle) failed \((\d{3})\)/;

function refusalStatus(status: number | undefined): ServiceRefusalStatus | undefined {
  return status !== undefined && status in SERVICE_REFUSALS ? (status as ServiceRefusalStatus) : undefined;
}

function statusOf(err: unknown): number | undefined {
  if (err instanceof VerifyError || err instanceof SettleError) return err.statusCode;
  const m = err instanceof Error ? STATUS_IN_MESSAGE.exec(err.message) : null;
  return m ? Number(m[1]) : undefined;
}

/** Calls verify and reads the outcome. */
export async function verifyAnswer(call: () => Promise<VerifyResponse>): Promise<FacilitatorAnswer<VerifyResponse>> {
  try {
    return { kind: "answered", response: await call() };
  } catch (err) {
    const refused = refusalStatus(statusOf(err));
    if (refused) return { kind: "refused-service", status: refused, detail: (err as Error).message };
    if (err instanceof VerifyError) {
      return { kind: "answered", response: { isValid: false, invalidReason: err.invalidReason, invalidMessage: err.invalidMessage, payer: err.payer } };
    }
    return unanswered(err);
  }
}

/** Calls settle and reads the outcome; a pending settlement is an answer (with its hash), never a refusal. */
export async function settleAnswer(call: () => Promise<SettleResponse>): Promise<FacilitatorAnswer<SettleResponse>> {
  try {
    return { kind: "answered", response: await call() };
  } catch (err) {
    if (err instanceof SettleError) {
      const response: SettleResponse = {
        success: false,
        errorReason: err.errorReason,
        errorMessage: err.errorMessage,
        payer: err.payer,
        transaction: err.transaction,
        network: err.network,
      };
      // A pending settlement may come back on any status (CDP's facilitator sends 500).
      if (isSettlementPending(response)) return { kind: "answered", response };
      const refused = refusalStatus(err.statusCode);
      if (refused) return { kind: "refused-service", status: refused, detail: err.message };
      // A 5xx settle body that is not pending: the facilitator may have broadcast before it
      // failed, so it is no answer about the money; the chain decides.
      return err.statusCode >= 500 ? { kind: "no-answer", error: err } : { kind: "answered", response };
    }
    const refused = refusalStatus(statusOf(err));
    if (refused) return { kind: "refused-service", status: refused, detail: (err as Error).message };
    return unanswered(err);
  }
}

/**
 * Broadcast but not confirmed: the payment may still land, under this hash. x402's
 * specification (v2, section 9) names no pending outcome, and its failed settlement carries
 * `"transaction": ""`; @x402/evm's facilitator answers `settlement_pending` with the hash. A
 * failure of another name that carries a hash is no such word: @x402/evm answers
 * `invalid_transaction_state` with the hash of a settlement mined and reverted, which can never
 * land. It is a refusal (refusedBy), and the order is watched like any refused one: should
 * something of it land after all, the ledger pass refunds it.
 */
export function isSettlementPending(r: SettleResponse): boolean {
  return !r.success && r.errorReason === SETTLEMENT_PENDING;
}
