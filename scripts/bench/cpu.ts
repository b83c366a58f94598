/**
 * Where a benchmark's CPU goes, process by process: each named process with its descendants,
 * the PostgreSQL server's processes, and the machine as a whole, read from /proc (Linux; on
 * another system every figure is absent). Unlike a rate, CPU per call barely moves with the
 * machine's other load, so it shows which process a change made cheaper.
 */
import { readdirSync, readFileSync } from "node:fs";
import { cpus } from "node:os";

const TICK_MS = 10; // USER_HZ is 100 on Linux

interface Proc {
  ppid: number;
  comm: string;
  ms: number;
}

function processes(): Map<number, Proc> {
  const all = new Map<number, Proc>();
  let entries: string[];
  try {
    entries = readdirSync("/proc").filter((e) => /^\d+$/.test(e));
  } catch {
    return all;
  }
  for (const pid of entries) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      // The command sits in parentheses and may hold spaces: the fields after it are fixed.
      const close = stat.lastIndexOf(")");
      const fields = stat.slice(close + 2).split(" ");
      all.set(Number(pid), {
        comm: stat.slice(stat.indexOf("(") + 1, close),
        ppid: Number(fields[1]),
        ms: (Number(fields[11]) + Number(fields[12])) * TICK_MS,
      });
    } catch {
      // It exited meanwhile.
    }
  }
  return all;
}

function machineBusyMs(): number | undefined {
  try {
    const [, ...ticks] = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).map(Number);
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    return ticks.slice(0, 8).reduce((sum, t, i) => (i === 3 || i === 4 ? sum : sum + t), 0) * TICK_MS;
  } catch {
    return undefined;
  }
}

export type CpuSnapshot = Record<string, number>;

/** CPU ms so far: per root (its whole process tree), `postgres` (the server's processes) and `machine`. */
export function cpuSnapshot(roots: Record<string, number | undefined>): CpuSnapshot {
  const all = processes();
  const children = new Map<number, number[]>();
  for (const [pid, p] of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), pid]);
  // A root's tree stops at another root (the service's process starts the ledger, say).
  const rootPids = new Set(Object.values(roots));
  const tree = (pid: number): number =>
    (all.get(pid)?.ms ?? 0) + (children.get(pid) ?? []).reduce((s, c) => s + (rootPids.has(c) ? 0 : tree(c)), 0);
  const out: CpuSnapshot = {};
  for (const [name, pid] of Object.entries(roots)) if (pid !== undefined && all.has(pid)) out[name] = tree(pid);
  const postgres = [...all.values()].filter((p) => p.comm === "postgres");
  if (postgres.length > 0) out.postgres = postgres.reduce((s, p) => s + p.ms, 0);
  const machine = machineBusyMs();
  if (machine !== undefined) out.machine = machine;
  return out;
}

/**
 * CPU ms per call between two snapshots, per process, and the rate the machine's cores could
 * carry at that cost if nothing else ran (cores x 1000 / machine ms per call).
 */
export function cpuPerCall(before: CpuSnapshot, after: CpuSnapshot, calls: number) {
  const perCall: Record<string, number> = {};
  for (const name of Object.keys(after)) {
    if (before[name] !== undefined) perCall[name] = Math.round(((after[name]! - before[name]!) / calls) * 10) / 10;
  }
  const machine = perCall.machine;
  const cores = cpus().length;
  return { msPerCall: perCall, cores, ceilingPerSecond: machine ? Math.round((cores * 1000) / machine) : undefined };
}

export function formatCpu(cpu: ReturnType<typeof cpuPerCall>, unit: string): string {
  const parts = Object.entries(cpu.msPerCall).map(([name, ms]) => `${name} ${ms}`);
  const ceiling = cpu.ceilingPerSecond ? `; at that cost ${cpu.cores} cores carry at most ${cpu.ceilingPerSecond} ${unit}s/s` : "";
  return `  CPU ms per ${unit}: ${parts.join(", ")}${ceiling}`;
}
