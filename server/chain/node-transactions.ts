/**
 * What the service's own node knows of a transaction by its hash: held unmined in its pool, or
 * mined, and whether a signer's nonce is used. For the watches and reconcilers that must not
 * close an order on a refund or pull that may still land (the ledger shows only what is mined
 * and indexed; a transaction a pool dropped lands whenever anyone sends it again, until its
 * nonce is used).
 */
import { serializeTransaction, TransactionNotFoundError, type Hex, type Transaction, type TransactionSerializableEIP1559 } from "viem";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";

/** A signer's nonce a transaction was signed under, with the highest fees signed under it (a legacy gas price as both): what a void of that nonce must outbid (chain/operator.ts voidNonce). */
export interface SignedNonce {
  signer: Hex;
  nonce: number;
  maxFeePerGas: bigint;
  maxPriorityFeePerGas: bigint;
}

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

/** The first of `nonces` its signer has not used in a block `depth` under the node's head: a transaction signed under it may still be mined. */
export async function nonceUnused(
  deps: { deployments: Deployments; confirmations: Partial<Record<ChainKey, number>> },
  chain: ChainKey,
  nonces: readonly SignedNonce[],
): Promise<SignedNonce | undefined> {
  if (nonces.length === 0) return undefined;
  const client = deployedClientFor(deps.deployments, chain);
  if (!client) throw new Error(`no deployment of BillPay on ${chain}`);
  // As deep as a payment must be before its bill is vended: a block that used the nonce and was
  // then reorganised away would give the nonce back.
  const head = await client.getBlockNumber();
  const depth = BigInt(deps.confirmations[chain] ?? 0);
  const blockNumber = head > depth ? head - depth : 0n;
  const signers = [...new Set(nonces.map((n) => n.signer.toLowerCase() as Hex))];
  const used = new Map(await Promise.all(signers.map(async (signer) => [signer, await client.getTransactionCount({ address: signer, blockNumber })] as const)));
  return nonces.find((n) => used.get(n.signer.toLowerCase() as Hex)! <= n.nonce);
}
