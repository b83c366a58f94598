/**
 * Runs the ledger (Ponder) as a child process (on 127.0.0.1 unless told otherwise) and waits
 * until it has finished its backfill and caught up with each chain's head, reporting progress
 * per chain from its /status. A long
 * backfill is never cut off for taking long: only one that stops advancing for
 * `stallTimeoutMs` is. Used by `npm start`, `npm run ledger`, the tests and the benchmarks.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { getPriority, setPriority } from "node:os";
import { createWriteStream } from "node:fs";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { createHash } from "node:crypto";
import pg from "pg";
import { isLocalRpcUrl, publicClientFor } from "../lib/chain-client.ts";
import { deployedChains, readDeployments, requireChain, rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import { readIndexedBlocks } from "../lib/ledger-watch.ts";
import { pgliteImage } from "../lib/pglite-image.ts";
import {
  IN_MEMORY,
  LEDGER_OPEN_QUERY_API,
  LEDGER_VIEWS_SCHEMA,
  ledgerNice,
  ledgerPgliteDir,
  ledgerQueryApiOpen,
  ledgerSchemaName,
  refuseOlderLedgerDir,
} from "../lib/ledger-config.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PONDER_BIN = fileURLToPath(new URL("../node_modules/ponder/dist/esm/bin/ponder.js", import.meta.url));
/** Ends Ponder when the process that started it is gone (stack/ledger-parent-watch.mjs). */
const PARENT_WATCH = new URL("./ledger-parent-watch.mjs", import.meta.url).href;
/** How long the ledger may go without indexing a block before it is taken for stuck. */
const STALL_TIMEOUT_MS = 120_000;
const STOP_TIMEOUT_MS = 15_000;

export interface LedgerOptions {
  deploymentsFile: string;
  /** 0 or absent picks a free port. */
  port?: number;
  /** PostgreSQL when set; embedded PGlite otherwise. */
  databaseUrl?: string;
  pgliteDir?: string;
  /** Defaults to the schema keyed to the chains and the app's code (ledgerSchemaName). */
  schema?: string;
  /** PostgreSQL only: the stable views schema. */
  viewsSchema?: string;
  pollingIntervalMs?: number;
  /** Where Ponder's output goes: a file path, "inherit", or nowhere (default). */
  logTo?: string | "inherit";
  /** Ponder's log format; JSON unless its output goes to a terminal. */
  logFormat?: "json" | "pretty";
  /** More environment for Ponder (for example `<CHAIN>_RPC_URL`); the rest is inherited. */
  env?: Record<string, string>;
  /** The address the ledger's HTTP server binds (default 127.0.0.1; 0.0.0.0 serves other machines). */
  host?: string;
  /**
   * Serve Ponder's SQL over HTTP (/sql/*) and GraphQL (/graphql) to other machines too
   * (LEDGER_OPEN_QUERY_API=1); absent, the inherited LEDGER_OPEN_QUERY_API decides (unset:
   * this machine only; /ledger/* answers everyone either way).
   */
  openQueryApi?: boolean;
  /** Told of each chain's indexed block while the backfill runs (at most every `progressEveryMs`). */
  onProgress?: (chains: Array<{ chain: string; chainId: number; block: number | null }>) => void;
  progressEveryMs?: number;
  /** How long the backfill may stop advancing before the ledger is stopped as stuck. */
  stallTimeoutMs?: number;
  /** The ledger's nice increment (0 to 19); absent, LEDGER_NICE decides (default 0: lib/ledger-config.ts). */
  nice?: number;
  /** Stops the ledger, and the start with it, when aborted (a supervisor stopped while it restarts one). */
  signal?: AbortSignal;
}

