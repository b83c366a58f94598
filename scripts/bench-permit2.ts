/**
 * `npm run bench:permit2`: what paying through Permit2 costs against EIP-3009, on the same
 * local Base chain, service, facilitator and ledger. Bills alternate between USDC (EIP-3009)
 * and USD₮ (Permit2, approved once beforehand), each paid end to end with @x402/fetch (402,
 * sign, pay, settle, ledger, vend): latency p50/p95 and bills/s per method, the settlement's
 * gas (transferWithAuthorization against the proxy's settle) and a failed bill's refund gas
 * (refundAuthorization against refundPermit2). Writes bench-results/permit2.json.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { wrapFetchWithPayment } from "@x402/fetch";
import { createWalletClient, http, maxUint256, type Hex } from "viem";
import { eip3009TokenAbi } from "../lib/generated/abis.ts";
import { viemChain } from "../lib/chains.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { PERMIT2 } from "../lib/permit2.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";
import { SANDBOX_NUMBERS } from "../services/biller-sandbox/catalog.ts";
import { chainActors } from "../test/support/actors.ts";
import { startPayingStack } from "../test/support/stack.ts";

const BILLS = Number(process.env.BENCH_PAID ?? 30);
const METHODS = { eip3009: "USDC", permit2: "USDT" } as const;
type Method = keyof typeof METHODS;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const round = (n: number) => Math.round(n * 100) / 100;

// On PGlite, as its row in docs/benchmarks.md was measured (the test suites' stacks default to PostgreSQL).
const paying = await startPayingStack({ LOG_REQUESTS: "0", RATE_LIMIT_CHALLENGE_ADDRESS: "1000000/60", RATE_LIMIT_ORDER_ADDRESS: "1000000/60" }, { db: "pglite" });
try {
  const url = `${paying.service.urls.service}/api/pay/x402`;
  const base = chainActors(paying.chains.deployments, "BASE");
  const payer = hardhatAccount(9);
  // The payer's one-time approval of Permit2 (not part of any bill's figure).
  const wallet = createWalletClient({ account: payer, chain: viemChain("BASE", base.deployment.rpcUrl), transport: http(base.deployment.rpcUrl) });
  await base.mined(await wallet.writeContract({ address: base.tokenAddress("USD₮"), abi: eip3009TokenAbi, functionName: "approve", args: [PERMIT2, maxUint256] }));

  const pay = wrapFetchWithPayment(fetch, x402ClientFor(payer, paying.chains.deployments));
  const bill = (method: Method, billersCode: string = SANDBOX_NUMBERS.phone) => ({
    serviceID: "mtn",
    serviceCategory: "AIRTIME",
    network: "MTN",
    billersCode,
    nairaAmount: 1550,
    token: METHODS[method],
    blockchain: "BASE",
    wallet_address: payer.address,
  });
  const payOne = async (body: unknown) => {
    const res = await pay(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const result = (await res.json()) as { status: string; tx_hash: Hex; refund?: { tx_hash: Hex } };
    if (res.status !== 200 && !result.refund) throw new Error(`${res.status}: ${JSON.stringify(result)}`);
    return result;
  };
  const gasOf = async (hash: Hex) => Number((await base.publicClient.getTransactionReceipt({ hash })).gasUsed);

  // One warm-up bill each, then alternate so both methods share the machine's noise.
  for (const method of Object.keys(METHODS) as Method[]) await payOne(bill(method));
  const times: Record<Method, number[]> = { eip3009: [], permit2: [] };
  const settleGas: Record<Method, number[]> = { eip3009: [], permit2: [] };
  for (let i = 0; i < BILLS; i++) {
    for (const method of Object.keys(METHODS) as Method[]) {
      const started = performance.now();
      const result = await payOne(bill(method));
      times[method].push(performance.now() - started);
      if (result.status !== "SUCCESS") throw new Error(`a ${method} bill ended ${result.status}`);
      settleGas[method].push(await gasOf(result.tx_hash));
    }
  }
  const refundGas: Record<Method, number> = { eip3009: 0, permit2: 0 };
  for (const method of Object.keys(METHODS) as Method[]) {
    const failed = await payOne(bill(method, "08099999999"));
    refundGas[method] = await gasOf(failed.refund!.tx_hash);
  }

  const figures = Object.fromEntries(
    (Object.keys(METHODS) as Method[]).map((m) => {
      const sorted = [...times[m]].sort((a, b) => a - b);
      const total = times[m].reduce((s, t) => s + t, 0);
      return [m, { p50Ms: round(percentile(sorted, 50)), p95Ms: round(percentile(sorted, 95)), billsPerSecond: round((times[m].length / total) * 1000), settleGas: percentile([...settleGas[m]].sort((a, b) => a - b), 50), refundGas: refundGas[m] }];
    }),
  ) as Record<Method, { p50Ms: number; p95Ms: number; billsPerSecond: number; settleGas: number; refundGas: number }>;
  const out = { bills: BILLS, ...figures, permit2VsEip3009: round(figures.permit2.billsPerSecond / figures.eip3009.billsPerSecond) };
  await mkdir("bench-results", { recursive: true });
  await writeFile("bench-results/permit2.json", `${JSON.stringify(out, null, 2)}\n`);
  console.log(JSON.stringify(out, null, 2));
} finally {
  await paying.close();
}
process.exit();
