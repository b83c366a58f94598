/**
 * A fresh in-process Hardhat chain per call, with BillPay, two EIP-3009 tokens, a plain
 * token and a no-return (USDT-style) token, and two funded payers who approved BillPay.
 */
import { network } from "hardhat";
import { maxUint256, parseEventLogs, parseUnits, type Abi, type Hash } from "viem";

export const units = (n: string) => parseUnits(n, 6);

export async function billPayFixture() {
  const { viem } = await network.connect();
  const publicClient = await viem.getPublicClient();
  const [admin, operator, pauser, alice, bob, stranger] = await viem.getWalletClients();
  if (!admin || !operator || !pauser || !alice || !bob || !stranger) throw new Error("not enough accounts");

  const usdc = await viem.deployContract("EIP3009Token", ["USDC", "USDC", "2", admin.account.address]);
  const usdt = await viem.deployContract("EIP3009Token", ["Tether USD", "USD₮", "1", admin.account.address]);
  const plain = await viem.deployContract("PlainToken", ["Tether USD", "USD₮", admin.account.address]);
  const noReturn = await viem.deployContract("NoReturnToken");
  const billPay = await viem.deployContract("BillPay", [
    admin.account.address,
    operator.account.address,
    pauser.account.address,
    [usdc.address, usdt.address],
  ]);

  for (const payer of [alice, bob]) {
    for (const token of [usdc, usdt, plain]) {
      await token.write.mint([payer.account.address, units("1000")]);
      await token.write.approve([billPay.address, maxUint256], { account: payer.account });
    }
    await noReturn.write.mint([payer.account.address, units("1000")]);
    await noReturn.write.approve([billPay.address, maxUint256], { account: payer.account });
  }

  /** Waits for a transaction and returns its decoded events from `abi`. */
  async function logsOf(hash: Hash, abi: Abi = billPay.abi) {
    const receipt = await publicClient.waitForTransactionReceipt({ hash });
    return parseEventLogs({ abi, logs: receipt.logs });
  }

  return { viem, publicClient, admin, operator, pauser, alice, bob, stranger, usdc, usdt, plain, noReturn, billPay, logsOf };
}

export type BillPayFixture = Awaited<ReturnType<typeof billPayFixture>>;

let counter = 0;
/** A fresh 32-byte order id. */
export function orderId(): `0x${string}` {
  counter += 1;
  return `0x${counter.toString(16).padStart(8, "0")}${"ab".repeat(28)}`;
}
