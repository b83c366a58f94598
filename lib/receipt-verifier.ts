/**
 * Checking a receipt the way a stranger would: with nothing but the receipt, the standard
 * verifiers of @x402/extensions and the did:web document at the host the receipt names.
 * Nothing here knows this service; any x402 resource that publishes its receipt key in a
 * did:web document verifies the same way.
 *
 *   - JWS: the extension's verifier resolves the header's `kid` (a did:web URL) to its key and
 *     checks the signature; then the kid's host must be the resource's host (offer-receipt
 *     §4.5.1: the key must be authorised for the service `resourceUrl` names).
 *   - EIP-712: the extension's verifier recovers the signer; the resource's did:web document
 *     must list that address (`blockchainAccountId`) or a secp256k1 key that hashes to it.
 *
 * A resource with no host of its own (MCP's `mcp://tool/...`) names no DID: the caller gives
 * the service's origin (`serviceOrigin`), the one it connected to.
 */
import {
  extractJWSHeader,
  verifyReceiptSignatureEIP712,
  verifyReceiptSignatureJWS,
  type ReceiptPayload,
  type SignedReceipt,
} from "@x402/extensions/offer-receipt";
import { getAddress, keccak256, type Hex } from "viem";

export interface DidDocument {
  id: string;
  verificationMethod?: Array<{ id: string; type: string; blockchainAccountId?: string; publicKeyJwk?: { kty: string; crv: string; x: string; y: string } }>;
  assertionMethod?: Array<string | { id: string }>;
}

export interface VerifiedReceipt {
  payload: ReceiptPayload;
  /** The DID whose document authorised the key, and the verification method that matched. */
  did: string;
  method: string;
}

/** did:web for an origin (host, port percent-encoded), as did:web's rules build it. */
export function didWebFor(origin: string): string {
  return `did:web:${encodeURIComponent(new URL(origin).host)}`;
}

/** Where a (path-less) did:web's document is: https, or http for localhost and 127.0.0.1 (as the extension's resolver allows). */
export function didDocumentUrl(did: string): string {
  const host = decodeURIComponent(did.replace(/^did:web:/, "").split(":")[0]!);
  const scheme = /^(localhost|127\.0\.0\.1)(:|$)/.test(host) ? "http" : "https";
  return `${scheme}://${host}/.well-known/did.json`;
}

/** Fetches and checks a did:web document. */
export async function resolveDidWeb(did: string, timeoutMs = 10_000): Promise<DidDocument> {
  const res = await fetch(didDocumentUrl(did), { headers: { accept: "application/did+json, application/json" }, signal: AbortSignal.timeout(timeoutMs) });
  if (!res.ok) throw new Error(`${did}: the DID document answered ${res.status}`);
  const doc = (await res.json()) as DidDocument;
  if (doc.id !== did) throw new Error(`${did}: the document is for ${doc.id}`);
  return doc;
}

/** The address a secp256k1 JWK's key signs as (keccak of x || y, last 20 bytes). */
export function addressOfJwk(jwk: { kty: string; crv: string; x: string; y: string }): Hex | undefined {
  if (jwk.kty !== "EC" || jwk.crv !== "secp256k1") return undefined;
  const point = Buffer.concat([Buffer.from(jwk.x, "base64url"), Buffer.from(jwk.y, "base64url")]);
  return getAddress(`0x${keccak256(point).slice(-40)}`);
}

/** The verification methods a document asserts with (assertionMethod), by id. */
function assertingMethods(doc: DidDocument) {
  const asserted = new Set((doc.assertionMethod ?? []).map((m) => (typeof m === "string" ? m : m.id)));
  return (doc.verificationMethod ?? []).filter((m) => asserted.has(m.id));
}

/** Which origin a receipt's resource is served from: its own, or the one given for a host-less resource. */
function originOf(resourceUrl: string, serviceOrigin?: string): string {
  if (/^https?:\/\//.test(resourceUrl)) return new URL(resourceUrl).origin;
  if (serviceOrigin) return new URL(serviceOrigin).origin;
  throw new Error(`the resource ${resourceUrl} names no host: give the service's origin`);
}

/** Verifies an x402 receipt and that its key is the service's, from the DID document alone. */
export async function verifyX402Receipt(receipt: SignedReceipt, options: { serviceOrigin?: string } = {}): Promise<VerifiedReceipt> {
  if (receipt.format === "jws") {
    const payload = await verifyReceiptSignatureJWS(receipt); // resolves the kid (did:web) itself
    const kid = extractJWSHeader(receipt.signature).kid ?? "";
    const did = didWebFor(originOf(payload.resourceUrl, options.serviceOrigin));
    if (!kid.startsWith(`${did}#`)) throw new Error(`the receipt's key ${kid} is not one of ${did}, the resource's service`);
    const doc = await resolveDidWeb(did);
    if (!assertingMethods(doc).some((m) => m.id === kid)) throw new Error(`${did} does not assert with ${kid}`);
    return { payload, did, method: kid };
  }
  const { signer, payload } = await verifyReceiptSignatureEIP712(receipt);
  const did = didWebFor(originOf(payload.resourceUrl, options.serviceOrigin));
  return { payload, did, method: await methodFor(signer, did) };
}

/**
 * Verifies that `signer` is asserted by the service at `origin` (for a receipt in another
 * EIP-712 domain, such as the bill's own, whose signature the caller has recovered).
 */
export async function methodFor(signer: Hex, did: string): Promise<string> {
  const doc = await resolveDidWeb(did);
  const methods = assertingMethods(doc);
  // An address listed as such first (what EIP-712 recovers), else a key that hashes to it.
  const match =
    methods.find((m) => {
      const account = m.blockchainAccountId?.split(":")[2];
      return account !== undefined && getAddress(account) === getAddress(signer);
    }) ?? methods.find((m) => m.publicKeyJwk !== undefined && addressOfJwk(m.publicKeyJwk) === getAddress(signer));
  if (!match) throw new Error(`${did} does not list ${signer} among its keys: the receipt is not this service's`);
  return match.id;
}
