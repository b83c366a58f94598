/**
 * `npm start`: the whole local stack on its embedded defaults, in the foreground: both
 * chains with the deployment (in a process of their own), the ledger (Ponder on PGlite, or
 * PostgreSQL when DATABASE_URL is set; restarted when it exits or stalls), the local x402
 * facilitator, the biller sandbox, and the service with its background worker. Ctrl-C stops
 * everything this process started.
 */
import { mkdir } from "node:fs/promises";
import { resolve } from "node:path";
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { localPort } from "../lib/local-ports.ts";
import { IN_MEMORY, ledgerPgliteDir, refuseOlderLedgerDir } from "../lib/ledger-config.ts";
import { loadConfig } from "../server/config.ts";
import { refuseOlderServiceDir } from "../server/db.ts";
import { purgeTask } from "../server/storage-purge.ts";
import { startWorker } from "../server/orders/worker.ts";
import { ledgerBounds } from "../lib/ledger-watch.ts";
import { ledgerDatabaseFor } from "./ledger-process.ts";
import { superviseLedger } from "./ledger-supervisor.ts";
import { startChainsProcess } from "./chains-process.ts";
import { startServiceStack } from "./service-stack.ts";

const log = (line: string) => console.log(line);
const config = loadConfig();
const deploymentsFile = deploymentsPath(config.DEPLOYMENTS_FILE);
await mkdir(".data", { recursive: true });

// A directory another PGlite wrote is refused before anything starts, in a line, not a trace.
try {
  if (!config.SERVER_DATABASE_URL) refuseOlderServiceDir(config.SERVER_PGLITE_DIR);
  if (!process.env.DATABASE_URL) refuseOlderLedgerDir(ledgerPgliteDir());
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}

const closers: Array<() => Promise<unknown>> = [];
let stopping = false;
async function stopAll() {
  for (const close of closers.reverse()) await close().catch(() => {});
}

try {
  // In a process of their own, so that nothing the service does on its event loop keeps the
  // nodes from answering the ledger (stack/chains-process.ts).
  const chains = await startChainsProcess({ env: { DEPLOYMENTS_FILE: resolve(deploymentsFile) }, log, logError: (line) => console.error(line) });
  closers.push(() => chains.close());
  chains.onExit((why) => {
    if (stopping) return;
    console.error(`${why}: stopping`);
    stopping = true;
    void stopAll().then(() => process.exit(1));
  });
  const deployments = await readDeployments(deploymentsFile);

  // Restarted when it exits or stalls behind a moving chain (stack/ledger-supervisor.ts).
  const ledger = await superviseLedger({
    deploymentsFile,
    port: localPort("ledger"),
    databaseUrl: process.env.DATABASE_URL ? await ledgerDatabaseFor(process.env.DATABASE_URL, deployments) : undefined,
    logTo: ".data/ledger.log",
    bounds: ledgerBounds(config),
    log: (line) => console.error(line),
  });
  closers.push(() => ledger.stop());
  const pgliteDir = ledgerPgliteDir();
  const ledgerState = process.env.DATABASE_URL ? "PostgreSQL" : pgliteDir === IN_MEMORY ? "memory" : pgliteDir;
  log(`ledger: ${ledger.url} (schema ${ledger.schema} in ${ledgerState}; log .data/ledger.log)`);

  const stack = await startServiceStack({
    deployments,
    env: { ...(process.env as Record<string, string>), LEDGER_URL: ledger.url },
    ports: {
      facilitator: Number(new URL(config.FACILITATOR_URL_CELO).port),
      biller: Number(new URL(config.BILLER_BASE_URL).port),
      service: config.PORT,
    },
    pgliteDir: config.SERVER_PGLITE_DIR,
  });
  closers.push(() => stack.close());
  const worker = startWorker(stack.flow, config.WORKER_INTERVAL_MS, [
    () => stack.hub.runDueSchedules(),
    purgeTask(stack.db, config.LINK_SIGNATURE_WINDOW_SECONDS, config.ORDER_UNPAID_RETENTION_DAYS * 86_400),
  ]);
  closers.push(() => worker.stop());
  // Another instance took a key while this one stalled: it must not sign again.
  stack.flow.keyLeases.onLost = () => {
    console.error("another instance took this instance's key lease; stopping");
    void stopAll().then(() => process.exit(1));
  };
  log(`facilitator: ${stack.urls.facilitator}`);
  log(`biller sandbox: ${stack.urls.biller}`);
  log(`service: ${stack.urls.service}`);
  log(
    `stack ready: the service ${stack.urls.service} (API reference ${stack.urls.service}/docs, operators' console ${stack.urls.service}/console), ` +
      `the ledger ${ledger.url}; pay a bill with \`npm run pay:example\`; Ctrl-C to stop`,
  );

} catch (err) {
  await stopAll();
  throw err;
}

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: stopping`);
    void stopAll().then(() => process.exit(0));
  });
}
