/**
 * The A2A task store (server/agent/a2a-tasks.ts): anyone can start a pay-per-call task, so the
 * store holds a bounded number, forgets a task after its lifetime, and lists none (a task
 * holds a bill: it is seen only by whoever holds its id).
 */
import { TaskState, type Task } from "@a2a-js/sdk";
import { describe, expect, it } from "vitest";
import { BoundedTaskStore } from "../../server/agent/a2a-tasks.ts";

const task = (id: string, state = TaskState.TASK_STATE_INPUT_REQUIRED): Task => ({
  id,
  contextId: "ctx",
  status: { state, message: undefined, timestamp: undefined },
  artifacts: [],
  history: [],
  metadata: { "billpay.x402.call": { tool: "pay_bill", arguments: { billersCode: "08011111111" } } },
});

describe("the A2A task store", () => {
  it("keeps at most its capacity, dropping the task changed longest ago", async () => {
    const store = new BoundedTaskStore(3);
    for (const id of ["a", "b", "c"]) await store.save(task(id));
    await store.save(task("a", TaskState.TASK_STATE_COMPLETED)); // a changed last now
    await store.save(task("d"));
    expect(store.size).toBe(3);
    expect(await store.load("b")).toBeUndefined();
    expect((await store.load("a"))!.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(await store.load("c")).toBeDefined();
    expect(await store.load("d")).toBeDefined();
  });

  it("forgets a task its lifetime after it last changed", async () => {
    let now = 1_000;
    const store = new BoundedTaskStore(10, 500, () => now);
    await store.save(task("a"));
    now += 500;
    expect(await store.load("a")).toBeDefined();
    now += 1;
    expect(await store.load("a")).toBeUndefined();
    expect(store.size).toBe(0);
  });

  it("hands out copies, and lists nothing", async () => {
    const store = new BoundedTaskStore();
    await store.save(task("a"));
    const loaded = (await store.load("a"))!;
    loaded.metadata = {};
    expect((await store.load("a"))!.metadata).toHaveProperty("billpay.x402.call");
    expect(await store.list()).toMatchObject({ tasks: [], totalSize: 0 });
  });
});
