/**
 * A ledger outlives nothing that started it. `npm run ledger` (and `npm start`, through the
 * same stack/ledger-process.ts) runs Ponder as a child process; killed outright, the parent
 * runs no exit handler, and Ponder used to go on indexing for no one, holding its port, so
 * that the next start found the port taken. Ponder now holds a channel to its parent and
 * shuts down when it closes (stack/ledger-parent-watch.mjs).
 */
import { readdirSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, ledgerDatabaseFor, startLedger } from "../../stack/ledger-process.ts";
import { IN_MEMORY } from "../../lib/ledger-config.ts";
import { startScript } from "../support/processes.ts";
import { dropDatabase, freshDatabase, leaseSharedChains, type SharedChains } from "../support/stack.ts";

/** Whether `pid` is a live process (a zombie nobody has reaped yet has ended). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] !== "Z";
  } catch {
    return false;
  }
}

/** The Ponder process `pid` started (beside it, tsx's esbuild service is a child too). */
function ponderChildOf(pid: number): number | undefined {
  for (const entry of readdirSync("/proc").filter((e) => /^\d+$/.test(e))) {
    try {
      const child = new RegExp(`^PPid:\\s+${pid}$`, "m").test(readFileSync(`/proc/${entry}/status`, "utf8"));
      if (child && readFileSync(`/proc/${entry}/cmdline`, "utf8").includes("/ponder/dist/esm/bin/ponder.js")) return Number(entry);
    } catch {
      // Ended while being read.
    }
  }
  return undefined;
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

describe("a ledger whose parent is killed outright", () => {
  let stack: SharedChains;
  let database: Awaited<ReturnType<typeof freshDatabase>>;

  beforeAll(async () => {
    stack = await leaseSharedChains();
    database = await freshDatabase("ledger_parent");
  });
  afterAll(async () => {
    // `npm run ledger` keeps local chains' ledger in a database of their own beside the one named.
    if (stack && database) await dropDatabase(new URL(await ledgerDatabaseFor(database.url, stack.deployments)).pathname.slice(1));
    await stack?.close();
    await database?.drop();
  });

  it("stops, and gives its port back, when `npm run ledger` is SIGKILLed", async () => {
    const port = await freePort();
    const ledger = await startScript("stack/ledger.ts", { DEPLOYMENTS_FILE: stack.deploymentsFile, DATABASE_URL: database.url, LEDGER_PORT: String(port) }, "ledger ready at", 120_000);
    const parent = ledger.child.pid!;
    const ponder = ponderChildOf(parent);
    expect(ponder, ledger.output()).toBeDefined();
    expect(running(ponder!)).toBe(true);
    expect(await listening(port)).toBe(true);

    ledger.child.kill("SIGKILL");
    await expect.poll(() => running(ponder!), { timeout: 30_000, interval: 200 }).toBe(false);
    expect(await listening(port)).toBe(false);
    // It shut down as on Ctrl-C, not by a kill of its own.
    expect(ledger.output()).toContain("Received SIGTERM");
  });

  it("a start whose signal is aborted stops the ledger it was starting, and fails at once, as a supervisor stopped mid-restart needs", async () => {
    const stop = new AbortController();
    const starting = startLedger({ deploymentsFile: stack.deploymentsFile, pgliteDir: IN_MEMORY, signal: stop.signal });
    const failed = starting.then(
      () => undefined,
      (err: Error) => err,
    );
    await new Promise((r) => setTimeout(r, 300)); // spawned, and seconds from ready
    stop.abort();
    // Not ready, however long a backfill would have taken: the start fails, its ledger gone.
    expect((await failed)?.message).toMatch(/^ledger exited \(.+\) before it was ready$/);
  });

  it("a start whose signal was aborted before its ledger was spawned stops that ledger too", async () => {
    // Aborted while the start read its deployments: no listener was there yet to hear it.
    const failed = await startLedger({ deploymentsFile: stack.deploymentsFile, pgliteDir: IN_MEMORY, signal: AbortSignal.abort() }).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(failed?.message).toMatch(/^ledger exited \(.+\) before it was ready$/);
  });
});
