/**
 * `npm start`: the whole local stack on its embedded defaults, in the foreground:
 * both chains with the deployment, then the ledger (Ponder on PGlite, or PostgreSQL when
 * DATABASE_URL is set). Ctrl-C stops everything this process started.
 */
import { mkdir } from "node:fs/promises";
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { DEFAULT_LEDGER_PORT } from "../lib/ledger-config.ts";
import { ledgerDatabaseFor, startLedger, type Ledger } from "./ledger-process.ts";
import { startLocalChains } from "./local-chains.ts";

const deploymentsFile = deploymentsPath();
const log = (line: string) => console.log(line);
await mkdir(".data", { recursive: true });

const chains = await startLocalChains({ deploymentsFile, log });
log(`deployments: ${deploymentsFile}`);

let ledger: Ledger;
try {
  ledger = await startLedger({
    deploymentsFile,
    port: Number(process.env.LEDGER_PORT ?? DEFAULT_LEDGER_PORT),
    databaseUrl: process.env.DATABASE_URL
      ? await ledgerDatabaseFor(process.env.DATABASE_URL, await readDeployments(deploymentsFile))
      : undefined,
    logTo: ".data/ledger.log",
  });
} catch (err) {
  await chains.close();
  throw err;
}
log(`ledger: ${ledger.url} (schema ${ledger.schema}; log .data/ledger.log)`);
log(`  ${ledger.url}/ledger/treasury   ${ledger.url}/graphql   ${ledger.url}/sql/*`);
log("stack ready; Ctrl-C to stop");

let stopping = false;
async function stop(signal: string) {
  if (stopping) return;
  stopping = true;
  log(`${signal}: stopping`);
  await ledger?.stop();
  await chains.close();
  process.exit(0);
}
process.on("SIGINT", () => void stop("SIGINT"));
process.on("SIGTERM", () => void stop("SIGTERM"));
ledger.process.on("exit", (code) => {
  if (!stopping) {
    console.error(`ledger exited unexpectedly (code ${code}); see .data/ledger.log`);
    void stop("ledger exit");
  }
});
