/**
 * Reading and checking an x402 payment before anything moves. The x402 packages verify a
 * signature against whatever requirements they are handed; the checks the server must
 * make itself are here: the requirements are rebuilt from the locked quote, the payer must
 * be the bill's wallet, the amount the quoted one, the payee BillPay, the asset the bill's
 * token, and the authorization's validity window bounded (no ten-year authorizations).
 */
import { PaymentPayloadV1Schema, PaymentPayloadV2Schema } from "@x402/core/schemas";
import type { PaymentPayload } from "@x402/core/types";
import type { Hex } from "viem";
import { z } from "zod";
import { CHAINS, type ChainKey } from "../../lib/chains.ts";

/** How the payment arrived: protocol v1 in X-PAYMENT, v2 in PAYMENT-SIGNATURE. */
export type PaymentHeader = "X-PAYMENT" | "PAYMENT-SIGNATURE";

export interface Authorization {
  from: `0x${string}`;
  to: `0x${string}`;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: `0x${string}`;
}

export interface DecodedPayment {
  x402Version: 1 | 2;
  header: PaymentHeader;
  scheme: string;
  network: string;
  /** v2 only: the requirement the client says it accepted (unsigned: checked, not trusted). */
  accepted?: { asset: string; payTo: string; amount: string; network: string };
  authorization: Authorization;
  signature: `0x${string}`;
  /** The decoded payload as the client sent it, for the facilitator. */
  raw: Record<string, unknown>;
}

export type PaymentProblem =
  | "INVALID_PAYMENT_HEADER"
  | "PAYMENT_SCHEME_UNSUPPORTED"
  | "PAYMENT_NETWORK_MISMATCH"
  | "PAYMENT_ASSET_MISMATCH"
  | "PAYER_MISMATCH"
  | "PAYEE_MISMATCH"
  | "AMOUNT_MISMATCH"
  | "AUTHORIZATION_NOT_YET_VALID"
  | "AUTHORIZATION_EXPIRES_TOO_SOON"
  | "AUTHORIZATION_TOO_LONG";

export class PaymentRejected extends Error {
  constructor(
    readonly code: PaymentProblem,
    readonly detail: string,
  ) {
    super(`${code}: ${detail}`);
  }
}

const hex = (bytes: number) => z.string().regex(new RegExp(`^0x[0-9a-fA-F]{${bytes * 2}}$`));
const uint = z.union([z.string().regex(/^\d{1,78}$/), z.number().int().nonnegative()]).transform((v) => BigInt(v));
const exactPayload = z.object({
  signature: z.string().regex(/^0x[0-9a-fA-F]+$/),
  authorization: z.object({
    from: hex(20),
    to: hex(20),
    value: uint,
    validAfter: uint,
    validBefore: uint,
    nonce: hex(32),
  }),
});

/** Decodes the payment header (base64 JSON); throws PaymentRejected on anything malformed. */
export function decodePayment(header: PaymentHeader, value: string): DecodedPayment {
  let json: unknown;
  try {
    if (value.length > 16_384) throw new Error("too long");
    json = JSON.parse(Buffer.from(value, "base64").toString("utf8"));
  } catch {
    throw new PaymentRejected("INVALID_PAYMENT_HEADER", `${header} is not base64-encoded JSON`);
  }
  const v1 = PaymentPayloadV1Schema.safeParse(json);
  const v2 = v1.success ? undefined : PaymentPayloadV2Schema.safeParse(json);
  if (!v1.success && !v2?.success) {
    throw new PaymentRejected("INVALID_PAYMENT_HEADER", `${header} is not an x402 payment payload`);
  }
  const envelope = (v1.success ? v1.data : v2!.data!) as { x402Version: 1 | 2; payload: unknown };
  const inner = exactPayload.safeParse(envelope.payload);
  if (!inner.success) {
    throw new PaymentRejected("INVALID_PAYMENT_HEADER", `${header} has no EIP-3009 authorization and signature`);
  }
  const a = inner.data.authorization;
  const common = {
    header,
    authorization: {
      from: a.from as `0x${string}`,
      to: a.to as `0x${string}`,
      value: a.value,
      validAfter: a.validAfter,
      validBefore: a.validBefore,
      nonce: a.nonce.toLowerCase() as `0x${string}`,
    },
    signature: inner.data.signature as `0x${string}`,
    raw: json as Record<string, unknown>,
  };
  if (v1.success) return { ...common, x402Version: 1, scheme: v1.data.scheme, network: v1.data.network };
  const d = v2!.data!;
  return {
    ...common,
    x402Version: 2,
    scheme: d.accepted.scheme,
    network: d.accepted.network,
    accepted: { asset: d.accepted.asset, payTo: d.accepted.payTo, amount: d.accepted.amount, network: d.accepted.network },
  };
}

