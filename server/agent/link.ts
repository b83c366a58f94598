/**
 * POST /api/agent/link: a wallet proves itself with one of two signed messages, sets its PIN
 * and approved chain and token, and receives an api_key, shown this once (stored only as a
 * hash). Linking again mints a new key, retires the old one and cancels its schedules.
 *   - the interface's form: a personal_sign over
 *     "<Service> Agent Action: POST:/api/agent/link: <timestamp>" (x-wallet-timestamp), the
 *     timestamp within the freshness window, usable once;
 *   - the safer form, Sign-In with Ethereum (EIP-4361) in x-wallet-siwe (base64): it names
 *     this service's domain and link URI, the chain id and a nonce from
 *     GET /api/agent/link/nonce, so a signature phished for another site, another chain or
 *     another moment links nothing here.
 * An ordinary wallet's signature holds on every chain; a contract wallet's (ERC-1271/6492)
 * is checked on the approved chain only, so its key pays only there (scope_chain).
 */
import { createHash } from "node:crypto";
import { getAddress, isAddress, isHex, type Hex } from "viem";
import { messageSigner } from "../../lib/contract-signature.ts";
import { parseSiweMessage, validateSiweMessage } from "viem/siwe";
import { LINK_PATH, linkMessage } from "../../lib/agent-link.ts";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { ServiceError, validationFailed } from "../errors.ts";
import { linkRequestSchema } from "../schemas.ts";
import { hashApiKey, newApiKey } from "../credentials.ts";
import { resolvePullOption } from "./hub.ts";
import type { LinkStore } from "./links.ts";

export interface LinkDeps {
  serviceName: string;
  windowSeconds: number;
  deployments: Deployments;
  links: LinkStore;
  /** Where this service is reached: a SIWE message must name this domain (host) and link URI. */
  origin: URL;
  /** Called once the wallet's signature verifies, before anything is spent (the per-wallet rate limit). */
  verified?: (wallet: string) => Promise<void>;
}

type WalletHeaders = { address: Hex; signature: Hex } & ({ form: "timestamp"; timestamp: string } | { form: "siwe"; message: string });

export function readWalletHeaders(get: (name: string) => string | undefined): WalletHeaders {
  const address = get("x-wallet-address")?.trim();
  const signature = get("x-wallet-signature")?.trim();
  const timestamp = get("x-wallet-timestamp")?.trim();
  const siwe = get("x-wallet-siwe")?.trim();
  const message = siwe ? Buffer.from(siwe, "base64").toString("utf8") : undefined;
  const problems = [
    !address || !isAddress(address, { strict: false }) ? "x-wallet-address must be a 0x-prefixed 20-byte hex address" : null,
    !signature || !isHex(signature) || signature.length < 132 ? "x-wallet-signature must be a 0x-prefixed hex signature" : null,
    siwe
      ? !message || !message.includes(" wants you to sign in with your Ethereum account:")
        ? "x-wallet-siwe must be a base64 Sign-In with Ethereum message"
        : null
      : !timestamp || !/^\d{1,16}$/.test(timestamp)
        ? "x-wallet-timestamp must be milliseconds since the epoch, as a decimal string (or send x-wallet-siwe)"
        : null,
  ].filter(Boolean);
  if (problems.length > 0) throw new ServiceError("WALLET_HEADERS_INVALID", problems.join("; "));
  const base = { address: getAddress(address!), signature: signature as Hex };
  return siwe ? { ...base, form: "siwe", message: message! } : { ...base, form: "timestamp", timestamp: timestamp! };
}

/** Who signed, on `chain` for a contract wallet (lib/contract-signature.ts). */
function signer(deps: LinkDeps, wallet: Hex, message: string, signature: Hex, chain: ChainKey): Promise<"wallet" | "contract" | null> {
  return messageSigner(deployedClientFor(deps.deployments, chain), wallet, message, signature);
}

