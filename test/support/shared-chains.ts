/**
 * Vitest global setup: local chains with a ledger on them, shared by suites one after another.
 *
 * Both chains with their deployment and a Ponder ledger take 15 to 30 s to start, most of a
 * paying suite's time. A suite that changes nothing chain-wide (no budget, role, pause,
 * mining mode, clock or reorganisation) leases a set no running suite holds, pays from
 * wallets of its own (test/support/stack.ts `freshAccounts`) and starts its own service on a
 * database of its own, so what an earlier suite left on the chain is nobody's balance,
 * allowance or order here. Suites that do change the chain keep a stack of their own
 * (`startPayingStack`).
 *
 * A set is started on first demand, is leased by one suite at a time (never by two at once,
 * whatever worker asks), and stops when the run ends.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startLedger } from "../../stack/ledger-process.ts";
import { deployedChains, requireChain, rpcUrlFor } from "../../lib/deployments.ts";
import { IN_MEMORY } from "../../lib/ledger-config.ts";
import { freshDatabase, STACK_ON_PGLITE, startChainsProcess, type SharedChainsLease } from "./stack.ts";

interface SharedChains extends SharedChainsLease {
  /** Both nodes answer and the ledger is ready: a set whose process died is not lent again. */
  alive(): Promise<boolean>;
  close(): Promise<void>;
}

const PROBE_TIMEOUT_MS = 2_000;

async function answers(url: string, init?: RequestInit): Promise<boolean> {
  try {
    return (await fetch(url, { ...init, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) })).ok;
  } catch {
    return false;
  }
}

async function startSharedChains(id: number): Promise<SharedChains> {
  const chains = await startChainsProcess();
  let database: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  try {
    // On the PostgreSQL server as a paying stack's ledger is, or in memory with STACK_DB=pglite.
    database = STACK_ON_PGLITE ? undefined : await freshDatabase("shared");
    const ledger = await startLedger({
      deploymentsFile: chains.deploymentsFile,
      ...(database ? { databaseUrl: database.url } : { pgliteDir: IN_MEMORY }),
      logTo: join(chains.dir, "ledger.log"),
    });
    const ownDatabase = database;
    return {
      id,
      deploymentsFile: chains.deploymentsFile,
      dir: chains.dir,
      ledgerUrl: ledger.url,
      async alive() {
        const nodes = deployedChains(chains.deployments).map((c) => rpcUrlFor(c, requireChain(chains.deployments, c)));
        const probes = [
          answers(`${ledger.url}/ready`),
          ...nodes.map((url) => answers(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] }) })),
        ];
        return (await Promise.all(probes)).every(Boolean);
      },
      async close() {
        await ledger.stop();
        await chains.close();
        await ownDatabase?.drop();
      },
    };
  } catch (err) {
    await chains.close();
    await database?.drop();
    throw err;
  }
}

/**
 * Sets handed out one suite at a time: a free one that is still alive if there is one, else a
 * new one started for this lease. A set whose suite never gives it back (a crashed worker),
 * or that died while free, is never handed out again; the run starts another, and closes
 * every set it started at its end.
 */
export class LeasePool<T extends { id: number; alive(): Promise<boolean> }> {
  private readonly started: Array<Promise<T>> = [];
  private readonly free: T[] = [];
  private readonly leased = new Map<number, T>();

  constructor(private readonly start: (id: number) => Promise<T>) {}

  async lease(): Promise<T> {
    let set: T | undefined;
    while (!set && this.free.length > 0) {
      // Off the free list before the probe, so that no other lease takes it meanwhile.
      const candidate = this.free.pop()!;
      if (await candidate.alive()) set = candidate;
    }
    if (!set) {
      const starting = this.start(this.started.length + 1);
      this.started.push(starting);
      set = await starting;
    }
    this.leased.set(set.id, set);
    return set;
  }

  /** False for a set that is not out on lease (never leased, or given back already). */
  release(id: number): boolean {
    const set = this.leased.get(id);
    if (!set) return false;
    this.leased.delete(id);
    this.free.push(set);
    return true;
  }

  /** Every set that started, leased or not. */
  async all(): Promise<T[]> {
    const settled = await Promise.allSettled(this.started);
    return settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const pool = new LeasePool(startSharedChains);
  const answer = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const released = /^\/release\/(\d+)$/.exec(req.url ?? "");
    if (req.method === "POST" && req.url === "/lease") {
      pool.lease().then(
        ({ id, deploymentsFile, dir, ledgerUrl }) => answer(res, 200, { id, deploymentsFile, dir, ledgerUrl } satisfies SharedChainsLease),
        (err: Error) => answer(res, 500, { error: err.message }),
      );
    } else if (req.method === "POST" && released) {
      answer(res, pool.release(Number(released[1])) ? 200 : 404, {});
    } else {
      answer(res, 404, {});
    }
  });
  // A lease waits for a set to start: no request timeout of the server's own cuts it short.
  server.requestTimeout = 0;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  project.provide("sharedChainsUrl", `http://127.0.0.1:${(server.address() as AddressInfo).port}`);

  return async () => {
    await new Promise((r) => server.close(r));
    for (const set of await pool.all()) await set.close();
  };
}
