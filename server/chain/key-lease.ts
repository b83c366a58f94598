/**
 * One key, one instance. Each hot key (operator, refunder) signs from one live instance only:
 * two instances sending from one key pick the same nonce, and the loser's transaction never
 * mines, stranding its bill. So an instance leases its keys in the database at start and
 * heartbeats the lease; another instance that would sign with a key a live instance holds
 * refuses to start, naming the key and its holder.
 *
 * A holder is live while its heartbeat moves. A starting instance that finds a lease:
 *   - held by a process that no longer exists in this very process space: dead, taken at once
 *     (a restart). The space is the host name, the PID namespace and the boot: two containers
 *     may share a host name, and two machines a namespace's name, and each sees the other's pid
 *     as absent. Where the namespace or the boot cannot be read, no holder is taken for dead this way;
 *   - otherwise watches it for up to DEAD_AFTER_MS: a heartbeat in that time means a live
 *     holder (refused); none means a dead one (taken).
 * Taking a dead instance's lease also releases the orders it had leased (order leases carry
 * the instance's id), so a restarted instance resumes them within seconds rather than after
 * ORDER_LEASE_SECONDS. A clean stop gives the leases back, so the next start is immediate.
 *
 * An instance that finds on a heartbeat that its lease was taken (it stalled past
 * DEAD_AFTER_MS) is told (`onLost`): it must stop signing, and main.ts exits. Signing does not
 * wait for that exit: every transaction is signed only within CONFIRMED_FOR_MS of a renewal
 * of the key's lease in the database (`confirm` renews it when the last is older), so an
 * instance that stalled and lost its lease signs nothing more, not even the requests and
 * worker passes in flight while it shuts down.
 *
 * Why a renewal that recent is as good as one right before the signature: another instance
 * takes a live key only after watching its heartbeat stand still for DEAD_AFTER_MS by the
 * database's clock, so a renewal whose statement was sent at t holds the key until t +
 * DEAD_AFTER_MS at the earliest (the takeover itself is made only while the heartbeat is
 * still that old, so a renewal between the watch and the takeover stops it). Signed within
 * CONFIRMED_FOR_MS of t, a transaction has at least DEAD_AFTER_MS - CONFIRMED_FOR_MS (4 s)
 * to be sent before anyone else may sign (chain/operator.ts confirms again between recording
 * a transaction and sending it, and before each send); an instance that stalled past that
 * finds its renewal stale, and the statement then finds the lease taken. The renewal's age
 * is read on two clocks, the monotonic one and the wall's (which, unlike the first, runs on
 * while the machine is suspended), and must be young on both. Under load this is one
 * statement a second instead of one per transaction.
 */
import { randomUUID } from "node:crypto";
import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";
import type { Db } from "../db.ts";
import type { Log } from "../log.ts";

export const HEARTBEAT_MS = 2_000;
/** No heartbeat for this long: the holder is dead (or stalled; it finds out at its next beat). */
export const DEAD_AFTER_MS = 5_000;
const WATCH_STEP_MS = 250;
/** A renewal this recent stands for one right before a signature (see above); well under DEAD_AFTER_MS. */
export const CONFIRMED_FOR_MS = 1_000;

export interface LeasedKey {
  role: "operator" | "refunder";
  address: string;
}

interface LeaseRow {
  address: string;
  role: string;
  instance_id: string;
  host: string;
  pid: number;
  /** Milliseconds since the holder's last heartbeat, by the database's clock. */
  age_ms: number;
  heartbeat_at: Date;
}

/** This instance's lease on a key was taken by another instance: it must not sign with it. */
export class KeyLeaseLost extends Error {
  constructor(readonly address: string) {
    super(`this instance no longer holds the lease on key ${address} (another instance took it, or this one gave it back as it stopped): nothing is signed with it`);
  }
}

/** Another live instance holds one of this instance's keys. */
export class KeyHeld extends Error {
  constructor(
    readonly key: LeasedKey,
    readonly holder: { instance: string; host: string; pid: number },
  ) {
    super(
      `the ${key.role} key ${key.address} is held by another live instance (${holder.instance}, host ${holder.host}, pid ${holder.pid}); ` +
        `each instance needs its own operator and refunder keys (OPERATOR_PRIVATE_KEY, REFUNDER_PRIVATE_KEY, granted with npm run admin)`,
    );
  }
}

