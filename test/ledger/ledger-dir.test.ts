import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";

// activeNetwork() is read once per module instance: each case loads the module afresh under its own env.
async function pgliteDirUnder(env: Record<string, string | undefined>) {
  vi.resetModules();
  for (const [k, v] of Object.entries(env)) vi.stubEnv(k, v);
  const { ledgerPgliteDir } = await import("../../lib/ledger-config.ts");
  return ledgerPgliteDir();
}

describe("where the ledger's PGlite lives", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    // The modules loaded under another profile leave with it: a later test file in this worker
    // (files share a worker's modules) gets them afresh, under the run's own environment.
    vi.resetModules();
  });

  it("is LEDGER_PGLITE_DIR when set, on any profile: a directory, or memory", async () => {
    expect(await pgliteDirUnder({ LEDGER_PGLITE_DIR: "some/dir", NETWORK: "local" })).toBe(resolve("some/dir"));
    expect(await pgliteDirUnder({ LEDGER_PGLITE_DIR: "some/dir", NETWORK: "celo-sepolia" })).toBe(resolve("some/dir"));
    expect(await pgliteDirUnder({ LEDGER_PGLITE_DIR: "memory://", NETWORK: "celo-sepolia" })).toBe("memory://");
  });

  it("is the ledger's memory for the local chains, which live in memory themselves", async () => {
    expect(await pgliteDirUnder({ LEDGER_PGLITE_DIR: undefined, NETWORK: "local" })).toBe("memory://");
  });

  it("stays on disk for a real network's chains", async () => {
    expect(await pgliteDirUnder({ LEDGER_PGLITE_DIR: undefined, NETWORK: "celo-sepolia" })).toBe(resolve(".data/ledger-pglite"));
  });

  it("is refused, before the ledger starts, when an older PGlite wrote it, and left as it was", async () => {
    const dir = await mkdtemp(join(tmpdir(), "billpay-ledger-dir-"));
    try {
      await writeFile(join(dir, "PG_VERSION"), "16\n");
      const { startLedger } = await import("../../stack/ledger-process.ts");
      await expect(startLedger({ deploymentsFile: join(dir, "none.json"), pgliteDir: dir })).rejects.toThrow(
        /holds a PostgreSQL 16 database.*runs PostgreSQL 18.*indexes again from BillPay's deployment block/,
      );
      expect(await readdir(dir)).toEqual(["PG_VERSION"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("is not started under a LEDGER_NICE that is not an integer from 0 to 19", async () => {
    const { startLedger } = await import("../../stack/ledger-process.ts");
    await expect(startLedger({ deploymentsFile: join(tmpdir(), "none.json"), pgliteDir: "memory://", env: { LEDGER_NICE: "lowest" } })).rejects.toThrow(/LEDGER_NICE must be an integer from 0 .* not "lowest"/);
  });
});
