/**
 * A database that comes to a ledger already holding payments that are not its orders (a
 * test's service on chains other suites paid on) starts its pass over that ledger where it is
 * told (Orphans.startAt): it reads each rail from there, and takes none of the payments
 * before it for orphans. Without a start, it reads from the beginning, as a service on a
 * ledger of its own does. Its position never passes a payment the ledger may still drop, and
 * an orphan pull the chain dropped before its refund is not tried for ever.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import type { LedgerPayment } from "../../server/ledger-client.ts";
import { Orphans, reconcileAuthorizationPayments, reconcileOrphanPulls, type LedgerPassDeps } from "../../server/orders/ledger-pass.ts";
import { RefusedPayments } from "../../server/orders/refused-payments.ts";
import { OrderStore } from "../../server/orders/store.ts";
import { ContractRefused } from "../../server/chain/operator.ts";

const CELO = 42220;

/**
 * A ledger holding one payment of each rail at `timestamp` in `block`, indexed to `indexed`,
 * answering `from` as the real one does (inclusive). `nonce` tells one set of payments from
 * another (a fork's); `empty` holds none; `refunded` shows the pull's refund.
 */
function ledgerWith(timestamp: bigint, { block = 10n, indexed = 100n, nonce = 0, empty = false, refunded = false } = {}) {
  const asked: Array<{ rail: string; from: bigint }> = [];
  const payment = (rail: LedgerPayment["rail"], n: number): LedgerPayment => {
    const i = n + nonce;
    return {
      id: `p${i}`,
      rail,
      chainId: CELO,
      orderId: rail === "pull" ? `0x${String(i).repeat(64)}` : null,
      token: "0x00000000000000000000000000000000000000aa",
      payer: "0x00000000000000000000000000000000000000bb",
      amount: "1000",
      authorizationNonce: rail === "pull" ? null : `0x${String(i).repeat(64)}`,
      txHash: `0x${String(i).repeat(64)}`,
      blockNumber: block.toString(),
      timestamp: timestamp.toString(),
    } as unknown as LedgerPayment;
  };
  const all = empty ? [] : [payment("pull", 1), payment("authorization", 2), payment("permit2", 3)];
  return {
    asked,
    async indexedBlock(chainId: number) {
      return chainId === CELO ? indexed : null;
    },
    async payments(q: { chainId: number; rail: LedgerPayment["rail"]; from?: bigint }) {
      asked.push({ rail: q.rail, from: q.from ?? 0n });
      return { payments: all.filter((p) => p.rail === q.rail && BigInt(p.timestamp) >= (q.from ?? 0n)), nextCursor: null };
    },
    async order(id: string) {
      const payments = all.filter((p) => p.orderId === id.toLowerCase());
      return { payments, refunds: refunded ? payments.map((p) => ({ chainId: CELO, orderId: p.orderId, amount: p.amount })) : [] };
    },
  };
}

