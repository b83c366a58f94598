/**
 * `npm run bench:x402`: the x402 route side by side with a reference route built with
 * @x402/hono's payment middleware, in one process tree, on the same local chain and the
 * same local facilitator.
 *   challenge: N sequential unpaid POSTs of one bill (priced under the current rate version):
 *              p50/p95 latency and requests/s, for ours and the reference.
 *   paid:      M sequential bills paid with @x402/fetch (402, sign, pay): bills/s for ours
 *              (which also vends through the biller sandbox and records the order) and the
 *              reference (which verifies, settles and answers). Goal: ours >= 1.2 x the reference.
 *              Ours is profiled as it runs: each outward call's median and time per bill.
 *              A third route is the reference held to the money rule's wait: after settling it
 *              also waits until the ledger shows the payment, as ours must before it vends. Ours
 *              against that one is the cost of everything else ours does (vending, recording).
 * Writes bench-results/x402.json, or x402-postgresql.json with BENCH_POSTGRES=1 (the service's
 * state and the ledger's on PostgreSQL, fresh databases, as deployed; PGlite otherwise).
 *
 * With `--concurrent`: 402s for distinct bills at 32 connections instead (bench-x402-concurrent.ts).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { wrapFetchWithPayment } from "@x402/fetch";
import { paymentMiddleware, x402ResourceServer } from "@x402/hono";
import { Hono } from "hono";
import { isAuthorizationPayment, LedgerClient } from "../server/ledger-client.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { startTestChains } from "../test/support/stack.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";
import { listen, startServiceStack } from "../stack/service-stack.ts";
import { runConcurrent } from "./bench-x402-concurrent.ts";
import { formatPhases, Phases } from "./bench/phases.ts";
import { formatStages, StageTable } from "./bench/stages.ts";
import { benchState } from "./bench/state.ts";

if (process.argv.includes("--concurrent")) {
  await runConcurrent();
  process.exit();
}

const CHALLENGES = Number(process.env.BENCH_CHALLENGES ?? 2000);
const PAID = Number(process.env.BENCH_PAID ?? 60);
const GOAL_RATIO = 1.2;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const round = (n: number) => Math.round(n * 100) / 100;

const stack = await startTestChains();
// An order is paid only once the ledger shows its payment: the ledger is part of the path.
const state = await benchState("x402", stack);
const ledger = state.ledger;
const d = stack.deployments.chains.CELO!;
const usdc = d.tokens.find((t) => t.symbol === "USDC")!;
// The limits still run (their cost is part of the figure) but are set above what the benchmark sends.
const service = await startServiceStack({
  deployments: stack.deployments,
  env: {
    LOG_REQUESTS: "0",
    LEDGER_URL: ledger.url,
    RATE_LIMIT_CHALLENGE_ADDRESS: "1000000/60",
    RATE_LIMIT_ORDER_ADDRESS: "1000000/60",
    // Each answer says where its time went (server/stage-timing.ts), read into the stage table.
    SERVER_TIMING: "1",
    ...state.serviceEnv,
  },
});
const ours = { url: service.urls.service };

// The reference: the same price, payee and asset, protected by @x402/hono's middleware.
const PRICE = "1001000";
const resourceServer = () =>
  new x402ResourceServer(new HTTPFacilitatorClient({ url: service.urls.facilitator })).register("eip155:42220", new ExactEvmScheme());
/** A route answering { ok: true } behind the middleware on `server`, at the reference's price. */
function referenceRoute(server: x402ResourceServer, description: string) {
  const app = new Hono();
  const accepts = {
    scheme: "exact",
    network: "eip155:42220" as const,
    payTo: d.billPay.address,
    price: { amount: PRICE, asset: usdc.address, extra: { name: usdc.name, version: usdc.eip712Version! } },
    maxTimeoutSeconds: 300,
  };
  app.use(paymentMiddleware({ "POST /reference": { accepts, description } }, server));
  app.post("/reference", (c) => c.json({ ok: true }));
  return listen(app.fetch);
}
const ref = await referenceRoute(resourceServer(), "reference");

// The reference held to the ledger: its settle is followed by the wait ours makes before vending.
const LEDGER_WAIT_MS = 10_000;
const heldLedger = new LedgerClient(ledger.url);
let heldUnconfirmed = 0;
const heldServer = resourceServer().onAfterSettle(async ({ paymentPayload }) => {
  const { from: payer, nonce } = (paymentPayload.payload as { authorization: { from: string; nonce: string } }).authorization;
  const itsPayment = isAuthorizationPayment({ chainId: d.chainId, token: usdc.address, payer, nonce });
  const read = async () => (await heldLedger.authorization("CELO", usdc.address, payer, nonce)).payment;
  if (!(await heldLedger.awaitPayment(itsPayment, read, LEDGER_WAIT_MS, () => {}))) heldUnconfirmed++;
});
const held = await referenceRoute(heldServer, "reference held to the ledger");

const payer = hardhatAccount(12);
const bill = () => ({
  serviceID: "mtn",
  serviceCategory: "AIRTIME",
  network: "MTN",
  billersCode: "08011111111",
  nairaAmount: 1550,
  token: "USDC",
  blockchain: "CELO",
  wallet_address: payer.address,
});
const init = (body: unknown): RequestInit => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

async function challenges(url: string, body: unknown) {
  const times: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < CHALLENGES; i++) {
    const s = performance.now();
    const res = await fetch(url, init(body));
    await res.arrayBuffer();
    if (res.status !== 402) throw new Error(`expected 402, got ${res.status}`);
    times.push(performance.now() - s);
  }
  const elapsed = performance.now() - t0;
  times.sort((a, b) => a - b);
  return { p50Ms: round(percentile(times, 50)), p95Ms: round(percentile(times, 95)), perSecond: Math.round(CHALLENGES / (elapsed / 1000)) };
}

