/**
 * Keeps the service's bookkeeping tables bounded: what can no longer matter is deleted on the
 * worker's schedule.
 *   - spent link signatures and link nonces older than twice the freshness window: their
 *     signed time is outside the window, so a replay is refused as stale without them;
 *   - expired rate-limit counters, and payers' pull holds past their end (a release lost);
 *   - the agent hub's quote locks past their quote's expiry (quote/quote-locks.ts);
 *   - refusals kept for a late landing (orders/late-landing.ts) a day after their authorization expired;
 *   - A2A tasks past their lifetime, and beyond the table's capacity (agent/a2a-tasks.ts);
 *   - orders that moved no money (PAYMENT_FAILED: never charged, and only so once the chain
 *     shows their authorization or pull can no longer land) older than ORDER_UNPAID_RETENTION_DAYS,
 *     with their callback deliveries: anyone can make such orders, so they must not pile up.
 * Orders that moved money, links and schedules are the service's record and are never purged here; nor are
 * rate versions (one row per change of rate, not per request: they say what each price was made from).
 */
import type { Db } from "./db.ts";
import { DbTaskStore } from "./agent/a2a-tasks.ts";
import { RefusedPayments } from "./orders/refused-payments.ts";

export async function purgeExpired(
  db: Db,
  linkWindowSeconds: number,
  unpaidOrderSeconds = 30 * 86_400,
): Promise<{ linkSignatures: number; linkNonces: number; rateLimits: number; pullHolds: number; quoteLocks: number; refusedPayments: number; a2aTasks: number; unpaidOrders: number }> {
  const count = async (sql: string, params: unknown[]) => (await db.query<{ n: number }>(`WITH gone AS (${sql} RETURNING 1) SELECT count(*)::int AS n FROM gone`, params))[0]!.n;
  return {
    linkSignatures: await count(`DELETE FROM link_signature WHERE used_at < now() - make_interval(secs => $1)`, [2 * linkWindowSeconds]),
    linkNonces: await count(`DELETE FROM link_nonce WHERE created_at < now() - make_interval(secs => $1)`, [2 * linkWindowSeconds]),
    rateLimits: await count(`DELETE FROM rate_limit WHERE expire < $1`, [Date.now()]),
    pullHolds: await count(`DELETE FROM payer_pull_hold WHERE until < now()`, []),
    quoteLocks: await count(`DELETE FROM quote_lock WHERE expires_at < now()`, []),
    refusedPayments: await new RefusedPayments(db).purge(BigInt(Math.floor(Date.now() / 1000))),
    a2aTasks: await new DbTaskStore(db).trim(),
    // A thousand a pass; their callback, attempt and refund nonce rows go in the same statement (foreign keys are checked at its end).
    unpaidOrders: (
      await db.query<{ n: number }>(
        `WITH doomed AS (SELECT request_id FROM bill_order WHERE status = 'PAYMENT_FAILED' AND updated_at < now() - make_interval(secs => $1) LIMIT 1000),
              callbacks AS (DELETE FROM callback_delivery WHERE request_id IN (SELECT request_id FROM doomed)),
              attempts AS (DELETE FROM biller_attempt WHERE request_id IN (SELECT request_id FROM doomed)),
              nonces AS (DELETE FROM refund_nonce WHERE request_id IN (SELECT request_id FROM doomed)),
              gone AS (DELETE FROM bill_order WHERE request_id IN (SELECT request_id FROM doomed) RETURNING 1)
         SELECT count(*)::int AS n FROM gone`,
        [unpaidOrderSeconds],
      )
    )[0]!.n,
  };
}

/** A worker task that purges at most once per `intervalMs` (the worker itself runs every few seconds). */
export function purgeTask(db: Db, linkWindowSeconds: number, unpaidOrderSeconds: number, intervalMs = 60_000): () => Promise<unknown> {
  let last = 0;
  return async () => {
    if (Date.now() - last < intervalMs) return;
    last = Date.now();
    return purgeExpired(db, linkWindowSeconds, unpaidOrderSeconds);
  };
}
