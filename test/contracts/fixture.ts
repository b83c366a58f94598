/**
 * A fresh in-process Hardhat chain per call, with BillPay, two EIP-3009 tokens, a plain
 * token and a no-return (USDT-style) token, and two funded payers who approved BillPay.
 * The two EIP-3009 tokens have a refund budget of REFUND_BUDGET and a pull budget of
 * PULL_BUDGET per day (the other two have neither: no pull or refund in them until a test sets one).
 */
import { network } from "hardhat";
import { getAddress, maxUint256, parseEventLogs, parseUnits, type Abi, type Hash } from "viem";

export const units = (n: string) => parseUnits(n, 6);
export const REFUND_BUDGET = parseUnits("500", 6);
/** More than both payers hold together, so only the pull-budget tests ever meet it. */
export const PULL_BUDGET = parseUnits("10000", 6);
export const DAY = 86_400n;

export async function billPayFixture() {
  const { viem } = await network.connect();
  const publicClient = await viem.getPublicClient();
  const testClient = await viem.getTestClient();
  const [admin, operator, refunder, pauser, alice, bob, stranger] = await viem.getWalletClients();
  if (!admin || !operator || !refunder || !pauser || !alice || !bob || !stranger) throw new Error("not enough accounts");

  // Re-attached at checksummed addresses so they compare equal to addresses in decoded events.
  const eip3009 = async (name: string, symbol: string, version: string) => {
    const c = await viem.deployContract("EIP3009Token", [name, symbol, version, admin.account.address]);
    return viem.getContractAt("EIP3009Token", getAddress(c.address));
  };
  const usdc = await eip3009("USDC", "USDC", "2");
  const usdt = await eip3009("Tether USD", "USD₮", "1");
  const plain = await viem.getContractAt(
    "PlainToken",
    getAddress((await viem.deployContract("PlainToken", ["Tether USD", "USD₮", admin.account.address])).address),
  );
  const noReturn = await viem.getContractAt(
    "NoReturnToken",
    getAddress((await viem.deployContract("NoReturnToken")).address),
  );
  const deployed = await viem.deployContract("BillPay", [
    admin.account.address,
    operator.account.address,
    refunder.account.address,
    pauser.account.address,
    [usdc.address, usdt.address],
  ]);
  const billPay = await viem.getContractAt("BillPay", getAddress(deployed.address));
  for (const token of [usdc, usdt]) {
    await billPay.write.setRefundBudget([token.address, REFUND_BUDGET, DAY]);
    await billPay.write.setPullBudget([token.address, PULL_BUDGET, DAY]);
  }

  for (const payer of [alice, bob]) {
    for (const token of [usdc, usdt]) {
      await token.write.mint([payer.account.address, units("1000")]);
      await token.write.approve([billPay.address, maxUint256], { account: payer.account });
    }
    await plain.write.mint([payer.account.address, units("1000")]);
    await plain.write.approve([billPay.address, maxUint256], { account: payer.account });
    await noReturn.write.mint([payer.account.address, units("1000")]);
    await noReturn.write.approve([billPay.address, maxUint256], { account: payer.account });
  }

  /** Waits for a transaction and returns its decoded events from `abi`. */
  async function logsOf(hash: Hash, abi: Abi = billPay.abi) {
    const receipt = await publicClient.waitForTransactionReceipt({ hash });
    return parseEventLogs({ abi, logs: receipt.logs });
  }

  // Checksummed, as decoded events carry them (hardhat-viem's wallet clients use lower case).
  const addr = {
    admin: getAddress(admin.account.address),
    operator: getAddress(operator.account.address),
    refunder: getAddress(refunder.account.address),
    pauser: getAddress(pauser.account.address),
    alice: getAddress(alice.account.address),
    bob: getAddress(bob.account.address),
    stranger: getAddress(stranger.account.address),
  };

  return { viem, publicClient, testClient, addr, admin, operator, refunder, pauser, alice, bob, stranger, usdc, usdt, plain, noReturn, billPay, logsOf };
}

export type BillPayFixture = Awaited<ReturnType<typeof billPayFixture>>;

let counter = 0;
/** A fresh 32-byte order id. */
export function orderId(): `0x${string}` {
  counter += 1;
  return `0x${counter.toString(16).padStart(8, "0")}${"ab".repeat(28)}`;
}
