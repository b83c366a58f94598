/**
 * Where a benchmarked request's time goes: the service's own outward calls (facilitator,
 * ledger, biller, operator, order store) timed in place, so each benchmark reports its
 * profile beside its figure. A wrapper costs one clock read per call.
 */
export class Phases {
  private readonly times = new Map<string, number[]>();

  /** Times every call of `target[method]` under `label` (the method's name by default). */
  time<T extends object>(target: T, method: keyof T & string, label: string = method): void {
    const original = target[method] as unknown as (...args: unknown[]) => Promise<unknown>;
    if (typeof original !== "function") throw new Error(`${label}: not a method`);
    const samples = this.times.get(label) ?? [];
    this.times.set(label, samples);
    (target as Record<string, unknown>)[method] = async (...args: unknown[]) => {
      const start = performance.now();
      try {
        return await original.apply(target, args);
      } finally {
        samples.push(performance.now() - start);
      }
    };
  }

  /** Forgets what was timed so far (the warm-up). */
  reset(): void {
    for (const samples of this.times.values()) samples.length = 0;
  }

  /** Per phase: how many calls, and their median and total per `units` (per bill, say) in ms. */
  report(units: number): Record<string, { calls: number; medianMs: number; perUnitMs: number }> {
    const round = (n: number) => Math.round(n * 100) / 100;
    const out: Record<string, { calls: number; medianMs: number; perUnitMs: number }> = {};
    for (const [label, samples] of this.times) {
      if (samples.length === 0) continue;
      const sorted = [...samples].sort((a, b) => a - b);
      const total = samples.reduce((a, b) => a + b, 0);
      out[label] = { calls: samples.length, medianMs: round(sorted[Math.floor(sorted.length / 2)]!), perUnitMs: round(total / units) };
    }
    return out;
  }
}

/** One line per phase, for the console. */
export function formatPhases(report: ReturnType<Phases["report"]>, unit: string): string {
  return Object.entries(report)
    .map(([label, p]) => `  ${label.padEnd(22)} ${String(p.calls).padStart(4)} calls, median ${p.medianMs} ms, ${p.perUnitMs} ms per ${unit}`)
    .join("\n");
}
