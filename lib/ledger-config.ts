/**
 * Ledger (Ponder) settings shared by ponder.config.ts, the scripts that start Ponder and
 * the clients that read it: database, polling interval, schema naming, and its URL.
 */
import { localUrl } from "./local-ports.ts";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Deployments } from "./deployments.ts";
import { refuseOtherPostgresMajor } from "./pglite-dir.ts";
import { activeNetwork, type ChainKey } from "./networks.ts";

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

/** PGlite's name for a database held in memory (Ponder passes it through). */
export const IN_MEMORY = "memory://";

/** PostgreSQL when DATABASE_URL is set, else embedded PGlite (no server needed) in `ledgerPgliteDir()`. */
export function ledgerDatabase() {
  const url = process.env.DATABASE_URL;
  if (url) return { kind: "postgres" as const, connectionString: url };
  return { kind: "pglite" as const, directory: ledgerPgliteDir() };
}

/** A ledger directory another PGlite wrote (an older one, in practice) cannot be opened; the index in it is the chain's, so it can be made again. */
export function refuseOlderLedgerDir(directory: string): void {
  if (directory === IN_MEMORY) return;
  refuseOtherPostgresMajor(
    directory,
    "The ledger is an index of the chain: move the directory aside (or set LEDGER_PGLITE_DIR to a new one) and the ledger indexes again from BillPay's deployment block.",
  );
}

/**
 * Where the ledger's PGlite keeps its index: LEDGER_PGLITE_DIR (a directory, or `memory://`);
 * else, on the local profile, in the ledger process's own memory; else `.data/ledger-pglite`.
 *
 * The local chains are Hardhat nodes held in memory, so an index of them is worth no more than
 * the chains, and a ledger started again re-indexes them from BillPay's deployment block. Off
 * the file system the ledger writes no pages and flushes no WAL. Measured with the PGlite Ponder
 * pins (0.2.13, which also wrote every protocol message through a file in its data directory: a
 * fifth of the ledger's busy time even on memory-backed /dev/shm), the ledger showed a pull
 * 23 ms after it was mined against 38 ms on /dev/shm, in alternating bench:agent runs; the
 * ledger now runs PGlite 0.5 (package.json overrides Ponder's pin), which writes no such file.
 * (Ponder 0.16.10 could not start on `memory://`; patches/ponder+0.16.10.patch mends it.) A
 * real network's ledger stays on disk, or on PostgreSQL.
 */
export function ledgerPgliteDir(): string {
  const set = process.env.LEDGER_PGLITE_DIR;
  if (set) return set === IN_MEMORY ? IN_MEMORY : resolve(set);
  return activeNetwork().local ? IN_MEMORY : resolve(".data/ledger-pglite");
}

/**
 * The setting that opens Ponder's SQL over HTTP (`/sql/*`, which `@ponder/client` and the
 * service's live push use) and GraphQL (`/graphql`) to every caller. Unset or `0`, they
 * answer callers on this machine only (loopback), and other machines get the `/ledger/*`
 * read API and Ponder's /health, /ready, /status and /metrics.
 */
export const LEDGER_OPEN_QUERY_API = "LEDGER_OPEN_QUERY_API";

/** Whether LEDGER_OPEN_QUERY_API opens the query API to other machines: `1` yes, `0` or unset no, anything else an error. */
export function ledgerQueryApiOpen(env: Record<string, string | undefined> = process.env): boolean {
  const raw = env[LEDGER_OPEN_QUERY_API];
  if (raw === undefined || raw === "" || raw === "0") return false;
  if (raw === "1") return true;
  throw new Error(`${LEDGER_OPEN_QUERY_API} must be 1 (open to every caller) or 0 (this machine only), not ${JSON.stringify(raw)}`);
}

/**
 * How much lower than the process that starts it the ledger runs (LEDGER_NICE, a Unix nice
 * increment, 0 to 19; default 0, the same priority). At a block the payer's answer and the
 * ledger's indexing want the same cores; a ledger below the service lets the answer go first
 * (measured in docs/benchmarks.md, "After the block"). It is not the default because a
 * system of record must keep up when the machine is busy: under sustained load a ledger at
 * nice 10 fell behind far enough that refunds and reviews, which wait for it, waited (the
 * test suite's busiest minutes showed it). An operator whose machine has room can set it,
 * and the watch on the ledger's lag (lib/ledger-watch.ts) reports it behind whatever the cause.
 */
export const LEDGER_NICE = "LEDGER_NICE";
export const DEFAULT_LEDGER_NICE = 0;

/** LEDGER_NICE as a number: the default when unset, an error for anything but an integer from 0 to 19. */
export function ledgerNice(env: Record<string, string | undefined> = process.env): number {
  const raw = env[LEDGER_NICE];
  if (raw === undefined || raw === "") return DEFAULT_LEDGER_NICE;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n > 19) throw new Error(`${LEDGER_NICE} must be an integer from 0 (the same priority as the service) to 19 (the lowest), not ${JSON.stringify(raw)}`);
  return n;
}

/** Whether a socket's peer address is this machine's loopback: 127.0.0.0/8, ::1, or 127.x mapped into IPv6. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  const v4 = address.toLowerCase().startsWith("::ffff:") ? address.slice(7) : address;
  return address === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

export function ledgerUrl(): string {
  return process.env.LEDGER_URL ?? localUrl("ledger");
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
  const sources = [...listFiles(join(root, "ponder")), join(root, "ponder.config.ts"), join(root, "lib/generated/abis.ts")];
  for (const file of sources) hash.update(readFileSync(file));
  return `ledger_${hash.digest("hex").slice(0, 16)}`;
}