/**
 * Where this process's pid means something: the host name, the PID namespace (Linux names it in
 * /proc/self/ns/pid) and the boot (/proc/sys/kernel/random/boot_id). The namespace's name alone
 * repeats from machine to machine (every host's first namespace has the same inode), and so may
 * a host name (a container's, "localhost"): the boot's id is this machine's, this boot's.
 * Undefined where either cannot be read.
 */
function processSpace(): string | undefined {
  try {
    return `${hostname()} ${readlinkSync("/proc/self/ns/pid")} ${readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()}`;
  } catch {
    return undefined;
  }
}
const PROCESS_SPACE = processSpace();

/** Whether process `pid` exists in this process space. */
function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The two clocks a renewal's age is read on, in milliseconds. */
export interface Clocks {
  monotonic: () => number;
  wall: () => number;
}
const SYSTEM_CLOCKS: Clocks = { monotonic: () => performance.now(), wall: () => Date.now() };
type Instant = { [k in keyof Clocks]: number };

export class KeyLeases {
  /** This process's instance id: host, pid and a random part (one process may run several instances in tests). */
  readonly instance = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private timer?: NodeJS.Timeout;
  private held: LeasedKey[] = [];
  /** Keys this instance claimed and then lost or gave back: never signed with again. */
  private readonly lost = new Set<string>();
  /** Per held key, when (on both clocks) the statement of its last renewal that found it still held was sent. */
  private readonly renewedAt = new Map<string, Instant>();
  private beating = false;

  constructor(
    private readonly db: Db,
    private readonly log: Log,
    /** Milliseconds: a stalled process sees both jump as the database's clock does, a suspended machine the wall's. */
    private readonly clocks: Clocks = SYSTEM_CLOCKS,
  ) {}

  private now(): Instant {
    return { monotonic: this.clocks.monotonic(), wall: this.clocks.wall() };
  }

  private async read(address: string): Promise<LeaseRow | undefined> {
    const [row] = await this.db.query<LeaseRow>(
      `SELECT address, role, instance_id, host, pid, heartbeat_at, (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms
       FROM key_lease WHERE address = $1`,
      [address],
    );
    return row;
  }

  /**
   * Leases every key, or throws KeyHeld (leasing none). Answers the dead instances whose
   * leases were taken over: their orders are the caller's to release.
   */
  async claim(keys: LeasedKey[]): Promise<string[]> {
    const unique = [...new Map(keys.map((k) => [k.address.toLowerCase(), { ...k, address: k.address.toLowerCase() }])).values()];
    const dead: string[] = [];
    try {
      for (const key of unique) {
        const previous = await this.take(key);
        if (previous) dead.push(previous);
        this.lost.delete(key.address); // given back at an earlier stop, held again now
        this.held.push(key);
      }
    } catch (err) {
      await this.release();
      throw err;
    }
    this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
    this.timer.unref();
    return [...new Set(dead)];
  }

  /** Leases one key; answers the dead holder it replaced, if any. */
  private async take(key: LeasedKey): Promise<string | undefined> {
    for (;;) {
      const row = await this.read(key.address);
      if (!row) {
        const inserted = await this.db.query(
          `INSERT INTO key_lease (address, role, instance_id, host, pid) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (address) DO NOTHING RETURNING address`,
          [key.address, key.role, this.instance, PROCESS_SPACE ?? hostname(), process.pid],
        );
        if (inserted.length > 0) return undefined;
        continue; // another instance inserted first: judge it like any holder
      }
      if (row.instance_id === this.instance) return undefined;
      const gone = PROCESS_SPACE !== undefined && row.host === PROCESS_SPACE && row.pid !== process.pid && !processExists(row.pid);
      if (!gone && !(await this.staysSilent(row))) {
        throw new KeyHeld(key, { instance: row.instance_id, host: row.host, pid: row.pid });
      }
      // Compare-and-set: only if the dead holder still holds it (two starting instances race)
      // and, unless its process is gone, its heartbeat is still as old as the watch found it
      // (a holder that woke and renewed meanwhile keeps its key).
      const taken = await this.db.query(
        `UPDATE key_lease SET role = $2, instance_id = $3, host = $4, pid = $5, heartbeat_at = now(), started_at = now()
         WHERE address = $1 AND instance_id = $6 AND ($7 OR heartbeat_at <= now() - make_interval(secs => $8))
         RETURNING address`,
        [key.address, key.role, this.instance, PROCESS_SPACE ?? hostname(), process.pid, row.instance_id, gone, DEAD_AFTER_MS / 1000],
      );
      if (taken.length > 0) {
        this.log.warn("took over a key whose instance stopped without giving it back", { role: key.role, key: key.address, previous: row.instance_id });
        return row.instance_id;
      }
    }
  }

