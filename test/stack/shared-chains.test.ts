/** The lease pool behind the suites' shared chains (test/support/shared-chains.ts): one suite per set at a time. */
import { describe, expect, it } from "vitest";
import { LeasePool } from "../support/shared-chains.ts";

describe("shared chains: the lease pool", () => {
  const counting = () => {
    const starts: number[] = [];
    const pool = new LeasePool(async (id) => {
      starts.push(id);
      await new Promise((r) => setTimeout(r, 20)); // a set takes a while to start
      return { id, alive: async () => true };
    });
    return { pool, starts };
  };

  it("never hands one set to two suites at once: two leases at the same moment start two sets", async () => {
    const { pool, starts } = counting();
    const [a, b] = await Promise.all([pool.lease(), pool.lease()]);
    expect(a.id).not.toBe(b.id);
    expect(starts).toEqual([1, 2]);
  });

  it("hands a set given back to the next suite instead of starting another", async () => {
    const { pool, starts } = counting();
    const a = await pool.lease();
    expect(pool.release(a.id)).toBe(true);
    expect((await pool.lease()).id).toBe(a.id);
    expect(starts).toEqual([1]);
    expect((await pool.all()).map((s) => s.id)).toEqual([1]);
  });

  it("refuses to take back a set that is not out on lease: given back twice, or never leased", async () => {
    const { pool } = counting();
    const a = await pool.lease();
    expect(pool.release(a.id)).toBe(true);
    expect(pool.release(a.id)).toBe(false);
    expect(pool.release(99)).toBe(false);
    // Given back twice must not put it in the free list twice: two suites would then share it.
    const [x, y] = await Promise.all([pool.lease(), pool.lease()]);
    expect(x.id).not.toBe(y.id);
  });

  it("a set that failed to start is not handed out; the next lease starts another", async () => {
    let first = true;
    const pool = new LeasePool(async (id) => {
      if (first) {
        first = false;
        throw new Error("the node did not start");
      }
      return { id, alive: async () => true };
    });
    await expect(pool.lease()).rejects.toThrow("the node did not start");
    expect((await pool.lease()).id).toBe(2);
    expect((await pool.all()).map((s) => s.id)).toEqual([2]);
  });

  it("does not lend a set that died while free: it starts another, and a live one given back is lent again", async () => {
    const dead = new Set<number>();
    const pool = new LeasePool(async (id) => ({ id, alive: async () => !dead.has(id) }));
    const [a, b] = await Promise.all([pool.lease(), pool.lease()]);
    pool.release(a.id);
    pool.release(b.id);
    dead.add(b.id); // its ledger or a node stopped answering
    expect((await pool.lease()).id).toBe(a.id);
    const next = await pool.lease();
    expect(next.id).toBe(3);
    expect((await pool.all()).map((s) => s.id)).toEqual([1, 2, 3]); // the dead one is still closed at the end
  });
});
