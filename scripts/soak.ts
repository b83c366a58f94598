/**
 * `npm run soak`: the default stack (`stack/start.ts`, what `npm start` runs) kept up for 15
 * minutes of steady payments on both rails and both chains, watched from outside the whole
 * time. A benchmark, not a test: it runs long because the faults it looks for come with time
 * (a subscription that expires, a socket that goes quiet, a ledger that stops).
 *
 * Four payers pay one after another, each at its own pace: x402 REST on CELO and on BASE
 * (@x402/fetch), and the agent hub over MCP on CELO and on BASE (a linked wallet, pay_bill
 * with no signature); one bill in ten fails at the biller and is refunded on chain. Every
 * second it reads each chain's head from the chain's node and the block the ledger has
 * indexed, and the service's /readyz. At the end it waits for every bill to be final, runs the
 * audit, and reports each chain's largest lag and longest stand-still (the ledger behind a
 * chain that moved), how every bill ended, the ledger's restarts and the audit. Writes
 * bench-results/soak.json; exits 1 when a goal is missed.
 *
 *   npm run soak                  15 minutes
 *   npm run soak -- --minutes 3   shorter
 *
 * The stack gets free ports and a state directory of its own, so a stack already running is
 * left alone. Goals (issue #37): lag <= 10 blocks, never still >= 20 s while the chain moves,
 * every bill final, audit clean.
 */
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { wrapFetchWithPayment } from "@x402/fetch";
import { createWalletClient, http, parseUnits, type Account, type Hex } from "viem";
import { billPayAbi, eip3009TokenAbi } from "../lib/generated/abis.ts";
import { linkAgent, mcpAgent } from "../lib/agent-client.ts";
import { publicClientFor } from "../lib/chain-client.ts";
import { viemChain, type ChainKey } from "../lib/chains.ts";
import { deployedChains, readDeployments, requireChain, rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import { readIndexedBlocks } from "../lib/ledger-watch.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { LOCAL_PORTS } from "../lib/local-ports.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";
import { runAudit } from "../server/audit/ledger.ts";
import { readServiceRecords } from "../server/audit/orders.ts";
import { freePort } from "../stack/ledger-process.ts";

const { values: flags } = parseArgs({ options: { minutes: { type: "string", default: "15" } } });
const minutes = Number(flags.minutes);
if (!(minutes > 0)) throw new Error("--minutes takes a positive number");
const GOALS = { maxLagBlocks: 10, maxStillSeconds: 20 };
const PAY_EVERY_MS = 3_000;
const FINAL = new Set(["SUCCESS", "REFUNDED", "PAYMENT_FAILED"]);
const PIN = "2468";

// 1. The default stack, on ports and state of its own.
const dir = await mkdtemp(join(tmpdir(), "billpay-soak-"));
const ports = Object.fromEntries(await Promise.all(Object.values(LOCAL_PORTS).map(async (p) => [p.variable, String(await freePort())])));
const env = {
  ...process.env,
  ...ports,
  DEPLOYMENTS_FILE: join(dir, "deployments.json"),
  SERVER_PGLITE_DIR: join(dir, "service-pglite"),
  PIN_PEPPER_FILE: join(dir, "pin-pepper"),
  LOG_LEVEL: process.env.LOG_LEVEL ?? "warn",
  // Each payer's one bill in ten fails on purpose, 30 in the run: above the bound a stranger is held to.
  RATE_LIMIT_FAILED_VENDS_PAYER: process.env.RATE_LIMIT_FAILED_VENDS_PAYER ?? "0/3600",
};
const serviceUrl = `http://127.0.0.1:${ports.PORT}`;
const stackLog = join(dir, "stack.log");
const stackOut = createWriteStream(stackLog);
console.log(`soak: ${minutes} min; the stack's output in ${stackLog}, the ledger's in .data/ledger.log`);
const stack = spawn(process.execPath, ["--import", "tsx", "stack/start.ts"], { env, stdio: ["ignore", "pipe", "pipe"] });
let stackText = "";
for (const s of [stack.stdout!, stack.stderr!]) {
  s.on("data", (d: Buffer) => {
    stackText += d;
    stackOut.write(d);
  });
}
const stopStack = () => new Promise<void>((resolve) => (stack.exitCode !== null ? resolve() : (stack.once("exit", () => resolve()), stack.kill("SIGINT"))));
process.once("exit", () => stack.kill("SIGKILL"));
await new Promise<void>((resolve, reject) => {
  const timer = setInterval(() => {
    if (stackText.includes("stack ready")) (clearInterval(timer), resolve());
    if (stack.exitCode !== null) (clearInterval(timer), reject(new Error(`the stack exited (${stack.exitCode}): ${stackText}`)));
  }, 200);
});
const deployments = await readDeployments(env.DEPLOYMENTS_FILE);
const ledgerUrl = `http://127.0.0.1:${ports.LEDGER_PORT}`;
console.log(`soak: stack ready (service ${serviceUrl}, ledger ${ledgerUrl})`);

// 2. The watch: each chain's head against the ledger, every second.
interface ChainFigures {
  maxLagBlocks: number;
  longestStillSeconds: number;
  samples: number;
  indexedLast?: bigint;
  movedAt?: number;
}
const chains = deployedChains(deployments);
const figures = Object.fromEntries(chains.map((c) => [c, { maxLagBlocks: 0, longestStillSeconds: 0, samples: 0 } as ChainFigures])) as Record<ChainKey, ChainFigures>;
const clients = Object.fromEntries(chains.map((c) => [c, publicClientFor(c, rpcUrlFor(c, requireChain(deployments, c)))]));
let readyFailures = 0;
let readyLooks = 0;
let watchErrors = 0;
let watching = true;
const watch = (async () => {
  while (watching) {
    try {
      const [indexed, heads] = await Promise.all([readIndexedBlocks(ledgerUrl), Promise.all(chains.map((c) => clients[c]!.getBlockNumber()))]);
      const now = Date.now();
      chains.forEach((c, i) => {
        const f = figures[c];
        const head = heads[i]!;
        const block = indexed.get(requireChain(deployments, c).chainId) ?? 0n;
        f.samples += 1;
        f.maxLagBlocks = Math.max(f.maxLagBlocks, Number(head - block));
        if (f.indexedLast !== block || block >= head) f.movedAt = now;
        f.indexedLast = block;
        f.longestStillSeconds = Math.max(f.longestStillSeconds, (now - (f.movedAt ?? now)) / 1000);
      });
      readyLooks += 1;
      if ((await fetch(`${serviceUrl}/readyz`, { signal: AbortSignal.timeout(3_000) })).status !== 200) readyFailures += 1;
    } catch {
      watchErrors += 1;
    }
    await new Promise((r) => setTimeout(r, 1_000));
  }
})();

// 3. The payers.
const bill = (i: number) => ({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: i % 10 === 9 ? "08099999999" : "08011111111", nairaAmount: 500 + (i % 7) * 50 });
const paid: Array<{ stream: string; requestId?: string; error?: string }> = [];
const endAt = Date.now() + minutes * 60_000;

async function x402Stream(chain: ChainKey, payer: Account) {
  const pay = wrapFetchWithPayment(fetch, x402ClientFor(payer, deployments));
  for (let i = 0; Date.now() < endAt; i++) {
    const started = Date.now();
    try {
      const res = await pay(`${serviceUrl}/api/pay/x402`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ...bill(i), token: "USDC", blockchain: chain, wallet_address: payer.address }),
        signal: AbortSignal.timeout(60_000),
      });
      const body = (await res.json()) as { request_id?: string; code?: string };
      paid.push({ stream: `x402 ${chain}`, requestId: body.request_id, error: body.request_id ? undefined : `${res.status} ${body.code}` });
    } catch (err) {
      paid.push({ stream: `x402 ${chain}`, error: (err as Error).message });
    }
    await new Promise((r) => setTimeout(r, Math.max(0, PAY_EVERY_MS - (Date.now() - started))));
  }
}

