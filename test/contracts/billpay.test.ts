import { beforeEach, describe, expect, it } from "vitest";
import { BaseError, ContractFunctionRevertedError, keccak256, encodeAbiParameters, maxUint256, zeroAddress, type Hex } from "viem";
import { expectRevert } from "../support/revert.ts";
import { CANCEL_AUTHORIZATION_TYPES, domainOf, signTransferAuthorization, randomNonce } from "../../lib/eip3009.ts";
import { billPayFixture, DAY, orderId, PULL_BUDGET, REFUND_BUDGET, units, type BillPayFixture } from "./fixture.ts";

let f: BillPayFixture;
beforeEach(async () => {
  f = await billPayFixture();
});

const asOperator = () => ({ account: f.operator.account });
const asRefunder = () => ({ account: f.refunder.account });

/** Awaits `action` and asserts it reverted with the custom error `name` carrying exactly `args`. */
async function expectRevertWith(action: Promise<unknown>, name: string, args: readonly unknown[]) {
  let error: unknown;
  try {
    await action;
  } catch (err) {
    error = err;
  }
  expect(error, `expected a revert with ${name}, but the call succeeded`).toBeInstanceOf(BaseError);
  const reverted = (error as BaseError).walk((e) => e instanceof ContractFunctionRevertedError) as ContractFunctionRevertedError | null;
  expect(reverted?.data?.errorName).toBe(name);
  expect(reverted?.data?.args).toEqual(args);
}

async function allow(payer = f.alice, token: Hex = f.usdc.address, amount = units("100")) {
  await f.billPay.write.setSpendingAllowance([token, amount], { account: payer.account });
}

describe("spending allowance", () => {
  it("is set, raised and revoked by the payer, with an event each time", async () => {
    const a = f.addr.alice;
    for (const amount of [units("50"), units("80"), 0n]) {
      const hash = await f.billPay.write.setSpendingAllowance([f.usdc.address, amount], { account: f.alice.account });
      const [event] = await f.logsOf(hash);
      expect(event?.eventName).toBe("SpendingAllowanceSet");
      expect(event?.args).toMatchObject({ payer: a, token: f.usdc.address, amount });
      expect(await f.billPay.read.spendingAllowance([a, f.usdc.address])).toBe(amount);
    }
  });

  it("is per payer and per token", async () => {
    await allow(f.alice, f.usdc.address, units("10"));
    expect(await f.billPay.read.spendingAllowance([f.addr.bob, f.usdc.address])).toBe(0n);
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdt.address])).toBe(0n);
  });

  it("cannot be granted for a token outside the accept-list, but can always be revoked", async () => {
    await expectRevert(
      f.billPay.write.setSpendingAllowance([f.plain.address, units("1")], { account: f.alice.account }),
      "TokenNotAccepted",
    );
    await allow(f.alice, f.usdc.address, units("10"));
    await f.billPay.write.setTokenAccepted([f.usdc.address, false]);
    await f.billPay.write.setSpendingAllowance([f.usdc.address, 0n], { account: f.alice.account });
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(0n);
  });
});

describe("pull", () => {
  it("moves the amount into BillPay, decrements the allowance first and records the order", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const id = orderId();
    const before = await f.usdc.read.balanceOf([f.addr.alice]);
    const hash = await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("30")], asOperator());
    const pulled = (await f.logsOf(hash)).find((l) => l.eventName === "Pulled");
    expect(pulled?.args).toEqual({
      orderId: id,
      payer: f.addr.alice,
      token: f.usdc.address,
      amount: units("30"),
      allowanceLeft: units("70"),
    });
    expect(await f.usdc.read.balanceOf([f.addr.alice])).toBe(before - units("30"));
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(units("30"));
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(units("70"));
    expect(await f.billPay.read.orderOf([id])).toEqual({
      payer: f.addr.alice,
      paid: units("30"),
      token: f.usdc.address,
      refunded: false,
      pulledAt: await f.publicClient.getBlockNumber(),
    });
  });

  it("may use the whole allowance, and not one unit more", async () => {
    await allow(f.alice, f.usdc.address, units("10"));
    await f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, units("10")], asOperator());
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], asOperator()),
      "SpendingAllowanceExceeded",
    );
  });

  it("refuses an amount beyond the allowance and moves nothing", async () => {
    await allow(f.alice, f.usdc.address, units("10"));
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, units("10") + 1n], asOperator()),
      "SpendingAllowanceExceeded",
    );
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(0n);
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(units("10"));
  });

  it("refuses a payer who set no allowance, even with an ERC-20 approval", async () => {
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.bob, f.usdc.address, 1n], asOperator()),
      "SpendingAllowanceExceeded",
    );
  });

  it("fails when the token approval is short although the spending allowance is not", async () => {
    await allow(f.alice, f.usdc.address, units("10"));
    await f.usdc.write.approve([f.billPay.address, units("1")], { account: f.alice.account });
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, units("2")], asOperator()),
      "ERC20InsufficientAllowance",
    );
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(units("10"));
  });

  it("accepts each order id once ever", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("1")], asOperator());
    await expectRevert(
      f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("1")], asOperator()),
      "OrderExists",
    );
    await f.billPay.write.refund([id, units("1")], asRefunder());
    await expectRevert(
      f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("1")], asOperator()),
      "OrderExists",
    );
  });

  it("refuses a zero amount and a token outside the accept-list", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 0n], asOperator()),
      "ZeroAmount",
    );
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.plain.address, 1n], asOperator()),
      "TokenNotAccepted",
    );
    await f.billPay.write.setTokenAccepted([f.usdc.address, false]);
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], asOperator()),
      "TokenNotAccepted",
    );
  });

  it("is the operator's alone", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    for (const caller of [f.alice, f.stranger, f.admin, f.pauser, f.refunder]) {
      await expectRevert(
        f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], { account: caller.account }),
        "AccessControlUnauthorizedAccount",
      );
    }
  });
});

