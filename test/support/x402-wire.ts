/** The x402 v2 wire as a hand-written client reads and writes it: a 402's requirements, and a PAYMENT-SIGNATURE header around a signed authorization. */
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from "@x402/core/http";
import type { PaymentRequirements } from "@x402/core/types";
import type { Hex } from "viem";
import type { SignedAuthorization } from "./actors.ts";

export interface Required {
  accepted: PaymentRequirements;
  resource: { url: string; description: string; mimeType: string };
}

/** The first option and the resource of a 402's PAYMENT-REQUIRED header. */
export function requirementsOf(res: Response): Required {
  const r = decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!);
  return { accepted: r.accepts[0]!, resource: r.resource as Required["resource"] };
}

/** A PAYMENT-SIGNATURE header around `auth` for `req` (with another signature when given). */
export function paymentHeader(auth: SignedAuthorization, req: Required, signature: Hex = auth.signature): { "PAYMENT-SIGNATURE": string } {
  const authorization = { from: auth.from, to: auth.to, value: auth.value.toString(), validAfter: auth.validAfter.toString(), validBefore: auth.validBefore.toString(), nonce: auth.nonce };
  return { "PAYMENT-SIGNATURE": encodePaymentSignatureHeader({ x402Version: 2, resource: req.resource, accepted: req.accepted, payload: { authorization, signature } }) };
}
