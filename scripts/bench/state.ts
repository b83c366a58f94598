/**
 * Where a benchmark keeps the service's state and the ledger's: PGlite in memory by default (the
 * ledger's as `npm start` keeps it for local chains), or with BENCH_POSTGRES=1 fresh PostgreSQL
 * databases for both, as deployed.
 */
import { join } from "node:path";
import { IN_MEMORY } from "../../lib/ledger-config.ts";
import { freshDatabase } from "../../test/support/stack.ts";
import { startLedger } from "../../stack/ledger-process.ts";

export async function benchState(name: string, stack: { dir: string; deploymentsFile: string }) {
  const postgres = Boolean(process.env.BENCH_POSTGRES);
  const service = postgres ? await freshDatabase(`bench_${name}`) : undefined;
  const ledgerDb = postgres ? await freshDatabase(`bench_${name}_ledger`) : undefined;
  const drop = async () => {
    await service?.drop();
    await ledgerDb?.drop();
  };
  // A ledger that fails to start leaves no database behind.
  const ledger = await startLedger({
    deploymentsFile: stack.deploymentsFile,
    ...(ledgerDb ? { databaseUrl: ledgerDb.url } : { pgliteDir: IN_MEMORY }),
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
