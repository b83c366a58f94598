/**
 * Scheduled bills: one-off (at a time) or recurring (a cron pattern, UTC, five fields or six
 * with seconds). A schedule is a row; each due time is claimed by one atomic statement that
 * both advances the schedule and inserts its run keyed by (schedule, due time), so with any
 * number of instances a due time runs once, and a cancelled schedule (the same row, updated
 * under the same lock) is never claimed again. The run pays through the ordinary pull path
 * under an idempotency key derived from that key, so a crash mid-run repeats nothing.
 * After downtime a recurring schedule runs once for the missed time, then resumes.
 */
import { randomBytes } from "node:crypto";
import { Cron } from "croner";
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import type { Db } from "../db.ts";
import { ServiceError, type ErrorCode } from "../errors.ts";
import type { AgentBill } from "../schemas.ts";

export type ScheduleStatus = "ACTIVE" | "COMPLETED" | "CANCELLED";

export interface Schedule {
  id: string;
  wallet: string;
  bill: AgentBill;
  chain: ChainKey;
  token: TokenSymbol;
  runAt: Date | null;
  cron: string | null;
  nextRunAt: Date | null;
  status: ScheduleStatus;
  runs: number;
  maxRuns: number | null;
  createdAt: Date;
  cancelledAt: Date | null;
  /** The key of the agent's call that made it (null for schedules older than the record). */
  apiKeyHash: string | null;
  /** The hash of what was asked for (the bill, its chain and token, when it runs), under its once-only key; null for schedules older than the key. */
  requestHash: string | null;
}

export interface ScheduleRun {
  dueAt: Date;
  requestId: string | null;
  outcome: string | null;
  error: string | null;
}

interface Row {
  id: string;
  wallet: string;
  bill: AgentBill;
  chain: ChainKey;
  token: TokenSymbol;
  run_at: Date | null;
  cron: string | null;
  next_run_at: Date | null;
  status: ScheduleStatus;
  runs: number;
  max_runs: number | null;
  created_at: Date;
  cancelled_at: Date | null;
  api_key_hash: string | null;
  request_hash: string | null;
}

const d = (v: Date | null) => (v ? new Date(v) : null);
const toSchedule = (r: Row): Schedule => ({
  id: r.id,
  wallet: r.wallet,
  bill: r.bill,
  chain: r.chain,
  token: r.token,
  runAt: d(r.run_at),
  cron: r.cron,
  nextRunAt: d(r.next_run_at),
  status: r.status,
  runs: r.runs,
  maxRuns: r.max_runs,
  createdAt: new Date(r.created_at),
  cancelledAt: d(r.cancelled_at),
  requestHash: r.request_hash,
  apiKeyHash: r.api_key_hash ?? null,
});

/** The next time a cron pattern fires strictly after `after` (UTC), or null. */
export function nextCronRun(pattern: string, after: Date): Date | null {
  return new Cron(pattern, { timezone: "UTC" }).nextRun(after);
}

/** Checks a cron pattern: parseable, fires again, and never more often than `minIntervalSeconds`. */
export function checkCron(pattern: string, minIntervalSeconds: number, now = new Date()): Date {
  let runs: Date[];
  try {
    const fields = pattern.trim().split(/\s+/).length;
    if (fields !== 5 && fields !== 6) throw new Error("needs 5 fields (minute hour day month weekday) or 6 (seconds first)");
    runs = new Cron(pattern, { timezone: "UTC" }).nextRuns(6, now);
  } catch (err) {
    throw new ServiceError("VALIDATION_FAILED", `cron "${pattern}" is not a cron pattern: ${(err as Error).message}`);
  }
  if (runs.length === 0) throw new ServiceError("VALIDATION_FAILED", `cron "${pattern}" never fires`);
  for (let i = 1; i < runs.length; i++) {
    if (runs[i]!.getTime() - runs[i - 1]!.getTime() < minIntervalSeconds * 1000) {
      throw new ServiceError("VALIDATION_FAILED", `cron "${pattern}" fires more often than every ${minIntervalSeconds} seconds`);
    }
  }
  return runs[0]!;
}

/** Refusals of a run that only the wallet's owner can mend (server/chain/wallet-state.ts requireFunds). */
export const UNPAYABLE: ReadonlySet<ErrorCode> = new Set<ErrorCode>(["SPENDING_ALLOWANCE_INSUFFICIENT", "TOKEN_ALLOWANCE_INSUFFICIENT", "BALANCE_INSUFFICIENT"]);

export class ScheduleStore {
  constructor(private readonly db: Db) {}