describe("pullBatch", () => {
  it("pulls many orders across payers and tokens in one transaction", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    await allow(f.bob, f.usdt.address, units("100"));
    const items = [
      { orderId: orderId(), payer: f.addr.alice, token: f.usdc.address, amount: units("10") },
      { orderId: orderId(), payer: f.addr.alice, token: f.usdc.address, amount: units("20") },
      { orderId: orderId(), payer: f.addr.bob, token: f.usdt.address, amount: units("5") },
    ];
    const hash = await f.billPay.write.pullBatch([items], asOperator());
    const pulls = (await f.logsOf(hash)).filter((l) => l.eventName === "Pulled");
    expect(pulls.map((p) => (p.args as { allowanceLeft: bigint }).allowanceLeft)).toEqual([
      units("90"),
      units("70"),
      units("95"),
    ]);
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(units("30"));
    expect(await f.usdt.read.balanceOf([f.billPay.address])).toBe(units("5"));
  });

  it("reverts whole when one item breaks a rule: allowance, duplicate id, unaccepted token", async () => {
    await allow(f.alice, f.usdc.address, units("25"));
    const a = f.addr.alice;
    const ok = { orderId: orderId(), payer: a, token: f.usdc.address, amount: units("10") };
    const cases: Array<[typeof ok, string]> = [
      [{ orderId: orderId(), payer: a, token: f.usdc.address, amount: units("16") }, "SpendingAllowanceExceeded"],
      [{ ...ok }, "OrderExists"],
      [{ orderId: orderId(), payer: a, token: f.plain.address, amount: 1n }, "TokenNotAccepted"],
    ];
    for (const [bad, error] of cases) {
      await expectRevert(f.billPay.write.pullBatch([[ok, bad]], asOperator()), error);
    }
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(0n);
    expect(await f.billPay.read.spendingAllowance([a, f.usdc.address])).toBe(units("25"));
  });

  it("refuses an empty batch and callers without the operator role", async () => {
    await expectRevert(f.billPay.write.pullBatch([[]], asOperator()), "EmptyBatch");
    await allow(f.alice, f.usdc.address, units("25"));
    const item = { orderId: orderId(), payer: f.addr.alice, token: f.usdc.address, amount: 1n };
    await expectRevert(
      f.billPay.write.pullBatch([[item]], { account: f.stranger.account }),
      "AccessControlUnauthorizedAccount",
    );
  });
});

describe("refund of a pulled order", () => {
  async function pulled(amount = units("30")) {
    await allow(f.alice, f.usdc.address, units("100"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, amount], asOperator());
    return id;
  }

  it("pays the original payer, at most what was pulled, once", async () => {
    const id = await pulled(units("30"));
    const before = await f.usdc.read.balanceOf([f.addr.alice]);
    await expectRevert(f.billPay.write.refund([id, units("30") + 1n], asRefunder()), "RefundExceedsPayment");
    const hash = await f.billPay.write.refund([id, units("30")], asRefunder());
    const refunded = (await f.logsOf(hash)).find((l) => l.eventName === "Refunded");
    expect(refunded?.args).toEqual({
      orderId: id,
      payer: f.addr.alice,
      token: f.usdc.address,
      amount: units("30"),
      authorizationNonce: `0x${"0".repeat(64)}`,
    });
    expect(await f.usdc.read.balanceOf([f.addr.alice])).toBe(before + units("30"));
    await expectRevert(f.billPay.write.refund([id, 1n], asRefunder()), "AlreadyRefunded");
  });

  it("may be partial, and is still only once", async () => {
    const id = await pulled(units("30"));
    await f.billPay.write.refund([id, units("12")], asRefunder());
    expect((await f.billPay.read.orderOf([id])).refunded).toBe(true);
    await expectRevert(f.billPay.write.refund([id, units("18")], asRefunder()), "AlreadyRefunded");
  });

  it("refuses an unknown order, a zero amount and callers without the refunder role, the operator included", async () => {
    await expectRevert(f.billPay.write.refund([orderId(), 1n], asRefunder()), "UnknownOrder");
    const id = await pulled();
    await expectRevert(f.billPay.write.refund([id, 0n], asRefunder()), "ZeroAmount");
    for (const caller of [f.alice, f.operator, f.admin, f.pauser]) {
      await expectRevert(f.billPay.write.refund([id, 1n], { account: caller.account }), "AccessControlUnauthorizedAccount");
    }
  });

  it("still works for a token removed from the accept-list", async () => {
    const id = await pulled();
    await f.billPay.write.setTokenAccepted([f.usdc.address, false]);
    await f.billPay.write.refund([id, units("30")], asRefunder());
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(0n);
  });
});

