/**
 * The A2A task store (server/agent/a2a-tasks.ts), on the service's database: anyone can start a
 * pay-per-call task, so the table holds a bounded number, forgets a task after its lifetime,
 * lists none (a task holds a bill: it is seen only by whoever holds its id), and never reopens
 * a finished task. Two instances continuing one task are in test/agent/a2a-x402.test.ts.
 */
import { Role, TaskState, type Task } from "@a2a-js/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DbTaskStore } from "../../server/agent/a2a-tasks.ts";
import { openDb, type Db } from "../../server/db.ts";
import { purgeExpired } from "../../server/storage-purge.ts";

const task = (id: string, state = TaskState.TASK_STATE_INPUT_REQUIRED): Task => ({
  id,
  contextId: "ctx",
  status: {
    state,
    message: {
      messageId: "m1",
      contextId: "ctx",
      taskId: id,
      role: Role.ROLE_AGENT,
      parts: [{ content: { $case: "data", value: { "x402.payment.status": "payment-required" } }, metadata: undefined, filename: "", mediaType: "application/json" }],
      metadata: { "x402.payment.status": "payment-required" },
      extensions: [],
      referenceTaskIds: [],
    },
    timestamp: "2026-11-27T12:00:00.000Z",
  },
  artifacts: [],
  history: [],
  metadata: { "billpay.x402.call": { tool: "pay_bill", arguments: { billersCode: "08011111111", nairaAmount: 500 } } },
});

