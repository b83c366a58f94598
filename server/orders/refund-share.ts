/**
 * Where a refund stands in BillPay's refund budget before it is sent (contracts/BillPay.sol
 * holds the budget: per token, `limit` refunded per `period`, refilling continuously).
 *
 * What bounds it, beside the chain's own budget:
 *   - every refund counts against its payer's share of the token's limit per period
 *     (REFUND_PAYER_SHARE_PERCENT), from the first: a fresh wallet cannot take the whole
 *     budget in one refund (bills priced above the share are refused: refund-budget.ts);
 *   - a refund the payer brought on himself (a payment he landed after the service refused it,
 *     `late_refund`) counts against the late slice too (REFUND_LATE_SLICE_PERCENT of the limit,
 *     all payers together), so honest failed vends never wait behind late landings.
 * The decision and the mark it leaves (refund_cleared_at, refund_cleared_amount) are made in
 * one transaction under a lock per (chain, token): refunds decided at once by several workers
 * or instances cannot all take the same room. A refund cleared once stays cleared (a retry
 * after a failed send does not count twice); it counts for one period from when it was cleared.
 * A refund begun anew (a move into REFUNDING from another state: orders/store.ts REFUND_AFRESH)
 * is cleared afresh.
 */
import type { Db } from "../db.ts";

/** The order whose refund is cleared: its key, payer and token, and whether it is a late landing's. */
export interface ClearedOrder {
  requestId: string;
  chain: string;
  tokenAddress: string;
  token: string;
  payer: string;
  lateRefund: boolean;
}

export interface RefundShares {
  /** One payer's most of a token's refund budget per period, as a percentage of its limit. */
  payerPercent: number;
  /** What refunds of late landings may take together per period, as a percentage of the limit. */
  latePercent: number;
}

/** Why a refund waits, and for how long; undefined when it may be sent now. */
export type RefundWait = { seconds: number; why: string } | undefined;

export async function clearRefund(
  db: Db,
  o: ClearedOrder,
  amount: bigint,
  budget: { limit: bigint; period: bigint },
  shares: RefundShares,
): Promise<RefundWait> {
  const token = o.tokenAddress.toLowerCase();
  return db.transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [`refund:${o.chain}:${token}`]);
    const [self] = await tx.query<{ cleared: boolean }>(`SELECT refund_cleared_at IS NOT NULL AS cleared FROM bill_order WHERE request_id = $1`, [o.requestId]);
    if (self?.cleared) return undefined;

    const since = `refund_cleared_at > now() - make_interval(secs => $3) AND request_id <> $4`;
    const [payer] = await tx.query<{ total: string; oldest: Date | null }>(
      `SELECT coalesce(sum(refund_cleared_amount), 0)::text AS total, min(refund_cleared_at) AS oldest FROM bill_order
       WHERE chain = $1 AND lower(token_address) = $2 AND ${since} AND payer = $5`,
      [o.chain, token, Number(budget.period), o.requestId, o.payer.toLowerCase()],
    );
    const waitFor = (oldest: Date | null) => Math.max(1, Math.ceil(((oldest?.getTime() ?? Date.now()) + Number(budget.period) * 1000 - Date.now()) / 1000));
    const share = (budget.limit * BigInt(shares.payerPercent)) / 100n;
    const payerTotal = BigInt(payer!.total);
    // A single refund above the share goes only when the payer has none in the period (else it
    // never could); the quote keeps bills under the share, so only an operator's refund does.
    if (payerTotal > 0n && payerTotal + amount > share) {
      return { seconds: waitFor(payer!.oldest), why: `the payer was refunded ${payerTotal} units of ${o.token} in the last ${budget.period} s; its share of the budget is ${share}` };
    }
    if (o.lateRefund) {
      const [late] = await tx.query<{ total: string; oldest: Date | null }>(
        `SELECT coalesce(sum(refund_cleared_amount), 0)::text AS total, min(refund_cleared_at) AS oldest FROM bill_order
         WHERE chain = $1 AND lower(token_address) = $2 AND ${since} AND late_refund`,
        [o.chain, token, Number(budget.period), o.requestId],
      );
      const slice = (budget.limit * BigInt(shares.latePercent)) / 100n;
      const lateTotal = BigInt(late!.total);
      // As with the share: one late refund goes when the slice is empty, else it never could.
      if (lateTotal > 0n && lateTotal + amount > slice) {
        return {
          seconds: waitFor(late!.oldest),
          why: `payments landed after their refusal were refunded ${lateTotal} units of ${o.token} in the last ${budget.period} s; such refunds share ${slice}, apart from honest refunds`,
        };
      }
    }
    await tx.query(`UPDATE bill_order SET refund_cleared_at = now(), refund_cleared_amount = $2 WHERE request_id = $1`, [o.requestId, amount.toString()]);
    return undefined;
  });
}
