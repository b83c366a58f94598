/**
 * Where a benchmark keeps the service's state and the ledger's: PGlite by default (in memory
 * for the service, a directory for the ledger), or with BENCH_POSTGRES=1 fresh PostgreSQL
 * databases for both, as deployed.
 */
import { join } from "node:path";
import { freshDatabase } from "../../test/support/stack.ts";
import { startLedger, type Ledger } from "../../stack/ledger-process.ts";

export async function benchState(name: string, stack: { dir: string; deploymentsFile: string }) {
  const postgres = Boolean(process.env.BENCH_POSTGRES);
  const service = postgres ? await freshDatabase(`bench_${name}`) : undefined;
  const ledgerDb = postgres ? await freshDatabase(`bench_${name}_ledger`) : undefined;
  const ledger: Ledger = await startLedger({
    deploymentsFile: stack.deploymentsFile,
    ...(ledgerDb ? { databaseUrl: ledgerDb.url } : { pgliteDir: join(stack.dir, "ledger") }),
    logTo: join(stack.dir, "ledger.log"),
  });
  return {
    postgres,
    ledger,
    /** The service's settings for its state (none: PGlite in memory). */
    serviceEnv: (service ? { SERVER_DATABASE_URL: service.url } : {}) as Record<string, string>,
    async close() {
      await ledger.stop();
      await service?.drop();
      await ledgerDb?.drop();
    },
  };
}