export interface Ledger {
  url: string;
  schema: string;
  process: ChildProcess;
  /** SIGTERM (a clean shutdown) by default; SIGKILL to simulate a crash. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

type Progress = Array<{ chain: string; chainId: number; block: number | null }>;

async function readProgress(url: string): Promise<Progress | null> {
  try {
    const res = await fetch(`${url}/status`, { signal: AbortSignal.timeout(1_000) });
    if (!res.ok) return null;
    const status = (await res.json()) as Record<string, { id: number; block: { number: number } | null }>;
    return Object.entries(status).map(([chain, s]) => ({ chain, chainId: s.id, block: s.block?.number ?? null }));
  } catch {
    return null; // not listening yet
  }
}

/**
 * Waits until the ledger has finished its backfill (Ponder's /ready) and then caught up with
 * each chain's head as read at that moment: Ponder's backfill ends at the block it holds
 * final, some thirty blocks under the head, and its realtime sync indexes the rest after
 * /ready. A ledger handed over before that would be reported behind by whoever watches it.
 */
async function waitReady(url: string, child: ChildProcess, options: LedgerOptions, deployments: Deployments): Promise<void> {
  const stallMs = options.stallTimeoutMs ?? STALL_TIMEOUT_MS;
  let deadline = Date.now() + stallMs;
  let lastReport = 0;
  let last = "";
  let heads: Map<number, bigint> | undefined;
  /** Catching up after /ready: each chain's block and when it last moved; a chain behind that stands still stalls it. */
  const moved = new Map<number, { block: bigint; at: number }>();
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`ledger exited (${child.signalCode ?? `code ${child.exitCode}`}) before it was ready`);
    try {
      const res = await fetch(`${url}/ready`, { signal: AbortSignal.timeout(1_000) });
      if (res.ok) {
        heads ??= await chainHeads(deployments, { ...process.env, ...options.env }).catch((err: Error) => {
          // A head that cannot be read is a failure of its own, not a ledger still starting.
          if (Date.now() > deadline) throw new Error(`ledger at ${url} backfilled, but the chains' heads could not be read for ${stallMs} ms: ${err.message.split("\n")[0]}`);
          return undefined;
        });
        if (!heads) {
          await new Promise((r) => setTimeout(r, 200));
          continue;
        }
        const indexed = await readIndexedBlocks(url);
        const behind = [...heads].filter(([chainId, head]) => (indexed.get(chainId) ?? -1n) < head);
        if (behind.length === 0) return;
        for (const [chainId, head] of behind) {
          const block = indexed.get(chainId) ?? -1n;
          const seen = moved.get(chainId);
          if (!seen || seen.block !== block) moved.set(chainId, { block, at: Date.now() });
          else if (Date.now() - seen.at > stallMs) throw new Error(`ledger at ${url} backfilled, then stood at block ${block} of chain ${chainId} for ${stallMs} ms, short of its head ${head}`);
        }
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
    } catch (err) {
      if ((err as Error).message.startsWith(`ledger at ${url}`)) throw err;
      // not listening yet
    }
    const progress = await readProgress(url);
    const seen = JSON.stringify(progress?.map((p) => p.block) ?? null);
    // Any block indexed since the last look is progress: the stall clock starts again.
    if (progress && seen !== last) {
      last = seen;
      deadline = Date.now() + stallMs;
    }
    if (progress && options.onProgress && Date.now() - lastReport >= (options.progressEveryMs ?? 5_000)) {
      lastReport = Date.now();
      options.onProgress(progress);
    }
    if (Date.now() > deadline) throw new Error(`ledger at ${url} indexed nothing for ${stallMs} ms before it was ready`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function startLedger(options: LedgerOptions): Promise<Ledger> {
  const nice = options.nice ?? ledgerNice({ ...process.env, ...options.env }); // a bad LEDGER_NICE is refused before anything starts
  // Before Ponder opens it: PGlite would fail on it with no reason given.
  if (!options.databaseUrl) refuseOlderLedgerDir(options.pgliteDir ?? ledgerPgliteDir());
  const port = options.port || (await freePort());
  const deployments = await readDeployments(options.deploymentsFile);
  const schema = options.schema ?? ledgerSchemaName(deployments, ROOT);
  const logFormat = options.logFormat ?? (options.logTo === "inherit" ? "pretty" : "json");
  const args = ["--import", PARENT_WATCH, PONDER_BIN, "--root", "ponder", "--log-format", logFormat, ...(process.env.LEDGER_LOG_LEVEL ? ["--log-level", process.env.LEDGER_LOG_LEVEL] : [])];
  const host = options.host ?? "127.0.0.1";
  args.push("start", "--schema", schema, "-p", String(port), "-H", host);
  if (options.databaseUrl) args.push("--views-schema", options.viewsSchema ?? LEDGER_VIEWS_SCHEMA);

  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...options.env,
    DEPLOYMENTS_FILE: options.deploymentsFile,
    PONDER_TELEMETRY_DISABLED: "1",
  };
  delete env.DATABASE_URL;
  // Ponder reads PORT before its own -p flag: the service's PORT would move the ledger onto it.
  delete env.PORT;
  if (options.databaseUrl) env.DATABASE_URL = options.databaseUrl;
  if (options.pgliteDir) env.LEDGER_PGLITE_DIR = options.pgliteDir;
  // An in-memory ledger loads a fresh cluster's image instead of running initdb (lib/pglite-image.ts);
  // only this one, never one a parent's environment named.
  delete env.PONDER_PGLITE_IMAGE;
  if (!options.databaseUrl && (options.pgliteDir ?? ledgerPgliteDir()) === IN_MEMORY) {
    const image = await pgliteImage();
    if (image) env.PONDER_PGLITE_IMAGE = image;
  }
  if (options.pollingIntervalMs) env.LEDGER_POLLING_INTERVAL_MS = String(options.pollingIntervalMs);
  if (options.openQueryApi !== undefined) env[LEDGER_OPEN_QUERY_API] = options.openQueryApi ? "1" : "0";
  ledgerQueryApiOpen(env); // a bad value is refused here, not as a failed Ponder build

  const inherit = options.logTo === "inherit";
  // The channel is how Ponder sees this process end, however it ends (stack/ledger-parent-watch.mjs).
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: inherit ? ["inherit", "inherit", "inherit", "ipc"] : ["ignore", "pipe", "pipe", "ipc"] });
  child.channel?.unref();
  // Below the service at once when asked, before Ponder has built or indexed anything (LEDGER_NICE).
  if (nice > 0 && child.pid !== undefined) {
    try {
      setPriority(child.pid, Math.min(19, getPriority() + nice));
    } catch (err) {
      // Lowering one's own child's priority needs no privilege; a system that refuses it still
      // gets a working ledger, only at the service's priority: said, not hidden.
      console.error(`ledger: could not lower its priority to nice ${nice}: ${(err as Error).message}`);
    }
  }
  // A parent that exits without stopping the ledger (process.exit, a crash) takes it along;
  // one killed outright does too, through the channel.
  const orphanGuard = () => child.kill("SIGTERM");
  process.once("exit", orphanGuard);
  child.once("exit", () => process.off("exit", orphanGuard));
  if (!inherit) {
    const sink = options.logTo ? createWriteStream(options.logTo, { flags: "a" }) : undefined;
    for (const stream of [child.stdout, child.stderr]) {
      if (sink) stream?.pipe(sink, { end: false });
      else stream?.resume();
    }
  }

