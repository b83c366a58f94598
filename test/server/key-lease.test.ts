/**
 * One key, one instance (server/chain/key-lease.ts), on the service's real database (PGlite):
 * a holder in another container that happens to share this host's name is not taken for
 * dead because its pid is absent here; a holder that truly died in this process space is
 * taken at once; and an instance whose lease was taken signs nothing more.
 */
import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import { CONFIRMED_FOR_MS, DEAD_AFTER_MS, KeyHeld, KeyLeaseLost, KeyLeases } from "../../server/chain/key-lease.ts";
import { silentLog } from "../../server/log.ts";

const KEY = { role: "operator" as const, address: "0x00000000000000000000000000000000000000aa" };
const ABSENT_PID = 2_147_000_000; // no process has it

describe("key leases", () => {
  let db: Db;
  const stops: Array<() => void> = [];
  afterEach(async () => {
    for (const stop of stops.splice(0)) stop();
    await db?.close();
  });

  /** A lease row as another holder wrote it, heartbeating while `beating` (as a live instance does). */
  async function holder(host: string, pid: number, beating: boolean) {
    await db.query(`INSERT INTO key_lease (address, role, instance_id, host, pid) VALUES ($1, 'operator', 'elsewhere:1:abcd', $2, $3)`, [KEY.address, host, pid]);
    if (beating) {
      const timer = setInterval(() => void db.query(`UPDATE key_lease SET heartbeat_at = now() WHERE address = $1`, [KEY.address]), 250);
      stops.push(() => clearInterval(timer));
    }
  }

  it("a live holder in another container with this host's name keeps its key, though its pid is absent here", async () => {
    db = await openDb({});
    await holder(`${hostname()} pid:[1]`, ABSENT_PID, true);
    const starting = new KeyLeases(db, silentLog);
    await expect(starting.claim([KEY])).rejects.toBeInstanceOf(KeyHeld);
    const [row] = await db.query<{ instance_id: string }>(`SELECT instance_id FROM key_lease WHERE address = $1`, [KEY.address]);
    expect(row!.instance_id).toBe("elsewhere:1:abcd");
  });

  it("a holder that died in this very process space is taken at once (a restart), whatever its heartbeat says", async () => {
    db = await openDb({});
    // This very space: the host, the PID namespace and the boot. Its row still beats (a
    // heartbeat written as it died, say): a watch would find it live, and no takeover would
    // find it old; its process is gone, and that is enough.
    const space = `${hostname()} ${readlinkSync("/proc/self/ns/pid")} ${readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()}`;
    await holder(space, ABSENT_PID, true);
    const restarted = new KeyLeases(db, silentLog);
    expect(await restarted.claim([KEY])).toEqual(["elsewhere:1:abcd"]);
    stops.push(() => restarted.stopHeartbeat());
    await restarted.confirm(KEY.address); // it signs
  });

  it("an instance whose lease another took signs nothing more: confirm refuses, at once and after", async () => {
    db = await openDb({});
    let clock = 0;
    const first = new KeyLeases(db, silentLog, { monotonic: () => clock, wall: () => clock });
    await first.claim([KEY]);
    first.stopHeartbeat(); // it stalls: no beat of its own
    const lost: string[] = [];
    first.onLost = (keys) => lost.push(...keys.map((k) => k.address));
    await first.confirm(KEY.address);
    // first stalls past DEAD_AFTER_MS, and another instance takes the key meanwhile.
    clock += DEAD_AFTER_MS + 1;
    await db.query(`UPDATE key_lease SET instance_id = 'taker:2:ef01' WHERE address = $1`, [KEY.address]);
    await expect(first.confirm(KEY.address)).rejects.toBeInstanceOf(KeyLeaseLost);
    expect(lost).toEqual([KEY.address]);
    await expect(first.confirm(KEY.address)).rejects.toBeInstanceOf(KeyLeaseLost);
    const [row] = await db.query<{ instance_id: string }>(`SELECT instance_id FROM key_lease WHERE address = $1`, [KEY.address]);
    expect(row!.instance_id).toBe("taker:2:ef01");
  });

  it("a renewal within CONFIRMED_FOR_MS, on both clocks, stands for one right before each signature; an older one is renewed first", async () => {
    db = await openDb({});
    let monotonic = 0;
    let wall = 0;
    let statementMs = 0; // how long a renewal's statement takes, on both clocks
    const renewals: string[] = [];
    const counting: Db = {
      ...db,
      query: async (text, params) => {
        if (!text.startsWith("UPDATE key_lease SET heartbeat_at")) return db.query(text, params);
        renewals.push(text);
        const rows = await db.query(text, params);
        monotonic += statementMs;
        wall += statementMs;
        return rows as never;
      },
    };
    const first = new KeyLeases(counting, silentLog, { monotonic: () => monotonic, wall: () => wall });
    await first.claim([KEY]);
    first.stopHeartbeat(); // only confirm renews here
    const heartbeat = async () => (await db.query<{ heartbeat_at: Date }>(`SELECT heartbeat_at FROM key_lease WHERE address = $1`, [KEY.address]))[0]!.heartbeat_at.getTime();
    const step = (ms: number) => ((monotonic += ms), (wall += ms));

    await first.confirm(KEY.address); // none yet: renewed
    expect(renewals).toHaveLength(1);
    const renewedAt = await heartbeat();
    step(CONFIRMED_FOR_MS - 1);
    await first.confirm(KEY.address); // still within the window: no statement
    expect(renewals).toHaveLength(1);
    expect(await heartbeat()).toBe(renewedAt);
    step(2);
    await first.confirm(KEY.address); // older than the window: renewed again
    expect(renewals).toHaveLength(2);

    // The window runs from when the renewal was sent, not from its answer.
    statementMs = CONFIRMED_FOR_MS - 100;
    step(CONFIRMED_FOR_MS);
    await first.confirm(KEY.address);
    expect(renewals).toHaveLength(3);
    statementMs = 0;
    step(200);
    await first.confirm(KEY.address);
    expect(renewals).toHaveLength(4);

    // A suspended machine: the monotonic clock stood still, the wall's ran on.
    wall += DEAD_AFTER_MS + 1;
    await first.confirm(KEY.address);
    expect(renewals).toHaveLength(5);
    // The wall's clock stood still (or was set) while the monotonic one ran on...
    monotonic += CONFIRMED_FOR_MS;
    await first.confirm(KEY.address);
    expect(renewals).toHaveLength(6);
    // ...or was set back: a renewal "from the future" is no renewal.
    wall -= 60_000;
    await first.confirm(KEY.address);
    expect(renewals).toHaveLength(7);

    // A stop gives the key back: nothing is signed with it after.
    await first.release();
    await expect(first.confirm(KEY.address)).rejects.toBeInstanceOf(KeyLeaseLost);
  });

  it("the heartbeat's renewal stands for one before a signature, as confirm's own does", async () => {
    db = await openDb({});
    const renewals: string[] = [];
    const counting: Db = { ...db, query: (text, params) => (text.startsWith("UPDATE key_lease SET heartbeat_at") && renewals.push(text), db.query(text, params)) };
    // Clocks that stand still: the beat's renewal is as young at the signature as when it was sent.
    const first = new KeyLeases(counting, silentLog, { monotonic: () => 0, wall: () => 0 });
    await first.claim([KEY]);
    stops.push(() => first.stopHeartbeat());
    const beaten = () => renewals.filter((r) => r.includes("ANY($1::text[])")).length;
    // After a beat (waited for by its statement), a signature needs no statement of its own.
    const before = beaten();
    while (beaten() === before) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 20)); // its answer read
    const all = renewals.length;
    await first.confirm(KEY.address);
    expect(renewals).toHaveLength(all);
  });

  it("a holder that wakes and renews between a starting instance's watch and its takeover keeps its key", async () => {
    db = await openDb({});
    let clock = 0;
    const holder = new KeyLeases(db, silentLog, { monotonic: () => clock, wall: () => clock });
    await holder.claim([KEY]);
    holder.stopHeartbeat();
    // It stalls: its heartbeat stands still past DEAD_AFTER_MS, and its last renewal is old.
    await db.query(`UPDATE key_lease SET heartbeat_at = now() - interval '10 seconds' WHERE address = $1`, [KEY.address]);
    clock += DEAD_AFTER_MS + 1;
    let woke = false;
    const racing: Db = {
      ...db,
      query: async (text, params) => {
        if (text.includes("SET role") && !woke) {
          woke = true;
          await holder.confirm(KEY.address); // it wakes and renews right before the takeover...
        } else if (woke && text.startsWith("SELECT address, role")) {
          await db.query(`UPDATE key_lease SET heartbeat_at = now() WHERE address = $1`, [KEY.address]); // ...and beats on
        }
        return db.query(text, params);
      },
    };
    const starting = new KeyLeases(racing, silentLog);
    await expect(starting.claim([KEY])).rejects.toBeInstanceOf(KeyHeld);
    expect(woke).toBe(true);
    clock += CONFIRMED_FOR_MS; // its next signature renews again, and finds the key its own
    await holder.confirm(KEY.address);
    const [row] = await db.query<{ instance_id: string }>(`SELECT instance_id FROM key_lease WHERE address = $1`, [KEY.address]);
    expect(row!.instance_id).toBe(holder.instance);
  });
});