  /** Watches a holder's heartbeat: true when it stays silent DEAD_AFTER_MS (dead), false as soon as it beats. */
  private async staysSilent(row: LeaseRow): Promise<boolean> {
    let age = row.age_ms;
    while (age < DEAD_AFTER_MS) {
      await new Promise((r) => setTimeout(r, WATCH_STEP_MS));
      const now = await this.read(row.address);
      if (!now || now.instance_id !== row.instance_id) return true; // given back or taken meanwhile: judge again
      if (now.heartbeat_at.getTime() !== row.heartbeat_at.getTime()) return false;
      age = now.age_ms;
    }
    return true;
  }

  /** Renews the leases; a lease found taken is reported once and dropped. */
  private async beat(): Promise<void> {
    // A beat still waiting on a quiet database is not joined by another (each would hold a
    // connection); the pool's statement timeout ends it, and the next beat runs.
    if (this.held.length === 0 || this.beating) return;
    this.beating = true;
    try {
      const sent = this.now();
      const rows = await this.db.query<{ address: string }>(
        `UPDATE key_lease SET heartbeat_at = now() WHERE address = ANY($1::text[]) AND instance_id = $2 RETURNING address`,
        [this.held.map((k) => k.address), this.instance],
      );
      const kept = new Set(rows.map((r) => r.address));
      for (const address of kept) this.renewed(address, sent);
      this.dropLost(this.held.filter((k) => !kept.has(k.address)));
    } catch (err) {
      this.log.warn("could not renew the key lease; retrying", { error: (err as Error).message });
    } finally {
      this.beating = false;
    }
  }

  private dropLost(lost: LeasedKey[]): void {
    if (lost.length === 0) return;
    for (const k of lost) {
      this.lost.add(k.address);
      this.renewedAt.delete(k.address);
    }
    this.held = this.held.filter((k) => !this.lost.has(k.address));
    this.log.error("another instance took this instance's key lease; it must stop signing", { keys: lost.map((k) => `${k.role} ${k.address}`) });
    this.onLost?.(lost);
  }

  /** A renewal sent at `sent` found the key held; an older one than the last known changes nothing. */
  private renewed(address: string, sent: Instant): void {
    if (!this.held.some((k) => k.address === address)) return;
    const last = this.renewedAt.get(address);
    if (!last || sent.monotonic > last.monotonic) this.renewedAt.set(address, sent);
  }

  /** Whether the key's last renewal is younger than CONFIRMED_FOR_MS on both clocks. */
  private renewedLately(address: string): boolean {
    const last = this.renewedAt.get(address);
    if (!last) return false;
    const now = this.now();
    const young = (since: number) => since >= 0 && since < CONFIRMED_FOR_MS;
    return young(now.monotonic - last.monotonic) && young(now.wall - last.wall);
  }

  /**
   * Called right before a transaction is signed with `address`: passes when the key's lease
   * was renewed within CONFIRMED_FOR_MS, renews it otherwise, or throws KeyLeaseLost (and
   * tells `onLost`) when another instance holds it now. A key this instance never leased (a
   * process without leases, as in some tests) passes.
   */
  async confirm(address: string): Promise<void> {
    const key = address.toLowerCase();
    if (this.lost.has(key)) throw new KeyLeaseLost(key);
    const held = this.held.find((k) => k.address === key);
    if (!held) return;
    if (this.renewedLately(key)) return;
    const sent = this.now();
    const rows = await this.db.query(`UPDATE key_lease SET heartbeat_at = now() WHERE address = $1 AND instance_id = $2 RETURNING address`, [key, this.instance]);
    if (rows.length === 0) {
      this.dropLost([held]);
      throw new KeyLeaseLost(key);
    }
    this.renewed(key, sent);
  }

  /** Called when a heartbeat finds a lease taken by another instance. */
  onLost?: (keys: LeasedKey[]) => void;

  /** Stops the heartbeat without giving the leases back: what a crash leaves (for tests). */
  stopHeartbeat(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Stops the heartbeat and gives the leases back (a clean stop): nothing is signed with them after. */
  async release(): Promise<void> {
    this.stopHeartbeat();
    const addresses = this.held.map((k) => k.address);
    for (const address of addresses) this.lost.add(address);
    this.held = [];
    this.renewedAt.clear();
    if (addresses.length > 0) await this.db.query(`DELETE FROM key_lease WHERE address = ANY($1::text[]) AND instance_id = $2`, [addresses, this.instance]);
  }
}