describe("a refunded pull gives back the spending allowance it used", () => {
  const allowance = () => f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address]);
  async function pull(amount: bigint) {
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, amount], asOperator());
    return id;
  }

  it("restores what was refunded, with an event the ledger can follow", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const whole = await pull(units("30"));
    const partial = await pull(units("20"));
    expect(await allowance()).toBe(units("50"));
    const hash = await f.billPay.write.refund([whole, units("30")], asRefunder());
    const restored = (await f.logsOf(hash)).find((l) => l.eventName === "SpendingAllowanceRestored");
    expect(restored?.args).toEqual({ orderId: whole, payer: f.addr.alice, token: f.usdc.address, amount: units("30"), allowanceLeft: units("80") });
    await f.billPay.write.refund([partial, units("5")], asRefunder());
    expect(await allowance()).toBe(units("85"));
  });

  it("leaves a figure the payer set after the pull alone, a revocation above all", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const beforeRevoke = await pull(units("30"));
    const beforeRaise = await pull(units("10"));
    await allow(f.alice, f.usdc.address, 0n);
    let hash = await f.billPay.write.refund([beforeRevoke, units("30")], asRefunder());
    expect((await f.logsOf(hash)).map((l) => l.eventName)).not.toContain("SpendingAllowanceRestored");
    expect(await allowance()).toBe(0n);
    await allow(f.alice, f.usdc.address, units("40"));
    hash = await f.billPay.write.refund([beforeRaise, units("10")], asRefunder());
    expect((await f.logsOf(hash)).map((l) => l.eventName)).not.toContain("SpendingAllowanceRestored");
    expect(await allowance()).toBe(units("40"));
    // A pull after the new figure is restored as usual.
    const after = await pull(units("15"));
    await f.billPay.write.refund([after, units("15")], asRefunder());
    expect(await allowance()).toBe(units("40"));
  });

  it("keeps an unlimited allowance unlimited instead of overflowing", async () => {
    await allow(f.alice, f.usdc.address, maxUint256);
    const id = await pull(units("30"));
    await f.billPay.write.refund([id, units("30")], asRefunder());
    expect(await allowance()).toBe(maxUint256);
  });
});

