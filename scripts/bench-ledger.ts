/**
 * `npm run bench:ledger`: the ledger's indexing lag and backfill throughput on local chains.
 *   lag:      one pull at a time (2 events each: Pulled + Transfer); from the moment the
 *             client holds the receipt to the moment the payment is visible through the
 *             read API, polled every 5 ms. Goal: p95 <= 150 ms, max <= 500 ms.
 *             BENCH_LAG_TRACE=1 prints each sample with its time; BENCH_LEDGER_LOG=<file>
 *             keeps the ledger's log (LEDGER_LOG_LEVEL=debug for every block).
 *   backfill: >= 10,000 events written on fresh chains before a ledger starts, in batches
 *             of pulls, all final; events/s over Ponder's own backfill duration (from its
 *             log), and wall time from spawn to /ready.
 *             Goal: >= 5,000 events/s.
 * PGlite by default, in memory as the local stack keeps it (see ledgerPgliteDir); PostgreSQL
 * when DATABASE_URL is set. Writes bench-results/ledger-<database>.json.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseUnits, toHex, type Hex } from "viem";
import { DEFAULT_POLLING_INTERVAL_MS, IN_MEMORY } from "../lib/ledger-config.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { chainActors } from "../test/support/actors.ts";
import { freshDatabase, startTestChains, uniqueSchema } from "../test/support/stack.ts";
import { startLedger } from "../stack/ledger-process.ts";

const LAG_SAMPLES = Number(process.env.BENCH_LAG_SAMPLES ?? 220);
const BACKFILL_BATCHES = Number(process.env.BENCH_BACKFILL_BATCHES ?? 50);
const BATCH_SIZE = 100; // 100 pulls = 200 events per transaction
// Each run gets a database of its own: Ponder's raw-chain cache is keyed by chain id, and
// these fresh local chains reuse the real ids.
const database = process.env.DATABASE_URL ? await freshDatabase("bench_ledger", process.env.DATABASE_URL) : undefined;
const databaseUrl = database?.url;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const round = (n: number) => Math.round(n * 10) / 10;

const payer = hardhatAccount(3);
let seq = 0;
const nextOrderId = (): Hex => toHex(++seq, { size: 32 });

async function freshChains() {
  const stack = await startTestChains();
  const celo = chainActors(stack.deployments, "CELO");
  await celo.approveAndAllow(payer, "USDC", parseUnits("10000", 6));
  return { stack, celo };
}

// ------------------------------------------------------------------------- lag
let { stack, celo } = await freshChains();
const lagLedger = await startLedger({
  deploymentsFile: stack.deploymentsFile,
  databaseUrl,
  pgliteDir: IN_MEMORY,
  schema: uniqueSchema("bench_lag"),
  viewsSchema: uniqueSchema("bench_lag_views"),
  ...(process.env.BENCH_LEDGER_LOG ? { logTo: process.env.BENCH_LEDGER_LOG } : {}),
});
const lags: number[] = [];
for (let i = 0; i < LAG_SAMPLES; i++) {
  const orderId = nextOrderId();
  await celo.pull(orderId, payer.address, "USDC", 1n);
  const t0 = performance.now();
  for (;;) {
    const res = await fetch(`${lagLedger.url}/ledger/orders/${orderId}`);
    const body = (await res.json()) as { payments: unknown[] };
    if (body.payments.length > 0) break;
    if (performance.now() - t0 > 10_000) throw new Error(`order ${orderId} not visible after 10 s`);
    await new Promise((r) => setTimeout(r, 5));
  }
  lags.push(performance.now() - t0);
  if (process.env.BENCH_LAG_TRACE) console.log(`lag ${i} ${Date.now()} ${Math.round(performance.now() - t0)}`);
}
await lagLedger.stop();
await stack.close();
lags.sort((a, b) => a - b);

// -------------------------------------------------------------------- backfill
// Fresh chains, so the backfill holds only the batches; then enough empty blocks that
// all of them are final (Ponder backfills to head - 30 and takes the rest live).
({ stack, celo } = await freshChains());
for (let b = 0; b < BACKFILL_BATCHES; b++) {
  await celo.pullBatch(
    Array.from({ length: BATCH_SIZE }, () => ({ orderId: nextOrderId(), payer: payer.address, symbol: "USDC" as const, amount: 1n })),
  );
}
await celo.mine(64);
const logFile = join(stack.dir, "backfill.log");
const t0 = performance.now();
const backfillLedger = await startLedger({
  deploymentsFile: stack.deploymentsFile,
  databaseUrl,
  pgliteDir: IN_MEMORY,
  schema: uniqueSchema("bench_backfill"),
  viewsSchema: uniqueSchema("bench_backfill_views"),
  logTo: logFile,
});
const wallToReadyMs = performance.now() - t0;
await backfillLedger.stop();
await stack.close();
await database?.drop();

const lines = (await readFile(logFile, "utf8")).split("\n").flatMap((l) => {
  try {
    return [JSON.parse(l) as { msg: string; event_count?: number; duration?: number }];
  } catch {
    return [];
  }
});
const backfillEvents = lines.filter((l) => l.msg === "Indexed block range").reduce((n, l) => n + (l.event_count ?? 0), 0);
const backfillMs = lines.find((l) => l.msg === "Completed backfill indexing across all chains")?.duration;
if (backfillMs === undefined) throw new Error(`no backfill duration in ${logFile}`);

// The speed issue's goals: lag p95 <= 150 ms and max <= 500 ms at 100 ms polling; backfill >= 5,000 events/s.
const lagGoalMs = 150;
const lagMaxGoalMs = 500;
const backfillGoal = 5000;
const eventsPerSecond = backfillEvents / (backfillMs / 1000);
const report = {
  measuredAt: new Date().toISOString(),
  database: databaseUrl ? "PostgreSQL" : "PGlite",
  pollingIntervalMs: DEFAULT_POLLING_INTERVAL_MS,
  lag: {
    samples: lags.length,
    eventsIndexed: lags.length * 2,
    p50Ms: round(percentile(lags, 50)),
    p95Ms: round(percentile(lags, 95)),
    maxMs: round(lags[lags.length - 1]!),
    goalP95Ms: lagGoalMs,
    goalMaxMs: lagMaxGoalMs,
    met: percentile(lags, 95) <= lagGoalMs && lags[lags.length - 1]! <= lagMaxGoalMs,
  },
  backfill: {
    events: backfillEvents,
    backfillMs: round(backfillMs),
    eventsPerSecond: Math.round(eventsPerSecond),
    wallToReadyMs: Math.round(wallToReadyMs),
    goalEventsPerSecond: backfillGoal,
    met: eventsPerSecond >= backfillGoal,
  },
};
await mkdir("bench-results", { recursive: true });
const out = `bench-results/ledger-${report.database.toLowerCase()}.json`;
await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);

console.log(`ledger benchmark on ${report.database}, polling ${DEFAULT_POLLING_INTERVAL_MS} ms`);
console.log(
  `  lag over ${report.lag.samples} pulls: p50 ${report.lag.p50Ms} ms, p95 ${report.lag.p95Ms} ms, max ${report.lag.maxMs} ms (goal p95 <= ${lagGoalMs} ms, max <= ${lagMaxGoalMs} ms: ${report.lag.met ? "met" : "NOT met"})`,
);
console.log(
  `  backfill: ${backfillEvents} events in ${report.backfill.backfillMs} ms = ${report.backfill.eventsPerSecond} events/s (goal >= ${backfillGoal}: ${report.backfill.met ? "met" : "NOT met"}); ${report.backfill.wallToReadyMs} ms from start to ready`,
);
console.log(`written to ${out}`);
if (!report.lag.met || !report.backfill.met) process.exitCode = 1;
