/** viem public clients for a chain at an RPC URL: one place for timeouts and polling. */
import { createPublicClient, fallback, http, type PublicClient, type Transport } from "viem";
import { viemChain, type ChainKey } from "./chains.ts";
import { rpcUrlFor, type Deployments } from "./deployments.ts";
import { activeNetwork } from "./networks.ts";
import { holdNodeSocket, isNodeSocketFailure, nodeSocketHeld, nodeSocketOpen, nodeSocketTransport, type NodeSocketLog } from "./node-socket.ts";

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
 * From now until the returned close, the service's clients (sharedClientFor) of the chains
 * `nodes` names read each node over its WebSocket, where it serves one (webSocketUrlFor), and
 * over HTTP while the socket is not open or when it fails a read (lib/node-socket.ts).
 *
 * Why: a read over the socket skips HTTP's per-request work on both ends, and the wait viem's
 * JSON-RPC batching makes before it sends (a timer of at least a millisecond). A receipt read
 * from the local node took 0.5 ms over the socket, 1.2 to 1.6 ms over plain HTTP and 2.8 ms
 * batched (docs/benchmarks.md); the paid paths read the node right after the block, while it
 * is busiest. Only processes that close it again open it (the service): an open socket holds
 * a process alive, so scripts and the command line stay on HTTP and exit when done. Several
 * services of one process (tests) share a socket; the last to close it closes it.
 */
export function readNodesOverWebSocket(nodes: Iterable<{ chain: ChainKey; rpcUrl: string }>, log?: NodeSocketLog): () => void {
  const held = [...nodes].flatMap(({ chain, rpcUrl }) => {
    const ws = webSocketUrlFor(chain, rpcUrl);
    if (!ws) return [];
    shared.delete(clientKey(chain, rpcUrl)); // made afresh, with the socket
    return [{ key: clientKey(chain, rpcUrl), release: holdNodeSocket(ws, log) }];
  });
  return () => {
    for (const { key, release } of held) {
      release();
      shared.delete(key);
    }
  };
}

const clientKey = (chain: ChainKey, rpcUrl: string) => `${chain} ${rpcUrl}`;

/** The node's WebSocket URL while the service's client reads the node over it and it is open now (readNodesOverWebSocket); else undefined. */
export function openSocketUrlFor(chain: ChainKey, rpcUrl: string): string | undefined {
  const ws = webSocketUrlFor(chain, rpcUrl);
  return ws && nodeSocketOpen(ws) ? ws : undefined;
}

/** The shared client's way to the node: its WebSocket while one is held and open, else HTTP. */
function sharedTransport(chain: ChainKey, rpcUrl: string): Transport {
  const batchSize = rpcBatchSize();
  const overHttp = http(rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 0, batch: batchSize > 0 ? { batchSize } : false });
  const ws = webSocketUrlFor(chain, rpcUrl);
  if (!ws || !nodeSocketHeld(ws)) return overHttp;
  // Only the socket's own failures are asked again over HTTP: a revert, or any answer of the
  // node's, is its answer whichever way it came.
  return fallback([nodeSocketTransport(ws, RPC_TIMEOUT_MS), overHttp], { retryCount: 0, shouldThrow: (err) => !isNodeSocketFailure(err) });
}

/**
 * The service's one client for a chain at an RPC URL, kept for the process's life. Over HTTP,
 * requests made in the same tick, by any caller, go to the node as one JSON-RPC batch (one
 * HTTP request instead of one each: the estimate, nonce and fees a transaction needs, say, or
 * the wallet checks of many agents at once); each still gets its own result or error, and
 * RPC_BATCH_SIZE caps a batch (0 sends each request alone). While the service reads the node
 * over its WebSocket (readNodesOverWebSocket), each request is a message of its own on it.
 */
export function sharedClientFor(chain: ChainKey, rpcUrl: string): PublicClient {
  const key = clientKey(chain, rpcUrl);
  let client = shared.get(key);
  if (!client) {
    client = createPublicClient({
      chain: viemChain(chain, rpcUrl),
      transport: sharedTransport(chain, rpcUrl),
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
