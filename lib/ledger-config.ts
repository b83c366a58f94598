/**
 * Ledger (Ponder) settings shared by ponder.config.ts, the scripts that start Ponder and
 * the clients that read it: database, polling interval, schema naming, and its URL.
 */
import { createHash } from "node:crypto";
import { accessSync, constants, readFileSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Deployments } from "./deployments.ts";
import { activeNetwork, type ChainKey } from "./networks.ts";

export const DEFAULT_LEDGER_PORT = 42069;
/** Ponder's minimum polling interval; fine for local chains (a block a second when idle). */
export const DEFAULT_POLLING_INTERVAL_MS = 100;
/** Stable views schema on PostgreSQL, re-pointed at each new ledger schema. */
export const LEDGER_VIEWS_SCHEMA = "ledger";

/** LEDGER_POLLING_INTERVAL_MS when set, else the network profile's for the chain, else Ponder's minimum. */
export function ledgerPollingIntervalMs(chain?: ChainKey): number {
  const raw = process.env.LEDGER_POLLING_INTERVAL_MS;
  if (raw === undefined) return (chain && activeNetwork().chains[chain]?.pollingIntervalMs) || DEFAULT_POLLING_INTERVAL_MS;
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 100) throw new Error("LEDGER_POLLING_INTERVAL_MS must be an integer >= 100");
  return ms;
}

/** PostgreSQL when DATABASE_URL is set, else embedded PGlite (no server needed) in `ledgerPgliteDir()`. */
export function ledgerDatabase() {
  const url = process.env.DATABASE_URL;
  if (url) return { kind: "postgres" as const, connectionString: url };
  return { kind: "pglite" as const, directory: ledgerPgliteDir() };
}

/** Memory-backed storage every process on this machine can reach (Linux's /dev/shm), if there is one. */
export function memoryBackedDir(): string | undefined {
  try {
    accessSync("/dev/shm", constants.W_OK);
    return statSync("/dev/shm").isDirectory() ? "/dev/shm" : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The ledger's PGlite directory: LEDGER_PGLITE_DIR; else, on the local profile, one per checkout
 * in memory-backed /dev/shm where there is one; else `.data/ledger-pglite`.
 *
 * The local chains are Hardhat nodes held in memory, so an index of them is of no use once they
 * are gone, and /dev/shm keeps it as long as they can live (until the machine restarts; a restart
 * of the stack against chains still running resumes it). The PGlite that Ponder pins (0.2) writes
 * every protocol message through a file in its data directory and flushes its WAL at each commit:
 * on /dev/shm the ledger showed a pull 54-59 ms after it was mined, against 64-72 ms on disk
 * (bench:agent, alternating runs). A real network's ledger stays on disk, or on PostgreSQL.
 */
export function ledgerPgliteDir(): string {
  if (process.env.LEDGER_PGLITE_DIR) return resolve(process.env.LEDGER_PGLITE_DIR);
  const memory = activeNetwork().local ? memoryBackedDir() : undefined;
  if (!memory) return resolve(".data/ledger-pglite");
  const checkout = createHash("sha256").update(resolve(".")).digest("hex").slice(0, 12);
  return join(memory, `billpay-ledger-${checkout}`);
}

export function ledgerUrl(): string {
  return process.env.LEDGER_URL ?? `http://127.0.0.1:${DEFAULT_LEDGER_PORT}`;
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => !e.name.startsWith(".") && e.name !== "generated")
    .flatMap((e) => (e.isDirectory() ? listFiles(join(dir, e.name)) : [join(dir, e.name)]))
    .sort();
}

/**
 * The database schema for this ledger: keyed to the chains it indexes (genesis and BillPay
 * address) and to the app's code. Ponder refuses a schema written by another build, and a
 * reset local chain must not resume an old schema, so either change means a fresh schema;
 * a plain restart resumes the same one.
 */
export function ledgerSchemaName(deployments: Deployments, root = resolve(".")): string {
  const hash = createHash("sha256");
  for (const [key, d] of Object.entries(deployments.chains).sort()) {
    hash.update(`${key}:${d.chainId}:${d.genesisHash}:${d.billPay.address}:${d.billPay.block};`);
  }
  const sources = [...listFiles(join(root, "ponder")), join(root, "ponder.config.ts"), join(root, "lib/abis.ts")];
  for (const file of sources) hash.update(readFileSync(file));
  return `ledger_${hash.digest("hex").slice(0, 16)}`;
}
