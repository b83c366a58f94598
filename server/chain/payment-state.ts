/**
 * A payment's key as the chain holds it now, read from the service's own node: for x402,
 * whether the authorization's nonce is consumed (by this payment or otherwise: EIP-3009's on
 * the token, or Permit2's, which spends each owner's nonce once across tokens), at which block, and that block's time (an authorization is judged expired by the chain's
 * clock, not ours); for a pull, whether BillPay holds the order id.
 */
import { erc20Abi, type Hex, type PublicClient } from "viem";
import { billPayAbi, eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { nonceBit, PERMIT2, permit2Abi } from "../../lib/permit2.ts";
import { x402RailOf } from "../ledger-client.ts";

type PaymentKey = { chain: string; tokenAddress: string; payer: string; authNonce: string | null; payment?: unknown };

/** Whether the payment's nonce is consumed, read at `at` (a block number, or the latest). */
async function nonceUsed(client: PublicClient, o: PaymentKey, at: { blockNumber?: bigint }): Promise<boolean> {
  if (x402RailOf(o) !== "permit2") {
    return client.readContract({ address: o.tokenAddress as Hex, abi: eip3009TokenAbi, functionName: "authorizationState", args: [o.payer as Hex, o.authNonce! as Hex], ...at });
  }
  const { word, bit } = nonceBit(BigInt(o.authNonce!));
  const bitmap = await client.readContract({ address: PERMIT2, abi: permit2Abi, functionName: "nonceBitmap", args: [o.payer as Hex, word], ...at });
  return ((bitmap >> bit) & 1n) === 1n;
}

/** `owner`'s balance of `token`, at the latest block. */
export function tokenBalance(client: PublicClient, token: string, owner: string): Promise<bigint> {
  return client.readContract({ address: token as Hex, abi: erc20Abi, functionName: "balanceOf", args: [owner as Hex] });
}

/** The service's one client for the chain: reads made in the same tick go to the node as one JSON-RPC batch. */
const clientOf = (deps: { deployments: Deployments }, chain: ChainKey) => deployedClientFor(deps.deployments, chain)!;

/**
 * Whether the payment's nonce is consumed, read at one block: the latest, or `depth` blocks
 * under it (for a reading that must stand, as deep as a payment must be before it counts).
 */
export async function authorizationOnChain(deps: { deployments: Deployments }, o: PaymentKey, depth = 0): Promise<{ used: boolean; block: bigint; timestamp: bigint }> {
  const client = clientOf(deps, o.chain as ChainKey);
  const head = await client.getBlock({ blockTag: "latest" });
  const block = depth > 0 ? await client.getBlock({ blockNumber: head.number > BigInt(depth) ? head.number - BigInt(depth) : 0n }) : head;
  return { used: await nonceUsed(client, o, { blockNumber: block.number }), block: block.number, timestamp: block.timestamp };
}

/**
 * A payment offered at intake (x402/pay.ts): whether its nonce is spent, and the payer's
 * balance of the token, read side by side at the latest block (one JSON-RPC batch). A nonce
 * seen spent decides something, so it is read again by authorizationOnChain, at one block
 * whose number the caller then holds the ledger to; an unspent one and the balance only
 * choose how the payment is settled.
 */
export async function paymentAtIntake(
  deps: { deployments: Deployments },
  o: PaymentKey,
): Promise<{ used: false; balance: bigint } | { used: true; block: bigint; timestamp: bigint; balance: bigint }> {
  const client = clientOf(deps, o.chain as ChainKey);
  const [used, balance] = await Promise.all([
    nonceUsed(client, o, {}),
    tokenBalance(client, o.tokenAddress, o.payer),
  ]);
  if (!used) return { used, balance };
  const spent = await authorizationOnChain(deps, o);
  // Spent a moment ago and unspent now is a block replaced between the reads: as unspent.
  return spent.used ? { used: true, block: spent.block, timestamp: spent.timestamp, balance } : { used: false, balance };
}

/** Whether BillPay holds a pull under `onchainOrderId` now (orderOf names a payer). */
export async function pullOnChain(deps: { deployments: Deployments }, o: { chain: string; onchainOrderId: string }): Promise<boolean> {
  const chain = o.chain as ChainKey;
  const d = deps.deployments.chains[chain]!;
  const onChain = await clientOf(deps, chain).readContract({
    address: d.billPay.address as Hex,
    abi: billPayAbi,
    functionName: "orderOf",
    args: [o.onchainOrderId as Hex],
  });
  return onChain.payer !== "0x0000000000000000000000000000000000000000";
}
