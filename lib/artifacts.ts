/** Compiled contract artifacts (ABI and bytecode) from Hardhat's build output. */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Abi, Hex } from "viem";

export interface Artifact {
  contractName: string;
  abi: Abi;
  bytecode: Hex;
  deployedBytecode: Hex;
}

const root = fileURLToPath(new URL("../artifacts/contracts/", import.meta.url));
const cache = new Map<string, Artifact>();

/** `source` is the path under contracts/, e.g. "BillPay.sol" or "tokens/EIP3009Token.sol". */
export function loadArtifact(source: string, contractName: string): Artifact {
  const key = `${source}:${contractName}`;
  let artifact = cache.get(key);
  if (!artifact) {
    const path = `${root}${source}/${contractName}.json`;
    try {
      artifact = JSON.parse(readFileSync(path, "utf8")) as Artifact;
    } catch (err) {
      throw new Error(`artifact ${path} missing: run \`npx hardhat build\` first (${(err as Error).message})`);
    }
    cache.set(key, artifact);
  }
  return artifact;
}

/**
 * Ignition's view of the same artifacts (by contract name, for contracts directly under
 * contracts/). Build info is not needed to deploy, only to verify, which the deploy command
 * does through Hardhat's own resolver.
 */
export const ignitionArtifacts = {
  async loadArtifact(contractName: string) {
    return loadArtifact(`${contractName}.sol`, contractName) as unknown as import("@nomicfoundation/ignition-core").Artifact;
  },
  async getBuildInfo() {
    return undefined;
  },
};
