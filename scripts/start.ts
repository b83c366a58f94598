/**
 * `npm start`: the whole local stack on its embedded defaults, in the foreground: both
 * chains with the deployment, the ledger (Ponder on PGlite, or PostgreSQL when
 * DATABASE_URL is set), the local x402 facilitator, the biller sandbox, and the service
 * with its background worker. Ctrl-C stops everything this process started.
 */
import { mkdir } from "node:fs/promises";
import { serve, type ServerType } from "@hono/node-server";
import { CHAIN_KEYS } from "../lib/chains.ts";
import { deploymentsPath, readDeployments, requireChain } from "../lib/deployments.ts";
import { DEFAULT_LEDGER_PORT } from "../lib/ledger-config.ts";
import { facilitatorAccount } from "../lib/local-accounts.ts";
import { createApp } from "../server/app.ts";
import { loadConfig } from "../server/config.ts";
import { openDb } from "../server/db.ts";
import { startWorker } from "../server/orders/worker.ts";
import { ConfiguredRate, HttpRateSource } from "../server/pricing/rates.ts";
import { buildFlow } from "../server/services.ts";
import { billerSandboxApp } from "../services/biller-sandbox/app.ts";
import { createFacilitator, facilitatorApp } from "../services/facilitator/app.ts";
import { ledgerDatabaseFor, startLedger, type Ledger } from "./ledger-process.ts";
import { startLocalChains } from "./local-chains.ts";

const log = (line: string) => console.log(line);
const config = loadConfig();
const deploymentsFile = deploymentsPath(config.DEPLOYMENTS_FILE);
await mkdir(".data", { recursive: true });

const closers: Array<() => Promise<unknown>> = [];
async function stopAll() {
  for (const close of closers.reverse()) await close().catch(() => {});
}
const listen = (name: string, fetch: (req: Request) => Response | Promise<Response>, port: number) =>
  new Promise<ServerType>((resolve) => {
    const server = serve({ fetch, port, hostname: "127.0.0.1" }, () => {
      log(`${name}: http://127.0.0.1:${port}`);
      resolve(server);
    });
    closers.push(() => new Promise((r) => server.close(() => r(undefined))));
  });

try {
  const chains = await startLocalChains({ deploymentsFile, log });
  closers.push(() => chains.close());
  const deployments = await readDeployments(deploymentsFile);

  const ledger: Ledger = await startLedger({
    deploymentsFile,
    port: Number(process.env.LEDGER_PORT ?? DEFAULT_LEDGER_PORT),
    databaseUrl: process.env.DATABASE_URL ? await ledgerDatabaseFor(process.env.DATABASE_URL, deployments) : undefined,
    logTo: ".data/ledger.log",
  });
  closers.push(() => ledger.stop());
  log(`ledger: ${ledger.url} (schema ${ledger.schema}; log .data/ledger.log)`);

  const facilitatorChains = CHAIN_KEYS.map((chain) => ({ chain, rpcUrl: requireChain(deployments, chain).rpcUrl }));
  await listen("facilitator", facilitatorApp(createFacilitator(facilitatorAccount(), facilitatorChains)).fetch, Number(new URL(config.FACILITATOR_URL_CELO).port));
  const sandbox = billerSandboxApp({ apiKey: config.BILLER_API_KEY, secretKey: config.BILLER_SECRET_KEY, publicKey: config.BILLER_PUBLIC_KEY });
  await listen("biller sandbox", sandbox.fetch, Number(new URL(config.BILLER_BASE_URL).port));

  const db = await openDb({ url: config.SERVER_DATABASE_URL, pgliteDir: config.SERVER_PGLITE_DIR });
  closers.push(() => db.close());
  const rates = config.RATE_SOURCE_URL
    ? new HttpRateSource(config.RATE_SOURCE_URL, config.RATE_SOURCE_FIELD, config.RATE_TIMEOUT_MS, config.RATE_CACHE_MS)
    : new ConfiguredRate(config.NGN_PER_USD);
  const flow = buildFlow({ ...config, LEDGER_URL: ledger.url }, deployments, db);
  const worker = startWorker(flow, config.WORKER_INTERVAL_MS);
  closers.push(() => worker.stop());
  await listen("service", createApp({ config, db, deployments, rates, flow }).fetch, config.PORT);
  log("stack ready: pay a bill with `npm run pay:example`; Ctrl-C to stop");

  ledger.process.on("exit", (code) => {
    console.error(`ledger exited (code ${code}); see .data/ledger.log`);
    void stopAll().then(() => process.exit(1));
  });
} catch (err) {
  await stopAll();
  throw err;
}

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: stopping`);
    void stopAll().then(() => process.exit(0));
  });
}