describe("refund of an x402 order (paid by EIP-3009 transfer)", () => {
  /** Alice signs an authorization to BillPay; by default a facilitator then settles it. */
  async function authorization(value = units("7"), options: { settle?: boolean; to?: Hex } = {}) {
    const signed = await signTransferAuthorization(f.alice, f.usdc, {
      from: f.addr.alice,
      to: options.to ?? f.billPay.address,
      value,
      nonce: randomNonce(),
    });
    if (options.settle ?? true) {
      await f.usdc.write.transferWithAuthorization(signed.args, { account: f.stranger.account });
    }
    return { ...signed.message, signature: signed.signature };
  }
  const refundX402 = (id: Hex, auth: Awaited<ReturnType<typeof authorization>>, amount: bigint, token: Hex = f.usdc.address) =>
    f.billPay.write.refundAuthorization([id, token, auth, amount], asRefunder());

  it("refunds the payer once per authorization, naming its nonce", async () => {
    const auth = await authorization(units("7"));
    const id = orderId();
    const before = await f.usdc.read.balanceOf([f.addr.alice]);
    const hash = await refundX402(id, auth, units("7"));
    const refunded = (await f.logsOf(hash)).find((l) => l.eventName === "Refunded");
    expect(refunded?.args).toMatchObject({ orderId: id, payer: f.addr.alice, authorizationNonce: auth.nonce });
    expect(await f.usdc.read.balanceOf([f.addr.alice])).toBe(before + units("7"));
    const key = keccak256(
      encodeAbiParameters([{ type: "address" }, { type: "address" }, { type: "bytes32" }], [
        f.usdc.address,
        f.addr.alice,
        auth.nonce,
      ]),
    );
    expect(await f.billPay.read.authorizationRefunded([key])).toBe(true);
    await expectRevert(refundX402(orderId(), auth, 1n), "AuthorizationAlreadyRefunded");
  });

  it("returns at most what the payer authorised", async () => {
    const auth = await authorization(units("7"));
    await expectRevert(refundX402(orderId(), auth, units("7") + 1n), "RefundExceedsPayment");
  });

  it("refuses an authorization that is forged, altered, to another payee, or never used", async () => {
    const auth = await authorization(units("7"));
    await expectRevert(refundX402(orderId(), { ...auth, value: units("700") }, units("700")), "InvalidAuthorizationSignature");
    await expectRevert(refundX402(orderId(), { ...auth, from: f.addr.bob }, 1n), "InvalidAuthorizationSignature");
    const elsewhere = await authorization(units("7"), { to: f.addr.stranger });
    await expectRevert(refundX402(orderId(), elsewhere, 1n), "AuthorizationNotToThisContract");
    const unused = await authorization(units("7"), { settle: false });
    await expectRevert(refundX402(orderId(), unused, 1n), "AuthorizationNotUsed");
    await expectRevert(refundX402(orderId(), auth, 1n, f.usdt.address), "InvalidAuthorizationSignature");
    await expectRevert(refundX402(orderId(), auth, 1n, f.plain.address), "NotAnAuthorizationToken");
  });

  it("shares the order-id space with pulls: neither can reuse the other's id", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const pulledId = orderId();
    await f.billPay.write.pull([pulledId, f.addr.alice, f.usdc.address, units("1")], asOperator());
    const auth = await authorization();
    await expectRevert(refundX402(pulledId, auth, 1n), "OrderExists");
    const x402Id = orderId();
    await refundX402(x402Id, auth, 1n);
    await expectRevert(f.billPay.write.refund([x402Id, 1n], asRefunder()), "AlreadyRefunded");
    await expectRevert(f.billPay.write.pull([x402Id, f.addr.alice, f.usdc.address, 1n], asOperator()), "OrderExists");
  });

  it("is the refunder's alone, stops while paused, and refuses a zero amount", async () => {
    const auth = await authorization();
    for (const caller of [f.admin, f.operator, f.alice]) {
      await expectRevert(
        f.billPay.write.refundAuthorization([orderId(), f.usdc.address, auth, 1n], { account: caller.account }),
        "AccessControlUnauthorizedAccount",
      );
    }
    await expectRevert(refundX402(orderId(), auth, 0n), "ZeroAmount");
    await f.billPay.write.pause({ account: f.pauser.account });
    await expectRevert(refundX402(orderId(), auth, units("7")), "EnforcedPause");
    await f.billPay.write.unpause({ account: f.pauser.account });
    await refundX402(orderId(), auth, units("7"));
  });

  it("refuses the zero nonce, which marks a pull's refund in the Refunded event", async () => {
    const signed = await signTransferAuthorization(f.alice, f.usdc, {
      from: f.addr.alice,
      to: f.billPay.address,
      value: units("7"),
      nonce: `0x${"0".repeat(64)}`,
    });
    await f.usdc.write.transferWithAuthorization(signed.args, { account: f.stranger.account });
    await expectRevert(refundX402(orderId(), { ...signed.message, signature: signed.signature }, units("7")), "ZeroNonce");
  });
});

