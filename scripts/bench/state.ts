/**
 * Where a benchmark keeps the service's state and the ledger's: PGlite by default, as the local
 * stack keeps them (the service's in memory; the ledger's in a fresh directory where
 * `npm start` keeps it for local chains, memory-backed /dev/shm where there is one), or with
 * BENCH_POSTGRES=1 fresh PostgreSQL databases for both, as deployed.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { memoryBackedDir } from "../../lib/ledger-config.ts";
import { freshDatabase } from "../../test/support/stack.ts";
import { startLedger } from "../../stack/ledger-process.ts";

export async function benchState(name: string, stack: { dir: string; deploymentsFile: string }) {
  const postgres = Boolean(process.env.BENCH_POSTGRES);
  const service = postgres ? await freshDatabase(`bench_${name}`) : undefined;
  const ledgerDb = postgres ? await freshDatabase(`bench_${name}_ledger`) : undefined;
  const memory = memoryBackedDir();
  const pgliteDir = postgres ? undefined : memory ? await mkdtemp(join(memory, `bench-ledger-${name}-`)) : join(stack.dir, "ledger");
  const drop = async () => {
    await service?.drop();
    await ledgerDb?.drop();
    if (memory && pgliteDir) await rm(pgliteDir, { recursive: true, force: true });
  };
  // A ledger that fails to start leaves no database behind.
  const ledger = await startLedger({
    deploymentsFile: stack.deploymentsFile,
    ...(ledgerDb ? { databaseUrl: ledgerDb.url } : { pgliteDir }),
    logTo: join(stack.dir, "ledger.log"),
  }).catch(async (err: unknown) => {
    await drop();
    throw err;
  });
  return {
    postgres,
    ledger,
    /** The service's settings for its state (none: PGlite in memory). */
    serviceEnv: (service ? { SERVER_DATABASE_URL: service.url } : {}) as Record<string, string>,
    async close() {
      await ledger.stop();
      await drop();
    },
  };
}
