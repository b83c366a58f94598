/**
 * A database that comes to a ledger already holding payments that are not its orders (a
 * test's service on chains other suites paid on) starts its pass over that ledger where it is
 * told (Orphans.startAt): it reads each rail from there, and takes none of the payments
 * before it for orphans. Without a start, it reads from the beginning, as a service on a
 * ledger of its own does.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import type { LedgerPayment } from "../../server/ledger-client.ts";
import { Orphans, reconcileAuthorizationPayments, reconcileOrphanPulls, type LedgerPassDeps } from "../../server/orders/ledger-pass.ts";
import { RefusedPayments } from "../../server/orders/refused-payments.ts";
import { OrderStore } from "../../server/orders/store.ts";

const CELO = 42220;

/** A ledger holding one payment of each rail at `timestamp`, answering `from` as the real one does (inclusive). */
function ledgerWith(timestamp: bigint) {
  const asked: Array<{ rail: string; from: bigint }> = [];
  const payment = (rail: LedgerPayment["rail"], i: number): LedgerPayment =>
    ({
      id: `p${i}`,
      rail,
      chainId: CELO,
      orderId: rail === "pull" ? `0x${"ab".repeat(32)}` : null,
      token: "0x00000000000000000000000000000000000000aa",
      payer: "0x00000000000000000000000000000000000000bb",
      amount: "1000",
      authorizationNonce: rail === "pull" ? null : `0x${String(i).repeat(64)}`,
      txHash: `0x${String(i).repeat(64)}`,
      blockNumber: "10",
      timestamp: timestamp.toString(),
    }) as unknown as LedgerPayment;
  const all = [payment("pull", 1), payment("authorization", 2), payment("permit2", 3)];
  return {
    asked,
    async payments(q: { chainId: number; rail: LedgerPayment["rail"]; from?: bigint }) {
      asked.push({ rail: q.rail, from: q.from ?? 0n });
      return { payments: all.filter((p) => p.rail === q.rail && BigInt(p.timestamp) >= (q.from ?? 0n)), nextCursor: null };
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

  const pass = async (ledger: ReturnType<typeof ledgerWith>) => {
    const orphans = new Orphans(db);
    const log = { debug() {}, info() {}, warn() {}, error() {} };
    const metrics = { orphanPulls: { inc() {} } };
    const deps = { deployments: { chains: { CELO: {} } }, ledger, orders: new OrderStore(db), orphans, refused: new RefusedPayments(db), log, metrics } as unknown as LedgerPassDeps;
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
});
