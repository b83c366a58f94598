/**
 * What the ledger serves to other machines, and Ponder's live-query slots.
 *
 * Bound on every address (LEDGER_HOST=0.0.0.0), the ledger answers its /ledger/* read API and
 * Ponder's /health, /ready, /status and /metrics to anyone; Ponder's SQL over HTTP (/sql/*)
 * and GraphQL (/graphql) answer callers on this machine only (403 LEDGER_QUERY_LOCAL_ONLY
 * otherwise, whatever a forwarding header claims), unless LEDGER_OPEN_QUERY_API=1 opens them.
 * Another machine is played by this machine's own non-loopback address: a connection to it
 * comes from it, not from 127.0.0.1.
 *
 * Ponder (0.16.10, and 0.17.7 as released) takes a live-query slot (1,000 in all) for every
 * /sql/live request and gives it back only when an open stream's client leaves, so invalid
 * requests use them up for good; patches/ponder+0.17.7.patch gives the slot back however the
 * request ends.
 */
import { execFileSync } from "node:child_process";
import { getPriority, networkInterfaces } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LEDGER_NICE, isLoopbackAddress, ledgerNice, ledgerQueryApiOpen } from "../../lib/ledger-config.ts";
import { startLedger, type Ledger } from "../../stack/ledger-process.ts";
import { chainActors } from "../support/actors.ts";
import { freshAccounts, freshDatabase, leaseSharedChains, tempDir, type SharedChains } from "../support/stack.ts";

/**
 * This machine's first IPv4 address that is not loopback. A machine with none gets one for the
 * test, on the loopback device (a test address, RFC 5737), so the cases always run.
 */
let otherAddress = Object.values(networkInterfaces())
  .flat()
  .find((i) => i && i.family === "IPv4" && !i.internal)?.address;
const ADDED_ADDRESS = "192.0.2.250";
let added = false;
if (!otherAddress) {
  execFileSync("ip", ["addr", "add", `${ADDED_ADDRESS}/32`, "dev", "lo"]);
  [otherAddress, added] = [ADDED_ADDRESS, true];
}

const GRAPHQL_QUERY = JSON.stringify({ query: "{ acceptedTokens { items { chainId token accepted } } }" });
/** A /sql/* query as @ponder/client sends one (superjson of the compiled statement). */
const sqlParam = (sql: string) => encodeURIComponent(JSON.stringify({ json: { sql, params: [] } }));
const TREASURY_SQL = `select "chain_id", "token", "balance" from "treasury"`;

/** The same ledger, reached from this machine's other address instead of loopback. */
const fromOtherMachine = (ledger: Ledger) => ledger.url.replace("127.0.0.1", otherAddress!);

const get = (url: string, init?: RequestInit) => fetch(url, { signal: AbortSignal.timeout(10_000), ...init });
const postGraphql = (base: string, headers: Record<string, string> = {}) =>
  get(`${base}/graphql`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: GRAPHQL_QUERY });