  /** The wallet's schedule made under `idempotencyKey`, if any. */
  async byKey(wallet: string, idempotencyKey: string): Promise<Schedule | undefined> {
    const [row] = await this.db.query<Row>(`SELECT * FROM bill_schedule WHERE wallet = $1 AND idempotency_key = $2`, [wallet.toLowerCase(), idempotencyKey]);
    return row && toSchedule(row);
  }

  async create(s: {
    wallet: string;
    bill: AgentBill;
    chain: ChainKey;
    token: TokenSymbol;
    runAt: Date | null;
    cron: string | null;
    firstRun: Date;
    maxRuns: number | null;
    maxPerWallet: number;
    /** The key of the agent's call that asks for it, which must still be the wallet's; null ties it to none. */
    apiKeyHash: string | null;
    /** Its once-only key for the wallet, and the hash of what is asked for; without a key one is made in any case. */
    idempotencyKey?: string | null;
    requestHash?: string | null;
  }): Promise<Schedule & { created: boolean }> {
    const id = `sch_${randomBytes(10).toString("hex")}`;
    // The per-wallet cap and the key are checked in the same statement as the insert. The cap
    // counts the wallet's active schedules and those it made within a day that ran (a one-off
    // due at once is done as soon as it runs, and would otherwise make room for the next); a
    // cancelled one, by the wallet or its re-link, ran nothing more and frees its place.
    const wallet = s.wallet.toLowerCase();
    // The first under its key is made; a copy (a blind retry, two at once) finds it.
    const [row] = await this.db.query<Row>(
      `INSERT INTO bill_schedule (id, wallet, bill, chain, token, run_at, cron, next_run_at, status, max_runs, api_key_hash, idempotency_key, request_hash)
       SELECT $1, $2, $3, $4, $5, $6, $7, $8, 'ACTIVE', $9, $11, $12, $13
       WHERE (SELECT count(*) FROM bill_schedule WHERE wallet = $2 AND (status = 'ACTIVE' OR (status = 'COMPLETED' AND created_at > now() - interval '1 day'))) < $10
         AND ($11::text IS NULL OR EXISTS (SELECT 1 FROM agent_link WHERE wallet = $2 AND api_key_hash = $11))
       ON CONFLICT (wallet, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
       RETURNING *`,
      [id, wallet, JSON.stringify(s.bill), s.chain, s.token, s.runAt, s.cron, s.firstRun, s.maxRuns, s.maxPerWallet, s.apiKeyHash, s.idempotencyKey ?? null, s.requestHash ?? null],
    );
    if (row) return { ...toSchedule(row), created: true };
    const earlier = s.idempotencyKey ? await this.byKey(wallet, s.idempotencyKey) : undefined;
    if (earlier) return { ...earlier, created: false };
    const [current] = s.apiKeyHash ? await this.db.query(`SELECT 1 FROM agent_link WHERE wallet = $1 AND api_key_hash = $2`, [wallet, s.apiKeyHash]) : [true];
    if (!current) throw new ServiceError("API_KEY_RETIRED", "this api_key was replaced when the wallet linked again; use the newest key");
    throw new ServiceError("VALIDATION_FAILED", `a wallet may have at most ${s.maxPerWallet} schedules active or completed within a day of their making; cancel one, or wait`);
  }

  async list(wallet: string, status?: ScheduleStatus): Promise<Array<Schedule & { lastRuns: ScheduleRun[] }>> {
    const rows = await this.db.query<Row>(
      `SELECT * FROM bill_schedule WHERE wallet = $1 AND ($2::text IS NULL OR status = $2) ORDER BY created_at DESC LIMIT 100`,
      [wallet.toLowerCase(), status ?? null],
    );
    const runs = await this.db.query<{ schedule_id: string; due_at: Date; request_id: string | null; outcome: string | null; error: string | null }>(
      `SELECT schedule_id, due_at, request_id, outcome, error FROM schedule_run WHERE schedule_id = ANY($1::text[]) ORDER BY due_at DESC`,
      [rows.map((r) => r.id)],
    );
    return rows.map((r) => ({
      ...toSchedule(r),
      lastRuns: runs
        .filter((x) => x.schedule_id === r.id)
        .slice(0, 5)
        .map((x) => ({ dueAt: new Date(x.due_at), requestId: x.request_id, outcome: x.outcome, error: x.error })),
    }));
  }

  /** Cancels an active schedule of this wallet; it is never claimed again. */
  async cancel(wallet: string, id: string): Promise<Schedule> {
    const [row] = await this.db.query<Row>(
      `UPDATE bill_schedule SET status = 'CANCELLED', cancelled_at = now(), next_run_at = NULL
       WHERE id = $1 AND wallet = $2 AND status = 'ACTIVE' RETURNING *`,
      [id, wallet.toLowerCase()],
    );
    if (row) return toSchedule(row);
    const [existing] = await this.db.query<Row>(`SELECT * FROM bill_schedule WHERE id = $1 AND wallet = $2`, [id, wallet.toLowerCase()]);
    if (!existing) throw new ServiceError("SCHEDULE_NOT_FOUND", `this wallet has no schedule ${id}`);
    throw new ServiceError("SCHEDULE_NOT_ACTIVE", `schedule ${id} is already ${existing.status.toLowerCase()}`);
  }