async function linkWallet(deps: Deployments, chain: ChainKey, wallet: Account): Promise<string> {
  const d = requireChain(deps, chain);
  const rpcUrl = rpcUrlFor(chain, d);
  const usdc = d.tokens.find((t) => t.symbol === "USDC")!.address as Hex;
  const client = createWalletClient({ account: wallet, chain: viemChain(chain, rpcUrl), transport: http(rpcUrl) });
  const allowance = parseUnits("2000", 6);
  for (const call of [
    () => client.writeContract({ address: usdc, abi: eip3009TokenAbi, functionName: "approve", args: [d.billPay.address as Hex, allowance] }),
    () => client.writeContract({ address: d.billPay.address as Hex, abi: billPayAbi, functionName: "setSpendingAllowance", args: [usdc, allowance] }),
  ]) {
    await clients[chain]!.waitForTransactionReceipt({ hash: await call() });
  }
  return linkAgent(serviceUrl, wallet, { pin: PIN, chain, token: "USDC" });
}

async function agentStream(chain: ChainKey, wallet: Account) {
  const apiKey = await linkWallet(deployments, chain, wallet);
  const mcp = await mcpAgent(serviceUrl);
  try {
    for (let i = 0; Date.now() < endAt; i++) {
      const started = Date.now();
      try {
        const answer = await mcp.call("pay_bill", { api_key: apiKey, pin: PIN, ...bill(i) });
        const requestId = answer.data.request_id as string | undefined;
        paid.push({ stream: `agent ${chain}`, requestId, error: requestId ? undefined : JSON.stringify(answer.data).slice(0, 200) });
      } catch (err) {
        paid.push({ stream: `agent ${chain}`, error: (err as Error).message });
      }
      await new Promise((r) => setTimeout(r, Math.max(0, PAY_EVERY_MS - (Date.now() - started))));
    }
  } finally {
    await mcp.close();
  }
}

