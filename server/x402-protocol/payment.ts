/**
 * Reading and checking an x402 payment before anything moves. The x402 packages verify a
 * signature against whatever requirements they are handed; the checks the server must
 * make itself are here: the requirements are rebuilt from the bill's price, the payer must
 * be the bill's wallet, the amount the quoted one, the payee BillPay, the asset the bill's
 * token, the nonce not zero, the authorization's validity window bounded (no ten-year
 * authorizations), and the signature the payer's own (recovered here for ordinary wallets,
 * asked of the wallet for contract wallets, ERC-1271, so a forged header locks nothing).
 *
 * A token without EIP-3009 is paid through Permit2 (x402 scheme_exact_evm.md, "Permit2";
 * lib/permit2.ts). Its signed PermitWitnessTransferFrom is read into the same authorization
 * shape, so every check above holds it the same way: from = the owner, to = the witness's
 * payee, value = the permitted amount, validAfter = the witness's, validBefore = the deadline,
 * nonce = the Permit2 nonce as 32 bytes. Beyond those, its token must be the bill's and its
 * spender the canonical x402 proxy (the only spender that sends to the witness's payee).
 */
import { PaymentPayloadV1Schema, PaymentPayloadV2Schema } from "@x402/core/schemas";
import type { PaymentPayload } from "@x402/core/types";
import { hashTypedData, isAddress, parseSignature, recoverTypedDataAddress, size, type Hex, type PublicClient } from "viem";
import { contractAccepts } from "../../lib/contract-signature.ts";
import { z } from "zod";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from "../../lib/eip3009.ts";
import type { X402Transfer } from "../../lib/networks.ts";
import { PERMIT2_WITNESS_TYPES, permit2Domain, permit2NonceKey, X402_EXACT_PROXY } from "../../lib/permit2.ts";

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

/** What a Permit2 payment signs beyond the authorization shape: the token and the spender. */
export interface Permit2Terms {
  token: `0x${string}`;
  spender: `0x${string}`;
  nonce: bigint;
}

