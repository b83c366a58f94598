/**
 * The one place that knows chains and tokens: chain ids, CAIP-2 ids, token symbols and
 * aliases, EIP-712 domains, which token settles an x402 payment where. Addresses of the
 * deployed contracts live in the deployments file (lib/deployments.ts), not here; the
 * mainnet addresses below are the real tokens', for configuration against real chains.
 */

import { defineChain, type Chain } from "viem";

export type ChainKey = "CELO" | "BASE";
export type TokenSymbol = "USDC" | "USD₮" | "USA₮";

export interface TokenInfo {
  symbol: TokenSymbol;
  /** ERC-20 name() of the real token, also its EIP-712 domain name when it has one. */
  name: string;
  decimals: 6;
  /** EIP-712 domain version for EIP-3009 signatures; null where the token lacks EIP-3009. */
  eip712Version: string | null;
  /** Whether an x402 `exact` payment (EIP-3009 transferWithAuthorization) can settle in it. */
  settlesX402: boolean;
  /** Whether the agent hub may pull it through BillPay. */
  acceptedForPulls: boolean;
  /** The real token's address on the real chain. */
  mainnetAddress: `0x${string}`;
}

export interface ChainInfo {
  key: ChainKey;
  chainId: number;
  caip2: `eip155:${number}`;
  /** x402 v1 network name. */
  x402V1Network: string;
  displayName: string;
  /** The block explorer of the real network (transaction links on a real deployment). */
  explorer: string;
  /** Hardhat network that simulates this chain locally (hardhat.config.ts). */
  hardhatNetwork: string;
  /** Default local RPC port; overridable by env. */
  defaultPort: number;
  tokens: readonly TokenInfo[];
}

export const CHAINS: Record<ChainKey, ChainInfo> = {
  CELO: {
    key: "CELO",
    chainId: 42220,
    caip2: "eip155:42220",
    x402V1Network: "celo",
    displayName: "Celo",
    explorer: "https://celoscan.io",
    hardhatNetwork: "celoLocal",
    defaultPort: 8545,
    tokens: [
      {
        symbol: "USDC",
        name: "USDC",
        decimals: 6,
        eip712Version: "2",
        settlesX402: true,
        acceptedForPulls: true,
        mainnetAddress: "0xcebA9300f2b948710d2653dD7B07f33A8B32118C",
      },
      {
        symbol: "USD₮",
        name: "Tether USD",
        decimals: 6,
        eip712Version: "1",
        settlesX402: true,
        acceptedForPulls: true,
        mainnetAddress: "0x48065fbBE25f71C9282ddf5e1cD6D6A887483D5e",
      },
      {
        symbol: "USA₮",
        name: "Tether America USD",
        decimals: 6,
        eip712Version: "1",
        settlesX402: true,
        acceptedForPulls: true,
        mainnetAddress: "0xD2ab3C9A02DBBAB236BfEC45D1d755DF4267F771",
      },
    ],
  },
  BASE: {
    key: "BASE",
    chainId: 8453,
    caip2: "eip155:8453",
    x402V1Network: "base",
    displayName: "Base",
    explorer: "https://basescan.org",
    hardhatNetwork: "baseLocal",
    defaultPort: 8546,
    tokens: [
      {
        symbol: "USDC",
        name: "USD Coin",
        decimals: 6,
        eip712Version: "2",
        settlesX402: true,
        acceptedForPulls: true,
        mainnetAddress: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
      },
      {
        // Bridged Tether on Base has no transferWithAuthorization: x402 cannot settle it.
        symbol: "USD₮",
        name: "Tether USD",
        decimals: 6,
        eip712Version: null,
        settlesX402: false,
        acceptedForPulls: false,
        mainnetAddress: "0xfde4C96c8593536E31F229EA8f37b2ADa2699bb2",
      },
    ],
  },
};

export const CHAIN_KEYS = Object.keys(CHAINS) as ChainKey[];

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

export function chainByKey(key: string): ChainInfo | undefined {
  return CHAINS[key.trim().toUpperCase() as ChainKey];
}

export function chainById(chainId: number): ChainInfo | undefined {
  return Object.values(CHAINS).find((c) => c.chainId === chainId);
}

export function tokenOn(chain: ChainKey, symbol: TokenSymbol): TokenInfo | undefined {
  return CHAINS[chain].tokens.find((t) => t.symbol === symbol);
}

/** Canonical Multicall3 address, the same on every EVM chain. */
export const MULTICALL3_ADDRESS = "0xcA11bde05977b3631167028862bE2a173976CA11" as const;

/** A viem chain definition for `chain` served at `rpcUrl` (local or real). */
export function viemChain(chain: ChainKey, rpcUrl: string): Chain {
  const info = CHAINS[chain];
  return defineChain({
    id: info.chainId,
    name: info.displayName,
    nativeCurrency: { name: info.key, symbol: info.key, decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
    contracts: { multicall3: { address: MULTICALL3_ADDRESS } },
  });
}
