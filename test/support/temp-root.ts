/**
 * Vitest global setup: every run keeps its temporary directories (stacks' deployments and
 * logs, PGlite data of the restart suites, about 250 MB a run) under one root of its own,
 * removed when the run ends. KEEP_TEST_TMP=1 keeps it, to read a failed run's logs.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const TEST_TMP_ENV = "BILLPAY_TEST_TMP";

export default async function setup(): Promise<() => Promise<void>> {
  const root = await mkdtemp(join(tmpdir(), "billpay-test-"));
  // Set before the workers start, so each inherits it (test/support/stack.ts tempDir).
  process.env[TEST_TMP_ENV] = root;
  return async () => {
    if (process.env.KEEP_TEST_TMP === "1") {
      console.log(`test directories kept in ${root}`);
      return;
    }
    await rm(root, { recursive: true, force: true, maxRetries: 3 });
  };
}
