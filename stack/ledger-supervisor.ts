/**
 * The stack's ledger, supervised: started as `startLedger` starts it, then held against each
 * chain's head every second (lib/ledger-watch.ts). A ledger that exits, stands still behind
 * a moving chain for longer than its bound, or stops answering for six bounds, is stopped and
 * started again on the same port, after a backoff that grows while restarts do not help
 * (1 s, 2 s, 4 s ... 60 s) and starts over once the ledger has stayed current for a minute.
 * Every step is a log line. Ponder resumes from its checkpoint where its index is kept
 * (PostgreSQL, a PGlite directory); an index held in memory is made again from BillPay's
 * deployment block.
 *
 * What it heals is whatever the cause turns out to be: Ponder's own realtime sync re-subscribes
 * a quiet WebSocket and falls back to polling (patches/, docs/ledger.md), and the local chains
 * no longer expire subscriptions (stack/subscription-keeper.ts); a restart is the last resort.
 */
import type { ChildProcess } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { deployedChains, readDeployments, requireChain, rpcUrlFor } from "../lib/deployments.ts";
import { LedgerWatch, stateChangeLines, type ChainProgress, type LedgerBounds } from "../lib/ledger-watch.ts";
import { freePort, startLedger, type Ledger, type LedgerOptions } from "./ledger-process.ts";

const WATCH_EVERY_MS = 1_000;
const FIRST_BACKOFF_MS = 1_000;
const MAX_BACKOFF_MS = 60_000;
/** A ledger current this long after a restart has healed: the next restart's backoff starts over. */
const HEALED_AFTER_MS = 60_000;

export interface SupervisedLedger {
  url: string;
  schema: string;
  /** The ledger process running now (a restart replaces it). */
  readonly process: ChildProcess;
  /** Restarts so far. */
  readonly restarts: number;
  /** The last look at each chain. */
  latest(): ChainProgress[];
  /** Stops supervising, then the ledger. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export interface SupervisorOptions extends LedgerOptions {
  bounds?: LedgerBounds;
  /** One line per event: a stall, a restart, its outcome. */
  log: (line: string) => void;
  watchEveryMs?: number;
}

export async function superviseLedger(options: SupervisorOptions): Promise<SupervisedLedger> {
  // The port is kept across restarts: the service reads the ledger at one URL.
  const port = options.port || (await freePort());
  const deployments = await readDeployments(options.deploymentsFile);
  let ledger: Ledger = await startLedger({ ...options, port });
  const watch = new LedgerWatch({
    ledgerUrl: ledger.url, // the same after every restart
    bounds: options.bounds,
    chains: deployedChains(deployments).map((chain) => {
      const d = requireChain(deployments, chain);
      return { chain, chainId: d.chainId, rpcUrl: rpcUrlFor(chain, d, { ...process.env, ...options.env }) }; // where the ledger reads it
    }),
  });
  let stopping = false;
  let restarting = false;
  let restarts = 0;
  let backoffMs = FIRST_BACKOFF_MS;
  let currentSince = Date.now();
  const logChanges = stateChangeLines(options.log);

  /** The restart under way, which `stop` waits for; aborted by `stop` to end its backoff. */
  let restartRun: Promise<void> | undefined;
  const stopped = new AbortController();

  const restart = (why: string) => {
    if (restarting || stopping) return;
    restartRun = restartLoop(why);
  };
  const restartLoop = async (why: string) => {
    restarting = true;
    try {
      for (;;) {
        restarts += 1;
        options.log(`ledger: restarting (${why}); restart ${restarts}, in ${backoffMs / 1000} s`);
        await ledger.stop();
        await sleep(backoffMs, undefined, { signal: stopped.signal }).catch(() => {}); // ends early on stop
        backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
        if (stopping) return;
        try {
          // Stopped meanwhile (an in-memory index backfills for minutes), the one starting stops too.
          ledger = await startLedger({ ...options, port, signal: stopped.signal });
          watchExit(ledger);
          watch.reset();
          currentSince = Date.now();
          options.log(`ledger: restarted and backfilled (schema ${ledger.schema}); watching it against the chains again`);
          return;
        } catch (err) {
          if (stopping) return;
          why = `the restart failed: ${(err as Error).message}`;
        }
      }
    } finally {
      restarting = false;
    }
  };

  const watchExit = (l: Ledger) =>
    l.process.once("exit", (code, signal) => {
      if (stopping || restarting) return;
      restart(`the ledger exited (${signal ?? `code ${code}`})`);
    });
  watchExit(ledger);

  const onLook = (progress: ChainProgress[]) => {
    if (stopping || restarting) return;
    logChanges(progress);
    const stalled = progress.find((p) => p.state === "stalled");
    if (stalled) return restart(stalled.problem!);
    if (progress.every((p) => p.state === "current")) {
      if (Date.now() - currentSince >= HEALED_AFTER_MS) backoffMs = FIRST_BACKOFF_MS;
    } else currentSince = Date.now();
  };
  watch.start(options.watchEveryMs ?? WATCH_EVERY_MS, onLook);

  return {
    get url() {
      return ledger.url;
    },
    get schema() {
      return ledger.schema;
    },
    get process() {
      return ledger.process;
    },
    get restarts() {
      return restarts;
    },
    latest: () => watch.latest(),
    async stop(signal) {
      stopping = true;
      watch.stop();
      const stoppedNow = ledger.stop(signal);
      stopped.abort(); // ends a restart's backoff, and stops the ledger it is starting
      await stoppedNow;
      await restartRun;
    },
  };
}
