/** What the operators' state reports of each chain: the ledger's progress, the hot keys, the treasury. */
import type { ChainKey } from "../../lib/chains.ts";
import type { ChainProgress } from "../../lib/ledger-watch.ts";

export interface TokenStatus {
  symbol: string;
  address: string;
  onChain: bigint | null;
  ledger: bigint | null;
  /**
   * The ledger's balance equals BillPay's on chain at the block the ledger has indexed through
   * (`ledgerBlock`), not at the head: a payment or refund in a block not indexed yet is lag, not
   * a mismatch. Null when either could not be read.
   */
  matches: boolean | null;
  /** The block the ledger's balance stands at, and `matches` compares at (null: unknown). */
  ledgerBlock: bigint | null;
  refundBudget: { limit: bigint; period: bigint; available: bigint } | null;
  /** The operator-wide pull budget: what the operator key (or whoever holds it) may still pull. */
  pullBudget: { limit: bigint; period: bigint; available: bigint } | null;
}

export interface ChainStatus {
  chain: ChainKey;
  chainId: number;
  head: bigint | null;
  indexed: bigint | null;
  lagBlocks: number | null;
  lagSeconds: number | null;
  /**
   * Seconds since the head block of the service's node was made. The ledger is held against
   * this node's head: a node that stops following its chain freezes both, and only its head's
   * age shows it.
   */
  headAgeSeconds: number | null;
  /** The ledger's state on this chain at the service's last look (server/ledger-health.ts). */
  ledger: ChainProgress | null;
  keys: Array<{ role: "operator" | "refunder"; address: string; gasWei: bigint | null }>;
  tokens: TokenStatus[];
  errors: string[];
}