await Promise.all([
  x402Stream("CELO", hardhatAccount(8)),
  x402Stream("BASE", hardhatAccount(9)),
  agentStream("CELO", hardhatAccount(10)),
  agentStream("BASE", hardhatAccount(11)),
]);
console.log(`soak: ${paid.length} bills sent; waiting for every one to be final`);

// 4. Every bill final, then the audit.
const ids = new Set(paid.flatMap((p) => (p.requestId ? [p.requestId] : [])));
let statuses = new Map<string, string>();
const finalBy = Date.now() + 180_000;
for (;;) {
  const records = await readServiceRecords(serviceUrl);
  statuses = new Map(records.orders.filter((o) => ids.has(o.request_id)).map((o) => [o.request_id, o.status]));
  if ([...ids].every((id) => FINAL.has(statuses.get(id) ?? "")) || Date.now() > finalBy) break;
  await new Promise((r) => setTimeout(r, 2_000));
}
watching = false;
await watch;
const audit = await runAudit({ ledgerUrl, deployments, service: { url: serviceUrl } }).catch((err: Error) => ({ error: err.message }));
const restarts = (stackText.match(/ledger: restarting/g) ?? []).length;
await stopStack();
stackOut.end();

const ends: Record<string, Record<string, number>> = {};
for (const p of paid) {
  const end = p.requestId ? (statuses.get(p.requestId) ?? "unknown") : `not taken: ${p.error}`;
  ends[p.stream] ??= {};
  ends[p.stream]![end] = (ends[p.stream]![end] ?? 0) + 1;
}
const notFinal = [...ids].filter((id) => !FINAL.has(statuses.get(id) ?? ""));
const discrepancies = "error" in audit ? [`the audit could not run: ${audit.error}`] : audit.discrepancies;
const chainsOut = Object.fromEntries(chains.map((c) => [c, { maxLagBlocks: figures[c].maxLagBlocks, longestStillSeconds: Math.round(figures[c].longestStillSeconds * 10) / 10, samples: figures[c].samples }]));
const met = {
  lag: chains.every((c) => figures[c].maxLagBlocks <= GOALS.maxLagBlocks),
  still: chains.every((c) => figures[c].longestStillSeconds < GOALS.maxStillSeconds),
  everyBillFinal: notFinal.length === 0 && paid.every((p) => p.requestId),
  auditClean: discrepancies.length === 0,
};
const result = {
  measuredAt: new Date().toISOString(),
  minutes,
  bills: paid.length,
  ends,
  notFinal,
  chains: chainsOut,
  ledgerRestarts: restarts,
  readiness: { looks: readyLooks, failed: readyFailures },
  watchErrors,
  audit: "error" in audit ? audit : { discrepancies: audit.discrepancies, review: audit.orders?.review.length ?? 0 },
  goals: GOALS,
  met,
};
await mkdir("bench-results", { recursive: true });
await writeFile("bench-results/soak.json", `${JSON.stringify(result, null, 2)}\n`);
console.log(`soak over ${minutes} min: ${paid.length} bills`);
for (const c of chains) console.log(`  ${c}: largest lag ${chainsOut[c]!.maxLagBlocks} blocks (goal <= ${GOALS.maxLagBlocks}), longest still ${chainsOut[c]!.longestStillSeconds} s (goal < ${GOALS.maxStillSeconds})`);
for (const [stream, e] of Object.entries(ends)) console.log(`  ${stream}: ${Object.entries(e).map(([k, n]) => `${n} ${k}`).join(", ")}`);
console.log(`  not final: ${notFinal.length}; ledger restarts: ${restarts}; /readyz failed ${readyFailures} of ${readyLooks} looks`);
console.log(`  audit: ${discrepancies.length === 0 ? "no discrepancies" : discrepancies.join("; ")}`);
console.log(`written to bench-results/soak.json; ${Object.values(met).every(Boolean) ? "every goal met" : `MISSED: ${Object.entries(met).filter(([, v]) => !v).map(([k]) => k).join(", ")}`}`);
process.exitCode = Object.values(met).every(Boolean) ? 0 : 1;