describe("the ledger pass's start", () => {
  let db: Db;
  beforeAll(async () => {
    db = await openDb({ pgliteDir: undefined });
  });
  afterAll(() => db?.close());
  // Each case starts from a database that has read nothing and recorded nothing.
  beforeEach(async () => {
    for (const table of ["reconciler_cursor", "orphan_pull", "orphan_payment"]) await db.query(`DELETE FROM ${table}`);
  });

  /** BillPay's refund of a pull, as the operator sends it: by default the order id is one BillPay does not hold. */
  const refunds: string[] = [];
  let lost = 0;
  let refund = async (a: { orderId: string }): Promise<object> => {
    refunds.push(a.orderId);
    throw new ContractRefused("UnknownOrder", [a.orderId], "BillPay refused: UnknownOrder");
  };
  beforeEach(() => {
    refunds.length = 0;
  });

  const pass = async (ledger: ReturnType<typeof ledgerWith>) => {
    const orphans = new Orphans(db);
    const log = { debug() {}, info() {}, warn() {}, error() {} };
    const metrics = { orphanPulls: { inc() {} }, refundsLost: { inc: () => lost++ } };
    const operator = { refund: (a: { orderId: string }) => refund(a) };
    const deps = { deployments: { chains: { CELO: {} } }, ledger, orders: new OrderStore(db), orphans, refused: new RefusedPayments(db), log, metrics, operator } as unknown as LedgerPassDeps;
    await reconcileOrphanPulls(deps);
    await reconcileAuthorizationPayments(deps);
    return orphans.all();
  };

  it("started past the ledger's payments: reads every rail from there and records none of them", async () => {
    await new Orphans(db).startAt(CELO, 1_001n);
    const ledger = ledgerWith(1_000n);
    const recorded = await pass(ledger);
    expect(ledger.asked).toEqual([
      { rail: "pull", from: 1_001n },
      { rail: "authorization", from: 1_001n },
      { rail: "permit2", from: 1_001n },
    ]);
    expect(recorded).toEqual({ pulls: [], payments: [] });
  });

  it("never moves a pass back: a start before where it has read leaves it there", async () => {
    const orphans = new Orphans(db);
    await orphans.startAt(CELO, 2_000n);
    await orphans.startAt(CELO, 5n);
    const ledger = ledgerWith(1_000n);
    await pass(ledger);
    expect(ledger.asked.map((a) => a.from)).toEqual([2_000n, 2_000n, 2_000n]);
  });

  it("not started: reads from the beginning and records every payment it has no order for", async () => {
    const ledger = ledgerWith(1_000n);
    const recorded = await pass(ledger);
    expect(ledger.asked.map((a) => a.from)).toEqual([0n, 0n, 0n]);
    expect(recorded.payments.map((p) => p.rail).sort()).toEqual(["authorization", "permit2"]);
    expect(recorded.pulls).toHaveLength(1);
  });

  it("never passes a payment the ledger may still drop: one landing again in a reorganised block, with an earlier second, is still read", async () => {
    // The dropped fork: each rail's payment in block 10, at a second far ahead, read while
    // the ledger is 2 blocks past it.
    const dropped = ledgerWith(5_000n, { block: 10n, indexed: 12n, nonce: 0 });
    await pass(dropped);
    // The chain is reorganised from block 10: other payments land in block 10, at an earlier
    // second. Still within reach of a reorganisation, they are read, and hold the pass too.
    const kept = ledgerWith(1_500n, { block: 10n, indexed: 20n, nonce: 3 });
    const recorded = await pass(kept);
    expect(kept.asked.map((a) => a.from)).toEqual([0n, 0n, 0n]);
    expect(recorded.pulls.map((p) => p.order_id)).toContain(`0x${"4".repeat(64)}`);
    expect(recorded.payments.map((p) => p.auth_nonce)).toEqual(expect.arrayContaining([`0x${"5".repeat(64)}`, `0x${"6".repeat(64)}`]));
    // Once the ledger is as deep past them as it follows a reorganisation, the pass moves on to their second.
    await pass(ledgerWith(1_500n, { block: 10n, indexed: 40n, nonce: 3 }));
    const later = ledgerWith(1_500n, { block: 10n, indexed: 40n, nonce: 3 });
    await pass(later);
    expect(later.asked.map((a) => a.from)).toEqual([1_500n, 1_500n, 1_500n]);
  });

  it("an orphan pull the chain dropped before its refund is not retried for ever; landing again, it is refunded", async () => {
    const pullId = `0x${"1".repeat(64)}`;
    const status = async () => (await db.query<{ status: string }>(`SELECT status FROM orphan_pull WHERE order_id = $1`, [pullId]))[0]?.status;
    // Recorded while BillPay refuses its refund (the node already on another fork) and the
    // ledger still shows it: tried again on the next pass.
    const landed = ledgerWith(1_000n, { block: 10n, indexed: 12n });
    await pass(landed);
    expect(refunds).toEqual([pullId]);
    expect(await status()).toBe("REFUNDING");
    // Reorganised away: BillPay holds nothing under the order id, and the ledger no longer
    // shows it. One more refusal, then no more tries.
    const reorganised = ledgerWith(1_000n, { indexed: 13n, empty: true });
    await pass(reorganised);
    expect(await status()).toBe("DROPPED");
    await pass(reorganised);
    expect(refunds).toEqual([pullId, pullId]);

    // Landed again by whoever holds the key: recorded afresh, and refunded.
    const saved = refund;
    refund = async (a) => (refunds.push(a.orderId), { txHash: `0x${"e".repeat(64)}` });
    try {
      await pass(ledgerWith(2_000n, { block: 14n, indexed: 15n }));
    } finally {
      refund = saved;
    }
    expect(await status()).toBe("REFUNDED");
    expect(refunds).toHaveLength(3);
  });

  it("an orphan pull's refund reorganised away while the pull stands is sent again, once the ledger is past its block; watched no deeper than the ledger follows", async () => {
    const pullId = `0x${"1".repeat(64)}`;
    const saved = refund;
    refund = async (a) => (refunds.push(a.orderId), { txHash: `0x${"e".repeat(64)}`, block: 11n });
    lost = 0;
    try {
      // Refunded in block 11; the ledger, indexed to 10 only, cannot tell yet.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n }));
      expect(refunds).toEqual([pullId]);
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n }));
      // Shown refunded past its block: nothing more.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 12n, refunded: true }));
      expect(refunds).toEqual([pullId]);
      // Indexed past its block, the ledger shows the pull and no refund: lost, sent again, once.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 13n }));
      expect(refunds).toEqual([pullId, pullId]);
      expect(lost).toBe(1);
      // Gone with its pull: nothing is owed, nothing sent.
      await pass(ledgerWith(1_000n, { indexed: 14n, empty: true }));
      expect(refunds).toHaveLength(2);
      // Past the depth, a refund the ledger no longer shows is no longer looked for.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 11n + 30n }));
      expect(refunds).toHaveLength(2);
      expect(lost).toBe(1);
    } finally {
      refund = saved;
    }
  });
});
