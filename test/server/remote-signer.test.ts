/**
 * The hot keys sign through viem's Account interface, which a remote or KMS signer
 * implements with `toAccount` (an address and async signing calls); a local key is one
 * implementation. Here the operator and refunder are such signers, whose keys live behind an
 * async "signing service" the operator never sees: a pull and its refund go through them.
 */
import { randomBytes } from "node:crypto";
import { mnemonicToAccount, privateKeyToAccount, toAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HARDHAT_MNEMONIC } from "../../lib/local-accounts.ts";
import { ChainOperator, onChainOrderId } from "../../server/chain/operator.ts";
import { chainActors } from "../support/actors.ts";
import { freshAccounts, leaseSharedChains, type SharedChains } from "../support/stack.ts";

/** A signer whose key stays with a "service": every signature is an async call to it, counted. */
function remoteSigner(privateKey: `0x${string}`) {
  const key = privateKeyToAccount(privateKey);
  const calls: string[] = [];
  const remote = async <T>(what: string, sign: () => Promise<T>) => {
    calls.push(what);
    await new Promise((r) => setTimeout(r, 5)); // a network hop
    return sign();
  };
  const account = toAccount({
    address: key.address,
    signMessage: ({ message }) => remote("message", () => key.signMessage({ message })),
    signTransaction: (tx, options) => remote("transaction", () => key.signTransaction(tx, options)),
    signTypedData: (data) => remote("typedData", () => key.signTypedData(data as Parameters<typeof key.signTypedData>[0])),
  });
  return { account, calls };
}

describe("remote signers for the hot keys", () => {
  const accounts = freshAccounts();
  let stack: SharedChains;
  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
  });
  afterAll(() => stack?.close());

  it("pull and refund through signers that implement viem's Account with async calls", async () => {
    // The local deployment's operator (#1) and refunder (#20) keys, held behind the "service".
    const keyOf = (index: number) => `0x${Buffer.from(mnemonicToAccount(HARDHAT_MNEMONIC, { addressIndex: index }).getHdKey().privateKey!).toString("hex")}` as const;
    const operator = remoteSigner(keyOf(1));
    const refunder = remoteSigner(keyOf(20));
    const chainOperator = new ChainOperator(stack.deployments, { operator: operator.account, refunder: refunder.account });
    const celo = chainActors(stack.deployments, "CELO");
    const payer = accounts(12);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const before = await celo.balanceOf("USDC", payer.address);

    // BillPay keys every pull by its order id, for good: on shared chains, an id of this run's own.
    const requestId = `req_20261123${randomBytes(12).toString("hex")}`;
    const pulled = await chainOperator.pull("CELO", { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 2_000_000n });
    expect((await celo.publicClient.getTransaction({ hash: pulled })).from.toLowerCase()).toBe(operator.account.address.toLowerCase());
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before - 2_000_000n);

    const refunded = await chainOperator.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 2_000_000n });
    expect("txHash" in refunded).toBe(true);
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before);
    expect(operator.calls).toEqual(["transaction"]);
    expect(refunder.calls).toEqual(["transaction"]);
  });
});
