import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";

// activeNetwork() is read once per module instance: each case loads the module afresh under its own env.
async function pgliteDirUnder(env: Record<string, string | undefined>) {
  vi.resetModules();
  for (const [k, v] of Object.entries(env)) vi.stubEnv(k, v);
  const { ledgerPgliteDir, memoryBackedDir } = await import("../../lib/ledger-config.ts");
  return { dir: ledgerPgliteDir(), memory: memoryBackedDir() };
}

describe("where the ledger's PGlite lives", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it("is LEDGER_PGLITE_DIR when set, on any profile", async () => {
    expect((await pgliteDirUnder({ LEDGER_PGLITE_DIR: "some/dir", NETWORK: "local" })).dir).toBe(resolve("some/dir"));
    expect((await pgliteDirUnder({ LEDGER_PGLITE_DIR: "some/dir", NETWORK: "celo-sepolia" })).dir).toBe(resolve("some/dir"));
  });

  it("is memory-backed /dev/shm for local chains where the machine has it, one directory per checkout", async () => {
    const { dir, memory } = await pgliteDirUnder({ LEDGER_PGLITE_DIR: undefined, NETWORK: "local" });
    expect(memory).toBe(existsSync("/dev/shm") ? "/dev/shm" : undefined);
    if (memory) expect(dir).toMatch(/^\/dev\/shm\/billpay-ledger-[0-9a-f]{12}$/);
    else expect(dir).toBe(resolve(".data/ledger-pglite"));
  });

  it("stays on disk for a real network's chains", async () => {
    expect((await pgliteDirUnder({ LEDGER_PGLITE_DIR: undefined, NETWORK: "celo-sepolia" })).dir).toBe(resolve(".data/ledger-pglite"));
  });
});