describe("refund budget", () => {
  /** Pulls `amount` from alice in USDC for a fresh order. */
  async function pulled(amount: bigint) {
    await allow(f.alice, f.usdc.address, maxUint256);
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, amount], asOperator());
    return id;
  }
  const available = async (token: Hex = f.usdc.address) => (await f.billPay.read.refundBudget([token]))[2];

  it("starts full, is drawn by every refund, refuses one beyond it, and refills over its period", async () => {
    expect(await f.billPay.read.refundBudget([f.usdc.address])).toEqual([REFUND_BUDGET, DAY, REFUND_BUDGET]);
    const a = await pulled(units("400"));
    const b = await pulled(units("200"));
    await f.billPay.write.refund([a, units("400")], asRefunder());
    expect(await available()).toBe(units("100"));
    await expectRevert(f.billPay.write.refund([b, units("200")], asRefunder()), "RefundBudgetExceeded");
    // A quarter of a day refills a quarter of the budget (125) on top of the 100 left.
    await f.testClient.increaseTime({ seconds: Number(DAY / 4n) });
    await f.testClient.mine({ blocks: 1 });
    expect(await available()).toBeGreaterThanOrEqual(units("225"));
    await f.billPay.write.refund([b, units("200")], asRefunder());
    // Never refills beyond the limit.
    await f.testClient.increaseTime({ seconds: Number(3n * DAY) });
    await f.testClient.mine({ blocks: 1 });
    expect(await available()).toBe(REFUND_BUDGET);
  });

  it("refuses every refund in a token without a budget", async () => {
    await f.billPay.write.setTokenAccepted([f.noReturn.address, true]);
    await f.billPay.write.setPullBudget([f.noReturn.address, units("100"), DAY]);
    await allow(f.alice, f.noReturn.address, units("50"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.noReturn.address, units("20")], asOperator());
    await expectRevert(f.billPay.write.refund([id, 1n], asRefunder()), "RefundBudgetExceeded");
  });

  it("is set by the admin alone, with an event; a lower limit caps what is left, and 0 stops refunds", async () => {
    await expectRevert(
      f.billPay.write.setRefundBudget([f.usdc.address, units("1"), DAY], asRefunder()),
      "AccessControlUnauthorizedAccount",
    );
    await expectRevert(f.billPay.write.setRefundBudget([f.usdc.address, units("1"), 0n]), "InvalidRefundPeriod");
    const hash = await f.billPay.write.setRefundBudget([f.usdc.address, units("50"), 3600n]);
    const [event] = await f.logsOf(hash);
    expect(event).toMatchObject({ eventName: "RefundBudgetSet", args: { token: f.usdc.address, limit: units("50"), period: 3600n } });
    expect(await available()).toBe(units("50"));
    // Raising the limit again does not refill the bucket at once.
    await f.billPay.write.setRefundBudget([f.usdc.address, units("5000"), 3600n]);
    expect(await available()).toBeLessThan(units("51"));
    await f.billPay.write.setRefundBudget([f.usdc.address, 0n, 3600n]);
    const id = await pulled(units("1"));
    await expectRevert(f.billPay.write.refund([id, 1n], asRefunder()), "RefundBudgetExceeded");
  });
});

