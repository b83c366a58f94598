/** Starting the project's real processes for a test file: local chains, then the ledger. */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalChains, type LocalChains } from "../../scripts/local-chains.ts";

export const POSTGRES_URL = process.env.TEST_DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/test";

export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `billpay-${prefix}-`));
}

/** Both chains on free ports with a fresh deployment in a temporary deployments file. */
export async function startTestChains(): Promise<LocalChains & { deploymentsFile: string; dir: string }> {
  const dir = await tempDir("stack");
  const deploymentsFile = join(dir, "deployments.json");
  const chains = await startLocalChains({ ports: { CELO: 0, BASE: 0 }, deploymentsFile });
  return Object.assign(chains, { deploymentsFile, dir });
}

/** A schema name no other run uses (PostgreSQL is shared between runs). */
export function uniqueSchema(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
}
