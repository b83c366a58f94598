/**
 * What the chain says a wallet can pay through BillPay, per token: its balance, its ERC-20
 * allowance to BillPay, the spending allowance it set on BillPay and what its periodic limit
 * leaves in the current period. A pull can take at most the least of the four. Read in one
 * eth_call per chain (a Multicall3 aggregate), which also answers the block it read and its time.
 */
import { errorText } from "../log-safety.ts";
import { erc20Abi, parseAbi, type ContractFunctionParameters, type Hex } from "viem";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { sharedClientFor } from "../../lib/chain-client.ts";
import { MULTICALL3_ADDRESS, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { ServiceError, type ErrorCode } from "../errors.ts";

export interface TokenState {
  token: Hex;
  balance: bigint;
  tokenAllowance: bigint;
  spendingAllowance: bigint;
  /** The payer's periodic limit (setSpendingLimit), or null when it set none. */
  periodLimit: PeriodLimit | null;
  /** The most one pull could take now. */
  spendable: bigint;
  blockNumber: bigint;
  /** That block's time (unix seconds): "now" for the periodic limit. */
  blockTimestamp: bigint;
}

export interface PeriodLimit {
  amountPerPeriod: bigint;
  periodSeconds: bigint;
  /** The current period: when it began (unix seconds), what it has used and what is left in it. */
  periodStart: bigint;
  spent: bigint;
  available: bigint;
}

// Multicall3's own views of the block a call runs in (viem's multicall3Abi carries only aggregate3).
const blockAbi = parseAbi(["function getBlockNumber() view returns (uint256)", "function getCurrentBlockTimestamp() view returns (uint256)"]);

const min = (...xs: bigint[]) => xs.reduce((a, b) => (a < b ? a : b));

export async function readWalletState(deployments: Deployments, chain: ChainKey, wallet: Hex, tokens: Hex[]): Promise<TokenState[]> {
  const d = deployments.chains[chain]!;
  const client = sharedClientFor(chain, rpcUrlFor(chain, d));
  const billPay = d.billPay.address as Hex;
  try {
    // One eth_call: the balances, allowances and limits, and the block they were read at
    // (asking for the block separately cost a second round trip, the longer one under load).
    const contracts: ContractFunctionParameters[] = [
      { address: MULTICALL3_ADDRESS, abi: blockAbi, functionName: "getBlockNumber" },
      { address: MULTICALL3_ADDRESS, abi: blockAbi, functionName: "getCurrentBlockTimestamp" },
      ...tokens.flatMap((token) => [
        { address: token, abi: erc20Abi, functionName: "balanceOf", args: [wallet] },
        { address: token, abi: erc20Abi, functionName: "allowance", args: [wallet, billPay] },
        { address: billPay, abi: billPayAbi, functionName: "spendingAllowance", args: [wallet, token] },
        { address: billPay, abi: billPayAbi, functionName: "spendingLimit", args: [wallet, token] },
      ]),
    ];
    // batchSize 0: never split into several eth_calls, which could each read a later block.
    const [block, time, ...results] = (await client.multicall({ allowFailure: false, contracts, batchSize: 0 })) as unknown[];
    const [blockNumber, blockTimestamp] = [block as bigint, time as bigint];
    return tokens.map((token, i) => {
      const [balance, tokenAllowance, spendingAllowance] = results.slice(i * 4, i * 4 + 3) as bigint[];
      const [amountPerPeriod, periodSeconds, periodStart, spent, available] = results[i * 4 + 3] as readonly bigint[];
      const periodLimit = periodSeconds === 0n ? null : { amountPerPeriod: amountPerPeriod!, periodSeconds: periodSeconds!, periodStart: periodStart!, spent: spent!, available: available! };
      const spendable = min(balance!, tokenAllowance!, spendingAllowance!, periodLimit?.available ?? balance!);
      return { token, balance: balance!, tokenAllowance: tokenAllowance!, spendingAllowance: spendingAllowance!, periodLimit, spendable, blockNumber, blockTimestamp };
    });
  } catch (err) {
    throw new ServiceError("CHAIN_UNAVAILABLE", `could not read ${chain}: ${errorText(err).split("\n")[0]}`);
  }
}

/** Refuses, naming the short figure, when a pull of `amount` could not go through. */
export function requireFunds(state: TokenState, amount: bigint, symbol: string): void {
  const short = (code: ErrorCode, have: bigint, what: string, extra: Record<string, unknown> = {}) =>
    new ServiceError(code, `the bill costs ${amount} ${symbol} units but ${what} is ${have}; nothing was charged`, {
      required: amount.toString(),
      available: have.toString(),
      ...extra,
    });
  if (state.spendingAllowance < amount) {
    throw short("SPENDING_ALLOWANCE_INSUFFICIENT", state.spendingAllowance, "the spending allowance left on BillPay (setSpendingAllowance)");
  }
  const period = state.periodLimit;
  if (period && period.available < amount) {
    const ends = period.periodStart + period.periodSeconds;
    throw short("SPENDING_LIMIT_EXCEEDED", period.available, `what your periodic limit (setSpendingLimit) leaves until ${new Date(Number(ends) * 1000).toISOString()}`, {
      period_ends: new Date(Number(ends) * 1000).toISOString(),
    });
  }
  if (state.tokenAllowance < amount) throw short("TOKEN_ALLOWANCE_INSUFFICIENT", state.tokenAllowance, "the token allowance to BillPay (approve)");
  if (state.balance < amount) throw short("BALANCE_INSUFFICIENT", state.balance, "the wallet's balance");
}

/**
 * The periodic limit as the ledger indexed it (its account row), brought to `now` as BillPay
 * does: fixed periods from the limit's start, the tally at zero in a period no pull has
 * touched yet. Null when the payer set no limit.
 */
export function ledgerPeriodLimit(account: Record<string, unknown>, now: bigint): PeriodLimit | null {
  const big = (k: string) => BigInt(String(account[k] ?? 0));
  const periodSeconds = big("limitPeriod");
  if (periodSeconds === 0n) return null;
  const amountPerPeriod = big("limitPerPeriod");
  const start = big("limitStart");
  const periodStart = now < start ? start : start + ((now - start) / periodSeconds) * periodSeconds;
  const spent = big("periodStart") === periodStart ? big("periodSpent") : 0n;
  return { amountPerPeriod, periodSeconds, periodStart, spent, available: spent >= amountPerPeriod ? 0n : amountPerPeriod - spent };
}
