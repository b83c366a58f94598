/** Starting the project's real processes for a test file: local chains, then the ledger. */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readDeployments, type Deployments } from "../../lib/deployments.ts";
import { IN_MEMORY } from "../../lib/ledger-config.ts";
import { freePort, startLedger } from "../../stack/ledger-process.ts";
import { startLocalChains, type LocalChains } from "../../stack/local-chains.ts";
import { startServiceStack } from "../../stack/service-stack.ts";
import { startScript } from "./processes.ts";
import { TEST_TMP_ENV } from "./temp-root.ts";

import pg from "pg";

export const POSTGRES_URL = process.env.TEST_DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/test";
/** STACK_DB=pglite runs the paying stacks on in-memory PGlite instead of PostgreSQL (startPayingStack; its `db` option decides for one stack). */
const STACK_ON_PGLITE = process.env.STACK_DB === "pglite";

/**
 * A database of its own on the PostgreSQL server, dropped by `drop()`. Ponder keeps its
 * raw chain data in one `ponder_sync` schema per database, keyed by chain id; local chains
 * reuse the real chain ids, so two runs' chains must never share a database.
 */
export async function freshDatabase(prefix: string, serverUrl = POSTGRES_URL): Promise<{ url: string; drop(): Promise<void> }> {
  const name = uniqueSchema(prefix);
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: serverUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/** A new directory under the run's temporary root (removed when the run ends), or the system's outside a test run. */
export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(process.env[TEST_TMP_ENV] ?? tmpdir(), `billpay-${prefix}-`));
}

/** Both chains on free ports with a fresh deployment in a temporary deployments file. */
export async function startTestChains(): Promise<LocalChains & { deploymentsFile: string; dir: string }> {
  const dir = await tempDir("stack");
  const deploymentsFile = join(dir, "deployments.json");
  const chains = await startLocalChains({ ports: { CELO: 0, BASE: 0 }, deploymentsFile });
  return Object.assign(chains, { deploymentsFile, dir });
}

/**
 * Both chains in a process of their own (`npm run chains` on free ports), as a real node is
 * not in the service's process: for benchmarks, where a node sharing the service's event loop
 * would be measured as the service's cost.
 */
export async function startChainsProcess(): Promise<{ deployments: Deployments; deploymentsFile: string; dir: string; pid?: number; close(): Promise<void> }> {
  const dir = await tempDir("chains");
  const deploymentsFile = join(dir, "deployments.json");
  const [celoPort, basePort] = [await freePort(), await freePort()];
  const chains = await startScript("stack/chains.ts", { CELO_PORT: String(celoPort), BASE_PORT: String(basePort), DEPLOYMENTS_FILE: deploymentsFile }, "local chains ready", 120_000);
  return { deployments: await readDeployments(deploymentsFile), deploymentsFile, dir, pid: chains.child.pid, close: chains.stop };
}

/** A schema name no other run uses (PostgreSQL is shared between runs). */
export function uniqueSchema(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * Everything an end-to-end suite pays against: local chains, a real Ponder ledger on them,
 * and the service with its facilitator and biller sandbox, tuned for tests (a short vend
 * deadline, no worker grace, quiet logs). `env` adds or overrides service settings; `options`
 * the sandbox's and the facilitator's behaviour.
 */
export async function startPayingStack(
  env: Record<string, string> = {},
  { db = STACK_ON_PGLITE ? "pglite" : "postgresql", ...options }: Pick<Parameters<typeof startServiceStack>[0], "sandbox" | "facilitator"> & { db?: "pglite" | "postgresql" } = {},
) {
  const chains = await startTestChains();
  // The ledger and the service on the PostgreSQL server, in a database of this stack's own:
  // PostgreSQL is what production runs, and it costs a fraction of the CPU an in-memory PGlite
  // does (measured: a paying suite's ledger spent half its CPU in PGlite's WASM). The embedded
  // PGlite default is exercised by the suites that start `npm start` and the ledger on it.
  const database = db === "pglite" ? undefined : await freshDatabase("stack");
  let ledger: Awaited<ReturnType<typeof startLedger>> | undefined;
  try {
    ledger = await startLedger({
      deploymentsFile: chains.deploymentsFile,
      ...(database ? { databaseUrl: database.url } : { pgliteDir: IN_MEMORY }),
      logTo: join(chains.dir, "ledger.log"),
    });
    const service = await startServiceStack({
      deployments: chains.deployments,
      ...options,
      env: {
        BILLER_TIMEOUT_MS: "500",
        VEND_DEADLINE_MS: "300", // one requery at most: the sandbox answers pending to the first
        REQUERY_INTERVAL_MS: "200",
        WORKER_GRACE_SECONDS: "0",
        LOG_REQUESTS: "0",
        LEDGER_URL: ledger.url,
        ...(database ? { SERVER_DATABASE_URL: database.url } : {}),
        ...env,
      },
    });
    const started = ledger;
    return {
      chains,
      ledger: started,
      service,
      async close() {
        await service.close();
        await started.stop();
        await chains.close();
        await database?.drop();
      },
    };
  } catch (err) {
    await ledger?.stop();
    await chains.close();
    await database?.drop();
    throw err;
  }
}