async function paid(url: string, body: unknown, check: (json: Record<string, unknown>) => boolean, stages?: StageTable) {
  // The client's own fetch, timed: each bill makes two requests (the 402, then the paid one).
  const calls: Array<{ ms: number; serverTiming: string | null }> = [];
  const timedFetch: typeof fetch = async (input, init) => {
    const started = performance.now();
    const res = await fetch(input, init);
    calls.push({ ms: performance.now() - started, serverTiming: res.headers.get("server-timing") });
    return res;
  };
  const payingFetch = wrapFetchWithPayment(timedFetch, x402ClientFor(payer, stack.deployments));
  const t0 = performance.now();
  for (let i = 0; i < PAID; i++) {
    calls.length = 0;
    const started = performance.now();
    const res = await payingFetch(url, init(body));
    const returned = performance.now();
    const json = (await res.json()) as Record<string, unknown>;
    if (res.status !== 200 || !check(json)) throw new Error(`paid request ${i} failed: ${res.status} ${JSON.stringify(json)}`);
    stages?.bill(calls, returned - started, performance.now() - returned);
  }
  const elapsedMs = performance.now() - t0;
  return { bills: PAID, perSecond: round(PAID / (elapsedMs / 1000)), msPerBill: round(elapsedMs / PAID) };
}

// Warm both paths once (JIT, quote lock, facilitator initialisation).
await fetch(`${ours.url}/api/pay/x402`, init(bill()));
await fetch(`${ref.url}/reference`, init({}));
await fetch(`${held.url}/reference`, init({}));

const challengeOurs = await challenges(`${ours.url}/api/pay/x402`, bill());
const challengeRef = await challenges(`${ref.url}/reference`, {});
const paidRef = await paid(`${ref.url}/reference`, {}, (j) => j.ok === true);
const paidHeld = await paid(`${held.url}/reference`, {}, (j) => j.ok === true);
// Its live query closed, so ours runs with the ledger pushing to the service alone.
await held.close();
heldLedger.close();
if (heldUnconfirmed > 0) throw new Error(`the ledger did not show ${heldUnconfirmed} of the held reference's payments within ${LEDGER_WAIT_MS} ms`);
// Where a paid bill's time goes on our side, timed around the calls the order flow makes.
const phases = new Phases();
const facilitator = service.flow.facilitators.CELO!;
phases.time(service.flow.orders, "lockPayment", "lock payment");
phases.time(facilitator, "verify", "facilitator verify");
phases.time(facilitator, "settle", "facilitator settle");
phases.time(service.flow.ledger, "awaitPayment", "ledger shows payment");
phases.time(service.flow.orders, "transition", "order transitions");
phases.time(service.flow.biller, "pay", "biller pay");
phases.time(service.flow.attempts, "latest", "pay attempt lookup");
phases.time(service.flow.attempts, "record", "pay attempt record");
const stageTable = new StageTable();
const paidOurs = await paid(`${ours.url}/api/pay/x402`, bill(), (j) => j.status === "SUCCESS", stageTable);
const profile = phases.report(PAID);
const stages = stageTable.report(paidOurs.msPerBill);

await ref.close();
await service.close();
await state.close();
await stack.close();

const ratio = paidOurs.perSecond / paidRef.perSecond;
const heldRatio = paidOurs.perSecond / paidHeld.perSecond;
const report = {
  measuredAt: new Date().toISOString(),
  setup: `one process; local Hardhat chain (automine), local facilitator on @x402/evm, biller sandbox; the service's state and the Ponder ledger's on ${state.postgres ? "PostgreSQL" : "PGlite"}; ours waits for the ledger (new blocks by WebSocket) to show each payment before vending`,
  challenge: { ours: challengeOurs, reference: challengeRef, goalP50Ms: 2, met: challengeOurs.p50Ms < 2 },
  paid: {
    ours: { ...paidOurs, profile, stages },
    reference: paidRef,
    ratio: round(ratio),
    goalRatio: GOAL_RATIO,
    met: ratio >= GOAL_RATIO,
    // The reference that also waits for the ledger before answering: what is left is vending and recording.
    referenceHeldToLedger: { ...paidHeld, ratio: round(heldRatio) },
  },
};
await mkdir("bench-results", { recursive: true });
const resultsFile = `bench-results/${state.postgres ? "x402-postgresql" : "x402"}.json`;
await writeFile(resultsFile, `${JSON.stringify(report, null, 2)}\n`);
console.log(`challenge (${CHALLENGES} sequential): ours p50 ${challengeOurs.p50Ms} ms, p95 ${challengeOurs.p95Ms} ms, ${challengeOurs.perSecond}/s; reference p50 ${challengeRef.p50Ms} ms, ${challengeRef.perSecond}/s (goal p50 < 2 ms: ${report.challenge.met ? "met" : "NOT met"})`);
console.log(`paid (${PAID} sequential bills): ours ${paidOurs.perSecond}/s, reference ${paidRef.perSecond}/s, ratio ${round(ratio)} (goal >= ${GOAL_RATIO}: ${report.paid.met ? "met" : "NOT met"})`);
console.log(`  the reference held to the ledger (waits for it to show each payment): ${paidHeld.perSecond}/s; ours ${round(heldRatio)}x of it`);
console.log(`where a paid bill's time goes (ours), the outward calls:\n${formatPhases(profile, "bill")}`);
console.log(`and stage by stage, client and server (ms per bill, mean):\n${formatStages(stages)}`);
console.log(`written to ${resultsFile}`);
if (!report.challenge.met || !report.paid.met) process.exitCode = 1;