  // This process reaches it on loopback when it binds every address, else where it binds.
  const url = `http://${host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host}:${port}`;
  const stop = async (signal: NodeJS.Signals = "SIGTERM") => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill(signal);
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
  };

  const abort = () => void stop();
  options.signal?.addEventListener("abort", abort, { once: true });
  child.once("exit", () => options.signal?.removeEventListener("abort", abort));
  // Aborted while the deployments were read or the child spawned: the listener came too late to hear it.
  if (options.signal?.aborted) abort();
  try {
    await waitReady(url, child, options, deployments);
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, schema, process: child, stop };
}

/** Each deployed chain's head now, by chain id, read where the ledger reads it (its environment's `<CHAIN>_RPC_URL`). */
async function chainHeads(deployments: Deployments, env: Record<string, string | undefined>): Promise<Map<number, bigint>> {
  const chains = deployedChains(deployments).map((key) => ({ key, d: requireChain(deployments, key) }));
  const heads = await Promise.all(chains.map(({ key, d }) => publicClientFor(key, rpcUrlFor(key, d, env)).getBlockNumber()));
  return new Map(chains.map(({ d }, i) => [d.chainId, heads[i]!]));
}

/**
 * The PostgreSQL database the ledger should use for these chains. Ponder caches raw chain
 * data per database keyed only by chain id, and local chains reuse the real ids, so a
 * reset local chain read through the previous one's cache (measured: rows lost). For
 * local chains the ledger therefore gets a database of its own per genesis, created on
 * first use next to the one DATABASE_URL names; real chains use DATABASE_URL as given.
 */
export async function ledgerDatabaseFor(databaseUrl: string, deployments: Deployments): Promise<string> {
  const chains = Object.values(deployments.chains);
  if (chains.length === 0 || !chains.every((d) => isLocalRpcUrl(d.rpcUrl))) return databaseUrl;
  const genesis = createHash("sha256").update(chains.map((d) => d.genesisHash).sort().join(",")).digest("hex").slice(0, 12);
  const url = new URL(databaseUrl);
  const name = `${url.pathname.slice(1) || "postgres"}_local_${genesis}`;
  const admin = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5_000 });
  await admin.connect();
  try {
    const exists = await admin.query("SELECT 1 FROM pg_database WHERE datname = $1", [name]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  url.pathname = `/${name}`;
  return url.toString();
}

export { waitForLedgerBlock } from "../server/ledger-client.ts";
