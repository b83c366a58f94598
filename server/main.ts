/**
 * `npm run server`: the bill-payment service on its configuration (see server/config.ts),
 * with graceful shutdown: stop taking requests, finish those in flight, close the database.
 */
import { serve } from "@hono/node-server";
import { readNodesOverWebSocket } from "../lib/chain-client.ts";
import { deployedChains, readDeployments, requireChain, rpcUrlFor } from "../lib/deployments.ts";
import { activeNetwork } from "../lib/networks.ts";
import { createApp } from "./app.ts";
import { loadConfig } from "./config.ts";
import { openDb } from "./db.ts";
import { purgeTask } from "./storage-purge.ts";
import { startWorker } from "./orders/worker.ts";
import { rateSourceFor } from "./pricing/rates.ts";
import { buildFlow, buildHub, claimKeys, hotKeys } from "./services.ts";
import { KeyHeld } from "./chain/key-lease.ts";
import { startupFailures } from "./startup-checks.ts";
import { log as processLog } from "./log.ts";

const log = (msg: string, fields?: Record<string, unknown>) => processLog().info(msg, fields);

let config;
try {
  config = loadConfig();
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}

const deployments = await readDeployments(config.DEPLOYMENTS_FILE);
const keys = hotKeys();
// Refuse to start on anything that would fail payers later (server/startup-checks.ts), before
// the database is opened: a service that cannot run says so at once, and creates nothing (an
// embedded database took seconds to create first).
const failures = await startupFailures(config, activeNetwork(), deployments, { operator: keys.operator.address, refunder: keys.refunder.address });
if (failures.length > 0) {
  processLog().error("refusing to start", { failures });
  console.error(`refusing to start:\n${failures.map((f) => `  - ${f}`).join("\n")}`);
  process.exit(1);
}
const db = await openDb({ url: config.SERVER_DATABASE_URL, pgliteDir: config.SERVER_PGLITE_DIR, poolSize: config.SERVER_DB_POOL_SIZE });
const rates = rateSourceFor(config, db, processLog());
const flow = buildFlow(config, deployments, db, keys);
const closeSockets = readNodesOverWebSocket(
  deployedChains(deployments).map((chain) => ({ chain, rpcUrl: rpcUrlFor(chain, requireChain(deployments, chain)) })),
  processLog(),
);
// One key, one instance: refused while another live instance signs with these keys (server/chain/key-lease.ts).
try {
  await claimKeys(flow);
} catch (err) {
  if (!(err instanceof KeyHeld)) throw err;
  processLog().error("refusing to start", { failures: [err.message] });
  console.error(`refusing to start:\n  - ${err.message}`);
  await db.close();
  process.exit(1);
}
const hub = buildHub(config, deployments, db, flow, rates);
const app = createApp({ config, db, deployments, rates, flow, hub });
flow.ledgerHealth.start(config.LEDGER_WATCH_INTERVAL_MS);
const worker = startWorker(flow, config.WORKER_INTERVAL_MS, [() => hub.runDueSchedules(), purgeTask(db, config.LINK_SIGNATURE_WINDOW_SECONDS, config.ORDER_UNPAID_RETENTION_DAYS * 86_400)]);

const server = serve({ fetch: app.fetch, port: config.PORT, hostname: config.HOST }, (info) =>
  log("listening", { url: `http://${config.HOST}:${info.port}`, network: activeNetwork().name, database: config.SERVER_DATABASE_URL ? "postgresql" : "pglite" }),
);

let stopping = false;
function shutdown(why: string, code: number) {
  if (stopping) return;
  stopping = true;
  log("shutting down", { why });
  server.close(async () => {
    await worker.stop();
    flow.ledger.close();
    flow.ledgerHealth.stop();
    flow.heads.close();
    closeSockets();
    await flow.keyLeases.release().catch(() => {}); // gives back only what this instance still holds
    await db.close();
    process.exit(code);
  });
  setTimeout(() => process.exit(1), 10_000).unref();
}
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => shutdown(signal, 0));
// Another instance took a key while this one stalled: it must not sign again.
flow.keyLeases.onLost = () => shutdown("another instance took this instance's key lease", 1);
