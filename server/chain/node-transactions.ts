/**
 * What the service's own node knows of a transaction by its hash: held unmined in its pool, or
 * mined. For the watches and reconcilers that must not close an order on a refund or pull that
 * may still land (the ledger shows only what is mined and indexed).
 */
import { TransactionNotFoundError, type Hex } from "viem";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";

/** Whether the node holds the transaction unmined, in its pool (where a reorganisation puts back what it took). */
export async function transactionPending(deps: { deployments: Deployments }, chain: ChainKey, hash: Hex): Promise<boolean> {
  const tx = await transactionOnNode(deps, chain, hash);
  return tx !== null && tx.blockNumber === null;
}

/** Whether the node knows the transaction at all: unmined in its pool, or mined. */
export async function transactionKnown(deps: { deployments: Deployments }, chain: ChainKey, hash: Hex): Promise<boolean> {
  return (await transactionOnNode(deps, chain, hash)) !== null;
}

async function transactionOnNode(deps: { deployments: Deployments }, chain: ChainKey, hash: Hex) {
  const client = deployedClientFor(deps.deployments, chain);
  if (!client) throw new Error(`no deployment of BillPay on ${chain}`);
  return client.getTransaction({ hash }).catch((err: unknown) => {
    if (err instanceof TransactionNotFoundError) return null;
    throw err;
  });
}
