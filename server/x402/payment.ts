/**
 * Reading and checking an x402 payment before anything moves. The x402 packages verify a
 * signature against whatever requirements they are handed; the checks the server must
 * make itself are here: the requirements are rebuilt from the bill's price, the payer must
 * be the bill's wallet, the amount the quoted one, the payee BillPay, the asset the bill's
 * token, the nonce not zero, the authorization's validity window bounded (no ten-year
 * authorizations), and the signature the payer's own (checked here for ordinary wallets,
 * so a forged header locks nothing; a contract wallet's is left to the facilitator).
 */
import { PaymentPayloadV1Schema, PaymentPayloadV2Schema } from "@x402/core/schemas";
import type { PaymentPayload } from "@x402/core/types";
import { hashTypedData, parseSignature, recoverTypedDataAddress, type Hex, type PublicClient } from "viem";
import { contractAccepts } from "../../lib/contract-signature.ts";
import { z } from "zod";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from "../../lib/eip3009.ts";

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
  /** v2 only: the signed price offer the client echoes from the challenge (`accepted.extra.offer`), checked by pricing/offers.ts. */
  offer?: unknown;
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
  | "NONCE_INVALID"
  | "AUTHORIZATION_EXPIRED"
  | "AUTHORIZATION_TOO_LONG"
  | "AUTHORIZATION_NOT_YET_VALID"
  | "AUTHORIZATION_EXPIRES_TOO_SOON"
  | "SIGNATURE_INVALID";

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
  return readPayment(header, json);
}

/**
 * Reads an x402 payment payload already parsed from JSON (an MCP call's
 * `_meta["x402/payment"]`, say); `header` names the protocol's header it stands for.
 */
export function readPayment(header: PaymentHeader, json: unknown): DecodedPayment {
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
    offer: (d.accepted.extra as Record<string, unknown> | undefined)?.offer,
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

const ZERO_NONCE = `0x${"0".repeat(64)}`;

/**
 * Checks a decoded payment against what the server expects; throws PaymentRejected on the
 * first mismatch, before anything is locked. An authorization that fits but cannot settle
 * right now (not yet valid, or about to expire) is rejected too, before anything is stored
 * or any facilitator asked: any wallet, even an empty one, can sign one, so storing it
 * would give a stranger free orders. Should someone land it anyway, the ledger pass meets a
 * payment with no order (orders/ledger-pass.ts).
 */
export function checkPayment(p: DecodedPayment, e: Expected): void {
  const chain = chainInfo(e.chain);
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
    throw new PaymentRejected("AMOUNT_MISMATCH", `the authorization is for ${a.value}; the bill's price is ${e.amount} (or what a rate version live within the challenge's lifetime priced it at)`);
  }
  // Zero marks a pull's refund on chain: an x402 payment under it could never be refunded.
  if (a.nonce === ZERO_NONCE) throw new PaymentRejected("NONCE_INVALID", "the nonce must be 32 random bytes, not zero");
  if (a.validBefore <= e.nowSeconds) throw new PaymentRejected("AUTHORIZATION_EXPIRED", `expired at ${a.validBefore}`);
  if (a.validBefore > e.nowSeconds + BigInt(e.maxTimeoutSeconds) + CLOCK_SKEW_SECONDS) {
    throw new PaymentRejected(
      "AUTHORIZATION_TOO_LONG",
      `valid until ${a.validBefore}, beyond the challenge's ${e.maxTimeoutSeconds} s lifetime`,
    );
  }
  if (a.validAfter >= e.nowSeconds) {
    throw new PaymentRejected("AUTHORIZATION_NOT_YET_VALID", `the authorization is valid only after ${a.validAfter}; nothing was stored: sign one valid now, and do not submit this one`);
  }
  if (a.validBefore < e.nowSeconds + MIN_REMAINING_SECONDS) {
    throw new PaymentRejected("AUTHORIZATION_EXPIRES_TOO_SOON", `the authorization expires at ${a.validBefore}, too soon to settle; nothing was stored: sign one valid for longer`);
  }
}

/**
 * Checks that the payer signed the authorization for the bill's token. An ordinary wallet's
 * signature is recovered here; when it does not recover to the payer and the payer is a
 * contract, the contract is asked (ERC-1271, within a gas cap: lib/contract-signature.ts),
 * so a junk signature never locks a contract wallet's nonce either. A wallet not yet deployed
 * cannot be asked, and is refused.
 */
export async function checkSignature(
  p: DecodedPayment,
  token: { name: string; version: string; chainId: number; address: string },
  client: Pick<PublicClient, "getCode" | "call">,
): Promise<void> {
  const domain = { name: token.name, version: token.version, chainId: token.chainId, verifyingContract: token.address as Hex };
  let signer: string | undefined;
  try {
    signer = await recoverTypedDataAddress({
      domain,
      types: TRANSFER_WITH_AUTHORIZATION_TYPES,
      primaryType: "TransferWithAuthorization",
      message: p.authorization,
      signature: p.signature,
    });
  } catch {
    signer = undefined;
  }
  if (signer && same(signer, p.authorization.from)) return;
  const code = await client.getCode({ address: p.authorization.from });
  if (code && code !== "0x") {
    const hash = hashTypedData({ domain, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType: "TransferWithAuthorization", message: { ...p.authorization } });
    if (await contractAccepts(client, p.authorization.from, hash, p.signature)) return;
  }
  throw new PaymentRejected("SIGNATURE_INVALID", `the signature is not ${p.authorization.from}'s over this authorization for ${token.name}`);
}

/** A signature in one spelling (r, s, parity), so a re-encoded copy of the same one compares equal. */
function canonicalSignature(signature: string): string {
  try {
    const { r, s, yParity } = parseSignature(signature as Hex);
    return `${r}${s.slice(2)}${yParity}`.toLowerCase();
  } catch {
    return signature.toLowerCase();
  }
}

/** Whether a presented payment is the stored one: the same signed authorization, signature included. */
export function samePayment(stored: StoredPayment, p: DecodedPayment): boolean {
  const a = stored.authorization;
  const b = p.authorization;
  return (
    same(a.from, b.from) &&
    same(a.to, b.to) &&
    a.value === b.value.toString() &&
    a.validAfter === b.validAfter.toString() &&
    a.validBefore === b.validBefore.toString() &&
    same(a.nonce, b.nonce) &&
    canonicalSignature(stored.signature) === canonicalSignature(p.signature)
  );
}

/** An x402 payment as an order keeps it: the payload for the facilitator, and the signed authorization for a refund. */
export interface StoredPayment {
  x402Version: 1 | 2;
  payload: PaymentPayload;
  authorization: Record<keyof Authorization, string>;
  signature: Hex;
}