export interface Expected {
  chain: ChainKey;
  asset: string;
  payTo: string;
  amount: bigint;
  wallet: string;
  /** The challenge's lifetime: an authorization may not outlive it by more than the skew. */
  maxTimeoutSeconds: number;
  nowSeconds: bigint;
}

/** Clock skew tolerated between the payer and the service. */
export const CLOCK_SKEW_SECONDS = 60n;
/** Settlement must have time to land before the authorization lapses. */
export const MIN_REMAINING_SECONDS = 30n;

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/** Checks a decoded payment against what the server expects; throws PaymentRejected on the first mismatch. */
export function checkPayment(p: DecodedPayment, e: Expected): void {
  const chain = CHAINS[e.chain];
  if (p.scheme !== "exact") throw new PaymentRejected("PAYMENT_SCHEME_UNSUPPORTED", `scheme "${p.scheme}"; only "exact" is accepted`);
  if (p.network !== chain.caip2 && p.network !== chain.x402V1Network) {
    throw new PaymentRejected("PAYMENT_NETWORK_MISMATCH", `payment is for ${p.network}; the bill settles on ${chain.caip2}`);
  }
  if (p.accepted && !same(p.accepted.asset, e.asset)) {
    throw new PaymentRejected("PAYMENT_ASSET_MISMATCH", `payment is in ${p.accepted.asset}; the bill's token is ${e.asset}`);
  }
  const a = p.authorization;
  if (!same(a.from, e.wallet)) {
    throw new PaymentRejected("PAYER_MISMATCH", `the authorization is signed by ${a.from}, not wallet_address ${e.wallet}`);
  }
  if (!same(a.to, e.payTo)) throw new PaymentRejected("PAYEE_MISMATCH", `the authorization pays ${a.to}, not ${e.payTo}`);
  if (a.value !== e.amount) {
    throw new PaymentRejected("AMOUNT_MISMATCH", `the authorization is for ${a.value}; the locked quote is ${e.amount}`);
  }
  if (a.validAfter > e.nowSeconds + CLOCK_SKEW_SECONDS) {
    throw new PaymentRejected("AUTHORIZATION_NOT_YET_VALID", `valid only after ${a.validAfter}`);
  }
  if (a.validBefore < e.nowSeconds + MIN_REMAINING_SECONDS) {
    throw new PaymentRejected("AUTHORIZATION_EXPIRES_TOO_SOON", `expires at ${a.validBefore}, too soon to settle`);
  }
  if (a.validBefore > e.nowSeconds + BigInt(e.maxTimeoutSeconds) + CLOCK_SKEW_SECONDS) {
    throw new PaymentRejected(
      "AUTHORIZATION_TOO_LONG",
      `valid until ${a.validBefore}, beyond the challenge's ${e.maxTimeoutSeconds} s lifetime`,
    );
  }
}

/** An x402 payment as an order keeps it: the payload for the facilitator, and the signed authorization for a refund. */
export interface StoredPayment {
  x402Version: 1 | 2;
  payload: PaymentPayload;
  authorization: Record<keyof Authorization, string>;
  signature: Hex;
}
