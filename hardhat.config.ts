import { createRequire } from "node:module";
import hardhatViem from "@nomicfoundation/hardhat-viem";
import { defineConfig } from "hardhat/config";

// Compile offline with solc-js (WASM) from the pinned `solc` package: Hardhat would
// otherwise download a native compiler from a host these machines cannot reach.
// The version label must match the package, so it is read from the package itself.
const require = createRequire(import.meta.url);
const solcVersion: string = require("solc/package.json").version;
const solcPath = require.resolve("solc/soljson.js");

// Local chains mine a block per transaction and also one a second when idle, so
// finality-based consumers (Ponder) keep advancing on a quiet chain.
const localMining = { auto: true, interval: 1000 };

export default defineConfig({
  plugins: [hardhatViem],
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
      chainId: 42220,
      mining: localMining,
    },
    baseLocal: {
      type: "edr-simulated",
      chainType: "op",
      chainId: 8453,
      mining: localMining,
    },
  },
});
