import { beforeEach, describe, expect, it } from "vitest";
import { parseSignature, type Hex } from "viem";
import { chainInfo } from "../../lib/chains.ts";
import { expectRevert } from "../support/revert.ts";
import { CANCEL_AUTHORIZATION_TYPES, domainOf, randomNonce, signTransferAuthorization } from "../../lib/eip3009.ts";
import { billPayFixture, units, type BillPayFixture } from "./fixture.ts";

let f: BillPayFixture;
beforeEach(async () => {
  f = await billPayFixture();
});

async function now(): Promise<bigint> {
  return (await f.publicClient.getBlock()).timestamp;
}

function authorize(input: { value?: bigint; nonce?: Hex; validAfter?: bigint; validBefore?: bigint } = {}) {
  return signTransferAuthorization(f.alice, f.usdc, {
    from: f.addr.alice,
    to: f.addr.bob,
    value: input.value ?? units("3"),
    nonce: input.nonce,
    validAfter: input.validAfter,
    validBefore: input.validBefore,
  });
}

describe("EIP-3009 token", () => {
  it("has 6 decimals and the real token's EIP-712 domain", async () => {
    const celoUsdc = chainInfo("CELO").tokens.find((t) => t.symbol === "USDC")!;
    expect(await f.usdc.read.decimals()).toBe(6);
    expect(await domainOf(f.usdc)).toEqual({
      name: celoUsdc.name,
      version: celoUsdc.eip712Version,
      chainId: await f.publicClient.getChainId(),
      verifyingContract: f.usdc.address,
    });
  });

  it("moves funds on a valid authorization submitted by anyone, and marks the nonce used", async () => {
    const auth = await authorize();
    const hash = await f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account });
    const events = await f.logsOf(hash, f.usdc.abi);
    expect(events.map((e) => e.eventName)).toEqual(["AuthorizationUsed", "Transfer"]);
    expect(events[0]?.args).toEqual({ authorizer: f.addr.alice, nonce: auth.message.nonce });
    expect(await f.usdc.read.balanceOf([f.addr.bob])).toBe(units("1003"));
    expect(await f.usdc.read.authorizationState([f.addr.alice, auth.message.nonce])).toBe(true);
  });

  it("accepts the packed-signature form as well", async () => {
    const auth = await authorize();
    const m = auth.message;
    await f.usdc.write.transferWithAuthorization(
      [m.from, m.to, m.value, m.validAfter, m.validBefore, m.nonce, auth.signature],
      { account: f.stranger.account },
    );
    expect(await f.usdc.read.balanceOf([f.addr.bob])).toBe(units("1003"));
  });

  it("refuses a replayed nonce", async () => {
    const auth = await authorize();
    await f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account });
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "AuthorizationUsedOrCanceled",
    );
    expect(await f.usdc.read.balanceOf([f.addr.bob])).toBe(units("1003"));
  });

  it("refuses an expired authorization", async () => {
    const auth = await authorize({ validBefore: (await now()) - 1n });
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "AuthorizationExpired",
    );
  });

  it("refuses an authorization that is not yet valid", async () => {
    const auth = await authorize({ validAfter: (await now()) + 3600n });
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "AuthorizationNotYetValid",
    );
  });

  it("refuses a signature by anyone but `from`, and a tampered value", async () => {
    const forged = await signTransferAuthorization(f.stranger, f.usdc, {
      from: f.addr.alice,
      to: f.addr.stranger,
      value: units("3"),
    });
    await expectRevert(
      f.usdc.write.transferWithAuthorization(forged.args, { account: f.stranger.account }),
      "InvalidSignature",
    );
    const auth = await authorize({ value: units("3") });
    const tampered = [...auth.args] as unknown as typeof auth.args;
    (tampered as unknown as unknown[])[2] = units("300");
    await expectRevert(
      f.usdc.write.transferWithAuthorization(tampered, { account: f.stranger.account }),
      "InvalidSignature",
    );
  });

  it("refuses a signature made for another token's domain", async () => {
    const auth = await signTransferAuthorization(f.alice, f.usdt, {
      from: f.addr.alice,
      to: f.addr.bob,
      value: units("1"),
    });
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "InvalidSignature",
    );
  });

  it("lets the authorizer cancel an unused nonce, after which it cannot be used or cancelled", async () => {
    const auth = await authorize();
    const signature = await f.alice.signTypedData({
      account: f.alice.account,
      domain: await domainOf(f.usdc),
      types: CANCEL_AUTHORIZATION_TYPES,
      primaryType: "CancelAuthorization",
      message: { authorizer: f.addr.alice, nonce: auth.message.nonce },
    });
    const { v, r, s } = parseSignature(signature);
    const hash = await f.usdc.write.cancelAuthorization([f.addr.alice, auth.message.nonce, Number(v), r, s], {
      account: f.stranger.account,
    });
    const [event] = await f.logsOf(hash, f.usdc.abi);
    expect(event?.eventName).toBe("AuthorizationCanceled");
    expect(await f.usdc.read.authorizationState([f.addr.alice, auth.message.nonce])).toBe(true);
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "AuthorizationUsedOrCanceled",
    );
    await expectRevert(
      f.usdc.write.cancelAuthorization([f.addr.alice, auth.message.nonce, signature], { account: f.stranger.account }),
      "AuthorizationUsedOrCanceled",
    );
  });

  it("refuses a cancellation signed by someone else", async () => {
    const nonce = randomNonce();
    const signature = await f.stranger.signTypedData({
      account: f.stranger.account,
      domain: await domainOf(f.usdc),
      types: CANCEL_AUTHORIZATION_TYPES,
      primaryType: "CancelAuthorization",
      message: { authorizer: f.addr.alice, nonce },
    });
    await expectRevert(
      f.usdc.write.cancelAuthorization([f.addr.alice, nonce, signature], { account: f.stranger.account }),
      "InvalidSignature",
    );
  });

  it("lets only the payee submit receiveWithAuthorization", async () => {
    const auth = await signTransferAuthorization(
      f.alice,
      f.usdc,
      { from: f.addr.alice, to: f.addr.bob, value: units("2") },
      "ReceiveWithAuthorization",
    );
    await expectRevert(
      f.usdc.write.receiveWithAuthorization(auth.args, { account: f.stranger.account }),
      "CallerMustBePayee",
    );
    await f.usdc.write.receiveWithAuthorization(auth.args, { account: f.bob.account });
    expect(await f.usdc.read.balanceOf([f.addr.bob])).toBe(units("1002"));
  });

  it("does not accept a receive authorization as a transfer authorization", async () => {
    const auth = await signTransferAuthorization(
      f.alice,
      f.usdc,
      { from: f.addr.alice, to: f.addr.bob, value: units("2") },
      "ReceiveWithAuthorization",
    );
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "InvalidSignature",
    );
  });

  it("refuses an authorization beyond the payer's balance", async () => {
    const auth = await authorize({ value: units("5000") });
    await expectRevert(
      f.usdc.write.transferWithAuthorization(auth.args, { account: f.stranger.account }),
      "ERC20InsufficientBalance",
    );
    expect(await f.usdc.read.authorizationState([f.addr.alice, auth.message.nonce])).toBe(false);
  });
});
