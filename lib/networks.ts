/**
 * Network profiles: the one place that says which chains a deployment serves and, for each,
 * its chain id, CAIP-2 id, RPC URLs, stablecoins, facilitator and block explorer.
 *
 * `NETWORK` names the active profile (default `local`). Mainnet or testnet profiles may be
 * combined with a comma (`NETWORK=celo,base`) to serve both chains; `local` stands alone.
 * Everything else (the 402, the ledger, the start-up checks, the deploy) reads chain ids from
 * here, never from literals.
 *
 * Token facts are the real tokens' (addresses, EIP-712 name and version, as @x402/evm's own
 * asset table has them). On `local` the tokens are the stack's own deployments, shaped like
 * Celo's and Base's mainnet tokens, and their addresses come from the deployments file.
 */
import { LOCAL_PORTS } from "./local-ports.ts";

export type ChainKey = "CELO" | "BASE";
export type TokenSymbol = "USDC" | "USD₮" | "USA₮";
export type NetworkName = "local" | "celo" | "celo-sepolia" | "base" | "base-sepolia";
/** How a facilitator authenticates the service (server/x402/facilitator-auth.ts). */
export const FACILITATOR_AUTH_MODES = ["none", "api-key", "bearer", "cdp"] as const;
export type FacilitatorAuth = (typeof FACILITATOR_AUTH_MODES)[number];

export const ALL_CHAIN_KEYS: readonly ChainKey[] = ["CELO", "BASE"];
export const NETWORK_NAMES: readonly NetworkName[] = ["local", "celo", "celo-sepolia", "base", "base-sepolia"];

export interface TokenInfo {
  symbol: TokenSymbol;
  /** ERC-20 name(), also the EIP-712 domain name where the token has one. */
  name: string;
  decimals: 6;
  /** EIP-712 domain version for EIP-3009 signatures; null where the token lacks EIP-3009 (x402 then pays it through Permit2: x402TransferOf). */
  eip712Version: string | null;
  /** Whether the agent hub may pull it through BillPay. */
  acceptedForPulls: boolean;
  /** The token's address on a real network; undefined on `local`, where the deployment places it. */
  address?: `0x${string}`;
}

export interface ChainInfo {
  key: ChainKey;
  chainId: number;
  caip2: `eip155:${number}`;
  /** x402 v1 network name, or null where v1 has none (v1 payers then use the CAIP-2 id). */
  x402V1Network: string | null;
  displayName: string;
  /** Block explorer for transaction links; null on `local`. */
  explorer: string | null;
  /** Public RPC endpoints, tried in order; `<CHAIN>_RPC_URL` replaces them (comma-separated for several). */
  rpcUrls: readonly string[];
  /** The chain's x402 facilitator and how it authenticates; null where none is known (configure FACILITATOR_URL_<CHAIN>). */
  facilitator: { url: string; auth: FacilitatorAuth } | null;
  /** How often the ledger asks the chain for new blocks (LEDGER_POLLING_INTERVAL_MS overrides): about a block time, at least Ponder's 100 ms. */
  pollingIntervalMs: number;
  /**
   * Blocks the ledger must have indexed on top of a payment's block before the bill is
   * vended (`CONFIRMATIONS_<CHAIN>` overrides). Celo and Base are OP Stack chains: a block
   * the sequencer has shared ("unsafe") is reorganised only when the sequencer posts other
   * data to Ethereum or misses its window (specs.celo.org, "Finality"), and "safe" waits
   * for Ethereum, minutes away. Two blocks (2 s on Celo, 4 s on Base) on mainnet outlast
   * the one-block replacements of a sequencer hand-over; one on testnets; none on the local
   * chains. A deeper reorganisation is still caught after the vend (orders/payment-watch.ts).
   */
  confirmations: number;
  /** The Hardhat network (hardhat.config.ts) that serves this chain locally or deploys to it. */
  hardhatNetwork: string;
  /** Local profile only: the default port of the local node (env `<CHAIN>_PORT`). */
  defaultPort?: number;
  tokens: readonly TokenInfo[];
}

export interface NetworkProfile {
  /** The profile names combined, e.g. "celo,base". */
  name: string;
  /** The local stack: Hardhat nodes on this machine, sandbox biller and facilitator, public test keys. */
  local: boolean;
  testnet: boolean;
  chains: Partial<Record<ChainKey, ChainInfo>>;
}

