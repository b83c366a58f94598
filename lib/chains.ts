/**
 * The chains and tokens this process serves: the active network profile's (lib/networks.ts),
 * with the helpers every reader uses. Chain ids and CAIP-2 ids come from the profile, never
 * from literals. Addresses of deployed contracts live in the deployments file
 * (lib/deployments.ts).
 */
import { defineChain, type Chain } from "viem";
import { activeNetwork, type ChainInfo, type ChainKey, type TokenInfo, type TokenSymbol } from "./networks.ts";

export type { ChainInfo, ChainKey, TokenInfo, TokenSymbol } from "./networks.ts";
export { ALL_CHAIN_KEYS, x402TransferOf, type X402Transfer } from "./networks.ts";

/** The active profile's chains: only those it serves. */
export const CHAINS: Readonly<Partial<Record<ChainKey, ChainInfo>>> = activeNetwork().chains;

/** The keys of the chains the active profile serves. */
export const CHAIN_KEYS = Object.keys(CHAINS) as ChainKey[];

/** The served chain `key`; throws for a chain the active profile does not serve. */
export function chainInfo(key: ChainKey | string): ChainInfo {
  const info = CHAINS[key as ChainKey];
  if (!info) throw new Error(`chain ${key} is not served by network profile "${activeNetwork().name}"`);
  return info;
}

/** Spellings callers use for each token, per the published interface (`USDT` means USD₮). */
const TOKEN_ALIASES: Record<string, TokenSymbol> = {
  USDC: "USDC",
  "USD₮": "USD₮",
  USDT: "USD₮",
  "USA₮": "USA₮",
  USAT: "USA₮",
};

/** The token a spelling names, or undefined for an unrecognised one. Case-insensitive. */
export function resolveTokenSymbol(input: string): TokenSymbol | undefined {
  return TOKEN_ALIASES[input.trim().toUpperCase()];
}

/** A served chain by its key, or undefined (unknown, or not served by this profile). */
export function chainByKey(key: string): ChainInfo | undefined {
  return CHAINS[key.trim().toUpperCase() as ChainKey];
}

export function chainById(chainId: number): ChainInfo | undefined {
  return Object.values(CHAINS).find((c) => c.chainId === chainId);
}

export function tokenOn(chain: ChainKey, symbol: TokenSymbol): TokenInfo | undefined {
  return CHAINS[chain]?.tokens.find((t) => t.symbol === symbol);
}

/** Transaction link on the chain's explorer, or undefined where it has none (local). */
export function explorerTxUrl(chain: ChainKey | string, txHash: string): string | undefined {
  const explorer = CHAINS[chain as ChainKey]?.explorer;
  return explorer ? `${explorer}/tx/${txHash}` : undefined;
}

/** Canonical Multicall3 address, the same on every EVM chain. */
export const MULTICALL3_ADDRESS = "0xcA11bde05977b3631167028862bE2a173976CA11" as const;

/** A viem chain definition for `chain` served at `rpcUrl` (local or real). */
export function viemChain(chain: ChainKey, rpcUrl: string): Chain {
  const info = chainInfo(chain);
  return defineChain({
    id: info.chainId,
    name: info.displayName,
    nativeCurrency: { name: info.key, symbol: info.key, decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
    contracts: { multicall3: { address: MULTICALL3_ADDRESS } },
  });
}