describe("pull budget", () => {
  /** A period so long that the bucket refills nothing over a test's few seconds: exact figures. */
  const LONG = 2n ** 32n - 1n;
  const available = async (token: Hex = f.usdc.address) => (await f.billPay.read.pullBudget([token]))[2];
  const pullFrom = (payer: Hex, amount: bigint, token: Hex = f.usdc.address, id: Hex = orderId()) =>
    f.billPay.write.pull([id, payer, token, amount], asOperator());
  beforeEach(async () => {
    await allow(f.alice, f.usdc.address, maxUint256);
    await allow(f.bob, f.usdc.address, maxUint256);
  });

  it("is set for the accepted tokens, and starts full", async () => {
    for (const token of [f.usdc.address, f.usdt.address]) {
      expect(await f.billPay.read.pullBudget([token])).toEqual([PULL_BUDGET, DAY, PULL_BUDGET]);
    }
  });

  it("allows pulls within it, from all payers together, and refuses one beyond it with what is left", async () => {
    await f.billPay.write.setPullBudget([f.usdc.address, units("100"), LONG]);
    await pullFrom(f.addr.alice, units("60"));
    await pullFrom(f.addr.bob, units("30"));
    expect(await available()).toBe(units("10"));
    await expectRevertWith(pullFrom(f.addr.alice, units("11")), "PullBudgetExceeded", [f.usdc.address, units("11"), units("10")]);
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(units("90"));
    await pullFrom(f.addr.bob, units("10"));
    expect(await available()).toBe(0n);
    await expectRevertWith(pullFrom(f.addr.alice, 1n), "PullBudgetExceeded", [f.usdc.address, 1n, 0n]);
    // Each token has its own budget.
    expect(await available(f.usdt.address)).toBe(PULL_BUDGET);
  });

  it("counts every item of a batch, all or nothing", async () => {
    await allow(f.alice, f.usdt.address, units("100"));
    await f.billPay.write.setPullBudget([f.usdc.address, units("100"), LONG]);
    await f.billPay.write.setPullBudget([f.usdt.address, units("100"), LONG]);
    const item = (payer: Hex, amount: bigint, token: Hex = f.usdc.address) => ({ orderId: orderId(), payer, token, amount });
    await expectRevertWith(
      f.billPay.write.pullBatch([[item(f.addr.alice, units("40")), item(f.addr.bob, units("40")), item(f.addr.alice, units("30"))]], asOperator()),
      "PullBudgetExceeded",
      [f.usdc.address, units("30"), units("20")],
    );
    expect(await available()).toBe(units("100"));
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(0n);
    await f.billPay.write.pullBatch(
      [[item(f.addr.alice, units("40")), item(f.addr.alice, units("5"), f.usdt.address), item(f.addr.bob, units("40")), item(f.addr.alice, units("20"))]],
      asOperator(),
    );
    expect(await available()).toBe(0n);
    expect(await available(f.usdt.address)).toBe(units("95"));
    await expectRevert(f.billPay.write.pullBatch([[item(f.addr.bob, 1n)]], asOperator()), "PullBudgetExceeded");
  });

  it("refills over its period, never beyond its limit", async () => {
    await f.billPay.write.setPullBudget([f.usdc.address, units("100"), DAY]);
    await pullFrom(f.addr.alice, units("100"));
    expect(await available()).toBeLessThan(units("1"));
    await expectRevert(pullFrom(f.addr.alice, units("50")), "PullBudgetExceeded");
    // Half a day refills half the budget.
    await f.testClient.increaseTime({ seconds: Number(DAY / 2n) });
    await f.testClient.mine({ blocks: 1 });
    expect(await available()).toBeGreaterThanOrEqual(units("50"));
    await pullFrom(f.addr.bob, units("50"));
    await f.testClient.increaseTime({ seconds: Number(3n * DAY) });
    await f.testClient.mine({ blocks: 1 });
    expect(await available()).toBe(units("100"));
  });

  it("is not given back by a refund, so a pull and its refund cannot be looped", async () => {
    await f.billPay.write.setPullBudget([f.usdc.address, units("100"), LONG]);
    const id = orderId();
    await pullFrom(f.addr.alice, units("100"), f.usdc.address, id);
    await f.billPay.write.refund([id, units("100")], asRefunder());
    // The refund gave back the payer's allowance, but not the pull budget.
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(maxUint256);
    expect(await available()).toBe(0n);
    await expectRevertWith(pullFrom(f.addr.alice, 1n), "PullBudgetExceeded", [f.usdc.address, 1n, 0n]);
  });

  it("allows no pull in a token whose budget was never set, nor once set to 0", async () => {
    await f.billPay.write.setTokenAccepted([f.noReturn.address, true]);
    await allow(f.alice, f.noReturn.address, units("50"));
    expect(await f.billPay.read.pullBudget([f.noReturn.address])).toEqual([0n, 0n, 0n]);
    await expectRevertWith(pullFrom(f.addr.alice, 1n, f.noReturn.address), "PullBudgetExceeded", [f.noReturn.address, 1n, 0n]);
    await f.billPay.write.setPullBudget([f.usdc.address, 0n, DAY]);
    await expectRevertWith(pullFrom(f.addr.alice, 1n), "PullBudgetExceeded", [f.usdc.address, 1n, 0n]);
  });

  it("is set by the admin alone, with an event; a lower limit caps what is left, a higher one does not refill at once", async () => {
    for (const caller of [f.operator, f.refunder, f.pauser, f.alice]) {
      await expectRevert(
        f.billPay.write.setPullBudget([f.usdc.address, units("1"), DAY], { account: caller.account }),
        "AccessControlUnauthorizedAccount",
      );
    }
    await expectRevertWith(f.billPay.write.setPullBudget([f.usdc.address, units("1"), 0n]), "InvalidPullPeriod", [0n]);
    await expectRevertWith(f.billPay.write.setPullBudget([f.usdc.address, units("1"), 2n ** 32n]), "InvalidPullPeriod", [2n ** 32n]);
    const hash = await f.billPay.write.setPullBudget([f.usdc.address, units("50"), LONG]);
    const [event] = await f.logsOf(hash);
    expect(event).toMatchObject({ eventName: "PullBudgetSet", args: { token: f.usdc.address, limit: units("50"), period: LONG } });
    expect(await f.billPay.read.pullBudget([f.usdc.address])).toEqual([units("50"), LONG, units("50")]);
    await pullFrom(f.addr.alice, units("20"));
    await f.billPay.write.setPullBudget([f.usdc.address, units("60"), LONG]);
    expect(await f.billPay.read.pullBudget([f.usdc.address])).toEqual([units("60"), LONG, units("30")]);
    await f.billPay.write.setPullBudget([f.usdc.address, units("10"), LONG]);
    expect(await available()).toBe(units("10"));
  });
});

