/**
 * The operators' routes, read by `npm run audit` to reconcile the service's orders with the
 * ledger: every order (a page at a time) and every orphan record, with their money fields and
 * never a purchased code or secret. Guarded as every operators' surface is (operator/auth.ts).
 */
import type { Hono } from "hono";
import { requireOperator } from "./operator/auth.ts";
import type { Orphans } from "./orders/ledger-pass.ts";
import type { Order, OrderStore } from "./orders/store.ts";
import type { ServiceRecords } from "../scripts/audit-orders.ts";

const MAX_PAGE = 500;

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

/** Every order and orphan record as the /ops routes serve them, read in this process (the console's audit). */
export async function opsRecords(orders: OrderStore, orphans: Orphans): Promise<ServiceRecords> {
  const all: ReturnType<typeof opsOrder>[] = [];
  for (let after: string | undefined; ; ) {
    const page = await orders.page(MAX_PAGE, after);
    all.push(...page.map(opsOrder));
    if (page.length < MAX_PAGE) break;
    after = page[page.length - 1]!.requestId;
  }
  // Through JSON, as the routes send them: the audit reads exactly what /ops/orders and /ops/orphans serve.
  return JSON.parse(JSON.stringify({ orders: all, orphans: await orphans.all() })) as ServiceRecords;
}

export function mountOps(app: Hono, deps: { token?: string; public: boolean; orders: OrderStore; orphans: Orphans }): void {
  app.use("/ops/*", requireOperator(deps.token, deps.public));
  app.get("/ops/orders", async (c) => {
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 200) || 200, 1), MAX_PAGE);
    const after = c.req.query("after");
    const page = await deps.orders.page(limit + 1, after);
    const orders = page.slice(0, limit).map(opsOrder);
    return c.json({ orders, next: page.length > limit ? orders[orders.length - 1]!.request_id : null }, 200, { "cache-control": "no-store" });
  });
  app.get("/ops/orphans", async (c) => c.json(await deps.orphans.all(), 200, { "cache-control": "no-store" }));
}