describe("the ledger's exposure to other machines", () => {
  // The chains are leased (test/support/shared-chains.ts): this suite changes nothing on them
  // chain-wide, and its two ledgers index them from the deployment on.
  let stack: SharedChains;
  const accounts = freshAccounts();
  /** Bound on 0.0.0.0 with the defaults. */
  let closed: Ledger;
  /** Bound on 0.0.0.0 with LEDGER_OPEN_QUERY_API=1. */
  let open: Ledger;
  const databases: Array<Awaited<ReturnType<typeof freshDatabase>>> = [];

  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
    const logs = await tempDir("ledger-exposure");
    // Each in a database of its own on the PostgreSQL server. What is served to whom is
    // Ponder's HTTP server and this project's middleware, the same on either database; a
    // PGlite ledger process took two to three times the CPU of a PostgreSQL one in a sampled
    // run, and the embedded database's serving is ledger-push's and the PGlite ledger suite's.
    databases.push(await freshDatabase("ledger_exposure"), await freshDatabase("ledger_exposure"));
    const common = { deploymentsFile: stack.deploymentsFile, host: "0.0.0.0" };
    // Both at once: each indexes the same chains into its own database.
    [closed, open] = await Promise.all([
      startLedger({ ...common, databaseUrl: databases[0]!.url, openQueryApi: false, logTo: join(logs, "ledger-closed.log") }),
      startLedger({ ...common, databaseUrl: databases[1]!.url, openQueryApi: true, nice: 10, logTo: join(logs, "ledger-open.log") }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([closed?.stop(), open?.stop()]);
    await stack?.close();
    for (const d of databases) await d.drop();
    if (added) execFileSync("ip", ["addr", "del", `${ADDED_ADDRESS}/32`, "dev", "lo"]);
  });

  it("runs beside the service by default, below it when told (LEDGER_NICE), and reads LEDGER_NICE strictly", () => {
    expect(getPriority(closed.process.pid!)).toBe(Math.min(19, getPriority() + DEFAULT_LEDGER_NICE));
    expect(getPriority(open.process.pid!)).toBe(Math.min(19, getPriority() + 10));
    expect(ledgerNice({})).toBe(0);
    expect(ledgerNice({ LEDGER_NICE: "0" })).toBe(0);
    expect(ledgerNice({ LEDGER_NICE: "19" })).toBe(19);
    for (const bad of ["20", "-1", "1.5", "low", " 5", "0x5"]) expect(() => ledgerNice({ LEDGER_NICE: bad }), bad).toThrow(/LEDGER_NICE must be an integer from 0/);
  });

  it("tells loopback peers from others, and reads LEDGER_OPEN_QUERY_API strictly", () => {
    for (const a of ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"]) expect(isLoopbackAddress(a), a).toBe(true);
    for (const a of [undefined, "", "192.0.2.2", "::ffff:192.0.2.2", "fd00::2", "10.127.0.1", "127.0.0.1.evil", "::"]) expect(isLoopbackAddress(a), String(a)).toBe(false);
    expect(ledgerQueryApiOpen({})).toBe(false);
    expect(ledgerQueryApiOpen({ LEDGER_OPEN_QUERY_API: "0" })).toBe(false);
    expect(ledgerQueryApiOpen({ LEDGER_OPEN_QUERY_API: "1" })).toBe(true);
    expect(() => ledgerQueryApiOpen({ LEDGER_OPEN_QUERY_API: "yes" })).toThrow(/LEDGER_OPEN_QUERY_API must be 1/);
  });

  it("refuses SQL over HTTP and GraphQL to another machine by default, and serves it /ledger/* and Ponder's health routes", async () => {
    const remote = fromOtherMachine(closed);
    const refused = [
      await get(`${remote}/sql/db?sql=${sqlParam(TREASURY_SQL)}`),
      await get(`${remote}/sql/live?sql=${sqlParam(TREASURY_SQL)}`),
      await get(`${remote}/sql/db`),
      await get(`${remote}/sql`),
      await get(`${remote}/graphql`), // GraphiQL
      await postGraphql(remote),
      // A forwarding header names no caller: only the socket's peer counts.
      await postGraphql(remote, { "x-forwarded-for": "127.0.0.1", forwarded: "for=127.0.0.1", "x-real-ip": "127.0.0.1" }),
      await get(`${remote}/sql/db?sql=${sqlParam(TREASURY_SQL)}`, { headers: { "x-forwarded-for": "127.0.0.1" } }),
    ];
    for (const res of refused) {
      expect(res.status, res.url).toBe(403);
      expect(res.headers.get("content-type")).toContain("application/problem+json");
      expect(await res.json()).toMatchObject({ status: 403, code: "LEDGER_QUERY_LOCAL_ONLY" });
    }

    const treasury = await get(`${remote}/ledger/treasury`);
    expect(treasury.status).toBe(200);
    expect(await treasury.json()).toHaveProperty("treasury");
    const bad = await get(`${remote}/ledger/wallets/0x1234`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ code: "INVALID_PARAMETER" });
    for (const path of ["/health", "/ready", "/status", "/metrics"]) expect((await get(`${remote}${path}`)).status, path).toBe(200);
  });

  it("keeps SQL over HTTP and GraphQL open to this machine (the service's push, console and audit)", async () => {
    const { createClient } = await import("@ponder/client");
    const schema = await import("../../ponder/ponder.schema.ts");
    const rows = await createClient(`${closed.url}/sql`, { schema }).db.select().from(schema.acceptedToken);
    expect(rows.length).toBeGreaterThan(0);
    const res = await postGraphql(closed.url);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { acceptedTokens: { items: unknown[] } } }).data.acceptedTokens.items.length).toBeGreaterThan(0);
  });

  it("serves SQL over HTTP and GraphQL to another machine with LEDGER_OPEN_QUERY_API=1", async () => {
    const remote = fromOtherMachine(open);
    const { createClient } = await import("@ponder/client");
    const schema = await import("../../ponder/ponder.schema.ts");
    const rows = await createClient(`${remote}/sql`, { schema }).db.select().from(schema.acceptedToken);
    expect(rows.length).toBeGreaterThan(0);
    const res = await postGraphql(remote);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { acceptedTokens: { items: unknown[] } } }).data.acceptedTokens.items.length).toBeGreaterThan(0);
    expect((await get(`${remote}/ledger/treasury`)).status).toBe(200);
  });

  it("still takes a live query after 1,100 invalid ones", async () => {
    const live = (query: string) => `${closed.url}/sql/live${query}`;
    /** Opens a live query and returns its response; the caller closes it with `close()`. */
    async function openLive(query: string) {
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), 10_000);
      const res = await fetch(live(query), { signal: controller.signal });
      clearTimeout(timer);
      return { res, close: () => controller.abort() };
    }
    const valid = `?sql=${sqlParam(TREASURY_SQL)}`;
    // The middleware sees the backfill done within a second of /ready.
    await expect
      .poll(
        async () => {
          const { res, close } = await openLive(valid);
          close();
          return res.status;
        },
        { timeout: 10_000, interval: 200 },
      )
      .toBe(200);

    const invalid = [
      "", // no query
      "?sql=not%20json", // not superjson
      `?sql=${sqlParam(`delete from "treasury"`)}`, // not a read
      `?sql=${sqlParam("selec 1")}`, // not SQL
      `?sql=${sqlParam(`select * from "treasury"; select 1`)}`, // two statements
    ];
    const statuses = new Map<number, number>();
    const TOTAL = 1_100;
    const AT_ONCE = 50;
    for (let sent = 0; sent < TOTAL; sent += AT_ONCE) {
      await Promise.all(
        Array.from({ length: Math.min(AT_ONCE, TOTAL - sent) }, async (_, i) => {
          const res = await get(live(invalid[(sent + i) % invalid.length]!));
          await res.arrayBuffer();
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        }),
      );
    }
    // Every one refused for what it is (400 or 500), none for want of a slot (503).
    expect([...statuses.keys()].sort()).toEqual([400, 500]);

    const { res, close } = await openLive(valid);
    try {
      expect(res.status, res.status === 503 ? await res.text() : "").toBe(200);
      expect(res.headers.get("content-type")).toContain("text/event-stream");
      // And it pushes: a transfer into BillPay changes the treasury it watches.
      const carol = accounts(5);
      const celo = chainActors(stack.deployments, "CELO");
      await celo.transfer(carol, "USDC", celo.billPay, 1n);
      const reader = res.body!.getReader();
      const first = await Promise.race([
        reader.read().then((r) => new TextDecoder().decode(r.value)),
        new Promise<string>((resolve) => setTimeout(() => resolve("no push in 15 s"), 15_000)),
      ]);
      expect(first).toMatch(/^data: /);
    } finally {
      close();
    }
  });
});
