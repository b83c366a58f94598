/** viem public clients for a chain at an RPC URL: one place for timeouts and polling. */
import { createPublicClient, http, type PublicClient } from "viem";
import { viemChain, type ChainKey } from "./chains.ts";

export const RPC_TIMEOUT_MS = 10_000;
/** viem polls every 4 s by default; local chains answer in milliseconds. */
export const POLLING_INTERVAL_MS = 200;

export function publicClientFor(chain: ChainKey, rpcUrl: string): PublicClient {
  return createPublicClient({
    chain: viemChain(chain, rpcUrl),
    transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 0 }),
    pollingInterval: POLLING_INTERVAL_MS,
  });
}

/** Whether an RPC URL is a node on this machine (a local, resettable chain). */
export function isLocalRpcUrl(url: string): boolean {
  return /^https?:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(url);
}
