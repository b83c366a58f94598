/**
 * Ponder configuration: both chains from the deployments file, BillPay's events and the
 * tokens' transfers into and out of BillPay and approvals of BillPay, from the deployment
 * blocks. Real chains need only their RPC URLs (CELO_RPC_URL, BASE_RPC_URL) and a
 * deployments file naming the real addresses. (ponder/ponder.config.ts re-exports this
 * file, so Ponder finds it from its app folder.)
 */
import { createConfig } from "ponder";
import { billPayAbi, eip3009TokenAbi } from "./lib/abis.ts";
import { isLocalRpcUrl } from "./lib/chain-client.ts";
import type { ChainKey } from "./lib/chains.ts";
import { readDeploymentsSync, requireChain, rpcUrlFor } from "./lib/deployments.ts";
import { ledgerDatabase, ledgerPollingIntervalMs } from "./lib/ledger-config.ts";

const deployments = readDeploymentsSync();

function chain(key: ChainKey) {
  const d = requireChain(deployments, key);
  const rpc = rpcUrlFor(key, d);
  // A local chain can be reset under the same id: never serve it from Ponder's RPC cache.
  return { id: d.chainId, rpc, pollingInterval: ledgerPollingIntervalMs(), disableCache: isLocalRpcUrl(rpc) };
}

function billPay(key: ChainKey) {
  const d = requireChain(deployments, key);
  return { address: d.billPay.address as `0x${string}`, startBlock: d.billPay.block };
}

// Ponder keeps one filter per event of a contract, so transfers into and out of BillPay
// are two sources over the same tokens, sharing one handler.
function tokens(key: ChainKey, direction: "in" | "out") {
  const d = requireChain(deployments, key);
  const billPayAddress = d.billPay.address as `0x${string}`;
  return {
    address: d.tokens.map((t) => t.address as `0x${string}`),
    // Nothing moves into or out of BillPay before it exists (a real token is far older).
    startBlock: d.billPay.block,
    filter:
      direction === "in"
        ? [
            { event: "Transfer" as const, args: { to: billPayAddress } },
            { event: "Approval" as const, args: { spender: billPayAddress } },
          ]
        : [{ event: "Transfer" as const, args: { from: billPayAddress } }],
  };
}

export default createConfig({
  database: ledgerDatabase(),
  // Each chain indexes at its own pace: one slow chain does not hold back the other's rows.
  ordering: "multichain",
  chains: { celo: chain("CELO"), base: chain("BASE") },
  contracts: {
    BillPay: { abi: billPayAbi, chain: { celo: billPay("CELO"), base: billPay("BASE") } },
    TokenIn: { abi: eip3009TokenAbi, chain: { celo: tokens("CELO", "in"), base: tokens("BASE", "in") } },
    TokenOut: { abi: eip3009TokenAbi, chain: { celo: tokens("CELO", "out"), base: tokens("BASE", "out") } },
  },
});
