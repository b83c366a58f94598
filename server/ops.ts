/**
 * The operators' routes, read by `npm run audit` to reconcile the service's orders with the
 * ledger: every order (a page at a time) and every orphan record, with their money fields and
 * never a purchased code or secret. Guarded by OPS_TOKEN (bearer, compared in constant time),
 * or, when none is configured and the service is not public (no PUBLIC_URL), open to
 * loopback callers only.
 */
import { getConnInfo } from "@hono/node-server/conninfo";
import { createHash, timingSafeEqual } from "node:crypto";
import type { Context, Hono } from "hono";
import { ServiceError } from "./errors.ts";
import type { Orphans } from "./orders/ledger-pass.ts";
import type { Order, OrderStore } from "./orders/store.ts";

const MAX_PAGE = 500;
const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

function allowed(c: Context, token: string | undefined, isPublic: boolean): boolean {
  if (token) {
    const presented = /^Bearer\s+(\S+)$/i.exec(c.req.header("authorization") ?? "")?.[1] ?? "";
    return timingSafeEqual(digest(presented), digest(token));
  }
  // Served publicly (PUBLIC_URL), a same-host proxy makes every caller look local: no token, no access.
  if (isPublic) return false;
  try {
    const address = getConnInfo(c).remote.address ?? "";
    return address === "127.0.0.1" || address === "::1" || address === "::ffff:127.0.0.1";
  } catch {
    return false; // not served over a socket: nobody to trust
  }
}

/** An order as the audit sees it: amounts as decimal strings of token units. */
export function opsOrder(o: Order) {
  return {
    request_id: o.requestId,
    rail: o.rail,
    status: o.status,
    chain: o.chain,
    token: o.token,
    token_address: o.tokenAddress,
    payer: o.payer,
    amount: o.amount.toString(),
    onchain_order_id: o.onchainOrderId,
    auth_nonce: o.authNonce,
    tx_hash: o.txHash,
    refund_tx_hash: o.refundTxHash,
    failure_reason: o.failureReason,
    flag: o.flag,
    auth_valid_before: o.authValidBefore?.toString() ?? null,
    created_at: o.createdAt.toISOString(),
  };
}
export type OpsOrder = ReturnType<typeof opsOrder>;

export function mountOps(app: Hono, deps: { token?: string; public: boolean; orders: OrderStore; orphans: Orphans }): void {
  app.use("/ops/*", async (c, next) => {
    if (!allowed(c, deps.token, deps.public)) throw new ServiceError("OPS_FORBIDDEN", "send Authorization: Bearer <OPS_TOKEN>, or call from this machine when no OPS_TOKEN is set");
    await next();
  });
  app.get("/ops/orders", async (c) => {
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 200) || 200, 1), MAX_PAGE);
    const after = c.req.query("after");
    const page = await deps.orders.page(limit + 1, after);
    const orders = page.slice(0, limit).map(opsOrder);
    return c.json({ orders, next: page.length > limit ? orders[orders.length - 1]!.request_id : null }, 200, { "cache-control": "no-store" });
  });
  app.get("/ops/orphans", async (c) => c.json(await deps.orphans.all(), 200, { "cache-control": "no-store" }));
}
