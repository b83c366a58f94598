/**
 * Where the A2A route keeps its tasks. Only pay-per-call calls make tasks (agent/a2a-x402.ts:
 * an input-required task holds the bill it priced until the payment comes), and anyone can
 * start one, so the store is bounded: at most `capacity` tasks, the oldest dropped first, and
 * a task is forgotten `ttlMs` after it last changed (far past its price's lifetime). A
 * flood can then cost the service a bounded amount of memory, never all of it; a payment
 * sent on a forgotten task is refused as an unknown task, and nothing is charged.
 *
 * Tasks are never listed: a task holds a bill (a phone, a meter), and every caller here is
 * unauthenticated, so a task is seen only by whoever holds its id.
 */
import type { ListTasksResponse, Task } from "@a2a-js/sdk";
import type { TaskStore } from "@a2a-js/sdk/server";

export class BoundedTaskStore implements TaskStore {
  private readonly tasks = new Map<string, { task: Task; at: number }>();

  constructor(
    private readonly capacity = 10_000,
    private readonly ttlMs = 60 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.tasks.size;
  }

  async save(task: Task): Promise<void> {
    // Re-inserted, so the Map's order stays oldest change first.
    this.tasks.delete(task.id);
    this.tasks.set(task.id, { task: structuredClone(task), at: this.now() });
    for (const id of this.tasks.keys()) {
      if (this.tasks.size <= this.capacity) break;
      this.tasks.delete(id);
    }
  }

  async load(taskId: string): Promise<Task | undefined> {
    const entry = this.tasks.get(taskId);
    if (!entry) return undefined;
    if (this.now() - entry.at > this.ttlMs) {
      this.tasks.delete(taskId);
      return undefined;
    }
    return structuredClone(entry.task);
  }

  async list(): Promise<ListTasksResponse> {
    return { tasks: [], nextPageToken: "", pageSize: 0, totalSize: 0 };
  }
}
