/**
 * An x402 authorization's state on chain, read from the service's own node: whether its
 * EIP-3009 nonce is consumed (by this payment or otherwise), at which block, and that
 * block's time (an authorization is judged expired by the chain's clock, not ours).
 */
import type { Hex } from "viem";
import { eip3009TokenAbi } from "../../lib/abis.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";

export async function authorizationOnChain(
  deps: { deployments: Deployments },
  o: { chain: string; tokenAddress: string; payer: string; authNonce: string | null },
): Promise<{ used: boolean; block: bigint; timestamp: bigint }> {
  const chain = o.chain as ChainKey;
  const client = publicClientFor(chain, rpcUrlFor(chain, deps.deployments.chains[chain]!));
  const block = await client.getBlock({ blockTag: "latest" });
  const used = await client.readContract({
    address: o.tokenAddress as Hex,
    abi: eip3009TokenAbi,
    functionName: "authorizationState",
    args: [o.payer as Hex, o.authNonce! as Hex],
    blockNumber: block.number,
  });
  return { used, block: block.number, timestamp: block.timestamp };
}