describe("a leaked hot key", () => {
  it("operator key: pulls only within payers' own allowances, and can move nothing out", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("100")], asOperator());
    await expectRevert(f.billPay.write.refund([id, units("100")], asOperator()), "AccessControlUnauthorizedAccount");
    await expectRevert(f.billPay.write.withdraw([f.usdc.address, f.addr.operator, 1n], asOperator()), "AccessControlUnauthorizedAccount");
    await expectRevert(f.billPay.write.pull([orderId(), f.addr.bob, f.usdc.address, 1n], asOperator()), "SpendingAllowanceExceeded");
  });

  it("operator key: takes at most the pull budget per period, from every payer together, and only into BillPay", async () => {
    // Both payers trust the service with unlimited allowances; the budget is 500 USDC a day.
    await allow(f.alice, f.usdc.address, maxUint256);
    await allow(f.bob, f.usdc.address, maxUint256);
    const budget = units("500");
    await f.billPay.write.setPullBudget([f.usdc.address, budget, DAY]);
    const held = async () => (await f.usdc.read.balanceOf([f.addr.alice])) + (await f.usdc.read.balanceOf([f.addr.bob]));
    const before = await held();

    // The thief pulls all it can, under fresh order ids, from both payers at once.
    const grab = (payer: Hex, amount: bigint) => f.billPay.write.pull([orderId(), payer, f.usdc.address, amount], asOperator());
    await expectRevert(grab(f.addr.alice, units("1000")), "PullBudgetExceeded");
    await grab(f.addr.alice, units("300"));
    await expectRevert(grab(f.addr.bob, units("300")), "PullBudgetExceeded");
    await grab(f.addr.bob, units("200"));
    await expectRevert(grab(f.addr.bob, units("1")), "PullBudgetExceeded");
    // The payers lost exactly the budget, all of it into BillPay.
    const taken = before - (await held());
    expect(taken).toBe(units("500"));
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(taken);
    expect(await f.usdc.read.balanceOf([f.addr.operator])).toBe(0n);
    await expectRevert(f.billPay.write.withdraw([f.usdc.address, f.addr.operator, taken], asOperator()), "AccessControlUnauthorizedAccount");

    // The guardian pauses: no pull even after the budget refills; the admin revokes the key.
    await f.billPay.write.pause({ account: f.pauser.account });
    await f.testClient.increaseTime({ seconds: Number(DAY) });
    await f.testClient.mine({ blocks: 1 });
    await expectRevert(grab(f.addr.alice, 1n), "EnforcedPause");
    await f.billPay.write.revokeRole([await f.billPay.read.OPERATOR_ROLE(), f.addr.operator]);
    await f.billPay.write.unpause({ account: f.pauser.account });
    await expectRevert(grab(f.addr.alice, 1n), "AccessControlUnauthorizedAccount");
  });

  it("refunder key: signing to BillPay from its own wallet and cancelling the nonce takes at most the budget", async () => {
    // The treasury holds 2,000 USDC of honest payments.
    await allow(f.alice, f.usdc.address, maxUint256);
    await allow(f.bob, f.usdc.address, maxUint256);
    await f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, units("1000")], asOperator());
    await f.billPay.write.pull([orderId(), f.addr.bob, f.usdc.address, units("1000")], asOperator());
    const treasury = await f.usdc.read.balanceOf([f.billPay.address]);

    // The thief holds the refunder key: it authorises a "payment" of the whole treasury
    // from its own wallet, cancels the nonce so the authorization reads as used, and refunds it.
    const thief = f.refunder;
    const drain = async (value: bigint) => {
      const nonce = randomNonce();
      const signed = await signTransferAuthorization(thief, f.usdc, { from: f.addr.refunder, to: f.billPay.address, value, nonce });
      const cancel = await thief.signTypedData({
        account: thief.account,
        domain: await domainOf(f.usdc),
        types: CANCEL_AUTHORIZATION_TYPES,
        primaryType: "CancelAuthorization",
        message: { authorizer: f.addr.refunder, nonce },
      });
      await f.usdc.write.cancelAuthorization([f.addr.refunder, nonce, cancel], { account: thief.account });
      return f.billPay.write.refundAuthorization([orderId(), f.usdc.address, { ...signed.message, signature: signed.signature }, value], asRefunder());
    };
    await expectRevert(drain(treasury), "RefundBudgetExceeded");
    await drain(REFUND_BUDGET);
    await expectRevert(drain(units("1")), "RefundBudgetExceeded");
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(treasury - REFUND_BUDGET);
    expect(await f.usdc.read.balanceOf([f.addr.refunder])).toBe(REFUND_BUDGET);

    // The guardian pauses: not one more unit leaves, even after the budget refills.
    await f.billPay.write.pause({ account: f.pauser.account });
    await f.testClient.increaseTime({ seconds: Number(DAY) });
    await f.testClient.mine({ blocks: 1 });
    await expectRevert(drain(units("1")), "EnforcedPause");
    // The admin revokes the key for good.
    await f.billPay.write.revokeRole([await f.billPay.read.REFUNDER_ROLE(), f.addr.refunder]);
    await f.billPay.write.unpause({ account: f.pauser.account });
    await expectRevert(drain(units("1")), "AccessControlUnauthorizedAccount");
  });
});

