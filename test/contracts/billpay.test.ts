import { beforeEach, describe, expect, it } from "vitest";
import { keccak256, encodeAbiParameters, zeroAddress, type Hex } from "viem";
import { expectRevert } from "../support/revert.ts";
import { signTransferAuthorization, randomNonce } from "../../lib/eip3009.ts";
import { billPayFixture, orderId, units, type BillPayFixture } from "./fixture.ts";

let f: BillPayFixture;
beforeEach(async () => {
  f = await billPayFixture();
});

const asOperator = () => ({ account: f.operator.account });

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
    await f.billPay.write.refund([id, units("1")], asOperator());
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
    for (const caller of [f.alice, f.stranger, f.admin, f.pauser]) {
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
    await expectRevert(f.billPay.write.refund([id, units("30") + 1n], asOperator()), "RefundExceedsPayment");
    const hash = await f.billPay.write.refund([id, units("30")], asOperator());
    const refunded = (await f.logsOf(hash)).find((l) => l.eventName === "Refunded");
    expect(refunded?.args).toEqual({
      orderId: id,
      payer: f.addr.alice,
      token: f.usdc.address,
      amount: units("30"),
      authorizationNonce: `0x${"0".repeat(64)}`,
    });
    expect(await f.usdc.read.balanceOf([f.addr.alice])).toBe(before + units("30"));
    await expectRevert(f.billPay.write.refund([id, 1n], asOperator()), "AlreadyRefunded");
  });

  it("may be partial, and is still only once", async () => {
    const id = await pulled(units("30"));
    await f.billPay.write.refund([id, units("12")], asOperator());
    expect((await f.billPay.read.orderOf([id])).refunded).toBe(true);
    await expectRevert(f.billPay.write.refund([id, units("18")], asOperator()), "AlreadyRefunded");
  });

  it("refuses an unknown order, a zero amount and callers without the operator role", async () => {
    await expectRevert(f.billPay.write.refund([orderId(), 1n], asOperator()), "UnknownOrder");
    const id = await pulled();
    await expectRevert(f.billPay.write.refund([id, 0n], asOperator()), "ZeroAmount");
    await expectRevert(
      f.billPay.write.refund([id, 1n], { account: f.alice.account }),
      "AccessControlUnauthorizedAccount",
    );
  });

  it("still works for a token removed from the accept-list", async () => {
    const id = await pulled();
    await f.billPay.write.setTokenAccepted([f.usdc.address, false]);
    await f.billPay.write.refund([id, units("30")], asOperator());
    expect(await f.usdc.read.balanceOf([f.billPay.address])).toBe(0n);
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
    f.billPay.write.refundAuthorization([id, token, auth, amount], asOperator());

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
    await expectRevert(f.billPay.write.refund([x402Id, 1n], asOperator()), "AlreadyRefunded");
    await expectRevert(f.billPay.write.pull([x402Id, f.addr.alice, f.usdc.address, 1n], asOperator()), "OrderExists");
  });

  it("is the operator's alone, works while paused, and refuses a zero amount", async () => {
    const auth = await authorization();
    await expectRevert(
      f.billPay.write.refundAuthorization([orderId(), f.usdc.address, auth, 1n], { account: f.admin.account }),
      "AccessControlUnauthorizedAccount",
    );
    await expectRevert(refundX402(orderId(), auth, 0n), "ZeroAmount");
    await f.billPay.write.pause({ account: f.pauser.account });
    await refundX402(orderId(), auth, units("7"));
  });
});

describe("pause", () => {
  it("stops pulls but never revokes or refunds, and is the pauser's alone", async () => {
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

    await f.billPay.write.refund([id, units("5")], asOperator());
    await f.billPay.write.setSpendingAllowance([f.usdc.address, 0n], { account: f.alice.account });
    expect(await f.billPay.read.spendingAllowance([f.addr.alice, f.usdc.address])).toBe(0n);

    await f.billPay.write.unpause({ account: f.pauser.account });
    await allow(f.alice, f.usdc.address, units("1"));
    await f.billPay.write.pull([orderId(), f.addr.alice, f.usdc.address, 1n], asOperator());
  });
});

describe("USDT-style token whose transfer functions return no bool", () => {
  it("is pulled, refunded and withdrawn through SafeERC20", async () => {
    const t = f.noReturn.address;
    await f.billPay.write.setTokenAccepted([t, true]);
    await allow(f.alice, t, units("50"));
    const id = orderId();
    await f.billPay.write.pull([id, f.addr.alice, t, units("20")], asOperator());
    expect(await f.noReturn.read.balanceOf([f.billPay.address])).toBe(units("20"));
    await f.billPay.write.refund([id, units("5")], asOperator());
    await f.billPay.write.withdraw([t, f.addr.admin, units("15")]);
    expect(await f.noReturn.read.balanceOf([f.billPay.address])).toBe(0n);
    expect(await f.noReturn.read.balanceOf([f.addr.alice])).toBe(units("985"));
  });

  it("surfaces the token's own failure instead of succeeding silently", async () => {
    const t = f.noReturn.address;
    await f.billPay.write.setTokenAccepted([t, true]);
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
      f.viem.deployContract("BillPay", [zeroAddress, zeroAddress, zeroAddress, []]),
      "ZeroAddress",
    );
  });
});
