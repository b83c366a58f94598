/**
 * `npm run bench:agent`: the agent hub's pay_bill over MCP on the local stack (chains,
 * Ponder ledger, biller sandbox, service), every call a real pull, ledger wait and vend.
 *   sequential: one agent, N pay_bill calls one after another: calls/s and p50/p95 latency,
 *               and where a call's time goes (each outward call's median and time per call);
 *   parallel:   20 agents at once, M calls each: calls/s overall;
 *   batch:      one pay_bill_batch of 20 bills against 20 single pay_bill calls: wall time
 *               and gas (one pullBatch against 20 pulls).
 * In the first two, every agent is its own MCP client, and the agents run in a worker thread,
 * off the service's event loop (as a real agent runs elsewhere).
 * Writes bench-results/agent.json (the service and the ledger on PGlite), or agent-postgresql.json
 * with BENCH_POSTGRES=1 (both on PostgreSQL, as deployed).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { createWalletClient, http, parseUnits, type Account, type Hex } from "viem";
import { eip3009TokenAbi } from "../lib/generated/abis.ts";
import { linkAgent, mcpAgent } from "../lib/agent-client.ts";
import { viemChain } from "../lib/chains.ts";
import { deployerAccount, hardhatAccount } from "../lib/local-accounts.ts";
import { chainActors } from "../test/support/actors.ts";
import { startChainsProcess } from "../test/support/stack.ts";
import { startServiceStack } from "../stack/service-stack.ts";
import { cpuPerCall, cpuSnapshot, formatCpu } from "./bench/cpu.ts";
import { runAgents, type AgentsOutcome } from "./bench/mcp-agents.ts";
import { formatPhases, Phases } from "./bench/phases.ts";
import { benchState } from "./bench/state.ts";

const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 40);
const AGENTS = 20;
const PER_AGENT = Number(process.env.BENCH_PER_AGENT ?? 30);
const BATCH = 20;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const round = (n: number) => Math.round(n * 100) / 100;
const airtime = (nairaAmount = 1550) => ({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount });

// The chains run in a process of their own, as a real node is not in the service's process.
const stack = await startChainsProcess();
const celo = chainActors(stack.deployments, "CELO");
const state = await benchState("agent", stack);
const ledger = state.ledger;
const service = await startServiceStack({
  deployments: stack.deployments,
  // The limits still run (their cost is part of the figure) but are set above what the benchmark sends.
  env: {
    LOG_REQUESTS: "0",
    LEDGER_URL: ledger.url,
    BATCH_MAX_BILLS: String(BATCH),
    RATE_LIMIT_PAYING_KEY: "1000000/60",
    RATE_LIMIT_TOOL_KEY: "1000000/60",
    RATE_LIMIT_AGENT_ADDRESS: "1000000/60",
    RATE_LIMIT_LINK_ADDRESS: "1000/60",
    ...state.serviceEnv,
  },
});
const url = service.urls.service;
const mcp = await mcpAgent(url);

// Accounts #3 to #19 come funded; the rest of the 21 wallets get gas and USDC here.
const d = stack.deployments.chains.CELO!;
const rpc = d.rpcUrl;
const usdc = celo.tokenAddress("USDC");
const admin = createWalletClient({ account: deployerAccount(), chain: viemChain("CELO", rpc), transport: http(rpc) });
async function fund(account: Account) {
  await celo.publicClient.request({ method: "hardhat_setBalance" as never, params: [account.address, "0x56BC75E2D63100000"] as never });
  await celo.mined(await admin.writeContract({ address: usdc, abi: eip3009TokenAbi, functionName: "mint", args: [account.address, parseUnits("10000", 6)] }));
}

async function agent(index: number) {
  const account = hardhatAccount(index);
  if (index > 19) await fund(account);
  await celo.approveAndAllow(account, "USDC", parseUnits("5000", 6));
  const apiKey = await linkAgent(url, account);
  return { account, apiKey };
}

async function pay(apiKey: string, args: Record<string, unknown> = airtime()) {
  const s = performance.now();
  const answer = await mcp.call("pay_bill", { api_key: apiKey, pin: "1234", allow_duplicate: true, ...args });
  if (answer.isError || answer.data.status !== "SUCCESS") throw new Error(`pay_bill failed: ${JSON.stringify(answer.data)}`);
  return { ms: performance.now() - s, txHash: answer.data.tx_hash as Hex };
}
const gasOf = async (hash: Hex) => (await celo.publicClient.getTransactionReceipt({ hash })).gasUsed;

const agents = [];
for (let i = 0; i < AGENTS + 1; i++) agents.push(await agent(3 + i));
const [solo, ...crowd] = agents;

await pay(solo!.apiKey); // warm-up: JIT, quote lock, MCP client

// One agent, sequentially, profiled: the calls a pay makes beyond this process's own work.
const phases = new Phases();
phases.time(service.flow.operator, "pull", "operator pull (mined)");
phases.time(service.flow.ledger, "awaitPayment", "ledger shows pull");
phases.time(service.flow.orders, "transition", "order transitions");
phases.time(service.flow.biller, "pay", "biller pay");
phases.time(service.flow.attempts, "record", "pay attempt record");
phases.time(service.db, "query", "database queries");
const payments = (apiKey: string, calls: number) => Array.from({ length: calls }, () => ({ api_key: apiKey, pin: "1234", allow_duplicate: true, ...airtime() }));
const succeeded = (outcome: AgentsOutcome) => {
  const failed = outcome.answers.flat().find((a) => a.status !== "SUCCESS");
  if (failed) throw new Error(`pay_bill failed: ${JSON.stringify(failed)}`);
  return outcome;
};
// The service's process holds the agents' worker thread, the biller sandbox and the facilitator too.
const cpuRoots = { "service+agents": process.pid, ledger: ledger.process.pid, chains: stack.pid };
let cpuBefore = cpuSnapshot(cpuRoots);
const solos = succeeded(await runAgents({ url, tool: "pay_bill", agents: [payments(solo!.apiKey, SEQUENTIAL)] }));
const times = solos.ms[0]!.sort((a, b) => a - b);
const sequential = {
  calls: SEQUENTIAL,
  perSecond: round(SEQUENTIAL / solos.seconds),
  p50Ms: round(percentile(times, 50)),
  p95Ms: round(percentile(times, 95)),
  profile: phases.report(SEQUENTIAL),
  cpu: cpuPerCall(cpuBefore, cpuSnapshot(cpuRoots), SEQUENTIAL),
};
phases.reset();

// Twenty agents at once, each its own MCP client.
cpuBefore = cpuSnapshot(cpuRoots);
const crowds = succeeded(await runAgents({ url, tool: "pay_bill", agents: crowd.map((a) => payments(a.apiKey, PER_AGENT)) }));
const parallel = {
  agents: AGENTS,
  calls: AGENTS * PER_AGENT,
  perSecond: round((AGENTS * PER_AGENT) / crowds.seconds),
  cpu: cpuPerCall(cpuBefore, cpuSnapshot(cpuRoots), AGENTS * PER_AGENT),
};

// A batch of 20 against 20 single calls (distinct amounts: distinct bills).
let t0 = performance.now();
const singles = [];
for (let i = 0; i < BATCH; i++) singles.push(await pay(solo!.apiKey, airtime(1000 + i)));
const singlesMs = performance.now() - t0;
let singlesGas = 0n;
for (const s of singles) singlesGas += await gasOf(s.txHash);
t0 = performance.now();
const batch = await mcp.call("pay_bill_batch", { api_key: solo!.apiKey, pin: "1234", bills: Array.from({ length: BATCH }, (_, i) => airtime(2000 + i)) });
const batchMs = performance.now() - t0;
if (batch.isError || batch.data.succeeded !== BATCH) throw new Error(`batch failed: ${JSON.stringify(batch.data).slice(0, 500)}`);
const batchGas = await gasOf((batch.data.results as Array<{ tx_hash: Hex }>)[0]!.tx_hash);

await mcp.close();
await service.close();
await state.close();
await stack.close();

const report = {
  measuredAt: new Date().toISOString(),
  setup: `local Hardhat chains (automine) in their own process, Ponder ledger in its own, the service with the biller sandbox and facilitator in this one; state (the service's and the ledger's) on ${state.postgres ? "PostgreSQL" : "PGlite"}; each agent its own MCP client, in a worker thread`,
  sequential,
  parallel,
  batch: {
    bills: BATCH,
    batchMs: Math.round(batchMs),
    singlesMs: Math.round(singlesMs),
    speedup: round(singlesMs / batchMs),
    batchGas: batchGas.toString(),
    singlesGas: singlesGas.toString(),
    gasRatio: round(Number(batchGas) / Number(singlesGas)),
  },
};
await mkdir("bench-results", { recursive: true });
const out = state.postgres ? "bench-results/agent-postgresql.json" : "bench-results/agent.json";
await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
console.log(`sequential (1 agent, ${SEQUENTIAL} calls): ${sequential.perSecond} calls/s, p50 ${sequential.p50Ms} ms, p95 ${sequential.p95Ms} ms`);
console.log(`where a sequential call's time goes:\n${formatPhases(sequential.profile, "call")}\n${formatCpu(sequential.cpu, "call")}`);
console.log(`parallel (${AGENTS} agents x ${PER_AGENT} calls): ${parallel.perSecond} calls/s\n${formatCpu(parallel.cpu, "call")}`);
console.log(`batch of ${BATCH}: ${report.batch.batchMs} ms and ${batchGas} gas; ${BATCH} single calls: ${report.batch.singlesMs} ms and ${singlesGas} gas (${report.batch.speedup}x faster, ${report.batch.gasRatio} of the gas)`);
console.log(`written to ${out}`);
