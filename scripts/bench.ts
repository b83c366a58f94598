/**
 * `npm run bench`: every benchmark, one after another (they share two cores, so never at
 * once), then one table with each figure beside its goal. Results stay in bench-results/
 * (each benchmark's own file) and the table in bench-results/summary.md and summary.json.
 *
 *   npm run bench                      run all, then print the table
 *   npm run bench -- --only ledger,gas run some (names below)
 *   npm run bench -- --table           print the table from the results already there
 *
 * `npm run soak` (15 minutes) is run on its own; the table shows its last result.
 *
 * PostgreSQL figures use TEST_DATABASE_URL (default: the local server's `test` database).
 */
import { spawn } from "node:child_process";
import { mkdir, readFile, writeFile } from "node:fs/promises";

const POSTGRES = process.env.TEST_DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/test";
/** Each benchmark bounds itself; this only stops one that hangs. */
const RUN_TIMEOUT_MS = 15 * 60_000;

interface Bench {
  name: string;
  script: string;
  args?: string[];
  env?: Record<string, string>;
}

const BENCHES: Bench[] = [
  { name: "gas", script: "scripts/bench-gas.ts" },
  { name: "ledger", script: "scripts/bench-ledger.ts" },
  { name: "ledger-postgresql", script: "scripts/bench-ledger.ts", env: { DATABASE_URL: POSTGRES } },
  { name: "x402", script: "scripts/bench-x402.ts" },
  { name: "x402-postgresql", script: "scripts/bench-x402.ts", env: { BENCH_POSTGRES: "1", TEST_DATABASE_URL: POSTGRES } },
  { name: "x402-concurrent", script: "scripts/bench-x402.ts", args: ["--concurrent"] },
  { name: "permit2", script: "scripts/bench-permit2.ts" },
  { name: "agent", script: "scripts/bench-agent.ts" },
  { name: "agent-postgresql", script: "scripts/bench-agent.ts", env: { BENCH_POSTGRES: "1", TEST_DATABASE_URL: POSTGRES } },
  { name: "flood", script: "scripts/bench-flood.ts" },
  { name: "blocktime", script: "scripts/bench-blocktime.ts" },
];

type Json = Record<string, any>;
interface Row {
  path: string;
  figure: string;
  goal: string;
  met: boolean | null;
}

async function read(file: string): Promise<Json | undefined> {
  try {
    return JSON.parse(await readFile(`bench-results/${file}`, "utf8")) as Json;
  } catch {
    return undefined;
  }
}

const missing = (path: string, goal: string): Row => ({ path, figure: "not measured", goal, met: null });

