/**
 * Ponder configuration: the chains the deployments file holds (one or both), BillPay's
 * events and the tokens' transfers into and out of BillPay and approvals of BillPay, from
 * the deployment blocks. A real chain's RPC URLs come from the deployment or
 * `<CHAIN>_RPC_URL` (several, comma-separated: Ponder balances the load across them). (ponder/ponder.config.ts re-exports this
 * file, so Ponder finds it from its app folder.)
 */
import { createConfig } from "ponder";
import { billPayAbi, eip3009TokenAbi } from "./lib/generated/abis.ts";
import { isLocalRpcUrl, webSocketUrlFor } from "./lib/chain-client.ts";
import type { ChainKey } from "./lib/chains.ts";
import { activeNetwork } from "./lib/networks.ts";
import { deployedChains, readDeploymentsSync, requireChain, rpcUrlsFor } from "./lib/deployments.ts";
import { ledgerDatabase, ledgerPollingIntervalMs } from "./lib/ledger-config.ts";

const deployments = readDeploymentsSync();

/**
 * Ponder gives each RPC URL its own request budget (20 requests a second at first, growing
 * slowly): a block's fetches past it wait for the next second, which was the ledger's
 * once-a-second lag of half a second. A node on this machine has no such limit to respect,
 * so it is listed several times, each copy a budget of its own; real chains list their
 * providers in `<CHAIN>_RPC_URL`.
 */
const LOCAL_RPC_LANES = 16;

function chain(key: ChainKey) {
  const d = requireChain(deployments, key);
  const listed = rpcUrlsFor(key, d);
  // The local profile's own Hardhat nodes (a real network reached on loopback is not one).
  const localNode = activeNetwork().local && listed.every(isLocalRpcUrl);
  const rpc = localNode ? listed.flatMap((u) => Array<string>(LOCAL_RPC_LANES).fill(u)) : listed;
  // New blocks arrive over a WebSocket newHeads subscription where there is one (polling is
  // Ponder's fallback): `<CHAIN>_WS_URL`, or a local node's own; `<CHAIN>_WS_URL=none` polls.
  const ws = webSocketUrlFor(key, listed[0]!);
  return {
    id: d.chainId,
    rpc: rpc.length === 1 ? rpc[0]! : rpc,
    ...(ws ? { ws } : {}),
    pollingInterval: ledgerPollingIntervalMs(key),
    // A local chain can be reset under the same id: never serve it from Ponder's RPC cache.
    disableCache: rpc.every(isLocalRpcUrl),
  };
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

// Ponder names chains; ours are the chain keys in lower case ("celo", "base").
const keys = deployedChains(deployments);
const perChain = <T>(make: (key: ChainKey) => T) => Object.fromEntries(keys.map((k) => [k.toLowerCase(), make(k)]));

export default createConfig({
  database: ledgerDatabase(),
  // Each chain indexes at its own pace: one slow chain does not hold back the other's rows.
  ordering: "multichain",
  chains: perChain(chain),
  contracts: {
    BillPay: { abi: billPayAbi, chain: perChain(billPay) },
    TokenIn: { abi: eip3009TokenAbi, chain: perChain((k) => tokens(k, "in")) },
    TokenOut: { abi: eip3009TokenAbi, chain: perChain((k) => tokens(k, "out")) },
  },
});