  async due(limit: number): Promise<Schedule[]> {
    const rows = await this.db.query<Row>(
      `SELECT * FROM bill_schedule WHERE status = 'ACTIVE' AND next_run_at <= now() ORDER BY next_run_at LIMIT $1`,
      [limit],
    );
    return rows.map(toSchedule);
  }

  /**
   * Claims the schedule's due run: advances it (to `next`, or finished when null) and
   * inserts the run, in one statement. False when another instance, or a cancel, got there first.
   */
  async claim(s: Schedule, next: Date | null): Promise<boolean> {
    const rows = await this.db.query(
      `WITH claimed AS (
         UPDATE bill_schedule SET next_run_at = $3, runs = runs + 1, status = CASE WHEN $3::timestamptz IS NULL THEN 'COMPLETED' ELSE status END
         WHERE id = $1 AND status = 'ACTIVE' AND next_run_at = $2
         RETURNING id)
       INSERT INTO schedule_run (schedule_id, due_at) SELECT id, $2 FROM claimed
       ON CONFLICT DO NOTHING RETURNING schedule_id`,
      [s.id, s.nextRunAt, next],
    );
    return rows.length === 1;
  }

  async finishRun(scheduleId: string, dueAt: Date, result: { requestId?: string; outcome: string; error?: string }): Promise<void> {
    await this.db.query(`UPDATE schedule_run SET request_id = $3, outcome = $4, error = $5 WHERE schedule_id = $1 AND due_at = $2`, [
      scheduleId,
      dueAt,
      result.requestId ?? null,
      result.outcome,
      result.error ?? null,
    ]);
  }

  /**
   * Cancels an active schedule whose last `runs` runs were all refused for want of the wallet's
   * funds or allowances (UNPAYABLE); true when it did. The run's error says so.
   */
  async cancelUnpayable(scheduleId: string, dueAt: Date, runs: number): Promise<boolean> {
    const rows = await this.db.query(
      `UPDATE bill_schedule SET status = 'CANCELLED', cancelled_at = now(), next_run_at = NULL
       WHERE id = $1 AND status = 'ACTIVE'
         AND (SELECT count(*) FROM (SELECT outcome, error FROM schedule_run WHERE schedule_id = $1 ORDER BY due_at DESC LIMIT $2) last
              WHERE last.outcome = 'NOT_PAID' AND split_part(last.error, ':', 1) = ANY($3::text[])) = $2
       RETURNING id`,
      [scheduleId, runs, [...UNPAYABLE]],
    );
    if (rows.length === 0) return false;
    await this.db.query(`UPDATE schedule_run SET error = error || $3 WHERE schedule_id = $1 AND due_at = $2`, [
      scheduleId,
      dueAt,
      `; the schedule is cancelled after ${runs} runs in a row the wallet could not pay`,
    ]);
    return true;
  }

  /** Runs claimed but never finished (the instance died mid-run), older than `seconds`. */
  async unfinishedRuns(seconds: number): Promise<Array<{ schedule: Schedule; dueAt: Date }>> {
    const rows = await this.db.query<Row & { due_at: Date }>(
      `SELECT s.*, r.due_at FROM schedule_run r JOIN bill_schedule s ON s.id = r.schedule_id
       WHERE r.outcome IS NULL AND r.started_at < now() - make_interval(secs => $1) LIMIT 20`,
      [seconds],
    );
    return rows.map((r) => ({ schedule: toSchedule(r), dueAt: new Date(r.due_at) }));
  }
}

/**
 * The next due time after a run at `due`: never in the past, so missed times collapse into one
 * run, and never sooner than `minIntervalSeconds` after `due`. checkCron refuses a pattern whose
 * next runs come closer than that, but a pattern can hide a short gap further on (the last
 * minute of a month, say): the interval holds here, whatever the pattern.
 */
export function nextDue(s: Schedule, due: Date, minIntervalSeconds: number, now = new Date()): Date | null {
  if (!s.cron) return null;
  if (s.maxRuns !== null && s.runs + 1 >= s.maxRuns) return null;
  const earliest = due.getTime() + minIntervalSeconds * 1000 - 1; // nextCronRun is strictly after
  return nextCronRun(s.cron, new Date(Math.max(earliest, now.getTime())));
}
