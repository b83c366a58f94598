/**
 * Orphan x402 payments in the service's own tables.
 *
 * A refused payment that landed anyway becomes a refunding order and claims its orphan, in one
 * statement (OrderStore.createLandedRefund), on PGlite and on PostgreSQL: the orphan is claimed
 * only when the order is made. An order already holding the payment's key (one of the other
 * rail, whose nonce has the same value) leaves the orphan for an operator, not claimed with
 * no order behind it, where nothing would refund it and the audit would count it resolved.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import type { RefusedPayment } from "../../server/orders/refused-payments.ts";
import { OperatorState, type OperatorStateDeps } from "../../server/operator/state.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND, OrderStore } from "../../server/orders/store.ts";
import { freshDatabase } from "../support/stack.ts";

const TOKEN = "0x00000000000000000000000000000000000000c0";
const payer = (n: number) => `0x${n.toString(16).padStart(40, "0")}`;
const NONCE = `0x${"ab".repeat(32)}`;

const landed = (who: string, rail: RefusedPayment["rail"]): RefusedPayment => ({
  chain: "CELO",
  rail,
  token: "USDC",
  tokenAddress: TOKEN,
  payer: who,
  nonce: NONCE,
  amount: 1_000_000n,
  validBefore: 2_000_000_000n,
  bill: { serviceID: "mtn" },
  bodyHash: "b".repeat(64),
  payment: {},
  requirements: {},
  reason: "not yet valid",
});

for (const kind of ["pglite", "postgresql"] as const) {
  describe(`a landed refusal's order and its orphan, on ${kind}`, () => {
    let db: Db;
    let drop: (() => Promise<void>) | undefined;
    let orders: OrderStore;

    beforeAll(async () => {
      if (kind === "postgresql") {
        const database = await freshDatabase("landed_refund");
        drop = database.drop;
        db = await openDb({ url: database.url, poolSize: 2 });
      } else db = await openDb({});
      orders = new OrderStore(db, "test-instance");
    });
    afterAll(async () => {
      await db?.close();
      await drop?.();
    });

    const orphan = (who: string, rail: string, status = "NEEDS_REVIEW") =>
      db.query(`INSERT INTO orphan_payment (chain, token_address, payer, auth_nonce, amount, tx_hash, status, rail) VALUES ('CELO', $1, $2, $3, 1000000, $4, $5, $6)`, [
        TOKEN,
        who,
        NONCE,
        `0x${"11".repeat(32)}`,
        status,
        rail,
      ]);
    const orphanStatus = async (who: string) => (await db.query<{ status: string }>(`SELECT status FROM orphan_payment WHERE payer = $1`, [who]))[0]?.status;

    it("claims the orphan with the order it makes", async () => {
      await orphan(payer(1), "authorization");
      const order = await orders.createLandedRefund(landed(payer(1), "authorization"), `0x${"22".repeat(32)}`, 20_000n);
      expect(order).toMatchObject({ status: "REFUNDING", payer: payer(1), amount: 1_000_000n, refundFee: 20_000n, lateRefund: true });
      expect(await orphanStatus(payer(1))).toBe("CLAIMED");
    });

    it("leaves the orphan for an operator when an order already holds the key: nothing claimed with no order behind it", async () => {
      // The payer's order on the other rail holds the same (chain, token, payer, nonce).
      expect(await orders.createLandedRefund(landed(payer(2), "permit2"), `0x${"33".repeat(32)}`, 0n)).toBeDefined();
      await orphan(payer(2), "authorization");
      expect(await orders.createLandedRefund(landed(payer(2), "authorization"), `0x${"44".repeat(32)}`, 0n)).toBeUndefined();
      expect(await orphanStatus(payer(2))).toBe("NEEDS_REVIEW");
    });

    it("makes no order for an orphan an operator holds or closed", async () => {
      await orphan(payer(3), "authorization", "REFUNDING_BY_HAND");
      expect(await orders.createLandedRefund(landed(payer(3), "authorization"), `0x${"55".repeat(32)}`, 0n)).toBeUndefined();
      expect(await orphanStatus(payer(3))).toBe("REFUNDING_BY_HAND");
    });
  });
}

describe("the console's list of payments no order accounts for", () => {
  it("shows those still waiting for an operator first: settled ones never push one off the page", async () => {
    const db = await openDb({});
    try {
      const state = new OperatorState({ db, ledgerUrl: "http://127.0.0.1:9" } as unknown as OperatorStateDeps);
      const row = (n: number, status: string, ageSeconds: number) =>
        db.query(
          `INSERT INTO orphan_payment (chain, token_address, payer, auth_nonce, amount, tx_hash, status, rail, created_at)
           VALUES ('CELO', $1, $2, $3, 1, $4, $5, 'authorization', now() - make_interval(secs => $6))`,
          [TOKEN, payer(1000 + n), NONCE, `0x${"66".repeat(32)}`, status, ageSeconds],
        );
      await row(0, "NEEDS_REVIEW", 3600); // the oldest, and waiting
      await row(1, ORPHAN_HELD_FOR_HAND_REFUND, 3000);
      for (let n = 2; n < 130; n++) await row(n, "RESOLVED", 60);
      const listed = (await state.orphans()).payments;
      expect(listed).toHaveLength(100);
      expect(listed.slice(0, 2).map((p) => p.status)).toEqual([ORPHAN_HELD_FOR_HAND_REFUND, "NEEDS_REVIEW"]);
    } finally {
      await db.close();
    }
  });
});