/** The table: one row per target, each figure from its benchmark's own results file. */
async function table(): Promise<Row[]> {
  const rows: Row[] = [];
  const c = await read("x402-concurrent.json");
  for (const [key, label] of [["pglite", "PGlite"], ["postgresql", "PostgreSQL"]] as const) {
    const path = `402, distinct bills, 32 connections, ${label}`;
    const goal = ">= 5,000 req/s and >= 0.3x bare Hono";
    const ofBare = c?.[key] && c.bareHono ? Math.round((100 * c[key].perSecond) / c.bareHono.perSecond) / 100 : undefined;
    rows.push(
      c?.[key] && ofBare !== undefined
        ? { path, figure: `${c[key].perSecond} req/s, ${ofBare}x of bare Hono (${c.bareHono.perSecond} req/s)`, goal, met: c[key].perSecond >= 5000 && ofBare >= 0.3 }
        : missing(path, goal),
    );
  }
  for (const [file, label] of [["x402.json", "PGlite"], ["x402-postgresql.json", "PostgreSQL"]] as const) {
    const x = await read(file);
    const path = `paid x402 flow, against @x402/hono, ${label}`;
    rows.push(
      x?.paid
        ? {
            path,
            // Beside it, ours against the reference that also waits for the ledger (the money rule's wait).
            figure: `${x.paid.ratio}x (${x.paid.ours.perSecond}/s vs ${x.paid.reference.perSecond}/s)${x.paid.referenceHeldToLedger ? `; ${x.paid.referenceHeldToLedger.ratio}x of it held to the ledger` : ""}`,
            goal: ">= 1.2x",
            met: x.paid.ratio >= 1.2,
          }
        : missing(path, ">= 1.2x"),
    );
  }
  const p2 = await read("permit2.json");
  const p2Path = "paid x402 on Base, Permit2 (USD₮) against EIP-3009 (USDC)";
  rows.push(
    p2?.permit2
      ? {
          path: p2Path,
          figure: `${p2.permit2VsEip3009}x (${p2.permit2.billsPerSecond}/s vs ${p2.eip3009.billsPerSecond}/s; settle gas ${p2.permit2.settleGas} vs ${p2.eip3009.settleGas}, refund ${p2.permit2.refundGas} vs ${p2.eip3009.refundGas})`,
          goal: ">= 0.9x",
          met: p2.permit2VsEip3009 >= 0.9,
        }
      : missing(p2Path, ">= 0.9x"),
  );
  for (const [file, label] of [["agent.json", "PGlite"], ["agent-postgresql.json", "PostgreSQL"]] as const) {
    const a = await read(file);
    const one = `agent pay_bill, one agent, ${label}`;
    const many = `20 agents paying at once, ${label}`;
    rows.push(a?.sequential ? { path: one, figure: `p50 ${a.sequential.p50Ms} ms`, goal: "p50 <= 60 ms", met: a.sequential.p50Ms <= 60 } : missing(one, "p50 <= 60 ms"));
    const cpu = a?.parallel?.cpu?.msPerCall?.machine as number | undefined; // the whole machine's CPU per pay: service, agents, ledger, chains
    const manyGoal = ">= 60 pays/s, CPU <= 20 ms per pay";
    rows.push(
      a?.parallel
        ? { path: many, figure: `${a.parallel.perSecond} pays/s${cpu === undefined ? "" : `, CPU ${cpu} ms per pay`}`, goal: manyGoal, met: a.parallel.perSecond >= 60 && cpu !== undefined && cpu <= 20 }
        : missing(many, manyGoal),
    );
  }
  for (const [file, label] of [["ledger-pglite.json", "PGlite"], ["ledger-postgresql.json", "PostgreSQL"]] as const) {
    const l = await read(file);
    rows.push(
      l?.lag
        ? { path: `ledger lag, 100 ms polling, ${label}`, figure: `p95 ${l.lag.p95Ms} ms, max ${l.lag.maxMs} ms`, goal: "p95 <= 150 ms, max <= 500 ms", met: l.lag.p95Ms <= 150 && l.lag.maxMs <= 500 }
        : missing(`ledger lag, 100 ms polling, ${label}`, "p95 <= 150 ms, max <= 500 ms"),
    );
    rows.push(l?.backfill ? { path: `backfill, ${label}`, figure: `${l.backfill.eventsPerSecond} events/s`, goal: ">= 5,000 events/s", met: l.backfill.eventsPerSecond >= 5000 } : missing(`backfill, ${label}`, ">= 5,000 events/s"));
  }
  const g = await read("gas.json");
  rows.push(g?.goal ? { path: "gas, pullBatch of 10 distinct payers per item", figure: `${Math.round(g.goal.ratio * 1000) / 10}% of a pull`, goal: "<= 75%", met: g.goal.met } : missing("gas, pullBatch of 10 distinct payers per item", "<= 75%"));
  const f = await read("flood.json");
  rows.push(f?.gated ? { path: "a payer's 402 under a flood (32 connections)", figure: `p99 ${f.gated.p99Ms} ms`, goal: `p99 <= ${f.gated.goalP99Ms} ms`, met: f.gated.met } : missing("a payer's 402 under a flood", "p99 <= 50 ms"));
  // A smoke run's figures (a few bills, for CI) are not measurements.
  const bt = await read("blocktime.json");
  const timed = bt && !bt.smoke ? bt.profiles : undefined;
  const from = (p: Json) => (p.confirmations > 0 ? ` (from block + ${p.confirmations})` : "");
  // Goals per rail: p50 and p95 after the block that holds the payment.
  for (const [rail, label, p95] of [["x402", "x402", 40], ["agent", "agent pay_bill", 30]] as const) {
    const path = `${label} after its block, 1 s blocks, local profile`;
    const goal = `p50 <= 15 ms, p95 <= ${p95} ms`;
    const s = timed?.local?.[rail]?.afterBlock;
    rows.push(s ? { path, figure: `p50 ${s.p50Ms} ms, p95 ${s.p95Ms} ms, max ${s.maxMs} ms${from(timed.local)}`, goal, met: s.p50Ms <= 15 && s.p95Ms <= p95 } : missing(path, goal));
  }
  const real = timed?.real;
  const realPath = "x402/agent after its block, real-profile ledger";
  rows.push(
    real
      ? { path: realPath, figure: `x402 p50 ${real.x402.afterBlock.p50Ms} ms, agent p50 ${real.agent.afterBlock.p50Ms} ms${from(real)}`, goal: "<= 60 ms p50", met: real.x402.afterBlock.p50Ms <= 60 && real.agent.afterBlock.p50Ms <= 60 }
      : missing(realPath, "<= 60 ms p50"),
  );
  const bursts = Object.entries((timed ?? {}) as Json).filter(([, p]) => p.burst);
  const burstPath = "burst 20 x402 + 20 agents × 3 bills, a third failing";
  const burstGoal = "final within 3 blocks of the last payment";
  rows.push(
    bursts.length > 0
      ? {
          path: burstPath,
          figure: bursts.map(([name, p]) => `${name}: ${p.burst.blocksAfterLastPayment} blocks, all final in ${p.burst.finalMs} ms${p.burst.asPlanned ? "" : " (not all served or refunded as planned)"}`).join("; "),
          goal: burstGoal,
          met: bursts.every(([, p]) => p.burst.asPlanned && p.burst.blocksAfterLastPayment <= 3),
        }
      : missing(burstPath, burstGoal),
  );
  // The soak runs for 15 minutes, so `npm run bench` does not run it (npm run soak); its last result is shown.
  const soak = await read("soak.json");
  const soakPath = `soak: the default stack, ${soak?.minutes ?? 15} min of payments on both rails and chains`;
  const soakGoal = "lag <= 10 blocks, never still >= 20 s, every bill final, audit clean";
  rows.push(
    soak?.met
      ? {
          path: soakPath,
          figure: `${soak.bills} bills; ${Object.entries(soak.chains as Json).map(([c, f]) => `${c} lag <= ${f.maxLagBlocks}, still <= ${f.longestStillSeconds} s`).join("; ")}; ${soak.notFinal.length} not final; ${soak.ledgerRestarts} ledger restarts; audit ${soak.met.auditClean ? "clean" : "NOT clean"}`,
          goal: soakGoal,
          met: Object.values(soak.met as Record<string, boolean>).every(Boolean),
        }
      : missing(soakPath, soakGoal),
  );
  return rows;
}

