/**
 * Agents for the benchmarks, in a worker thread of their own: each agent is its own MCP
 * client calling one tool over and over, as a real agent elsewhere would. Running them on the
 * service's event loop would bill the service for its clients' work (the MCP SDK, schema
 * checks, HTTP) and hold its replies behind theirs.
 */
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { mcpAgent } from "../../lib/agent-client.ts";

export interface AgentsPlan {
  url: string;
  tool: string;
  /** One entry per agent: the arguments of each of its calls, made one after another. */
  agents: Record<string, unknown>[][];
}

export interface AgentsOutcome {
  /** Each call's time, in the order made, per agent. */
  ms: number[][];
  seconds: number;
  /** Each call's answer, per agent (only what the caller asks back: the data). */
  answers: Record<string, unknown>[][];
}

/** Runs the plan in a worker thread; rejects on the first call that fails. */
export function runAgents(plan: AgentsPlan): Promise<AgentsOutcome> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: plan });
    worker.once("message", (m: { outcome?: AgentsOutcome; error?: string }) => (m.outcome ? resolve(m.outcome) : reject(new Error(m.error))));
    worker.once("error", reject);
    worker.once("exit", (code) => code !== 0 && reject(new Error(`agents worker exited with ${code}`)));
  });
}

if (!isMainThread && (workerData as AgentsPlan | undefined)?.tool) {
  const plan = workerData as AgentsPlan;
  try {
    const clients = await Promise.all(plan.agents.map(() => mcpAgent(plan.url)));
    const t0 = performance.now();
    const runs = await Promise.all(
      plan.agents.map(async (calls, i) => {
        const ms: number[] = [];
        const answers: Record<string, unknown>[] = [];
        for (const args of calls) {
          const s = performance.now();
          const answer = await clients[i]!.call(plan.tool, args);
          if (answer.isError) throw new Error(`${plan.tool} failed: ${JSON.stringify(answer.data).slice(0, 500)}`);
          ms.push(performance.now() - s);
          answers.push(answer.data);
        }
        return { ms, answers };
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    await Promise.all(clients.map((c) => c.close()));
    parentPort!.postMessage({ outcome: { ms: runs.map((r) => r.ms), answers: runs.map((r) => r.answers), seconds } });
  } catch (err) {
    parentPort!.postMessage({ error: err instanceof Error ? err.message : String(err) });
  }
}