describe("the A2A task store, in the database", () => {
  let db: Db;
  beforeAll(async () => {
    db = await openDb({ pgliteDir: undefined });
  });
  afterAll(async () => {
    await db?.close();
  });
  const count = async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM a2a_task`))[0]!.n;
  const clear = () => db.query(`DELETE FROM a2a_task`);

  it("gives back exactly the task it was given, oneofs, metadata and all; an unknown id is undefined", async () => {
    await clear();
    const store = new DbTaskStore(db);
    const saved = task("round-trip");
    await store.save(saved);
    expect(await store.load("round-trip")).toEqual(saved);
    expect(await store.load("nobody")).toBeUndefined();
  });

  it("keeps about its capacity, dropping the task changed longest ago", async () => {
    await clear();
    const store = new DbTaskStore(db, 3, 60_000, Date.now, 1); // trimmed on every save
    for (const id of ["a", "b", "c"]) await store.save(task(id));
    await store.save(task("a", TaskState.TASK_STATE_WORKING)); // a changed last now
    await store.save(task("d"));
    expect(await count()).toBe(3);
    expect(await store.load("b")).toBeUndefined();
    expect((await store.load("a"))!.status!.state).toBe(TaskState.TASK_STATE_WORKING);
    expect(await store.load("c")).toBeDefined();
    expect(await store.load("d")).toBeDefined();
  });

  it("forgets a task its lifetime after it last changed, and the purge deletes it", async () => {
    await clear();
    let now = Date.now();
    const store = new DbTaskStore(db, 10, 500, () => now);
    await store.save(task("a"));
    now += 499;
    expect(await store.load("a")).toBeDefined();
    now += 2;
    expect(await store.load("a")).toBeUndefined();
    expect(await store.trim()).toBe(1);
    expect(await count()).toBe(0);
    // The worker's purge trims with the real lifetime: an hour-old task goes, a fresh one stays.
    now = Date.now();
    await new DbTaskStore(db, 10, 3_600_000, () => now - 3_600_001).save(task("old"));
    await new DbTaskStore(db).save(task("fresh"));
    expect((await purgeExpired(db, 300)).a2aTasks).toBe(1);
    expect(await new DbTaskStore(db).load("fresh")).toBeDefined();
  });

  it("never reopens a finished task: a save turning it into another state is ignored, the same state is kept", async () => {
    await clear();
    const store = new DbTaskStore(db);
    await store.save(task("t"));
    await store.save(task("t", TaskState.TASK_STATE_COMPLETED));
    await store.save(task("t", TaskState.TASK_STATE_INPUT_REQUIRED)); // a racing instance, one step behind
    await store.save(task("t", TaskState.TASK_STATE_FAILED));
    expect((await store.load("t"))!.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    const withArtifact = { ...task("t", TaskState.TASK_STATE_COMPLETED), artifacts: [{ artifactId: "bill", name: "bill", description: "", parts: [], metadata: undefined, extensions: [] }] };
    await store.save(withArtifact);
    expect((await store.load("t"))!.artifacts).toHaveLength(1);
  });

  it("lists nothing", async () => {
    const store = new DbTaskStore(db);
    await store.save(task("listed?"));
    expect(await store.list()).toMatchObject({ tasks: [], totalSize: 0 });
  });

  it("never stores a wallet's api_key or PIN sent on a task, in a data part or in JSON text, and keeps the rest of the call", async () => {
    await clear();
    const store = new DbTaskStore(db);
    const key = `bpk_${"k".repeat(43)}`;
    const call = { skill: "pay_bill", arguments: { api_key: key, pin: "4821", billersCode: "08011111111", nairaAmount: 500 } };
    const message = (parts: Task["history"][number]["parts"], role = Role.ROLE_USER) => ({ messageId: "m2", contextId: "ctx", taskId: "with-key", role, parts, metadata: undefined, extensions: [], referenceTaskIds: [] });
    // The service's own answer may name a pin (describe_capabilities' rules): kept as it is, as is JSON text that holds no credential.
    const answer = message([{ content: { $case: "data", value: { limits: { pin: "4 to 6 digits" } } }, metadata: undefined, filename: "", mediaType: "application/json" }], Role.ROLE_AGENT);
    const plainJson = '{ "skill": "list_plans",  "arguments": { "serviceID": "mtn" } }';
    const saved: Task = {
      ...task("with-key"),
      history: [
        message([{ content: { $case: "data", value: call }, metadata: undefined, filename: "", mediaType: "application/json" }]),
        message([{ content: { $case: "text", value: JSON.stringify(call) }, metadata: undefined, filename: "", mediaType: "text/plain" }]),
        message([{ content: { $case: "text", value: `pay it with ${key}` }, metadata: undefined, filename: "", mediaType: "text/plain" }]),
        answer,
        message([{ content: { $case: "text", value: plainJson }, metadata: undefined, filename: "", mediaType: "text/plain" }]),
      ],
    };
    await store.save(saved);
    const [row] = await db.query<{ task: unknown }>(`SELECT task FROM a2a_task WHERE id = 'with-key'`);
    const stored = typeof row!.task === "string" ? row!.task : JSON.stringify(row!.task);
    expect(stored).not.toContain(key);
    expect(stored).not.toContain("4821");
    const loaded = (await store.load("with-key"))!;
    const redacted = { skill: "pay_bill", arguments: { api_key: "[redacted]", pin: "[redacted]", billersCode: "08011111111", nairaAmount: 500 } };
    expect(loaded.history[0]!.parts[0]!.content).toEqual({ $case: "data", value: redacted });
    expect(JSON.parse((loaded.history[1]!.parts[0]!.content as { value: string }).value)).toEqual(redacted);
    expect(loaded.history[2]!.parts[0]!.content).toEqual({ $case: "text", value: "pay it with [redacted]" });
    expect(loaded.history[3]).toEqual(answer);
    expect(loaded.history[4]!.parts[0]!.content).toEqual({ $case: "text", value: plainJson });
    expect(loaded.metadata).toEqual(saved.metadata); // the priced call, which carries no credential, is kept as it was
  });

  it("stores no PIN sent as a number, and saves a message nested deeper than any call without walking it all", async () => {
    await clear();
    const store = new DbTaskStore(db);
    const message = (parts: Task["history"][number]["parts"]) => ({ messageId: "m3", contextId: "ctx", taskId: "odd", role: Role.ROLE_USER, parts, metadata: undefined, extensions: [], referenceTaskIds: [] });
    const numeric = { skill: "pay_bill", arguments: { pin: 48213, billersCode: "08011111111" } };
    const deep = `${"[".repeat(20_000)}${"]".repeat(20_000)}`;
    await store.save({
      ...task("odd"),
      history: [
        message([{ content: { $case: "data", value: numeric }, metadata: undefined, filename: "", mediaType: "application/json" }]),
        message([{ content: { $case: "text", value: deep }, metadata: undefined, filename: "", mediaType: "text/plain" }]),
      ],
    });
    const [row] = await db.query<{ task: unknown }>(`SELECT task FROM a2a_task WHERE id = 'odd'`);
    expect(typeof row!.task === "string" ? row!.task : JSON.stringify(row!.task)).not.toContain("48213");
    const loaded = (await store.load("odd"))!;
    expect(loaded.history[0]!.parts[0]!.content).toEqual({ $case: "data", value: { skill: "pay_bill", arguments: { pin: "[redacted]", billersCode: "08011111111" } } });
  });
});
