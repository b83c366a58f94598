/**
 * An order's life is one table (server/orders/lifecycle.ts): the store refuses a move it does
 * not list, every move the code asks for is listed, and the state diagram in
 * docs/architecture.md is the table's.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PaymentWatches } from "../../server/orders/payment-watch.ts";
import { openDb, type Db } from "../../server/db.ts";
import { assertMove, IllegalMove, mayMove, ORDER_MOVES, ORDER_STARTS, ORDER_STATUSES, stateDiagram, stoodSql, unfinishedSince, type OrderStatus } from "../../server/orders/lifecycle.ts";
import { newOrderIds, OrderStore } from "../../server/orders/store.ts";
import { BillerAttempts } from "../../server/orders/attempts.ts";
import { withOrderStates } from "../../scripts/gen-order-states.ts";

const ROOT = join(import.meta.dirname, "../..");

/** Every server source file's text, by path. */
function serverSources(dir = join(ROOT, "server")): Array<{ path: string; text: string }> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? serverSources(join(dir, e.name)) : /\.tsx?$/.test(e.name) ? [{ path: join(dir, e.name), text: readFileSync(join(dir, e.name), "utf8") }] : [],
  );
}

describe("an order's life", () => {
  it("is a table whose every state is reached from a start, and whose every state but the final ones leads on", () => {
    const reached = new Set<OrderStatus>(ORDER_STARTS.map((s) => s.at));
    for (let grew = true; grew; ) {
      grew = false;
      for (const m of ORDER_MOVES) if (reached.has(m.from) && !reached.has(m.to)) grew = reached.add(m.to) !== undefined;
    }
    expect([...reached].sort()).toEqual([...ORDER_STATUSES].sort());
    const leaving = new Set(ORDER_MOVES.map((m) => m.from));
    // Every state has a way on: the final ones too (a reorganisation, a reversal, an operator).
    for (const s of ORDER_STATUSES) expect(leaving.has(s), s).toBe(true);
    const pairs = ORDER_MOVES.map((m) => `${m.from}>${m.to}`);
    expect(new Set(pairs).size).toBe(pairs.length);
    for (const m of ORDER_MOVES) {
      expect(m.from).not.toBe(m.to);
      expect(m.when.length).toBeGreaterThan(10);
      expect(m.money.length).toBeGreaterThan(3);
    }
  });

  it("refuses what it does not list: money never goes back in once refunded, a delivered bill is never paid again", () => {
    expect(mayMove("SETTLING", "PAID")).toBe(true);
    expect(mayMove("PAID", "PAID")).toBe(true); // staying put is not a move
    for (const [from, to] of [
      ["REFUNDED", "REFUNDING"],
      ["REFUNDED", "PAID"],
      ["SUCCESS", "PAID"],
      ["SUCCESS", "PENDING"],
      ["PAYMENT_FAILED", "PAID"],
      ["REFUSED", "PAID"],
      ["SETTLING", "SUCCESS"],
      ["PULLING", "REFUNDING"],
    ] as const) {
      expect(mayMove(from, to), `${from} > ${to}`).toBe(false);
      expect(() => assertMove([from], to)).toThrow(IllegalMove);
    }
    // One state not allowed among several is enough to refuse the whole move.
    expect(() => assertMove(["PAID", "SUCCESS"], "PENDING")).toThrow(/from SUCCESS to PENDING/);
  });

  it("lists every move the code asks the store for (each literal `move`/`transition` call in server/)", () => {
    const call = /\b(?:move\(deps, [\w.]+|transition\([\w.]+(?:\.requestId)?), \[([^\]]*)\], "([A-Z_]+)"/g;
    const asked: string[] = [];
    for (const { path, text } of serverSources())
      for (const m of text.matchAll(call)) {
        const from = [...m[1]!.matchAll(/"([A-Z_]+)"/g)].map((f) => f[1] as OrderStatus);
        for (const f of from) {
          asked.push(`${f}>${m[2]}`);
          expect(mayMove(f, m[2] as OrderStatus), `${path.replace(ROOT, "")}: ${f} > ${m[2]}`).toBe(true);
        }
      }
    // The pattern does find the calls (a refactor that hides them from it fails here).
    expect(asked.length).toBeGreaterThan(25);
  });

  it("is drawn in docs/architecture.md exactly as the table says (npm run docs:states writes it)", () => {
    const doc = readFileSync(join(ROOT, "docs/architecture.md"), "utf8");
    expect(doc).toContain(`\`\`\`mermaid\n${stateDiagram()}\n\`\`\``);
    expect(withOrderStates(doc), "docs/architecture.md is behind the table: npm run docs:states").toBe(doc);
    for (const m of ORDER_MOVES) expect(doc, `${m.from} > ${m.to}`).toContain(`| ${m.from} | ${m.to} | ${m.when} | ${m.money} |`);
  });

  describe("in the order store", () => {
    let db: Db;
    let orders: OrderStore;
    beforeAll(async () => {
      db = await openDb({});
      orders = new OrderStore(db);
    });
    afterAll(() => db?.close());

    it("a move the table does not list is refused and changes nothing; a listed one is made", async () => {
      const { order } = await orders.lockPayment(
        { ...newOrderIds(), vend: null, bodyHash: "h", bill: {}, chain: "CELO", token: "USDC", tokenAddress: "0x1", payer: "0x2", amount: 1n, authNonce: `0x${"01".repeat(32)}`, authValidBefore: 1n, payment: {}, requirements: {}, secretHash: "s" } as never,
        60,
      );
      expect(order.status).toBe("SETTLING");
      await expect(orders.transition(order.requestId, ["SETTLING"], "SUCCESS")).rejects.toThrow(IllegalMove);
      expect((await orders.get(order.requestId))!.status).toBe("SETTLING");
      expect((await orders.transition(order.requestId, ["SETTLING"], "PAID", { txHash: "0xabc" }))!.status).toBe("PAID");
      await expect(orders.transition(order.requestId, ["PAID"], "SETTLING")).rejects.toThrow(/from PAID to SETTLING/);
      expect((await orders.get(order.requestId))!.status).toBe("PAID");
    });

    it("advancing an order it holds answers exactly what the store then holds, and a final move still queues its callback", async () => {
      const { order } = await orders.lockPayment(
        {
          ...newOrderIds(),
          vend: { plan: "airtime" },
          bodyHash: "h2",
          bill: { serviceID: "mtn", callback_url: "https://example.com/hook" },
          chain: "CELO",
          token: "USDC",
          tokenAddress: "0x1",
          payer: "0x3",
          amount: 7n,
          authNonce: `0x${"02".repeat(32)}`,
          authValidBefore: 9n,
          payment: { signature: "0xsig" },
          requirements: { amount: "7" },
          secretHash: "s2",
        } as never,
        60,
      );
      const watches = new PaymentWatches(db, { chains: { CELO: { genesisHash: "0xgenesis", billPay: { address: "0xbillpay" } } } } as never);
      const shown = { rail: "authorization", chainId: 42220, authorizationNonce: order.authNonce, payer: "0x3", token: "0x1", amount: "7", txHash: "0xpaid", blockNumber: "41", timestamp: "1700000000" };
      const watched = async () => db.query<{ block_number: string; tx_hash: string }>(`SELECT block_number::text, tx_hash FROM payment_watch WHERE request_id = $1`, [order.requestId]);
      // The watch on the payment is written by the statement that makes the order PAID.
      const paid = await orders.advance(order, ["SETTLING"], "PAID", { txHash: "0xpaid" }, watches.recording(order, shown as never));
      expect(paid).toEqual(await orders.get(order.requestId));
      expect(await watched()).toEqual([{ block_number: "41", tx_hash: "0xpaid" }]);
      expect(paid!.status).toBe("PAID");
      expect(await db.query(`SELECT 1 FROM callback_delivery WHERE request_id = $1`, [order.requestId])).toHaveLength(0);

      // A stale copy moves nothing; a move the table does not list is refused.
      expect(await orders.advance(order, ["SETTLING"], "PAID")).toBeUndefined();
      await expect(orders.advance(paid!, ["PAID"], "SETTLING")).rejects.toThrow(IllegalMove);

      // A final move with a write alongside: both CTEs, the callback's and the watch's, are made.
      const served = await orders.advance(paid!, ["PAID", "PENDING"], "SUCCESS", { purchasedCodes: [{ kind: "token", value: "1234" }] as never, units: "5 kWh", flag: "charged more" }, watches.recording(order, { ...shown, blockNumber: "42" } as never));
      expect(await watched()).toEqual([{ block_number: "42", tx_hash: "0xpaid" }]);
      // Watched again after a loss (an operator served it): the loss's state is cleared, so a second loss is told and collected again.
      await db.query(`UPDATE payment_watch SET lost_at = now(), outcome = 'REVIEW', detail = 'lost', recollect_tx_hash = '0xagain', attempted_at = now(), final = true WHERE request_id = $1`, [order.requestId]);
      await watches.record(order, { ...shown, blockNumber: "43" } as never);
      expect(await db.query(`SELECT block_number::text, final, lost_at, outcome, detail, recollect_tx_hash, attempted_at FROM payment_watch WHERE request_id = $1`, [order.requestId])).toEqual([
        { block_number: "43", final: false, lost_at: null, outcome: null, detail: null, recollect_tx_hash: null, attempted_at: null },
      ]);
      expect(served).toEqual(await orders.get(order.requestId));
      expect(served).toMatchObject({ status: "SUCCESS", txHash: "0xpaid", units: "5 kWh", flag: "charged more", bill: order.bill, payment: order.payment, amount: 7n });
      expect(await db.query(`SELECT url FROM callback_delivery WHERE request_id = $1`, [order.requestId])).toEqual([{ url: "https://example.com/hook" }]);
    });

    it("a pay attempt recorded before payment is withdrawn by the move that closes the order unpaid, in the same statement; a paid order's are kept", async () => {
      const attempts = new BillerAttempts(db);
      const pay = { serviceID: "mtn", billersCode: "08011111111", phone: "08011111111", amount: 100 };
      const locked = async (i: number) =>
        (
          await orders.lockPayment(
            { ...newOrderIds(), vend: null, bodyHash: `ahead${i}`, bill: {}, chain: "CELO", token: "USDC", tokenAddress: "0x1", payer: `0x6${i}`, amount: 1n, authNonce: `0x${(i + 32).toString(16).repeat(32)}`, authValidBefore: 9n, payment: {}, requirements: {}, secretHash: `a${i}` } as never,
            60,
          )
        ).order;
      // Left by a request that died while its payment settled: closed unpaid, its attempt goes with it.
      const refused = await locked(1);
      expect(await attempts.record(refused.requestId, 1, `ahead-${refused.requestId}`, pay)).toBe(true);
      expect((await orders.transition(refused.requestId, ["SETTLING"], "REFUSED"))!.status).toBe("REFUSED");
      expect(await attempts.of(refused.requestId)).toEqual([]);
      // Nor does one made while it is already closed: the attempt is not recorded at all.
      expect(await attempts.recordAhead(refused.requestId, `late-${refused.requestId}`, pay)).toBe(false);
      // A step that stays put (a pending settlement's transaction noted) withdraws nothing: it may yet be paid.
      const paid = await locked(2);
      expect(await attempts.recordAhead(paid.requestId, `ahead-${paid.requestId}`, pay)).toBe(true);
      expect((await orders.transition(paid.requestId, ["SETTLING"], "SETTLING", { txHash: "0xpending" }))!.status).toBe("SETTLING");
      expect(await attempts.of(paid.requestId)).toHaveLength(1);
      // A move that does not find the order where it moves from withdraws nothing: paid meanwhile, its attempt may be sent.
      expect((await orders.advance(paid, ["SETTLING"], "PAID"))!.status).toBe("PAID");
      expect(await orders.advance(paid, ["SETTLING"], "PAYMENT_FAILED")).toBeUndefined();
      expect(await attempts.of(paid.requestId)).toHaveLength(1);
      // Nor does any move of an order once paid.
      expect((await orders.advance(paid, ["PAID"], "REFUNDING"))!.status).toBe("REFUNDING");
      expect(await attempts.of(paid.requestId)).toHaveLength(1);
    });

    it("a failed bill counts against its payer from the mark its first refund left, until it is delivered after all", async () => {
      const { order } = await orders.lockPayment(
        { ...newOrderIds(), vend: null, bodyHash: "cause", bill: {}, chain: "CELO", token: "USDC", tokenAddress: "0x1", payer: "0x77", amount: 1n, authNonce: `0x${"4d".repeat(32)}`, authValidBefore: 9n, payment: {}, requirements: {}, secretHash: "c" } as never,
        60,
      );
      const failed = () => orders.failedVends("0x77", 3600, 10);
      await orders.transition(order.requestId, ["SETTLING"], "PAID");
      await orders.transition(order.requestId, ["PAID"], "REFUNDING", { failureReason: "biller: transaction failed", refundCause: "biller" });
      expect(await failed()).toHaveLength(1);
      // Held, its reason written again, then served: delivered after all, it is no failed bill.
      await orders.transition(order.requestId, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: "the biller delivered pay attempt 1 while the refund was not yet done" });
      expect(await failed()).toHaveLength(1);
      await orders.transition(order.requestId, ["NEEDS_REVIEW"], "PAID");
      await orders.transition(order.requestId, ["PAID"], "SUCCESS");
      expect(await failed()).toEqual([]);
    });

    it("a refund begun anew (an operator's, a served bill's failing again) starts its clocks afresh: the budget wait, the reverts that held it for review and its place in the payer's share are the last try's; the worker's own tries keep them", async () => {
      const { order } = await orders.lockPayment(
        { ...newOrderIds(), vend: null, bodyHash: "afresh", bill: {}, chain: "CELO", token: "USDC", tokenAddress: "0x1", payer: "0x78", amount: 1n, authNonce: `0x${"4e".repeat(32)}`, authValidBefore: 9n, payment: {}, requirements: {}, secretHash: "af" } as never,
        60,
      );
      const clocks = async () =>
        (await db.query<{ waiting: boolean; reverts: number; cleared: boolean }>(`SELECT refund_waiting_since IS NOT NULL AS waiting, refund_reverts AS reverts, refund_cleared_at IS NOT NULL AS cleared FROM bill_order WHERE request_id = $1`, [order.requestId]))[0];
      const clear = async () => expect(await orders.clearRefund((await orders.get(order.requestId))!, 1n, { limit: 100n, period: 3_600n }, { payerPercent: 100, latePercent: 100 })).toBeUndefined();
      await orders.transition(order.requestId, ["SETTLING"], "PAID");
      await orders.transition(order.requestId, ["PAID"], "REFUNDING", { failureReason: "biller: transaction failed" });
      await clear();
      await orders.deferRefund(order.requestId, 0);
      await orders.refundReverted(order.requestId, 0);
      await orders.transition(order.requestId, ["REFUNDING"], "REFUNDING");
      expect(await clocks()).toEqual({ waiting: true, reverts: 1, cleared: true });
      await orders.transition(order.requestId, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: "refund waited past its deadline" });
      expect(await clocks()).toEqual({ waiting: true, reverts: 1, cleared: true });
      await orders.transition(order.requestId, ["NEEDS_REVIEW"], "REFUNDING", { failureReason: "an operator refunds it" });
      expect(await clocks()).toEqual({ waiting: false, reverts: 0, cleared: false });
      // Held again, served instead, and failing again: its refund is begun anew too.
      await clear();
      await orders.deferRefund(order.requestId, 0);
      await orders.refundReverted(order.requestId, 0);
      await orders.transition(order.requestId, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: "refund waited past its deadline" });
      await orders.transition(order.requestId, ["NEEDS_REVIEW"], "PAID", { failureReason: "served by an operator" });
      expect(await clocks()).toEqual({ waiting: true, reverts: 1, cleared: true });
      await orders.transition(order.requestId, ["PAID"], "REFUNDING", { failureReason: "biller: transaction failed" });
      expect(await clocks()).toEqual({ waiting: false, reverts: 0, cleared: false });
    });

    it("an unfinished order has stood since it last became unfinished, however recently it moved (a refusal: since its authorization expires), by one rule in SQL and in code", async () => {
      const now = Math.floor(Date.now() / 1000);
      type Case = { status: OrderStatus; madeAgo: number; validBefore: bigint | number; then?: OrderStatus; legacy?: true; stood: boolean };
      const cases: Case[] = [
        { status: "REFUNDING", madeAgo: 3600, validBefore: now + 3600, then: "REFUNDING", stood: true }, // its refund retried a moment ago
        { status: "SUCCESS", madeAgo: 3600, validBefore: now + 3600, then: "REFUNDING", stood: false }, // served an hour ago, reversed a moment ago
        { status: "PENDING", madeAgo: 3600, validBefore: now + 3600, legacy: true, stood: true }, // made before the column: counted from its making
        { status: "PAID", madeAgo: 5, validBefore: now + 3600, stood: false },
        { status: "REFUSED", madeAgo: 3600, validBefore: now + 3600, stood: false }, // its authorization may still land
        { status: "REFUSED", madeAgo: 7200, validBefore: now - 3600, stood: true },
        { status: "REFUSED", madeAgo: 7200, validBefore: 2n ** 256n - 1n, stood: false }, // never expires: no timestamp holds it
      ];
      const ids: string[] = [];
      for (const [i, c] of cases.entries()) {
        const { order } = await orders.lockPayment(
          { ...newOrderIds(), vend: null, bodyHash: `stood${i}`, bill: {}, chain: "CELO", token: "USDC", tokenAddress: "0x1", payer: `0x5${i}`, amount: 1n, authNonce: `0x${(i + 16).toString(16).repeat(32)}`, authValidBefore: BigInt(c.validBefore), payment: {}, requirements: {}, secretHash: `s${i}` } as never,
          60,
        );
        await db.query(
          `UPDATE bill_order SET status = $2, created_at = now() - make_interval(secs => $3), unfinished_since = CASE WHEN $4 THEN NULL ELSE now() - make_interval(secs => $3) END WHERE request_id = $1`,
          [order.requestId, c.status, c.madeAgo, c.legacy === true],
        );
        if (c.then) expect((await orders.transition(order.requestId, [c.status], c.then))?.status).toBe(c.then);
        ids.push(order.requestId);
      }
      const rows = await db.query<{ request_id: string }>(`SELECT request_id FROM bill_order WHERE request_id = ANY($1::text[]) AND ${stoodSql("$2")}`, [ids, 600]);
      const inSql = new Set(rows.map((r) => r.request_id));
      for (const [i, c] of cases.entries()) {
        const o = (await orders.get(ids[i]!))!;
        const inCode = Date.now() - unfinishedSince({ status: o.status, unfinishedSinceMs: o.unfinishedSince.getTime(), authValidBefore: o.authValidBefore }) > 600_000;
        expect([inSql.has(ids[i]!), inCode], `${c.status}${c.then ? ` then ${c.then}` : ""}, made ${c.madeAgo} s ago, valid before ${c.validBefore}`).toEqual([c.stood, c.stood]);
      }
    });
  });
});
