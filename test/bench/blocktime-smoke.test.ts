/**
 * `npm run bench:blocktime -- --smoke` as CI runs it: the whole stack on interval mining, a few
 * bills on both rails and a small burst with one failing bill. Behaviour only, never timings:
 * it ends cleanly, times both rails against their blocks, and every burst bill ends served or
 * refunded as planned. The results go to a temporary file, not bench-results/.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runScript } from "../support/processes.ts";
import { tempDir } from "../support/stack.ts";

/** The chains, a ledger's start-up and a dozen bills at a block a second, with room for a busy machine. */
const RUN_TIMEOUT_MS = 600_000;

describe("npm run bench:blocktime -- --smoke", () => {
  it(
    "times both rails after their blocks and ends every burst bill served or refunded",
    async () => {
      const out = join(await tempDir("blocktime"), "blocktime.json");
      const run = await runScript("scripts/bench-blocktime.ts", ["--smoke", "--out", out], { LOG_LEVEL: "warn" }, RUN_TIMEOUT_MS);
      expect(run.code, run.out).toBe(0);

      const results = JSON.parse(await readFile(out, "utf8"));
      expect(results.smoke).toBe(true);
      expect(Object.keys(results.profiles)).toEqual(["local"]);
      const local = results.profiles.local;
      for (const rail of ["x402", "agent"]) {
        expect(local[rail].afterBlock.count, rail).toBe(2);
        expect(Number.isFinite(local[rail].afterBlock.p50Ms), rail).toBe(true);
        expect(Number.isFinite(local[rail].requestP50Ms), rail).toBe(true);
      }
      expect(local.burst).toMatchObject({ bills: 4, failing: 1, served: 3, refunded: 1, asPlanned: true, other: 0, unfinished: 0, errors: 0 });
      expect(local.burst.blocksAfterLastPayment).toBeGreaterThanOrEqual(0);
    },
    RUN_TIMEOUT_MS + 60_000,
  );
});
