/**
 * A paid x402 bill's whole time, stage by stage, from both ends: the client's two requests
 * (the 402, then the paid one) timed where it makes them, and the paid request's stages as
 * the service's Server-Timing header names them (server/stage-timing.ts). The rows of one
 * bill add up to its time by construction; the report holds their sum against the wall time
 * per bill the benchmark measured on its own, so anything outside the bills shows.
 */

/** One request the client made for a bill: how long until its answer's headers, and the answer's Server-Timing. */
export interface TimedCall {
  ms: number;
  serverTiming: string | null;
}

function parseServerTiming(value: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const part of value.split(",")) {
    const [name, ...params] = part.trim().split(";");
    const dur = params.map((p) => p.trim()).find((p) => p.startsWith("dur="));
    if (name && dur) out.set(name, Number(dur.slice(4)));
  }
  return out;
}

export class StageTable {
  private readonly totals = new Map<string, number>();
  private bills = 0;

  private add(row: string, ms: number): void {
    this.totals.set(row, (this.totals.get(row) ?? 0) + ms);
  }

  /**
   * One bill: `calls` as the client made them (the 402, then the paid request), `payingMs`
   * from the call to the answer's headers, `readMs` reading the answer's body.
   */
  bill(calls: TimedCall[], payingMs: number, readMs: number): void {
    const [challenge, paid] = calls;
    if (!challenge || !paid?.serverTiming) throw new Error(`a bill made ${calls.length} requests, or its answer had no Server-Timing header`);
    const server = parseServerTiming(paid.serverTiming);
    const serverTotal = server.get("total") ?? 0;
    this.bills++;
    this.add("client: the 402 round trip", challenge.ms);
    this.add("client: reading the 402, signing", payingMs - challenge.ms - paid.ms);
    this.add("HTTP: the paid request, both ways", paid.ms - serverTotal);
    for (const [name, ms] of server) if (name !== "total") this.add(`server: ${name}`, ms);
    this.add("client: reading the answer", readMs);
  }

  /** Mean ms per bill for each row, their sum, and that sum against the benchmark's own wall time per bill. */
  report(wallMsPerBill: number) {
    const round = (n: number) => Math.round(n * 100) / 100;
    const rows = [...this.totals].map(([stage, total]) => ({ stage, msPerBill: round(total / this.bills) }));
    const sum = rows.reduce((a, r) => a + r.msPerBill, 0);
    return { rows, sumMs: round(sum), wallMsPerBill: round(wallMsPerBill), coveredPct: round((100 * sum) / wallMsPerBill) };
  }
}

/** The stage table for the console. */
export function formatStages(report: ReturnType<StageTable["report"]>): string {
  const lines = report.rows.map((r) => `  ${r.stage.padEnd(40)} ${r.msPerBill.toFixed(2).padStart(7)} ms`);
  lines.push(`  ${"sum".padEnd(40)} ${report.sumMs.toFixed(2).padStart(7)} ms, ${report.coveredPct}% of the wall time per bill (${report.wallMsPerBill} ms)`);
  return lines.join("\n");
}