/** The SIWE message's fields checked against this service, this chain and now; its nonce spent. */
async function checkSiwe(deps: LinkDeps, headers: WalletHeaders & { form: "siwe" }, chain: ChainKey): Promise<void> {
  const fields = parseSiweMessage(headers.message);
  const expected = { domain: deps.origin.host, uri: `${deps.origin.origin}${LINK_PATH}`, chainId: chainInfo(chain).chainId };
  const wrong = [
    fields.domain !== expected.domain ? `domain must be ${expected.domain}` : null,
    fields.uri !== expected.uri ? `uri must be ${expected.uri}` : null,
    fields.chainId !== expected.chainId ? `chain id must be ${expected.chainId}, the approved chain's` : null,
    fields.version !== "1" ? "version must be 1" : null,
    !fields.nonce ? "a nonce from GET /api/agent/link/nonce is required" : null,
    !fields.issuedAt ? "issued-at is required" : null,
  ].filter(Boolean);
  if (wrong.length > 0) throw new ServiceError("SIWE_MESSAGE_INVALID", `the Sign-In with Ethereum message does not fit this link: ${wrong.join("; ")}`);
  const skewMs = Math.abs(Date.now() - fields.issuedAt!.getTime());
  if (skewMs > deps.windowSeconds * 1000 || !validateSiweMessage({ message: fields, address: headers.address, time: new Date() })) {
    throw new ServiceError("SIGNATURE_STALE", `the message was issued ${Math.round(skewMs / 1000)} s from now, or has expired; it must be within ${deps.windowSeconds} s`);
  }
}

export async function linkWallet(
  deps: LinkDeps,
  headers: WalletHeaders,
  body: unknown,
): Promise<{ success: true; api_key: string; cancelled_schedules: string[]; scope_chain: ChainKey | null }> {
  const parsed = linkRequestSchema.safeParse(body);
  if (!parsed.success) throw validationFailed(parsed.error);
  const req = parsed.data;
  if (getAddress(req.wallet_address) !== headers.address) {
    throw new ServiceError("WALLET_MISMATCH", "wallet_address in the body must be the x-wallet-address that signed");
  }
  const option = resolvePullOption(deps.deployments, req.approved_chain, req.approved_token);
  let message: string;
  if (headers.form === "siwe") {
    await checkSiwe(deps, headers, option.chain);
    message = headers.message;
  } else {
    const skewMs = Math.abs(Date.now() - Number(headers.timestamp));
    if (skewMs > deps.windowSeconds * 1000) {
      throw new ServiceError("SIGNATURE_STALE", `the timestamp is ${Math.round(skewMs / 1000)} s from now; it must be within ${deps.windowSeconds} s`);
    }
    message = linkMessage(deps.serviceName, headers.timestamp);
  }
  const who = await signer(deps, headers.address, message, headers.signature, option.chain);
  if (!who) throw new ServiceError("SIGNATURE_INVALID", `x-wallet-signature is not ${headers.address}'s personal_sign of the link message`);
  await deps.verified?.(headers.address);
  // Spent before anything else changes: a replay gets 409, never a second key. A SIWE link
  // spends the server's nonce; the interface's form is keyed by what was signed (wallet and
  // timestamp), not the signature's bytes, which have other valid encodings (v as 0/1, s as n - s).
  const fresh =
    headers.form === "siwe"
      ? await deps.links.useNonce(parseSiweMessage(headers.message).nonce!, deps.windowSeconds)
      : await deps.links.useSignature(createHash("sha256").update(`${headers.address.toLowerCase()}:${headers.timestamp}`).digest("hex"), headers.address);
  if (!fresh) {
    throw new ServiceError("SIGNATURE_REPLAYED", "this signature (or its nonce) was already used, or the nonce was not issued here; sign a new message");
  }
  const apiKey = newApiKey();
  const scopeChain = who === "contract" ? option.chain : null;
  const { cancelledSchedules } = await deps.links.link({
    wallet: headers.address,
    apiKeyHash: hashApiKey(apiKey),
    pinHash: deps.links.hashPin(req.pin),
    channel: req.channel,
    chain: option.chain,
    token: option.token,
    scopeChain,
  });
  return { success: true, api_key: apiKey, cancelled_schedules: cancelledSchedules, scope_chain: scopeChain };
}
