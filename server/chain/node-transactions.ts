/**
 * What the service's own node knows of a transaction by its hash: held unmined in its pool, or
 * mined. For the watches and reconcilers that must not close an order on a refund or pull that
 * may still land (the ledger shows only what is mined and indexed).
 */
import { serializeTransaction, TransactionNotFoundError, type Hex, type Transaction, type TransactionSerializableEIP1559 } from "viem";
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

/** The transaction as the node holds it, mined or unmined; null when it knows none by that hash (a failed read throws). */
export async function transactionOnNode(deps: { deployments: Deployments }, chain: ChainKey, hash: Hex) {
  const client = deployedClientFor(deps.deployments, chain);
  if (!client) throw new Error(`no deployment of BillPay on ${chain}`);
  return client.getTransaction({ hash }).catch((err: unknown) => {
    if (err instanceof TransactionNotFoundError) return null;
    throw err;
  });
}

/**
 * An EIP-1559 transaction as it was signed and sent, rebuilt from what the node answers for it:
 * what anyone who saw it can send again. Its keccak256 is its hash when read back whole.
 */
export function asSigned(tx: Transaction): { request: TransactionSerializableEIP1559; serialized: Hex } {
  const request: TransactionSerializableEIP1559 = {
    type: "eip1559",
    chainId: tx.chainId!,
    nonce: tx.nonce,
    gas: tx.gas,
    to: tx.to!,
    data: tx.input,
    value: tx.value,
    maxFeePerGas: tx.maxFeePerGas!,
    maxPriorityFeePerGas: tx.maxPriorityFeePerGas!,
    accessList: tx.accessList,
  };
  return { request, serialized: serializeTransaction(request, { r: tx.r, s: tx.s, yParity: tx.yParity! }) };
}
