import { defineConfig } from "vitest/config";
import LongestFirst from "./test/support/sequencer.ts";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    // Vitest's default on a 2-core machine is one worker; the suites wait on chains and
    // processes as well as compute, so two use both cores (three measured no faster:
    // docs/development.md, Tests).
    maxWorkers: 2,
    // A worker keeps its modules from one test file to the next instead of loading viem,
    // Ponder's client, Hardhat and the server afresh for each (a sixth of the run's time went to
    // that). A file that changes what a module reads once (the environment, the process's log,
    // the clock) puts it back when it ends, as test/ledger/ledger-dir.test.ts does.
    isolate: false,
    // Fails a file that leaves the environment or the process's log changed for the next one.
    setupFiles: ["./test/support/process-hygiene.ts"],
    // The service's own log lines stay out of the test output unless asked for (LOG_LEVEL=info).
    env: { LOG_LEVEL: process.env.LOG_LEVEL ?? "warn" },
    hookTimeout: 120_000,
    // One temporary root per run, then the chains and ledgers that suites lease (test/support/shared-chains.ts).
    globalSetup: ["./test/support/temp-root.ts", "./test/support/shared-chains.ts"],
    reporters: ["default", "./test/support/summary-reporter.ts"],
    // The files known to be the longest start first (test/support/sequencer.ts), unless
    // the run is asked to shuffle them (a sequencer set here would take the place of Vitest's
    // shuffling one: docs/development.md, Tests).
    sequence: process.argv.some((a) => a.startsWith("--sequence.shuffle")) ? {} : { sequencer: LongestFirst },
  },
});