const celoTokens: TokenInfo[] = [
  { symbol: "USDC", name: "USDC", decimals: 6, eip712Version: "2", acceptedForPulls: true, address: "0xcebA9300f2b948710d2653dD7B07f33A8B32118C" },
  { symbol: "USD₮", name: "Tether USD", decimals: 6, eip712Version: "1", acceptedForPulls: true, address: "0x48065fbBE25f71C9282ddf5e1cD6D6A887483D5e" },
  { symbol: "USA₮", name: "Tether America USD", decimals: 6, eip712Version: "1", acceptedForPulls: true, address: "0xD2ab3C9A02DBBAB236BfEC45D1d755DF4267F771" },
];
const baseTokens: TokenInfo[] = [
  { symbol: "USDC", name: "USD Coin", decimals: 6, eip712Version: "2", acceptedForPulls: true, address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913" },
  // Bridged Tether on Base has no transferWithAuthorization: x402 pays it through Permit2
  // (x402TransferOf), and the hub's pull is a plain transferFrom within the wallet's allowance.
  { symbol: "USD₮", name: "Tether USD", decimals: 6, eip712Version: null, acceptedForPulls: true, address: "0xfde4C96c8593536E31F229EA8f37b2ADa2699bb2" },
];
/**
 * How an x402 `exact` payment moves a token (x402 specs/schemes/exact/scheme_exact_evm.md):
 * its own EIP-3009 transferWithAuthorization where it has one, else Permit2 through the
 * canonical x402 exact proxy (lib/permit2.ts), which works for any ERC-20 once the payer
 * has approved Permit2. One token, one method: the service offers and accepts no other.
 */
export type X402Transfer = "eip3009" | "permit2";
export const x402TransferOf = (token: { eip712Version: string | null }): X402Transfer => (token.eip712Version === null ? "permit2" : "eip3009");

/** Celo's hosted x402 facilitators, keyed per merchant (celo-org/docs, build/agents/x402). */
const CELO_FACILITATOR = {
  mainnet: { url: "https://api.x402.celo.org", auth: "api-key" },
  sepolia: { url: "https://api.x402.sepolia.celo.org", auth: "api-key" },
} as const;

/** The local stack's facilitator at its default port (FACILITATOR_PORT moves it: server/config.ts). */
const LOCAL_FACILITATOR = { url: `http://127.0.0.1:${LOCAL_PORTS.facilitator.defaultPort}`, auth: "none" } as const;

const localTokens = (tokens: TokenInfo[]): TokenInfo[] => tokens.map(({ address: _real, ...t }) => t);

const chain = (c: Omit<ChainInfo, "caip2">): ChainInfo => ({ ...c, caip2: `eip155:${c.chainId}` });

const PROFILES: Record<NetworkName, Omit<NetworkProfile, "name">> = {
  local: {
    local: true,
    testnet: true,
    chains: {
      CELO: chain({ key: "CELO", chainId: 42220, x402V1Network: "celo", displayName: "Celo (local)", explorer: null, rpcUrls: [`http://127.0.0.1:${LOCAL_PORTS.CELO.defaultPort}`], facilitator: LOCAL_FACILITATOR, pollingIntervalMs: 100, confirmations: 0, hardhatNetwork: "celoLocal", defaultPort: LOCAL_PORTS.CELO.defaultPort, tokens: localTokens(celoTokens) }),
      BASE: chain({ key: "BASE", chainId: 8453, x402V1Network: "base", displayName: "Base (local)", explorer: null, rpcUrls: [`http://127.0.0.1:${LOCAL_PORTS.BASE.defaultPort}`], facilitator: LOCAL_FACILITATOR, pollingIntervalMs: 100, confirmations: 0, hardhatNetwork: "baseLocal", defaultPort: LOCAL_PORTS.BASE.defaultPort, tokens: localTokens(baseTokens) }),
    },
  },
  celo: {
    local: false,
    testnet: false,
    chains: {
      // Celo's hosted facilitator (celo-org/docs, build/agents/x402): /settle needs the merchant's
      // key in X-API-Key (FACILITATOR_API_KEY_CELO), issued on its dashboard, x402.celo.org.
      CELO: chain({ key: "CELO", chainId: 42220, x402V1Network: "celo", displayName: "Celo", explorer: "https://celoscan.io", rpcUrls: ["https://forno.celo.org"], facilitator: CELO_FACILITATOR.mainnet, pollingIntervalMs: 1000, confirmations: 2, hardhatNetwork: "celo", tokens: celoTokens }),
    },
  },
  "celo-sepolia": {
    local: false,
    testnet: true,
    chains: {
      CELO: chain({
        key: "CELO",
        chainId: 11142220,
        x402V1Network: null,
        displayName: "Celo Sepolia",
        explorer: "https://celo-sepolia.blockscout.com",
        rpcUrls: ["https://forno.celo-sepolia.celo-testnet.org"],
        facilitator: CELO_FACILITATOR.sepolia,
        pollingIntervalMs: 1000,
        confirmations: 1,
        hardhatNetwork: "celoSepolia",
        tokens: [{ symbol: "USDC", name: "USDC", decimals: 6, eip712Version: "2", acceptedForPulls: true, address: "0x01C5C0122039549AD1493B8220cABEdD739BC44E" }],
      }),
    },
  },
  base: {
    local: false,
    testnet: false,
    chains: {
      BASE: chain({ key: "BASE", chainId: 8453, x402V1Network: "base", displayName: "Base", explorer: "https://basescan.org", rpcUrls: ["https://mainnet.base.org"], facilitator: { url: "https://api.cdp.coinbase.com/platform/v2/x402", auth: "cdp" }, pollingIntervalMs: 1000, confirmations: 2, hardhatNetwork: "base", tokens: baseTokens }),
    },
  },
  "base-sepolia": {
    local: false,
    testnet: true,
    chains: {
      BASE: chain({
        key: "BASE",
        chainId: 84532,
        x402V1Network: "base-sepolia",
        displayName: "Base Sepolia",
        explorer: "https://sepolia.basescan.org",
        rpcUrls: ["https://sepolia.base.org"],
        facilitator: { url: "https://x402.org/facilitator", auth: "none" },
        pollingIntervalMs: 1000,
        confirmations: 1,
        hardhatNetwork: "baseSepolia",
        tokens: [{ symbol: "USDC", name: "USDC", decimals: 6, eip712Version: "2", acceptedForPulls: true, address: "0x036CbD53842c5426634e7929541eC2318f3dCF7e" }],
      }),
    },
  },
};

/** Env spelling of a token symbol: USD₮ is USDT, USA₮ is USAT. */
export const envSymbol = (symbol: TokenSymbol): string => symbol.replace("₮", "T");

/**
 * The profile named by `spec` ("celo", "celo,base", ...). A token's address may be replaced
 * by `<CHAIN>_<SYMBOL>_ADDRESS` (for a fork or a private test chain; the start-up checks still
 * read its EIP-712 domain from the chain).
 */
export function resolveNetwork(spec: string, env: NodeJS.ProcessEnv = process.env): NetworkProfile {
  const names = spec.split(",").map((s) => s.trim().toLowerCase()).filter(Boolean);
  if (names.length === 0) throw new Error("NETWORK is empty: name a profile (" + NETWORK_NAMES.join(", ") + ")");
  for (const n of names) {
    if (!(NETWORK_NAMES as readonly string[]).includes(n)) throw new Error(`NETWORK "${n}" is not a profile: use ${NETWORK_NAMES.join(", ")}`);
  }
  const profiles = (names as NetworkName[]).map((n) => PROFILES[n]);
  if (names.includes("local") && names.length > 1) throw new Error("NETWORK=local stands alone: it cannot be combined with a real network");
  if (new Set(profiles.map((p) => p.testnet)).size > 1) throw new Error(`NETWORK=${spec} mixes mainnets and testnets`);
  const chains: Partial<Record<ChainKey, ChainInfo>> = {};
  for (const p of profiles) {
    for (const c of Object.values(p.chains)) {
      if (chains[c.key]) throw new Error(`NETWORK=${spec} names two profiles for ${c.key}`);
      chains[c.key] = {
        ...c,
        tokens: c.tokens.map((t) => {
          const override = env[`${c.key}_${envSymbol(t.symbol)}_ADDRESS`];
          if (override === undefined) return t;
          if (!/^0x[0-9a-fA-F]{40}$/.test(override)) throw new Error(`${c.key}_${envSymbol(t.symbol)}_ADDRESS must be an 0x-prefixed 20-byte address`);
          return { ...t, address: override as `0x${string}` };
        }),
      };
    }
  }
  return { name: names.join(","), local: profiles[0]!.local, testnet: profiles[0]!.testnet, chains };
}

let active: NetworkProfile | undefined;

/** The profile this process serves, from `NETWORK` (read once). */
export function activeNetwork(): NetworkProfile {
  active ??= resolveNetwork(process.env.NETWORK || "local");
  return active;
}
