/**
 * An amount of a token as an operator reads it: "1.001 USDC on CELO", never "1001000 of
 * 0x5fbd…". The local stack deploys different contracts at the same address on its two chains,
 * so a token is named by its chain and address together, from the deployments file.
 */
import { formatUnits } from "viem";
import { chainById, tokenOn, type ChainKey } from "./chains.ts";
import type { Deployments } from "./deployments.ts";
import type { TokenSymbol } from "./networks.ts";

export interface NamedToken {
  chain: string;
  symbol: string;
  decimals: number;
}

/** The token deployed at `address` on `chain` (its key, e.g. CELO, or its chain id). */
export function tokenAt(deployments: Deployments, chain: ChainKey | string | number, address: string): NamedToken | undefined {
  const key = typeof chain === "number" || /^\d+$/.test(chain) ? chainById(Number(chain))?.key : chain;
  const token = key ? deployments.chains[key as ChainKey]?.tokens.find((t) => t.address.toLowerCase() === address.toLowerCase()) : undefined;
  return token && key ? { chain: key, symbol: token.symbol, decimals: token.decimals } : undefined;
}

/** The amount with its decimals, symbol and chain; raw units and a shortened address when the token is not one deployed here. */
export function amountText(units: bigint | string, token: NamedToken | undefined, address?: string): string {
  if (!token) return `${units} raw units of ${address ? `${address.slice(0, 10)}…` : "an unknown token"}`;
  return `${formatUnits(BigInt(units), token.decimals)} ${token.symbol} on ${token.chain}`;
}

/** amountText for a token named by its chain and address. */
export function describeAmount(deployments: Deployments, chain: ChainKey | string | number, address: string, units: bigint | string): string {
  return amountText(units, tokenAt(deployments, chain, address), address);
}

/** amountText for a token named by its chain and symbol (an order's own). */
export function amountIn(chain: string, symbol: string, units: bigint | string): string {
  const decimals = tokenOn(chain as ChainKey, symbol as TokenSymbol)?.decimals;
  return amountText(units, decimals === undefined ? undefined : { chain, symbol, decimals });
}
