/**
 * POST /api/agent/link: a wallet proves itself with a personal_sign over
 * "<Service> Agent Action: POST:/api/agent/link: <timestamp>", the timestamp within the
 * freshness window and the signature usable once; it sets its PIN and approved chain and
 * token, and receives an api_key, shown this once (stored only as a hash). Linking again
 * mints a new key and retires the old one.
 */
import { createHash } from "node:crypto";
import { getAddress, isAddress, isHex, recoverMessageAddress, type Hex } from "viem";
import { LINK_PATH, linkMessage } from "../../lib/agent-link.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { ServiceError, validationFailed } from "../errors.ts";
import { linkRequestSchema, type LinkRequest } from "../schemas.ts";
import { hashApiKey, hashPin, newApiKey } from "./credentials.ts";
import { resolvePullOption } from "./hub.ts";
import type { LinkStore } from "./links.ts";


export interface LinkDeps {
  serviceName: string;
  windowSeconds: number;
  deployments: Deployments;
  links: LinkStore;
}

interface WalletHeaders {
  address: Hex;
  signature: Hex;
  timestamp: string;
}

export function readWalletHeaders(get: (name: string) => string | undefined): WalletHeaders {
  const address = get("x-wallet-address")?.trim();
  const signature = get("x-wallet-signature")?.trim();
  const timestamp = get("x-wallet-timestamp")?.trim();
  const problems = [
    !address || !isAddress(address, { strict: false }) ? "x-wallet-address must be a 0x-prefixed 20-byte hex address" : null,
    !signature || !isHex(signature) || signature.length < 132 ? "x-wallet-signature must be a 0x-prefixed hex signature" : null,
    !timestamp || !/^\d{1,16}$/.test(timestamp) ? "x-wallet-timestamp must be milliseconds since the epoch, as a decimal string" : null,
  ].filter(Boolean);
  if (problems.length > 0) throw new ServiceError("WALLET_HEADERS_INVALID", problems.join("; "));
  return { address: getAddress(address!), signature: signature as Hex, timestamp: timestamp! };
}

/** Whether `signature` is the wallet's over `message`: an EOA's, or a contract wallet's by ERC-1271/6492 on the chosen chain. */
async function signedBy(deps: LinkDeps, wallet: Hex, message: string, signature: Hex, chain: LinkRequest["approved_chain"]): Promise<boolean> {
  try {
    if ((await recoverMessageAddress({ message, signature })) === wallet) return true;
  } catch {
    // not a plain ECDSA signature: a contract wallet may still accept it
  }
  const d = deps.deployments.chains[chain as keyof Deployments["chains"]];
  if (!d || signature.length <= 132) return false;
  try {
    return await publicClientFor(chain as never, rpcUrlFor(chain as never, d)).verifyMessage({ address: wallet, message, signature });
  } catch {
    return false;
  }
}

export async function linkWallet(deps: LinkDeps, headers: WalletHeaders, body: unknown): Promise<{ success: true; api_key: string }> {
  const parsed = linkRequestSchema.safeParse(body);
  if (!parsed.success) throw validationFailed(parsed.error);
  const req = parsed.data;
  if (getAddress(req.wallet_address) !== headers.address) {
    throw new ServiceError("WALLET_MISMATCH", "wallet_address in the body must be the x-wallet-address that signed");
  }
  const option = resolvePullOption(deps.deployments, req.approved_chain, req.approved_token);
  const skewMs = Math.abs(Date.now() - Number(headers.timestamp));
  if (skewMs > deps.windowSeconds * 1000) {
    throw new ServiceError("SIGNATURE_STALE", `the timestamp is ${Math.round(skewMs / 1000)} s from now; it must be within ${deps.windowSeconds} s`);
  }
  const message = linkMessage(deps.serviceName, headers.timestamp);
  if (!(await signedBy(deps, headers.address, message, headers.signature, option.chain))) {
    throw new ServiceError("SIGNATURE_INVALID", `x-wallet-signature is not ${headers.address}'s personal_sign of "${message}"`);
  }
  // Spent before anything else changes: a replay gets 409, never a second key. Keyed by what
  // was signed (wallet and timestamp), not by the signature's bytes: an ECDSA signature has
  // other valid encodings (v as 0/1, s as n - s) that must not count as new.
  const signedKey = createHash("sha256").update(`${headers.address.toLowerCase()}:${headers.timestamp}`).digest("hex");
  if (!(await deps.links.useSignature(signedKey, headers.address))) {
    throw new ServiceError("SIGNATURE_REPLAYED", "this signature was already used; sign the message again with a new timestamp");
  }
  const apiKey = newApiKey();
  await deps.links.link({
    wallet: headers.address,
    apiKeyHash: hashApiKey(apiKey),
    pinHash: await hashPin(req.pin),
    channel: req.channel,
    chain: option.chain,
    token: option.token,
  });
  return { success: true, api_key: apiKey };
}
