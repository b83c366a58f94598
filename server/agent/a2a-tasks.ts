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
 * task. Those are never stored: in the caller's messages, each is replaced by "[redacted]"
 * before the task is written, in a data part or in a text part (as JSON, or an api_key in
 * prose). The service's own messages are kept as they are.
 */
import { Role, Task, TaskState, type Message, type Part } from "@a2a-js/sdk";
import type { ListTasksResponse } from "@a2a-js/sdk";
import type { TaskStore } from "@a2a-js/sdk/server";
import type { Db } from "../db.ts";
import { API_KEY_IN_TEXT } from "../credentials.ts";

export const A2A_TASK_CAPACITY = 10_000;
export const A2A_TASK_TTL_MS = 60 * 60_000;

const FINISHED = [TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED];

/** The arguments that are a linked wallet's credentials (agent/tools.ts). */
const CREDENTIALS = new Set(["api_key", "pin"]);
const REDACTED = "[redacted]";

/** Deeper than any tool's arguments go (three levels): past it a part is kept as redacted whole, never walked. */
const MAX_DEPTH = 8;

/** `value` with every credential argument replaced (whatever its type), however deep; itself when it holds none. */
function withoutCredentials(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== "object") return value;
  // A part nested past any tool's (a body of brackets, say) is not walked, so it cannot overflow the stack.
  if (depth > MAX_DEPTH) return REDACTED;
  if (Array.isArray(value)) {
    const out = value.map((v) => withoutCredentials(v, depth + 1));
    return out.some((v, i) => v !== value[i]) ? out : value;
  }
  let changed = false;
  const out = Object.fromEntries(
    Object.entries(value).map(([k, v]) => {
      const next = CREDENTIALS.has(k) && v !== null && v !== undefined ? REDACTED : withoutCredentials(v, depth + 1);
      changed ||= next !== v;
      return [k, next];
    }),
  );
  return changed ? out : value;
}

/** A text with any api_key replaced; JSON in it written again only when a credential was in it. */
function textWithoutCredentials(text: string): string {
  const plain = text.replace(API_KEY_IN_TEXT, REDACTED);
  if (!/^\s*[{[]/.test(plain)) return plain;
  try {
    const parsed: unknown = JSON.parse(plain);
    const cleaned = withoutCredentials(parsed);
    return cleaned === parsed ? plain : JSON.stringify(cleaned);
  } catch {
    return plain; // not JSON after all
  }
}

function partWithoutCredentials(part: Part): Part {
  const content = part.content;
  if (content?.$case === "data") return { ...part, content: { ...content, value: withoutCredentials(content.value) as typeof content.value } };
  if (content?.$case === "text") return { ...part, content: { ...content, value: textWithoutCredentials(content.value) } };
  return part;
}

/** The caller's messages without credentials; the service's own as they are. */
function messageWithoutCredentials(m: Message): Message {
  return m.role === Role.ROLE_USER ? { ...m, parts: m.parts.map(partWithoutCredentials) } : m;
}

/** The task as it may be stored: its caller's messages without credentials. */
function storable(task: Task): Task {
  return {
    ...task,
    history: task.history.map(messageWithoutCredentials),
    ...(task.status?.message ? { status: { ...task.status, message: messageWithoutCredentials(task.status.message) } } : {}),
  };
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
      [task.id, state, JSON.stringify(Task.toJSON(storable(task))), new Date(this.now()), FINISHED],
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
