/**
 * Permit2 and the x402 exact Permit2 proxy on the local Hardhat chains, at their canonical
 * addresses, so x402 `exact` payments with `assetTransferMethod: "permit2"` sign and settle
 * there as on Celo and Base (@x402/evm hard-codes both addresses).
 *
 * - Permit2 is Uniswap's own published runtime code, read at deploy time from the pinned
 *   devDependency @uniswap/v4-periphery (lib/permit2/test/utils/DeployPermit2.sol, Uniswap's
 *   "deploy permit2 from precompiled bytecode" helper, which `vm.etch`es the same bytes at the
 *   same address). The bytecode is not copied into this repository.
 *   Placing it on chain ids 42220 and 8453 works because Permit2's EIP712 caches, as
 *   immutables in the runtime code, the domain separator and chain id of the chain it was
 *   deployed on, and returns the cached separator only while block.chainid equals that cached
 *   id; on any other chain it recomputes it from block.chainid and address(this). So at the
 *   canonical address on a local chain, DOMAIN_SEPARATOR() is the separator of
 *   {name: "Permit2", chainId: <the local chain>, verifyingContract: canonical}, the domain
 *   @x402/evm signs under (test/contracts/permit2.test.ts checks it on 42220 and 8453).
 *   Caveat: Uniswap captured these bytes from a deployment on chain id 31337 (a Foundry test
 *   chain) at another address, so on a chain with id 31337 (Hardhat's default network) the
 *   cached, wrong separator is returned and Permit2 payments fail there. The local chains
 *   never use 31337.
 * - The proxy is contracts/local/X402ExactPermit2Proxy.sol, a local stand-in written from the
 *   x402 spec; it has no immutables, so its runtime code works wherever it is placed.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { domainSeparator, type Address, type Hex, type PublicClient } from "viem";
import { loadArtifact } from "./artifacts.ts";
import { PERMIT2, permit2Abi, permit2Domain, X402_EXACT_PROXY } from "./permit2.ts";

const DEPLOY_PERMIT2_SOURCE = "@uniswap/v4-periphery/lib/permit2/test/utils/DeployPermit2.sol";

let permit2Code: Hex | undefined;

/** Permit2's runtime code, as Uniswap publishes it in DeployPermit2.sol (the `hex"..."` it etches). */
export function permit2RuntimeCode(): Hex {
  if (permit2Code) return permit2Code;
  const path = createRequire(import.meta.url).resolve(DEPLOY_PERMIT2_SOURCE);
  const source = readFileSync(path, "utf8");
  const literals = [...source.matchAll(/hex"([0-9a-fA-F]*)"/g)];
  if (literals.length !== 1 || !source.includes("0x000000000022D473030F116dDEE9F6B43aC78BA3")) {
    throw new Error(`${path}: expected exactly one hex"..." literal etched at the canonical Permit2 address, found ${literals.length}`);
  }
  const hex = literals[0]![1]!;
  if (hex.length < 2_000 || hex.length % 2 !== 0) throw new Error(`${path}: the Permit2 bytecode literal looks wrong (${hex.length} hex digits)`);
  permit2Code = `0x${hex.toLowerCase()}`;
  return permit2Code;
}

/** The proxy stand-in's runtime code, from the Hardhat build. */
export function x402ExactPermit2ProxyRuntimeCode(): Hex {
  const artifact = loadArtifact("local/X402ExactPermit2Proxy.sol", "x402ExactPermit2Proxy") as ReturnType<typeof loadArtifact> & {
    immutableReferences?: Record<string, unknown>;
  };
  if (artifact.immutableReferences && Object.keys(artifact.immutableReferences).length > 0) {
    throw new Error("x402ExactPermit2Proxy has immutables: its runtime code cannot be placed with hardhat_setCode");
  }
  return artifact.deployedBytecode;
}

/** The EIP-712 domain separator x402 payers sign Permit2 payments under on `chainId`. */
export function permit2DomainSeparator(chainId: number): Hex {
  return domainSeparator({ domain: permit2Domain(chainId) });
}

/**
 * Puts Permit2 and the x402 exact proxy at their canonical addresses on a local Hardhat node
 * (hardhat_setCode), where the code there is not already theirs, then checks that Permit2's
 * DOMAIN_SEPARATOR() is the one payers sign under on this chain (it is not on chain id 31337:
 * see the file's comment). Idempotent; sends no transaction. Only for local chains: a real
 * node refuses hardhat_setCode.
 */
export async function placePermit2Contracts(client: PublicClient): Promise<void> {
  const placements: Array<[Address, Hex]> = [
    [PERMIT2, permit2RuntimeCode()],
    [X402_EXACT_PROXY, x402ExactPermit2ProxyRuntimeCode()],
  ];
  for (const [address, code] of placements) {
    const current = await client.getCode({ address });
    if (current?.toLowerCase() === code.toLowerCase()) continue;
    await client.request({ method: "hardhat_setCode" as never, params: [address, code] as never });
  }
  const chainId = await client.getChainId();
  const separator = await client.readContract({ address: PERMIT2, abi: permit2Abi, functionName: "DOMAIN_SEPARATOR" });
  if (separator !== permit2DomainSeparator(chainId)) {
    throw new Error(
      `Permit2 placed on chain id ${chainId} answers DOMAIN_SEPARATOR ${separator}, not ${permit2DomainSeparator(chainId)}: ` +
        "Uniswap's precompiled Permit2 caches a separator for chain id 31337, so Permit2 payments cannot work on that chain id",
    );
  }
}