function render(rows: Row[]): string {
  const lines = ["| Path | Figure | Goal | Met |", "| --- | --- | --- | --- |"];
  for (const r of rows) lines.push(`| ${r.path} | ${r.figure} | ${r.goal} | ${r.met === null ? "-" : r.met ? "yes" : "no"} |`);
  return lines.join("\n");
}

function run(b: Bench): Promise<number | null> {
  return new Promise((resolve) => {
    console.log(`\n== ${b.name}: ${b.script} ${(b.args ?? []).join(" ")}`);
    const child = spawn(process.execPath, ["--import", "tsx", b.script, ...(b.args ?? [])], {
      env: { ...process.env, LOG_LEVEL: "warn", ...b.env },
      stdio: ["ignore", "inherit", "inherit"],
    });
    const timer = setTimeout(() => child.kill("SIGTERM"), RUN_TIMEOUT_MS);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

const argv = process.argv.slice(2);
const onlyAt = argv.indexOf("--only");
const only = onlyAt >= 0 ? (argv[onlyAt + 1] ?? "").split(",").filter(Boolean) : undefined;
const unknown = only?.filter((n) => !BENCHES.some((b) => b.name === n)) ?? [];
if (unknown.length > 0) {
  console.error(`bench: unknown benchmark(s) ${unknown.join(", ")}; use ${BENCHES.map((b) => b.name).join(", ")}`);
  process.exit(2);
}
// Each benchmark exits 1 when a goal of its own is not met (the table shows which) and
// otherwise non-zero only when it could not measure.
const failed: string[] = [];
if (!argv.includes("--table")) {
  for (const b of BENCHES.filter((x) => !only || only.includes(x.name))) {
    const code = await run(b);
    if (code !== 0 && code !== 1) failed.push(`${b.name} (exit ${code})`);
  }
}
const rows = await table();
const text = render(rows);
await mkdir("bench-results", { recursive: true });
await writeFile("bench-results/summary.md", `${text}\n`);
await writeFile("bench-results/summary.json", `${JSON.stringify({ measuredAt: new Date().toISOString(), rows }, null, 2)}\n`);
console.log(`\n${text}\n\nwritten to bench-results/summary.md and summary.json`);
if (failed.length > 0) {
  console.error(`these benchmarks could not measure: ${failed.join(", ")}`);
  process.exit(1);
}
