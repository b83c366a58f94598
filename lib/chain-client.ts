/** viem public clients for a chain at an RPC URL: one place for timeouts and polling. */
import { createPublicClient, http, type PublicClient } from "viem";
import { viemChain, type ChainKey } from "./chains.ts";
import { rpcUrlFor, type Deployments } from "./deployments.ts";
import { activeNetwork } from "./networks.ts";

export const RPC_TIMEOUT_MS = 10_000;
/** viem polls every 4 s by default; local chains answer in milliseconds. */
export const POLLING_INTERVAL_MS = 200;

/**
 * `retries`: how often a request that got no answer is sent again. None by default: the
 * service decides what to retry. Observers (tests, benchmarks) reading a local node pass some,
 * as a reused keep-alive socket the node has just closed can reset a request that never reached it.
 */
export function publicClientFor(chain: ChainKey, rpcUrl: string, retries = 0): PublicClient {
  return createPublicClient({
    chain: viemChain(chain, rpcUrl),
    transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: retries, retryDelay: 100 }),
    pollingInterval: POLLING_INTERVAL_MS,
    // viem caches the block number for cacheTime (the polling interval by default): a head
    // read right after a transaction then names a block before it, and "the ledger has
    // indexed the head" would be believed of a ledger that has not reached the transaction.
    cacheTime: 0,
    ccipRead: false, // as sharedClientFor: no call fetches a URL a contract names
  });
}

/** JSON-RPC requests a batch may carry (providers cap a batch's size; 100 is within the usual caps). */
export const DEFAULT_RPC_BATCH_SIZE = 100;
const shared = new Map<string, PublicClient>();

export const RPC_BATCH_SIZE_RULE = "RPC_BATCH_SIZE must be an integer from 0 (no batches) to 1000";

/** The batch size `raw` (RPC_BATCH_SIZE) names, the default when unset, or undefined when it breaks the rule. */
export function parseRpcBatchSize(raw: string | undefined): number | undefined {
  if (raw === undefined || raw === "") return DEFAULT_RPC_BATCH_SIZE;
  const n = Number(raw);
  return Number.isInteger(n) && n >= 0 && n <= 1000 ? n : undefined;
}

/** RPC_BATCH_SIZE when set (0: no batches, for a provider that refuses them), else the default. */
export function rpcBatchSize(): number {
  const n = parseRpcBatchSize(process.env.RPC_BATCH_SIZE);
  if (n === undefined) throw new Error(RPC_BATCH_SIZE_RULE);
  return n;
}

/**
 * The service's one client for a chain at an RPC URL, kept for the process's life: requests
 * made in the same tick, by any caller, go to the node as one JSON-RPC batch (one HTTP request
 * instead of one each: the estimate, nonce and fees a transaction needs, say, or the wallet
 * checks of many agents at once). Each request still gets its own result or error.
 * RPC_BATCH_SIZE caps a batch (0 sends each request alone).
 */
export function sharedClientFor(chain: ChainKey, rpcUrl: string): PublicClient {
  const key = `${chain} ${rpcUrl}`;
  let client = shared.get(key);
  if (!client) {
    const batchSize = rpcBatchSize();
    client = createPublicClient({
      chain: viemChain(chain, rpcUrl),
      transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 0, batch: batchSize > 0 ? { batchSize } : false }),
      pollingInterval: POLLING_INTERVAL_MS,
      cacheTime: 0, // as publicClientFor: every head read is the node's head now
      // A contract the service calls may be anyone's (a payer's wallet asked for its
      // signature): one that reverts with OffchainLookup (EIP-3668) would have viem fetch the
      // URL it names. The service reads nothing off chain through a call.
      ccipRead: false,
    });
    shared.set(key, client);
  }
  return client;
}

/** The service's one client (sharedClientFor) for a chain of the deployment, at the RPC URL it reaches that chain by; undefined for a chain not deployed. */
export function deployedClientFor(deployments: Deployments, chain: ChainKey): PublicClient | undefined {
  const d = deployments.chains[chain];
  return d && sharedClientFor(chain, rpcUrlFor(chain, d));
}

/**
 * Where a chain's node announces new blocks over WebSocket: `<CHAIN>_WS_URL`, else a local
 * node's own port (a Hardhat node serves WebSocket beside HTTP); none for a remote node
 * without one set, or when `<CHAIN>_WS_URL=none` (readers then poll).
 */
export function webSocketUrlFor(chain: ChainKey, rpcUrl: string): string | undefined {
  const set = process.env[`${chain}_WS_URL`];
  if (set === "none") return undefined;
  // A real network reached through a proxy on loopback is not a local node.
  return set || (activeNetwork().local && isLocalRpcUrl(rpcUrl) ? rpcUrl.replace(/^http/, "ws") : undefined);
}

/** Whether an RPC URL is a node on this machine (a local, resettable chain). */
export function isLocalRpcUrl(url: string): boolean {
  return /^https?:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(url);
}
