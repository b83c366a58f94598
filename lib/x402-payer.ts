/**
 * An x402 payer for the local stack: the official x402 client (@x402/core with @x402/evm's
 * exact scheme) for a local account. The local tokens are not x402's built-in assets, so
 * the client's spend controls must name them.
 */
import { x402Client } from "@x402/core/client";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import type { Account } from "viem";
import type { Deployments } from "./deployments.ts";

/** Every deployed token, as the client's spend controls name assets: each settles x402 (by EIP-3009, or Permit2 where it has none). */
export function localAssets(deployments: Deployments) {
  return Object.values(deployments.chains).flatMap((d) => d.tokens.map((t) => ({ network: `eip155:${d.chainId}` as const, asset: t.address })));
}

export function x402ClientFor(account: Account, deployments: Deployments): x402Client {
  const signer = toClientEvmSigner(account as Parameters<typeof toClientEvmSigner>[0]);
  return x402Client.fromConfig({
    schemes: [{ network: "eip155:*", client: new ExactEvmScheme(signer) }],
    spendControls: { allowedAssets: localAssets(deployments) },
  });
}