describe("pause", () => {
  it("stops pulls and refunds but never revocation, and is the pauser's alone", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, f.usdc.address, units("5")], asOperator());

    await expectRevert(f.billPay.write.pause({ account: f.stranger.account }), "AccessControlUnauthorizedAccount");
    await f.billPay.write.pause({ account: f.pauser.account });

    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], asOperator()),
      "EnforcedPause",
    );
    const item = { orderId: orderId(), payer: f.addr.alice, token: f.usdc.address, amount: 1n };
    await expectRevert(f.billPay.write.pullBatch([[item]], asOperator()), "EnforcedPause");

    await expectRevert(f.billPay.write.refund([id, units("5")], asRefunder()), "EnforcedPause");
    await f.billPay.write.setSpendingAllowance([f.usdc.address, 0n], { account: f.alice.account });
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(0n);

    await f.billPay.write.unpause({ account: f.pauser.account });
    await f.billPay.write.refund([id, units("5")], asRefunder());
    await allow(f.alice, f.usdc.address, units("1"));
    await f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], asOperator());
  });
});

describe("USDT-style token whose transfer functions return no bool", () => {
  it("is pulled, refunded and withdrawn through SafeERC20", async () => {
    const t = f.noReturn.address;
    await f.billPay.write.setTokenAccepted([t, true]);
    await f.billPay.write.setRefundBudget([t, units("100"), DAY]);
    await f.billPay.write.setPullBudget([t, units("100"), DAY]);
    await allow(f.alice, t, units("50"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, t, units("20")], asOperator());
    expect(await f.noReturn.read.balanceOf([f.billPay.address])).toBe(units("20"));
    await f.billPay.write.refund([id, units("5")], asRefunder());
    await f.billPay.write.withdraw([t, f.addr.admin, units("15")]);
    expect(await f.noReturn.read.balanceOf([f.billPay.address])).toBe(0n);
    expect(await f.noReturn.read.balanceOf([f.addr.alice])).toBe(units("985"));
  });

  it("surfaces the token's own failure instead of succeeding silently", async () => {
    const t = f.noReturn.address;
    await f.billPay.write.setTokenAccepted([t, true]);
    await f.billPay.write.setPullBudget([t, units("5000"), DAY]);
    await allow(f.alice, t, units("5000"));
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, t, units("2000")], asOperator()),
      "balance",
    );
  });
});

describe("admin", () => {
  it("withdraws to any address with an event; nobody else can", async () => {
    await allow(f.alice, f.usdc.address, units("100"));
    await f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, units("40")], asOperator());
    await expectRevert(
      f.billPay.write.withdraw([f.usdc.address, f.addr.operator, 1n], asOperator()),
      "AccessControlUnauthorizedAccount",
    );
    await expectRevert(f.billPay.write.withdraw([f.usdc.address, zeroAddress, 1n]), "ZeroAddress");
    await expectRevert(f.billPay.write.withdraw([f.usdc.address, f.addr.stranger, 0n]), "ZeroAmount");
    const hash = await f.billPay.write.withdraw([f.usdc.address, f.addr.stranger, units("40")]);
    const [event] = (await f.logsOf(hash)).filter((l) => l.eventName === "Withdrawn");
    expect(event?.args).toEqual({ token: f.usdc.address, to: f.addr.stranger, amount: units("40") });
    expect(await f.usdc.read.balanceOf([f.addr.stranger])).toBe(units("40"));
  });

  it("manages the accept-list with events; nobody else can", async () => {
    await expectRevert(
      f.billPay.write.setTokenAccepted([f.plain.address, true], asOperator()),
      "AccessControlUnauthorizedAccount",
    );
    await expectRevert(f.billPay.write.setTokenAccepted([zeroAddress, true]), "ZeroAddress");
    const hash = await f.billPay.write.setTokenAccepted([f.plain.address, true]);
    const [event] = await f.logsOf(hash);
    expect(event?.eventName).toBe("TokenAcceptanceSet");
    expect(event?.args).toEqual({ token: f.plain.address, accepted: true });
    expect(await f.billPay.read.isAcceptedToken([f.plain.address])).toBe(true);
  });

  it("grants and revokes the operator role", async () => {
    const role = await f.billPay.read.OPERATOR_ROLE();
    await f.billPay.write.revokeRole([role, f.addr.operator]);
    await allow(f.alice, f.usdc.address, units("100"));
    await expectRevert(
      f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], asOperator()),
      "AccessControlUnauthorizedAccount",
    );
    await f.billPay.write.grantRole([role, f.addr.stranger]);
    await f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], {
      account: f.stranger.account,
    });
  });

  it("cannot be deployed without an admin", async () => {
    await expectRevert(
      f.viem.deployContract("BillPay", [zeroAddress, zeroAddress, zeroAddress, zeroAddress, []]),
      "ZeroAddress",
    );
  });
});
