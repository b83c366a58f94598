/**
 * Where one request's time goes, stage by stage, answered in a W3C `Server-Timing` header
 * (`SERVER_TIMING=1`; off by default, as a request's timings are the operator's business).
 * The paid x402 path names its stages (x402/pay.ts, orders/x402-flow.ts); `npm run bench:x402`
 * reads the header and adds the client's side, so the stages account for the whole bill.
 *
 * Stages are sequential: a stage that runs inside another is counted in both, so the paths
 * that time themselves name only stages that do not nest. What no stage covers is reported
 * as `other` (routing, body parsing, answer building), so the parts always add to `total`.
 */
import { AsyncLocalStorage } from "node:async_hooks";

class StageClock {
  readonly started = performance.now();
  readonly stages = new Map<string, number>();

  add(name: string, ms: number): void {
    this.stages.set(name, (this.stages.get(name) ?? 0) + ms);
  }

  /** `name;dur=ms` for each stage, then `other` and `total`, as Server-Timing writes them. */
  header(): string {
    const total = performance.now() - this.started;
    let named = 0;
    const parts: string[] = [];
    for (const [name, ms] of this.stages) {
      named += ms;
      parts.push(`${name};dur=${ms.toFixed(2)}`);
    }
    parts.push(`other;dur=${Math.max(0, total - named).toFixed(2)}`, `total;dur=${total.toFixed(2)}`);
    return parts.join(", ");
  }
}

const current = new AsyncLocalStorage<StageClock>();

/** Runs a request's handler with a clock; answers its Server-Timing value once the handler is done. */
export async function withStageClock(run: () => Promise<void>): Promise<string> {
  const clock = new StageClock();
  await current.run(clock, run);
  return clock.header();
}

/**
 * Starts the named stage of the current request, if it is being timed: call what it answers
 * when the stage is done. (A stage left unended, by a throw say, falls to `other`.)
 */
export function startStage(name: string): () => void {
  const clock = current.getStore();
  if (!clock) return () => {};
  const started = performance.now();
  return () => clock.add(name, performance.now() - started);
}
