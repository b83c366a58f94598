/**
 * Where the A2A route keeps its tasks: in the service's database, so any instance continues a
 * task another started (a pay-per-call task is priced on one call and paid on the next, and a
 * load balancer need not send both to the same instance).
 *
 * Only pay-per-call calls make tasks (agent/a2a-x402.ts: an input-required task holds the bill
 * it priced until the payment comes), and anyone can start one, so the table is bounded: about
 * `capacity` tasks (trimmed every `trimEvery` saves and on the worker's purge, the task
 * changed longest ago first), and a task is forgotten `ttlMs` after it last changed (far past
 * its price's lifetime). A flood costs a bounded amount of storage; a payment sent on a
 * forgotten task is refused as an unknown task, and nothing is charged.
 *
 * A finished task (completed, failed, canceled, rejected) never goes back: a save that would
 * turn it into another state is ignored, so two instances racing on one task cannot reopen
 * it. Tasks are never listed: a task holds a bill (a phone, a meter), and every caller here is
 * unauthenticated, so a task is seen only by whoever holds its id.
 *
 * A task keeps its messages (the SDK appends each message sent on a task to its history
 * before the skill runs), and a caller may send a linked wallet's api_key and PIN on an open
 * task. Those are never stored: each is replaced by "[redacted]" before the task is written,
 * wherever in the task it stands, in a data part or in a text part holding JSON.
 */
import { Task, TaskState } from "@a2a-js/sdk";
import type { ListTasksResponse } from "@a2a-js/sdk";
import type { TaskStore } from "@a2a-js/sdk/server";
import type { Db } from "../db.ts";

export const A2A_TASK_CAPACITY = 10_000;
export const A2A_TASK_TTL_MS = 60 * 60_000;

const FINISHED = [TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED];

/** The arguments that are a linked wallet's credentials (agent/tools.ts). */
const CREDENTIALS = new Set(["api_key", "pin"]);
const API_KEY_TEXT = /bpk_[A-Za-z0-9_-]{43}/g;

/** `value` (a task as JSON) with every credential replaced, however deep, JSON text included. */
function withoutCredentials(value: unknown): unknown {
  if (typeof value === "string") {
    const text = value.replace(API_KEY_TEXT, "[redacted]");
    if (!/^\s*[{[]/.test(text)) return text;
    try {
      return JSON.stringify(withoutCredentials(JSON.parse(text)));
    } catch {
      return text; // not JSON after all
    }
  }
  if (Array.isArray(value)) return value.map(withoutCredentials);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, CREDENTIALS.has(k) && v !== undefined && v !== null ? "[redacted]" : withoutCredentials(v)]));
}

export class DbTaskStore implements TaskStore {
  private savesSinceTrim = 0;

  constructor(
    private readonly db: Pick<Db, "query">,
    private readonly capacity = A2A_TASK_CAPACITY,
    private readonly ttlMs = A2A_TASK_TTL_MS,
    private readonly now: () => number = Date.now,
    private readonly trimEvery = 100,
  ) {}

  async save(task: Task): Promise<void> {
    const state = task.status?.state ?? TaskState.TASK_STATE_UNSPECIFIED;
    await this.db.query(
      `INSERT INTO a2a_task (id, state, task, updated_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, task = EXCLUDED.task, updated_at = EXCLUDED.updated_at, seq = nextval('a2a_task_seq')
       WHERE NOT (a2a_task.state = ANY($5::int[]) AND EXCLUDED.state <> a2a_task.state)`,
      [task.id, state, JSON.stringify(withoutCredentials(Task.toJSON(task))), new Date(this.now()), FINISHED],
    );
    if (++this.savesSinceTrim >= this.trimEvery) {
      this.savesSinceTrim = 0;
      await this.trim();
    }
  }

  async load(taskId: string): Promise<Task | undefined> {
    const [row] = await this.db.query<{ task: unknown }>(`SELECT task FROM a2a_task WHERE id = $1 AND updated_at > $2`, [taskId, new Date(this.now() - this.ttlMs)]);
    return row ? Task.fromJSON(typeof row.task === "string" ? JSON.parse(row.task) : row.task) : undefined;
  }

  async list(): Promise<ListTasksResponse> {
    return { tasks: [], nextPageToken: "", pageSize: 0, totalSize: 0 };
  }

  /** Drops tasks past their lifetime, then all but the `capacity` changed last; resolves to how many went. */
  async trim(): Promise<number> {
    const expired = await this.db.query(`DELETE FROM a2a_task WHERE updated_at <= $1 RETURNING 1`, [new Date(this.now() - this.ttlMs)]);
    const over = await this.db.query(
      `DELETE FROM a2a_task WHERE seq <= (SELECT seq FROM a2a_task ORDER BY seq DESC OFFSET $1 LIMIT 1) RETURNING 1`,
      [this.capacity],
    );
    return expired.length + over.length;
  }
}
