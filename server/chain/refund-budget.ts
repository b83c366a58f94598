/**
 * BillPay's refund budget, as the chain holds it: per token, up to `limit` refunded at
 * once, refilled at `limit` per `period` seconds (contracts/BillPay.sol). The service reads
 * it for two things:
 *   - a bill priced above one payer's share of `limit` (REFUND_PAYER_SHARE_PERCENT) could not be
 *     refunded promptly should it fail (every refund counts against its payer's share, from the
 *     first: orders/refund-share.ts), so it is refused before any challenge or pull
 *     (BILL_ABOVE_REFUND_LIMIT);
 *   - a refund the budget cannot take now waits its turn (orders/fulfil.ts), instead of
 *     being sent again on every pass.
 * Read through the service's own node and cached briefly: the figure changes only when the
 * admin sets it, and a stale read errs on neither side for long.
 */
import { formatUnits, type Hex } from "viem";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { sharedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { TtlCache } from "../biller/catalogue/ttl-cache.ts";
import { ServiceError } from "../errors.ts";
import { errorText } from "../log-safety.ts";

export interface RefundBudget {
  limit: bigint;
  period: bigint;
  available: bigint;
}

export class RefundBudgets {
  private readonly cache: TtlCache;
  /** The last figure read per token, used when the chain cannot be read. */
  private readonly lastKnown = new Map<string, RefundBudget>();

  constructor(
    private readonly deployments: Deployments,
    ttlMs = 30_000,
    /** Below this percentage of its limit a token's budget is under pressure (see underPressure). */
    private readonly pressurePercent = 50,
    /** One payer's most of the limit per period, as a percentage: the most one bill may cost. */
    private readonly payerSharePercent = 100,
  ) {
    this.cache = new TtlCache(ttlMs);
  }

  /** The token's budget now; the last figure read when the chain does not answer, else CHAIN_UNAVAILABLE. */
  async read(chain: ChainKey, token: string): Promise<RefundBudget> {
    const key = `${chain}:${token.toLowerCase()}`;
    try {
      return await this.cache.get(key, async () => {
        const d = this.deployments.chains[chain];
        if (!d) throw new Error(`${chain} has no deployment`);
        const [limit, period, available] = await sharedClientFor(chain, rpcUrlFor(chain, d)).readContract({
          address: d.billPay.address as Hex,
          abi: billPayAbi,
          functionName: "refundBudget",
          args: [token as Hex],
        });
        const budget = { limit, period, available };
        this.lastKnown.set(key, budget);
        return budget;
      });
    } catch (err) {
      const known = this.lastKnown.get(key);
      if (known) return known;
      throw new ServiceError("CHAIN_UNAVAILABLE", `the ${chain} refund budget could not be read (${errorText(err).split("\n")[0]}); try again`);
    }
  }

  /**
   * Whether the token's budget has less than REFUND_PRESSURE_PERCENT of its limit left: many
   * refunds lately, perhaps many wallets each taking its share. Every payer's checkable bill
   * is then checked before it is paid (biller/customer-check.ts), so wrong numbers stop
   * costing refunds until the budget has refilled.
   */
  async underPressure(chain: ChainKey, symbol: string): Promise<boolean> {
    const token = this.token(chain, symbol);
    if (!token) return false;
    const { limit, available } = await this.read(chain, token.address);
    return available * 100n < limit * BigInt(this.pressurePercent);
  }

  private token(chain: ChainKey, symbol: string) {
    return this.deployments.chains[chain]?.tokens.find((t) => t.symbol === symbol);
  }

  /** Forgets a token's cached figure (a refund just spent from it, or found it short). */
  forget(chain: ChainKey, token: string): void {
    this.cache.forget(`${chain}:${token.toLowerCase()}`);
  }

  /**
   * Refuses a bill whose price is more than one payer's share of the token's refund budget:
   * were it to fail, its refund could not go out by the share's rule, and the payer's money
   * would wait on an operator.
   */
  async assertRefundable(chain: ChainKey, symbol: string, amount: bigint, what = "this bill costs"): Promise<void> {
    const token = this.token(chain, symbol);
    if (!token) return; // not deployed here: the bill is refused for that elsewhere
    const { limit } = await this.read(chain, token.address);
    const share = (limit * BigInt(this.payerSharePercent)) / 100n;
    if (amount <= share) return;
    throw new ServiceError(
      "BILL_ABOVE_REFUND_LIMIT",
      `${what} ${formatUnits(amount, 6)} ${token.symbol}; the most BillPay refunds one payer in ${token.symbol} on ${chain} is ${formatUnits(share, 6)}, so a failed vend could not be refunded. Split the bill, or pay in another token`,
      { amount: amount.toString(), refund_limit: share.toString() },
    );
  }
}
