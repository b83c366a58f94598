/**
 * The order in which a run starts its files: Vitest's own (the longest first once it has timed
 * them, by size before that), except that the files known to be the longest (40 s to 100 s
 * each in a `.ci/run`) start first. A fresh clone, as CI runs, has no timings, and the largest files are not the longest:
 * the ledger's suites are short files that start Ponder two or three times, and they started
 * last, three of them in the last minute of a 637 s run. Simulated from that run's own times
 * on two workers, starting these first ends the files 21 s sooner (615 s against 594 s).
 * A file missing from the list only starts in Vitest's order; nothing depends on it.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

const LONGEST = [
  "test/stack/start.test.ts",
  "test/ledger/ledger-faults.test.ts",
  "test/deploy/celo-sepolia.test.ts",
  "test/ledger/ledger-postgres.test.ts",
  "test/ledger/ledger-push.test.ts",
  "test/ledger/ledger-pglite.test.ts",
  "test/bench/blocktime-smoke.test.ts",
];

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (spec: TestSpecification) => {
      const i = LONGEST.findIndex((path) => spec.moduleId.endsWith(path));
      return i < 0 ? LONGEST.length : i;
    };
    // Array.prototype.sort is stable: the rest keep Vitest's order.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