export interface DecodedPayment {
  x402Version: 1 | 2;
  /** How the payment moves the token: EIP-3009, or Permit2 (then `permit2` holds what it signs beyond `authorization`). */
  method: X402Transfer;
  permit2?: Permit2Terms;
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
  | "SIGNATURE_INVALID"
  | "PAYMENT_METHOD_MISMATCH"
  | "PERMIT2_SPENDER_INVALID";

export class PaymentRejected extends Error {
  constructor(
    readonly code: PaymentProblem,
    readonly detail: string,
  ) {
    super(`${code}: ${detail}`);
  }
}

const hex = (bytes: number) => z.string().regex(new RegExp(`^0x[0-9a-fA-F]{${bytes * 2}}$`));
/** An address as EIP-55 has it: all lower case, or checksummed (a mixed case that is not its checksum is a mistyped address, which viem refuses to sign or hash over). */
const address = hex(20).refine((v) => isAddress(v));
const uint = z.union([z.string().regex(/^\d{1,78}$/), z.number().int().nonnegative()]).transform((v) => BigInt(v));
const exactPayload = z.object({
  signature: z.string().regex(/^0x[0-9a-fA-F]+$/),
  authorization: z.object({
    from: address,
    to: address,
    value: uint,
    validAfter: uint,
    validBefore: uint,
    nonce: hex(32),
  }),
});

const permit2Payload = z.object({
  signature: z.string().regex(/^0x[0-9a-fA-F]+$/),
  permit2Authorization: z.object({
    from: address,
    permitted: z.object({ token: address, amount: uint }),
    spender: address,
    nonce: uint,
    deadline: uint,
    witness: z.object({ to: address, validAfter: uint }),
  }),
});

/** The signed part of a payload, EIP-3009's or Permit2's, in the one authorization shape (see the file's comment). */
function signedPart(payload: unknown): Pick<DecodedPayment, "method" | "permit2" | "authorization" | "signature"> | null {
  // One shape or the other: the facilitator settles by which it finds, so a payload with both
  // could be checked here as one and settled as the other.
  if (typeof payload === "object" && payload !== null && "authorization" in payload && "permit2Authorization" in payload) return null;
  const eip3009 = exactPayload.safeParse(payload);
  if (eip3009.success) {
    const a = eip3009.data.authorization;
    return {
      method: "eip3009",
      authorization: { from: a.from as `0x${string}`, to: a.to as `0x${string}`, value: a.value, validAfter: a.validAfter, validBefore: a.validBefore, nonce: a.nonce.toLowerCase() as `0x${string}` },
      signature: eip3009.data.signature as `0x${string}`,
    };
  }
  const permit2 = permit2Payload.safeParse(payload);
  if (!permit2.success || permit2.data.permit2Authorization.nonce >= 2n ** 256n) return null;
  const p = permit2.data.permit2Authorization;
  return {
    method: "permit2",
    permit2: { token: p.permitted.token as `0x${string}`, spender: p.spender as `0x${string}`, nonce: p.nonce },
    authorization: {
      from: p.from as `0x${string}`,
      to: p.witness.to as `0x${string}`,
      value: p.permitted.amount,
      validAfter: p.witness.validAfter,
      validBefore: p.deadline,
      nonce: permit2NonceKey(p.nonce),
    },
    signature: permit2.data.signature as `0x${string}`,
  };
}

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
  const signed = signedPart(envelope.payload);
  if (!signed) {
    throw new PaymentRejected("INVALID_PAYMENT_HEADER", `${header} has neither an EIP-3009 authorization nor a Permit2 authorization, with its signature and addresses in lower case or checksummed`);
  }
  const common = { header, ...signed, raw: json as Record<string, unknown> };
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
  /** How the bill's token is paid (x402TransferOf): a payment by the other method is refused. */
  method: X402Transfer;
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
  if (p.method !== e.method) {
    throw new PaymentRejected("PAYMENT_METHOD_MISMATCH", `the payment moves the token by ${p.method}; the bill's token is paid by ${e.method} here`);
  }
  if (p.permit2 && !same(p.permit2.token, e.asset)) {
    throw new PaymentRejected("PAYMENT_ASSET_MISMATCH", `the permit is for ${p.permit2.token}; the bill's token is ${e.asset}`);
  }
  if (p.permit2 && !same(p.permit2.spender, X402_EXACT_PROXY)) {
    throw new PaymentRejected("PERMIT2_SPENDER_INVALID", `the permit's spender is ${p.permit2.spender}; it must be the x402 exact proxy ${X402_EXACT_PROXY}`);
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
  if (p.method === "eip3009" && a.nonce === ZERO_NONCE) throw new PaymentRejected("NONCE_INVALID", "the nonce must be 32 random bytes, not zero");
  if (a.validBefore <= e.nowSeconds) throw new PaymentRejected("AUTHORIZATION_EXPIRED", `expired at ${a.validBefore}`);
  if (a.validBefore > e.nowSeconds + BigInt(e.maxTimeoutSeconds) + CLOCK_SKEW_SECONDS) {
    throw new PaymentRejected(
      "AUTHORIZATION_TOO_LONG",
      `valid until ${a.validBefore}, beyond the challenge's ${e.maxTimeoutSeconds} s lifetime`,
    );
  }
  if (a.validAfter >= e.nowSeconds) {
    throw new PaymentRejected("AUTHORIZATION_NOT_YET_VALID", `the authorization is valid only after ${a.validAfter}: sign one valid now`);
  }
  if (a.validBefore < e.nowSeconds + MIN_REMAINING_SECONDS) {
    throw new PaymentRejected("AUTHORIZATION_EXPIRES_TOO_SOON", `the authorization expires at ${a.validBefore}, too soon to settle: sign one valid for longer`);
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
  const typed = signedTypedData(p, token);
  let signer: string | undefined;
  try {
    signer = await recoverTypedDataAddress({ ...typed, signature: p.signature } as Parameters<typeof recoverTypedDataAddress>[0]);
  } catch {
    signer = undefined;
  }
  if (signer && same(signer, p.authorization.from)) {
    if (!refundableSignature(p.signature)) {
      throw new PaymentRejected("SIGNATURE_INVALID", "sign with a canonical 65-byte signature (v 27 or 28, low s): BillPay checks this very signature on chain to refund the payment");
    }
    return;
  }
  const code = await client.getCode({ address: p.authorization.from });
  if (code && code !== "0x") {
    // An address in the payload whose mixed case is not its EIP-55 checksum hashes to nothing
    // (viem refuses it, as the recovery above did): no signature over it is the payer's.
    const hash = (() => {
      try {
        return hashTypedData(typed as Parameters<typeof hashTypedData>[0]);
      } catch {
        return undefined;
      }
    })();
    if (hash && (await contractAccepts(client, p.authorization.from, hash, p.signature))) return;
  }
  throw new PaymentRejected("SIGNATURE_INVALID", `the signature is not ${p.authorization.from}'s over this ${p.method === "permit2" ? "Permit2 permit" : "authorization"} for ${token.name}`);
}

/** What the payer signed: EIP-3009's TransferWithAuthorization under the token's domain, or Permit2's PermitWitnessTransferFrom under Permit2's. */
function signedTypedData(p: DecodedPayment, token: { name: string; version: string; chainId: number; address: string }) {
  const a = p.authorization;
  if (p.method === "permit2") {
    return {
      domain: permit2Domain(token.chainId),
      types: PERMIT2_WITNESS_TYPES,
      primaryType: "PermitWitnessTransferFrom" as const,
      message: {
        permitted: { token: p.permit2!.token, amount: a.value },
        spender: p.permit2!.spender,
        nonce: p.permit2!.nonce,
        deadline: a.validBefore,
        witness: { to: a.to, validAfter: a.validAfter },
      },
    };
  }
  const domain = { name: token.name, version: token.version, chainId: token.chainId, verifyingContract: token.address as Hex };
  return { domain, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType: "TransferWithAuthorization" as const, message: { ...a } };
}

/** Half the secp256k1 order: OpenZeppelin's ECDSA, which BillPay's refunds check signatures with, takes no s above it. */
const HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n;

/**
 * Whether BillPay could check this ordinary wallet's signature to refund the payment: 65 bytes,
 * v 27 or 28, s in the lower half. viem recovers more (a high s, v 0 or 1), and Permit2's own
 * ecrecover settles a high s: such a payment would settle yet leave a failed bill unrefundable.
 */
function refundableSignature(signature: Hex): boolean {
  if (size(signature) !== 65) return false;
  const v = Number.parseInt(signature.slice(130, 132), 16);
  const s = BigInt(`0x${signature.slice(66, 130)}`);
  return (v === 27 || v === 28) && s <= HALF_ORDER;
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
    (stored.method ?? "eip3009") === p.method &&
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
  /** Absent on orders stored before Permit2 was accepted: EIP-3009. */
  method?: X402Transfer;
  payload: PaymentPayload;
  authorization: Record<keyof Authorization, string>;
  signature: Hex;
}
