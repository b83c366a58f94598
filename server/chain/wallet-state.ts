/**
 * What the chain says a wallet can pay through BillPay, per token: its balance, its ERC-20
 * allowance to BillPay and the spending allowance it set on BillPay. A pull can take at most
 * the least of the three. Read in one multicall per chain, at one block.
 */
import { errorText } from "../log-safety.ts";
import { erc20Abi, type Hex } from "viem";
import { billPayAbi } from "../../lib/abis.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { ServiceError } from "../errors.ts";

export interface TokenState {
  token: Hex;
  balance: bigint;
  tokenAllowance: bigint;
  spendingAllowance: bigint;
  /** The most one pull could take now. */
  spendable: bigint;
  blockNumber: bigint;
}

export async function readWalletState(deployments: Deployments, chain: ChainKey, wallet: Hex, tokens: Hex[]): Promise<TokenState[]> {
  const d = deployments.chains[chain]!;
  const client = publicClientFor(chain, rpcUrlFor(chain, d));
  const billPay = d.billPay.address as Hex;
  try {
    const blockNumber = await client.getBlockNumber();
    const results = await client.multicall({
      allowFailure: false,
      blockNumber,
      contracts: tokens.flatMap((token) => [
        { address: token, abi: erc20Abi, functionName: "balanceOf", args: [wallet] } as const,
        { address: token, abi: erc20Abi, functionName: "allowance", args: [wallet, billPay] } as const,
        { address: billPay, abi: billPayAbi, functionName: "spendingAllowance", args: [wallet, token] } as const,
      ]),
    });
    return tokens.map((token, i) => {
      const [balance, tokenAllowance, spendingAllowance] = results.slice(i * 3, i * 3 + 3) as bigint[];
      const spendable = [balance!, tokenAllowance!, spendingAllowance!].reduce((a, b) => (a < b ? a : b));
      return { token, balance: balance!, tokenAllowance: tokenAllowance!, spendingAllowance: spendingAllowance!, spendable, blockNumber };
    });
  } catch (err) {
    throw new ServiceError("CHAIN_UNAVAILABLE", `could not read ${chain}: ${errorText(err).split("\n")[0]}`);
  }
}

/** Refuses, naming the short figure, when a pull of `amount` could not go through. */
export function requireFunds(state: TokenState, amount: bigint, symbol: string): void {
  const short = (code: "SPENDING_ALLOWANCE_INSUFFICIENT" | "TOKEN_ALLOWANCE_INSUFFICIENT" | "BALANCE_INSUFFICIENT", have: bigint, what: string) =>
    new ServiceError(code, `the bill costs ${amount} ${symbol} units but ${what} is ${have}; nothing was charged`, {
      required: amount.toString(),
      available: have.toString(),
    });
  if (state.spendingAllowance < amount) {
    throw short("SPENDING_ALLOWANCE_INSUFFICIENT", state.spendingAllowance, "the spending allowance left on BillPay (setSpendingAllowance)");
  }
  if (state.tokenAllowance < amount) throw short("TOKEN_ALLOWANCE_INSUFFICIENT", state.tokenAllowance, "the token allowance to BillPay (approve)");
  if (state.balance < amount) throw short("BALANCE_INSUFFICIENT", state.balance, "the wallet's balance");
}
