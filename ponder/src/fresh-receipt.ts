/**
 * A transaction's receipt read from the chain's node past Ponder's RPC cache, for a cached one
 * of another block (lib/payment-logs.ts receiptInBlock). The node is the one the ledger indexes
 * from: `<CHAIN>_RPC_URL`'s first, else the deployment's (one rule: lib/deployments.ts).
 */
import type { Hex, TransactionReceipt } from "viem";
import { sharedClientFor } from "../../lib/chain-client.ts";
import { deployedChains, readDeploymentsSync, requireChain, rpcUrlsFor } from "../../lib/deployments.ts";

const deployments = readDeploymentsSync();

export function freshReceipt(chainId: number, hash: Hex): Promise<TransactionReceipt> {
  const key = deployedChains(deployments).find((k) => requireChain(deployments, k).chainId === chainId);
  if (!key) throw new Error(`no deployment of chain ${chainId}`);
  return sharedClientFor(key, rpcUrlsFor(key, requireChain(deployments, key))[0]!).getTransactionReceipt({ hash });
}
