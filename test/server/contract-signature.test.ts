/**
 * Who signed a message (lib/contract-signature.ts), against a node that records what it is
 * asked: every question put to a wallet's code, or to ERC-6492's validator for a wallet not yet
 * deployed, runs within the gas cap, as anyone may write that code; and a wallet with no code
 * whose signature does not recover costs no call at all.
 */
import { concat, encodeAbiParameters, type Hex, type PublicClient } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { CONTRACT_SIGNATURE_GAS, messageSigner } from "../../lib/contract-signature.ts";

const ERC6492_SUFFIX = `0x${"6492".repeat(16)}` as Hex;
const MAGIC = `0x1626ba7e${"0".repeat(56)}` as Hex;

/** A node whose wallets have `code`, answering every call with `answer`, recording each call's gas. */
function node(code: Hex | undefined, answer: Hex) {
  const calls: Array<{ to?: string; gas?: bigint }> = [];
  return {
    calls,
    client: {
      getCode: async () => code,
      call: async (args: { to?: Hex; data?: Hex; gas?: bigint }) => (calls.push({ to: args.to, gas: args.gas }), { data: answer }),
    } as unknown as Pick<PublicClient, "getCode" | "call">,
  };
}

/** An ERC-6492 wrapper: (factory, its calldata, the inner signature), then the suffix. */
const wrapped = (inner: Hex): Hex =>
  concat([encodeAbiParameters([{ type: "address" }, { type: "bytes" }, { type: "bytes" }], ["0x00000000000000000000000000000000000000f1", "0xdeadbeef", inner]), ERC6492_SUFFIX]);

describe("who signed a message", () => {
  const wallet = "0x00000000000000000000000000000000000000aa" as Hex;
  const junk = `0x${"11".repeat(65)}` as Hex;

  it("an ordinary wallet's own signature, with no call to the node", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { client, calls } = node(undefined, "0x");
    expect(await messageSigner(client, account.address, "hello", await account.signMessage({ message: "hello" }))).toBe("wallet");
    expect(calls).toEqual([]);
  });

  it("a wallet with no code whose signature does not recover: refused, with no call to run", async () => {
    const { client, calls } = node("0x", `0x${"00".repeat(31)}01`);
    expect(await messageSigner(client, wallet, "hello", junk)).toBeNull();
    expect(calls).toEqual([]);
  });

  it("a deployed contract wallet is asked by ERC-1271 within the gas cap", async () => {
    const { client, calls } = node("0x6080", MAGIC);
    expect(await messageSigner(client, wallet, "hello", junk)).toBe("contract");
    expect(calls).toEqual([{ to: wallet, gas: CONTRACT_SIGNATURE_GAS }]);
  });

  it("an ERC-6492 signature is asked of the validator in one call with no target and within the gas cap: refused when it says no, accepted when it says yes", async () => {
    const no = node("0x", `0x${"00".repeat(32)}`);
    expect(await messageSigner(no.client, wallet, "hello", wrapped(junk))).toBeNull();
    expect(no.calls).toEqual([{ to: undefined, gas: CONTRACT_SIGNATURE_GAS }]);
    const yes = node("0x", "0x01");
    expect(await messageSigner(yes.client, wallet, "hello", wrapped(junk))).toBe("contract");
    expect(yes.calls).toEqual([{ to: undefined, gas: CONTRACT_SIGNATURE_GAS }]);
  });
});
