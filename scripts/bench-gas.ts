/**
 * `npm run bench:gas`: gas used by BillPay's payer and operator calls, measured from
 * receipts on Hardhat's in-process chain (cancun, optimizer as in hardhat.config.ts).
 * Steady state: the treasury already holds the token and payers have paid before, as in
 * production; a first-ever pull or allowance pays extra for fresh storage and is shown
 * separately. Writes bench-results/gas.json and prints a table.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { network } from "hardhat";
import { maxUint256, parseUnits, toHex, type Hash } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { signTransferAuthorization } from "../lib/eip3009.ts";

const GOAL_RATIO = 0.75;
const units = (n: string) => parseUnits(n, 6);

const { viem } = await network.connect();
const publicClient = await viem.getPublicClient();
const [admin, operator, refunder, payer, otherPayer] = await viem.getWalletClients();
if (!admin || !operator || !refunder || !payer || !otherPayer) throw new Error("not enough accounts");

const usdc = await viem.deployContract("EIP3009Token", ["USDC", "USDC", "2", admin.account.address]);
const billPay = await viem.deployContract("BillPay", [
  admin.account.address,
  operator.account.address,
  refunder.account.address,
  admin.account.address,
  [usdc.address],
]);
await billPay.write.setRefundBudget([usdc.address, units("1000000"), 86_400n]);
await billPay.write.setPullBudget([usdc.address, units("1000000"), 86_400n]);
for (const p of [payer, otherPayer]) {
  await usdc.write.mint([p.account.address, units("1000000")]);
  await usdc.write.approve([billPay.address, maxUint256], { account: p.account });
}

let seq = 0;
const nextOrderId = () => toHex(++seq, { size: 32 });
const gasOf = async (hash: Hash) => (await publicClient.waitForTransactionReceipt({ hash })).gasUsed;
const asOperator = { account: operator.account };
const asRefunder = { account: refunder.account };

const results: Record<string, number> = {};

// Spending allowance: first set (zero to non-zero), then a change (non-zero to non-zero).
results.setSpendingAllowance_first = Number(
  await gasOf(await billPay.write.setSpendingAllowance([usdc.address, units("100000")], { account: payer.account })),
);
results.setSpendingAllowance_update = Number(
  await gasOf(await billPay.write.setSpendingAllowance([usdc.address, units("900000")], { account: payer.account })),
);
await billPay.write.setSpendingAllowance([usdc.address, units("900000")], { account: otherPayer.account });

// The first pull into an empty treasury pays for the treasury's balance slot: shown apart.
results.pull_firstIntoEmptyTreasury = Number(
  await gasOf(await billPay.write.pull([nextOrderId(), otherPayer.account.address, usdc.address, units("1")], asOperator)),
);
const singlePulls: bigint[] = [];
for (let i = 0; i < 5; i++) {
  singlePulls.push(
    await gasOf(await billPay.write.pull([nextOrderId(), payer.account.address, usdc.address, units("1")], asOperator)),
  );
}
results.pull = Number(singlePulls.reduce((a, b) => a + b, 0n) / BigInt(singlePulls.length));

for (const size of [1, 10, 50]) {
  const items = Array.from({ length: size }, () => ({
    orderId: nextOrderId(),
    payer: payer.account.address,
    token: usdc.address,
    amount: units("1"),
  }));
  const gas = await gasOf(await billPay.write.pullBatch([items], asOperator));
  results[`pullBatch_${size}_total`] = Number(gas);
  results[`pullBatch_${size}_perItem`] = Math.round(Number(gas) / size);
}

// The same batches with a different payer per item (each has paid before): no storage
// slot is shared between items, as in a batch of many agents' bills.
const testClient = await viem.getTestClient();
const payers = Array.from({ length: 50 }, () => privateKeyToAccount(generatePrivateKey()));
for (const p of payers) {
  await testClient.setBalance({ address: p.address, value: 10n ** 18n });
  await usdc.write.mint([p.address, units("1000")]);
  await usdc.write.approve([billPay.address, maxUint256], { account: p });
  await billPay.write.setSpendingAllowance([usdc.address, units("1000")], { account: p });
  await billPay.write.pull([nextOrderId(), p.address, usdc.address, units("1")], asOperator);
}
for (const size of [10, 50]) {
  const items = payers.slice(0, size).map((p) => ({ orderId: nextOrderId(), payer: p.address, token: usdc.address, amount: units("1") }));
  const gas = await gasOf(await billPay.write.pullBatch([items], asOperator));
  results[`pullBatch_${size}_distinctPayers_perItem`] = Math.round(Number(gas) / size);
}

const refundId = nextOrderId();
await billPay.write.pull([refundId, payer.account.address, usdc.address, units("5")], asOperator);
results.refund = Number(await gasOf(await billPay.write.refund([refundId, units("5")], asRefunder)));

// Refund of an x402 order: the payer paid the treasury by transferWithAuthorization.
const auth = await signTransferAuthorization(payer, usdc, {
  from: payer.account.address,
  to: billPay.address,
  value: units("5"),
});
await usdc.write.transferWithAuthorization(auth.args, asOperator);
results.refundAuthorization = Number(
  await gasOf(
    await billPay.write.refundAuthorization(
      [nextOrderId(), usdc.address, { ...auth.message, signature: auth.signature }, units("5")],
      asRefunder,
    ),
  ),
);

// The goal is judged on the harder case: a different payer per item.
const ratio = results.pullBatch_10_distinctPayers_perItem! / results.pull;
const sharedPayerRatio = results.pullBatch_10_perItem! / results.pull;
const report = {
  measuredAt: new Date().toISOString(),
  chain: "Hardhat in-process (EDR), evm cancun, solc optimizer 10000 runs",
  gas: results,
  goal: {
    description: "a pull in a batch of 10 (a different payer per item) costs at most 75% of a single pull",
    ratio,
    sharedPayerRatio,
    met: ratio <= GOAL_RATIO,
  },
};

await mkdir("bench-results", { recursive: true });
await writeFile("bench-results/gas.json", `${JSON.stringify(report, null, 2)}\n`);

console.log("BillPay gas (steady state unless noted)");
for (const [name, gas] of Object.entries(results)) console.log(`  ${name.padEnd(32)} ${String(gas).padStart(9)}`);
console.log(
  `pull in a batch of 10 = ${(ratio * 100).toFixed(1)}% of a single pull with a payer per item, ${(sharedPayerRatio * 100).toFixed(1)}% with one payer (goal <= ${GOAL_RATIO * 100}%): ${report.goal.met ? "met" : "NOT met"}`,
);
console.log("written to bench-results/gas.json");
if (!report.goal.met) process.exitCode = 1;
