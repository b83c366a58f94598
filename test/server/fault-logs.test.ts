/**
 * An outage is logged when it starts and when it ends, not on every retry: a payment waiting
 * on a ledger that is down, and a worker task that fails pass after pass. A worker that
 * starts says what unfinished orders it resumes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import { LedgerClient } from "../../server/ledger-client.ts";
import type { Log, LogFields } from "../../server/log.ts";
import { Orphans } from "../../server/orders/ledger-pass.ts";
import { RefusedPayments } from "../../server/orders/refused-payments.ts";
import { newOrderIds, OrderStore } from "../../server/orders/store.ts";
import { startWorker, type WorkerDeps } from "../../server/orders/worker.ts";

function capture(): Log & { lines: Array<{ level: string; msg: string; fields?: LogFields }> } {
  const lines: Array<{ level: string; msg: string; fields?: LogFields }> = [];
  const at = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ level, msg, fields });
  return { lines, debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

describe("outages are logged once, and their end", () => {
  let db: Db;
  beforeAll(async () => {
    db = await openDb({ pgliteDir: undefined });
  });
  afterAll(() => db?.close());

  it("a payment waiting on a ledger that is down reports the failure once, however many reads fail", async () => {
    const ledger = new LedgerClient("http://127.0.0.1:9"); // nothing listens: every read is refused
    let reads = 0;
    let reported = 0;
    const found = await ledger.awaitPayment(
      () => false,
      async () => {
        reads++;
        return ledger.order(`0x${"00".repeat(32)}`).then(() => null);
      },
      600,
      () => reported++,
    );
    ledger.close();
    expect(found).toBeNull();
    expect(reads).toBeGreaterThan(3);
    expect(reported).toBe(1);
  });

  it("a worker task failing pass after pass is logged when it starts failing and when it recovers", async () => {
    const log = capture();
    let calls = 0;
    const flaky = async () => {
      calls++;
      if (calls <= 4) throw new Error("the ledger answered 503");
    };
    const orders = new OrderStore(db);
    // An order a crash left unfinished: the worker says at start that it resumes it.
    await orders.lockPayment(
      { ...newOrderIds(), vend: null, bodyHash: "h", bill: {}, chain: "CELO", token: "USDC", tokenAddress: "0x1", payer: "0x2", amount: 1n, authNonce: `0x${"01".repeat(32)}`, authValidBefore: 1n, payment: {}, requirements: {}, secretHash: "s" } as never,
      60,
    );
    const deps = { orders, orphans: new Orphans(db), refused: new RefusedPayments(db), deployments: { chains: {} }, log, graceSeconds: 3_600, leaseSeconds: 60, reversalChecksSeconds: [] } as unknown as WorkerDeps;
    const worker = startWorker(deps, 20, [flaky]);
    await expect.poll(() => calls, { timeout: 5_000, interval: 20 }).toBeGreaterThan(6);
    await worker.stop();
    const failed = log.lines.filter((l) => l.level === "error");
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ msg: expect.stringContaining("worker task failed"), fields: { task: "task 1 of the caller's", error: "the ledger answered 503" } });
    expect(log.lines.filter((l) => l.msg === "worker started: resuming unfinished orders")).toEqual([expect.objectContaining({ fields: { total: 1, SETTLING: 1 } })]);
    const recovered = log.lines.filter((l) => l.msg === "worker task recovered");
    expect(recovered).toHaveLength(1);
    expect(recovered[0]!.fields).toMatchObject({ task: "task 1 of the caller's", failedPasses: 4 });
  });
});
