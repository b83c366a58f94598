/**
 * The payer's periodic spending limit on BillPay: a cap per fixed period on top of the
 * spending allowance, with the boundaries tested to the second.
 */
import { beforeEach, describe, expect, it } from "vitest";
import { maxUint256, type Hex } from "viem";
import { expectRevert } from "../support/revert.ts";
import { billPayFixture, DAY, orderId, units, type BillPayFixture } from "./fixture.ts";

let f: BillPayFixture;
beforeEach(async () => {
  f = await billPayFixture();
});

const asOperator = () => ({ account: f.operator.account });
const asRefunder = () => ({ account: f.refunder.account });

/** Alice allows everything, then caps 100 USDC per day; returns when the first period began. */
async function limited(amount = units("100"), period = DAY): Promise<bigint> {
  await f.billPay.write.setSpendingAllowance([f.usdc.address, maxUint256], { account: f.alice.account });
  const hash = await f.billPay.write.setSpendingLimit([f.usdc.address, amount, period], { account: f.alice.account });
  const receipt = await f.publicClient.waitForTransactionReceipt({ hash });
  return (await f.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp;
}

/** Sends the next transaction at exactly `timestamp`. */
const at = (timestamp: bigint) => f.testClient.setNextBlockTimestamp({ timestamp });

async function pull(amount: bigint, payer: Hex = f.addr.alice) {
  const id = orderId();
  await f.billPay.write.pull([id, payer, f.usdc.address, amount], asOperator());
  return id;
}

const limit = () => f.billPay.read.spendingLimit([f.addr.alice, f.usdc.address]);

describe("periodic spending limit", () => {
  it("is set by the payer with an event, and the view shows the period and what is left", async () => {
    await f.billPay.write.setSpendingAllowance([f.usdc.address, maxUint256], { account: f.alice.account });
    const hash = await f.billPay.write.setSpendingLimit([f.usdc.address, units("100"), DAY], { account: f.alice.account });
    const set = (await f.logsOf(hash)).find((l) => l.eventName === "SpendingLimitSet");
    const start = (await f.publicClient.getBlock({ blockNumber: (await f.publicClient.getTransactionReceipt({ hash })).blockNumber })).timestamp;
    expect(set?.args).toEqual({ payer: f.addr.alice, token: f.usdc.address, amountPerPeriod: units("100"), period: DAY, start, spent: 0n });
    expect(await limit()).toEqual([units("100"), DAY, start, 0n, units("100")]);
    // Nobody else is limited by it.
    expect((await f.billPay.read.spendingLimit([f.addr.bob, f.usdc.address]))[4]).toBe(maxUint256);
    expect((await f.billPay.read.spendingLimit([f.addr.alice, f.usdt.address]))[4]).toBe(maxUint256);
  });

  it("lets a period's pulls reach the limit and not one unit more, with an event per pull", async () => {
    const start = await limited();
    const id = orderId();
    const hash = await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("60")], asOperator());
    const used = (await f.logsOf(hash)).find((l) => l.eventName === "SpendingLimitUsed");
    expect(used?.args).toEqual({ payer: f.addr.alice, token: f.usdc.address, periodStart: start, spent: units("60") });
    await expectRevert(pull(units("40") + 1n), "SpendingLimitExceeded");
    await pull(units("40"));
    await expectRevert(pull(1n), "SpendingLimitExceeded");
    expect(await limit()).toEqual([units("100"), DAY, start, units("100"), 0n]);
    // The allowance was never the bound: it is unlimited.
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(maxUint256 - units("100"));
  });

  it("resets at the period's boundary to the second: the last second still counts, the next one is fresh", async () => {
    const start = await limited();
    await pull(units("60"));
    await at(start + DAY - 1n);
    await expectRevert(pull(units("41")), "SpendingLimitExceeded");
    // The refused pull mined no block (its gas estimate failed), so this one lands in that same last second.
    await pull(units("40"));
    expect((await f.publicClient.getBlock()).timestamp).toBe(start + DAY - 1n);
    await at(start + DAY);
    await pull(units("100"));
    expect(await limit()).toEqual([units("100"), DAY, start + DAY, units("100"), 0n]);
    await expectRevert(pull(1n), "SpendingLimitExceeded");
  });

  it("names what is left and when the period ends in its refusal", async () => {
    const start = await limited();
    await pull(units("70"));
    try {
      await pull(units("31"));
      expect.unreachable("the pull should have reverted");
    } catch (err) {
      const text = String((err as Error).message);
      expect(text).toContain("SpendingLimitExceeded");
      expect(text).toContain(String(units("30")));
      expect(text).toContain(String(start + DAY));
    }
  });

  it("keeps fixed windows from the start: after idle periods the current one starts on the grid, not at the pull", async () => {
    const start = await limited(units("100"), 3_600n);
    await at(start + 5n * 3_600n + 1_234n);
    await pull(units("100"));
    const [, , periodStart, spent, available] = await limit();
    expect(periodStart).toBe(start + 5n * 3_600n);
    expect([spent, available]).toEqual([units("100"), 0n]);
    await at(start + 6n * 3_600n);
    await pull(units("1"));
  });

  it("applies with the allowance: the lower of the two bounds each pull", async () => {
    await limited(units("100"));
    await f.billPay.write.setSpendingAllowance([f.usdc.address, units("30")], { account: f.alice.account });
    await expectRevert(pull(units("31")), "SpendingAllowanceExceeded");
    await pull(units("30"));
    await f.billPay.write.setSpendingAllowance([f.usdc.address, units("500")], { account: f.alice.account });
    await expectRevert(pull(units("71")), "SpendingLimitExceeded");
    await pull(units("70"));
  });

  it("counts every item of a batch, and a batch past the limit reverts whole", async () => {
    await limited(units("100"));
    const item = (amount: bigint) => ({ orderId: orderId(), payer: f.addr.alice, token: f.usdc.address, amount });
    await expectRevert(f.billPay.write.pullBatch([[item(units("60")), item(units("41"))]], asOperator()), "SpendingLimitExceeded");
    expect((await limit())[3]).toBe(0n);
    await f.billPay.write.pullBatch([[item(units("60")), item(units("40"))]], asOperator());
    expect((await limit())[4]).toBe(0n);
  });

  it("gives back what a refunded pull used, in the same period only", async () => {
    const start = await limited();
    const early = await pull(units("50"));
    const late = await pull(units("50"));
    const hash = await f.billPay.write.refund([early, units("50")], asRefunder());
    const used = (await f.logsOf(hash)).find((l) => l.eventName === "SpendingLimitUsed");
    expect(used?.args).toEqual({ payer: f.addr.alice, token: f.usdc.address, periodStart: start, spent: units("50") });
    await pull(units("50"));
    // Refunded in the next period: the new period's tally is not touched.
    await at(start + DAY);
    await pull(units("100"));
    const next = await f.billPay.write.refund([late, units("50")], asRefunder());
    expect((await f.logsOf(next)).map((l) => l.eventName)).not.toContain("SpendingLimitUsed");
    expect((await limit())[4]).toBe(0n);
  });

  it("does not free the period for a refund of a pull made before the limit existed", async () => {
    await f.billPay.write.setSpendingAllowance([f.usdc.address, maxUint256], { account: f.alice.account });
    const before = await pull(units("80"));
    await f.billPay.write.setSpendingLimit([f.usdc.address, units("100"), DAY], { account: f.alice.account });
    await pull(units("100"));
    await f.billPay.write.refund([before, units("80")], asRefunder());
    expect((await limit())[4]).toBe(0n);
    await expectRevert(pull(1n), "SpendingLimitExceeded");
  });

  it("carries what the current period used into a changed limit, so lowering it mid-period frees nothing", async () => {
    const start = await limited();
    await pull(units("80"));
    await at(start + 100n);
    const hash = await f.billPay.write.setSpendingLimit([f.usdc.address, units("50"), DAY], { account: f.alice.account });
    const set = (await f.logsOf(hash)).find((l) => l.eventName === "SpendingLimitSet");
    expect((set?.args as { spent?: bigint } | undefined)?.spent).toBe(units("80"));
    expect(await limit()).toEqual([units("50"), DAY, start + 100n, units("80"), 0n]);
    await expectRevert(pull(1n), "SpendingLimitExceeded");
    // The new limit's first period runs from when it was set.
    await at(start + 100n + DAY);
    await pull(units("50"));
  });

  it("is removed by (0, 0), refuses a limit without a period, and is set only for accepted tokens", async () => {
    await limited();
    await pull(units("100"));
    await expectRevert(
      f.billPay.write.setSpendingLimit([f.usdc.address, units("10"), 0n], { account: f.alice.account }),
      "InvalidSpendingPeriod",
    );
    await expectRevert(
      f.billPay.write.setSpendingLimit([f.usdc.address, units("10"), 2n ** 40n], { account: f.alice.account }),
      "InvalidSpendingPeriod",
    );
    await expectRevert(
      f.billPay.write.setSpendingLimit([f.plain.address, units("10"), DAY], { account: f.alice.account }),
      "TokenNotAccepted",
    );
    await f.billPay.write.pause({ account: f.pauser.account });
    await f.billPay.write.setSpendingLimit([f.usdc.address, 0n, 0n], { account: f.alice.account });
    await f.billPay.write.unpause({ account: f.pauser.account });
    expect((await limit())[4]).toBe(maxUint256);
    await pull(units("300"));
  });

  it("holds against a leaked operator key: an unlimited allowance still yields one period's limit", async () => {
    const start = await limited(units("25"));
    await pull(units("25"));
    await expectRevert(pull(1n), "SpendingLimitExceeded");
    // Only the payer can lift it: the operator, the admin and strangers set their own limits, not Alice's.
    await f.billPay.write.setSpendingLimit([f.usdc.address, 0n, 0n], { account: f.operator.account });
    await f.billPay.write.setSpendingLimit([f.usdc.address, 0n, 0n], { account: f.admin.account });
    await expectRevert(pull(1n), "SpendingLimitExceeded");
    await at(start + DAY);
    await pull(units("25"));
    await expectRevert(pull(1n), "SpendingLimitExceeded");
  });
});
