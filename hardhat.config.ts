import { createRequire } from "node:module";
import hardhatIgnitionViem from "@nomicfoundation/hardhat-ignition-viem";
import hardhatKeystore from "@nomicfoundation/hardhat-keystore";
import hardhatVerify from "@nomicfoundation/hardhat-verify";
import hardhatViem from "@nomicfoundation/hardhat-viem";
import { configVariable, defineConfig } from "hardhat/config";
import { resolveNetwork, type NetworkName } from "./lib/networks.ts";
import transientWarning from "./contracts/build/transient-warning.ts";

// Compile offline with solc-js (WASM) from the pinned `solc` package: Hardhat would
// otherwise download a native compiler from a host these machines cannot reach.
// The version label must match the package, so it is read from the package itself.
const require = createRequire(import.meta.url);
const solcVersion: string = require("solc/package.json").version;
const solcPath = require.resolve("solc/soljson.js");

// Local chains mine a block per transaction and also one a second when idle, so
// finality-based consumers (Ponder) keep advancing on a quiet chain.
const localMining = { auto: true, interval: 1000 };

/** The one chain of a network profile (lib/networks.ts), token overrides ignored. */
const profileChain = (name: NetworkName) => Object.values(resolveNetwork(name, {}).chains)[0]!;
const local = resolveNetwork("local", {}).chains;

/**
 * A real network for `npm run deploy`: chain id and public RPC from the profile (the deploy
 * command overrides the URL with `<CHAIN>_RPC_URL`), the deployer's key from Hardhat's
 * keystore (`npx hardhat keystore set DEPLOYER_PRIVATE_KEY`) or the environment.
 */
const realNetwork = (name: NetworkName) => ({
  type: "http" as const,
  chainType: "op" as const,
  chainId: profileChain(name).chainId,
  url: profileChain(name).rpcUrls[0]!,
  accounts: [configVariable("DEPLOYER_PRIVATE_KEY")],
});

export default defineConfig({
  plugins: [hardhatViem, hardhatKeystore, hardhatVerify, hardhatIgnitionViem, transientWarning],
  solidity: {
    version: solcVersion,
    path: solcPath,
    settings: {
      evmVersion: "cancun",
      optimizer: { enabled: true, runs: 10_000 },
    },
  },
  paths: {
    sources: "./contracts",
  },
  networks: {
    celoLocal: {
      type: "edr-simulated",
      chainType: "l1",
      chainId: local.CELO!.chainId,
      mining: localMining,
    },
    baseLocal: {
      type: "edr-simulated",
      chainType: "op",
      chainId: local.BASE!.chainId,
      mining: localMining,
    },
    // A plain node on Celo Sepolia's chain id: the deploy test's stand-in for the real testnet.
    celoSepoliaStandIn: {
      type: "edr-simulated",
      chainType: "l1",
      chainId: profileChain("celo-sepolia").chainId,
      mining: localMining,
    },
    celo: realNetwork("celo"),
    celoSepolia: realNetwork("celo-sepolia"),
    base: realNetwork("base"),
    baseSepolia: realNetwork("base-sepolia"),
  },
  // Source verification (npm run deploy; npx hardhat ignition verify <id>): one Etherscan v2 key covers Celo and Base.
  verify: {
    etherscan: { apiKey: configVariable("ETHERSCAN_API_KEY") },
  },
});
