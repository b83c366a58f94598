/**
 * Abuse resistance against the real local stack, with small limits so a flood is short:
 * rate limits on the link route, the paying tools, new challenges and the order route (a
 * payment is never refused by one), limits shared across instances on PostgreSQL, bounded
 * bookkeeping tables, and a service that will not build its resource URL from Host.
 */
import type { Account } from "viem";
import { airtimeBill, x402Bill } from "../support/bills.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkHeaders, mcpAgent, type ToolAnswer } from "../../lib/agent-client.ts";
import { LINK_PATH } from "../../lib/agent-link.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { x402HTTPClient } from "@x402/core/http";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { hashApiKey, newApiKey } from "../../server/credentials.ts";
import { loadConfig } from "../../server/config.ts";
import { createApp } from "../../server/app.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { openDb, type Db } from "../../server/db.ts";
import { Gate, Limits } from "../../server/limits.ts";
import { purgeExpired } from "../../server/storage-purge.ts";
import { hashOrderSecret, newOrderIds } from "../../server/orders/store.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshDatabase, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { listen } from "../support/http-server.ts";

const airtime = (billersCode: string, nairaAmount = 1550) => airtimeBill({ billersCode, nairaAmount });

describe("abuse resistance", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;
  let mcp: Awaited<ReturnType<typeof mcpAgent>>;
  const errorOf = (a: ToolAnswer) => a.data.error as { code?: string; retry_after_seconds?: number } | undefined;
  const bill = (payer: Account, billersCode: string, nairaAmount = 1550) => x402Bill(payer.address, { billersCode, nairaAmount });
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts, {
      RATE_LIMIT_LINK_ADDRESS: "4/60",
      RATE_LIMIT_LINK_WALLET: "2/60",
      RATE_LIMIT_PAYING_KEY: "2/60",
      RATE_LIMIT_CHALLENGE_ADDRESS: "5/60",
      RATE_LIMIT_ORDER_ADDRESS: "3/60",
    });
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
    mcp = await mcpAgent(url);
  });
  afterAll(async () => {
    await mcp?.close();
    await paying?.close();
  });

  it("limits links per wallet and per address with 429, Retry-After and a stable code, before any key is minted", async () => {
    const link = async (account: Account) =>
      fetch(`${url}${LINK_PATH}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(await linkHeaders(account, "BillPay", String(Date.now() + Math.floor(Math.random() * 1000)))) },
        body: JSON.stringify({ wallet_address: account.address, channel: "MCP", pin: "1234", approved_chain: "CELO", approved_token: "USDC" }),
      });
    const wallet = accounts(15);
    expect((await link(wallet)).status).toBe(200);
    expect((await link(wallet)).status).toBe(200);
    const third = await link(wallet); // the wallet's budget (2) is spent
    expect(third.status).toBe(429);
    expect(third.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await third.json()).toMatchObject({ code: "RATE_LIMITED", retry_after_seconds: expect.any(Number) });
    const keys = await service.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM retired_api_key WHERE wallet = $1`, [wallet.address.toLowerCase()]);
    expect(keys[0]!.n).toBe(1); // two links: one key retired, none minted by the refused call
    // The address's budget (4) is spent by a fourth call, whichever wallet it names.
    expect((await link(accounts(16))).status).toBe(200);
    const other = await link(accounts(17));
    expect(other.status).toBe(429);
  });

  it("limits paying calls per api_key, before the PIN's hash, charging nothing", async () => {
    const account = accounts(18);
    await celo.approveAndAllow(account, "USDC", 100_000_000n);
    // Links from this address are spent: the service's own link path is exercised above, so
    // this agent is linked in the store directly, as the link route would.
    const key = await linkAgentDirect(account);
    const before = await celo.balanceOf("USDC", account.address);
    const pay = (code: string) => mcp.call("pay_bill", { api_key: key, pin: "1234", ...airtime(code) });
    expect((await pay("08011111111")).data).toMatchObject({ status: "SUCCESS" });
    expect(errorOf(await mcp.call("pay_bill", { api_key: key, pin: "0000", ...airtime("08011111112") }))?.code).toBe("PIN_INVALID");
    const limited = errorOf(await pay("08011111113"));
    expect(limited).toMatchObject({ code: "RATE_LIMITED", retry_after_seconds: expect.any(Number) });
    expect(await celo.balanceOf("USDC", account.address)).toBe(before - 1_001_000n);
    // Reading tools are not paying calls.
    expect((await mcp.call("check_balance", { api_key: key })).isError).toBe(false);
  });

  it("limits new bills per address but never a payment, nor a repeat of a quoted bill", async () => {
    const payer = accounts(11);
    const codes: number[] = [];
    for (let i = 0; i < 6; i++) codes.push((await post(bill(payer, "08011111111", 100 + i))).status);
    expect(codes).toEqual([402, 402, 402, 402, 402, 429]);
    // A bill already quoted is answered from its quote.
    expect((await post(bill(payer, "08011111111", 100))).status).toBe(402);
    // A payment for a quoted bill goes through although the address's budget is spent.
    const body = bill(payer, "08011111111", 101);
    const challenged = await post(body);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const paid = await post(body, client.encodePaymentSignatureHeader(payload));
    expect(paid.status).toBe(200);
    const result = (await paid.json()) as { status: string; request_id: string };
    expect(result.status).toBe("SUCCESS");

    // The order route: 3 per address, then 429.
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await fetch(`${url}/api/orders/${result.request_id}`)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    // A replay of the payment is a look at its order too: the same budget.
    expect((await post(body, client.encodePaymentSignatureHeader(payload))).status).toBe(429);
  });

  it("keeps the tables bounded: a flood of new bills writes no row; expired link signatures are purged", async () => {
    const count = async (table: string) => (await service.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`))[0]!.n;
    // Unpaid bills from fresh addresses' budgets: each answered 402 (or 429 past the limit), none stored.
    const versions = await count("rate_version");
    const orders = await count("bill_order");
    for (let i = 0; i < 8; i++) expect([402, 429]).toContain((await post(bill(accounts(13), "08011111111", 300 + i))).status);
    expect(await count("rate_version")).toBe(versions);
    expect(await count("bill_order")).toBe(orders);
    await service.db.query(`UPDATE link_signature SET used_at = now() - interval '1 hour'`);
    const purged = await purgeExpired(service.db, service.config.LINK_SIGNATURE_WINDOW_SECONDS);
    expect(purged.linkSignatures).toBeGreaterThan(0);
    expect(await count("link_signature")).toBe(0);
  });

  it("purges orders that moved no money after the retention, with their callbacks; orders that moved money stay", async () => {
    const count = async (sql: string, params: unknown[]) => (await service.db.query<{ n: number }>(sql, params))[0]!.n;
    const order = async (tag: string) => {
      const nonce = `0x${tag.padStart(64, "0")}`;
      const { order: o } = await service.flow.orders.lockPayment(
        {
          ...newOrderIds(),
          vend: null,
          bodyHash: `purge-${tag}`,
          bill: { ...airtime("08011111111"), callback_url: "https://receiver.example/hook" },
          chain: "CELO",
          token: "USDC",
          tokenAddress: celo.tokenAddress("USDC"),
          payer: accounts(19).address,
          amount: 1_001_000n,
          authNonce: nonce,
          authValidBefore: 1n,
          secretHash: hashOrderSecret(`ors_${tag}`),
          payment: { tag },
          requirements: {},
        },
        0,
      );
      return o;
    };
    const failed = await order("a1");
    // A refund was signed for it once (its payment then reorganised away): the record goes with the order.
    await service.flow.orders.refundSigned(failed.requestId, `0x${"ab".repeat(32)}`, { signer: accounts(19).address, nonce: 7, maxFeePerGas: 2_000_000_000n, maxPriorityFeePerGas: 1_000_000_000n });
    await service.flow.orders.transition(failed.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "the authorization expired unsettled" });
    const unfinished = await order("a2"); // still SETTLING: it may yet move money
    const recent = await order("a3");
    await service.flow.orders.transition(recent.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "the authorization expired unsettled" });
    expect(await count(`SELECT count(*)::int AS n FROM callback_delivery WHERE request_id = $1`, [failed.requestId])).toBe(1);
    await service.db.query(`UPDATE bill_order SET updated_at = now() - interval '40 days' WHERE request_id = ANY($1)`, [[failed.requestId, unfinished.requestId]]);
    const purged = await purgeExpired(service.db, service.config.LINK_SIGNATURE_WINDOW_SECONDS, 30 * 86_400);
    expect(purged.unpaidOrders).toBe(1);
    expect(await service.flow.orders.get(failed.requestId)).toBeUndefined();
    expect(await count(`SELECT count(*)::int AS n FROM callback_delivery WHERE request_id = $1`, [failed.requestId])).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM refund_nonce WHERE request_id = $1`, [failed.requestId])).toBe(0);
    expect((await service.flow.orders.get(unfinished.requestId))?.status).toBe("SETTLING");
    expect((await service.flow.orders.get(recent.requestId))?.status).toBe("PAYMENT_FAILED"); // within the retention
    // Orders that moved money are never purged, however old.
    expect(await count(`SELECT count(*)::int AS n FROM bill_order WHERE status IN ('SUCCESS', 'REFUNDED')`, [])).toBeGreaterThan(0);
    await service.db.query(`UPDATE bill_order SET updated_at = now() - interval '400 days' WHERE status IN ('SUCCESS', 'REFUNDED')`);
    const served = await count(`SELECT count(*)::int AS n FROM bill_order WHERE status IN ('SUCCESS', 'REFUNDED')`, []);
    await purgeExpired(service.db, service.config.LINK_SIGNATURE_WINDOW_SECONDS, 30 * 86_400);
    expect(await count(`SELECT count(*)::int AS n FROM bill_order WHERE status IN ('SUCCESS', 'REFUNDED')`, [])).toBe(served);
    // The unfinished one is ended by hand so the worker leaves it be.
    await service.flow.orders.transition(unfinished.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "test order" });
  });

  it("limits MCP and A2A requests per client address, and tool calls per api_key", async () => {
    const appWith = (limits: Record<string, string>) =>
      createApp({ config: loadConfig({ LOG_REQUESTS: "0", ...limits }), db: service.db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow: service.flow });
    const call = (app: ReturnType<typeof createApp>, path: "/api/mcp" | "/api/a2a", name: string, args: Record<string, unknown>) =>
      app.request(`http://localhost${path}`, {
        method: "POST",
        headers: { host: "localhost", "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify(
          path === "/api/mcp"
            ? { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }
            : { jsonrpc: "2.0", id: 1, method: "message/send", params: { message: { kind: "message", role: "user", messageId: `m${Math.random()}`, parts: [{ kind: "data", data: { skill: name, arguments: args } }] } } },
        ),
      });
    // Per address: MCP and A2A share one budget (3), whatever the tool.
    const byAddress = appWith({ RATE_LIMIT_AGENT_ADDRESS: "3/60" });
    const statuses = [];
    for (const path of ["/api/mcp", "/api/a2a", "/api/mcp", "/api/a2a"] as const) statuses.push((await call(byAddress, path, "list_plans", { serviceID: "mtn-data" })).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    // Per key: any tool called with the api_key counts (2), whichever address or transport it comes through.
    const byKey = appWith({ RATE_LIMIT_TOOL_KEY: "2/60" });
    const key = await linkAgentDirect(accounts(17));
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await (await call(byKey, "/api/mcp", "describe_capabilities", { api_key: key })).json());
    const codes = answers.map((a) => (a as { result: { structuredContent?: { error?: { code?: string } } } }).result.structuredContent?.error?.code ?? "ok");
    expect(codes).toEqual(["ok", "ok", "RATE_LIMITED"]);
    // A keyless call is not counted under any key.
    expect(((await (await call(byKey, "/api/mcp", "describe_capabilities", {})).json()) as { result: { isError?: boolean } }).result.isError).toBeFalsy();
  });

  it("behind TRUSTED_PROXIES, limits and the operators' locality key on the client the proxy names, not on the proxy", async () => {
    // Each app counts in a database of its own (in memory): on the stack's PostgreSQL the
    // counters are shared, and this machine's address has been counted by the suites before.
    const counters: Db[] = [];
    const serve = async (env: Record<string, string>) => {
      const db = await openDb({});
      counters.push(db);
      return listen(createApp({ config: loadConfig({ LOG_REQUESTS: "0", RATE_LIMIT_ORDER_ADDRESS: "2/60", ...env }), db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow: service.flow }).fetch);
    };
    const order = (base: string, forwardedFor?: string) =>
      fetch(`${base}/api/orders/req_000000000000${"0".repeat(20)}`, { headers: forwardedFor ? { "x-forwarded-for": forwardedFor } : {} }).then((r) => r.status);
    const proxied = await serve({ TRUSTED_PROXIES: "127.0.0.1" });
    const direct = await serve({});
    try {
      // Two clients behind the proxy: each has its own budget (2).
      expect([await order(proxied.url, "203.0.113.7"), await order(proxied.url, "203.0.113.7"), await order(proxied.url, "203.0.113.7")]).toEqual([404, 404, 429]);
      expect(await order(proxied.url, "203.0.113.8")).toBe(404);
      // An IPv6 client is limited by its /64, which one host holds whole: another address in it is the same client.
      expect([await order(proxied.url, "2001:db8:1:2::1"), await order(proxied.url, "2001:db8:1:2:ffff::9"), await order(proxied.url, "2001:0db8:0001:0002:0:0:0:5")]).toEqual([404, 404, 429]);
      expect(await order(proxied.url, "2001:db8:1:3::1")).toBe(404);
      // A client cannot name itself: what the proxy appended (the rightmost) is believed.
      expect(await order(proxied.url, "198.51.100.1, 203.0.113.7")).toBe(429);
      // Not behind a trusted proxy, X-Forwarded-For is nobody's word.
      expect([await order(direct.url, "203.0.113.20"), await order(direct.url, "203.0.113.21"), await order(direct.url, "203.0.113.22")]).toEqual([404, 404, 429]);
      // The operators' routes without a token answer this machine only: a client the proxy names is not it.
      expect((await fetch(`${proxied.url}/ops/orphans`, { headers: { "x-forwarded-for": "203.0.113.7" } })).status).toBe(403);
      expect((await fetch(`${proxied.url}/ops/orphans`)).status).toBe(200);

      // A number check with no api_key, over MCP, counts against the caller's address, as the
      // REST route's does: one client spending its budget leaves every other keyless caller theirs.
      const verifying = await serve({ TRUSTED_PROXIES: "127.0.0.1", RATE_LIMIT_VERIFY: "2/60" });
      try {
        const check = async (forwardedFor: string) => {
          const res = await fetch(`${verifying.url}/api/mcp`, {
            method: "POST",
            headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "x-forwarded-for": forwardedFor },
            body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "verify_customer", arguments: { serviceCategory: "ELECTRICITY", serviceID: "ikeja-electric", billersCode: "1111111111111", variation_code: "prepaid" } } }),
          });
          const answer = (await res.json()) as { result: { structuredContent?: { error?: { code?: string } } } };
          return answer.result.structuredContent?.error?.code ?? "ok";
        };
        expect([await check("203.0.113.30"), await check("203.0.113.30"), await check("203.0.113.30")]).toEqual(["ok", "ok", "RATE_LIMITED"]);
        expect(await check("203.0.113.31")).toBe("ok");
      } finally {
        await verifying.close();
      }
    } finally {
      await proxied.close();
      await direct.close();
      for (const db of counters) await db.close();
    }
  });

  it("shares limits across instances on PostgreSQL", async () => {
    const { url: dbUrl, drop } = await freshDatabase("limits");
    const [a, b] = [await openDb({ url: dbUrl }), await openDb({ url: dbUrl })];
    try {
      const config = loadConfig({ RATE_LIMIT_LINK_ADDRESS: "3/60" });
      const [one, two] = [new Limits(config, a), new Limits(config, b)];
      await one.take("linkAddress", "203.0.113.7");
      await two.take("linkAddress", "203.0.113.7");
      await one.take("linkAddress", "203.0.113.7");
      await expect(two.take("linkAddress", "203.0.113.7")).rejects.toMatchObject({ code: "RATE_LIMITED" });
      await two.take("linkAddress", "203.0.113.8"); // another address has its own budget
      expect(await purgeExpired(a, 300)).toMatchObject({ rateLimits: 0 }); // live counters stay
    } finally {
      await a.close();
      await b.close();
      await drop();
    }
  });

  it("bounds expensive work: a full gate answers SERVICE_BUSY at once instead of queueing without end", async () => {
    const gate = new Gate("links", 1, 1);
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const first = gate.run(() => held); // runs
    const second = gate.run(async () => "queued"); // waits
    await expect(gate.run(async () => "third")).rejects.toMatchObject({ code: "SERVICE_BUSY", extra: { retry_after_seconds: 1 } });
    release();
    await first;
    expect(await second).toBe("queued");
    expect(await gate.run(async () => "again")).toBe("again"); // room once the queue drains
  });

  it("bounds how much quick work starts each second: past its share a gate answers SERVICE_BUSY until the next second", async () => {
    let now = 1_700_000_000_250;
    const gate = new Gate("links", 64, 1000, 3, () => now);
    expect(await Promise.all([1, 2, 3].map((n) => gate.run(async () => n)))).toEqual([1, 2, 3]);
    now += 700; // still the same second
    await expect(gate.run(async () => 4)).rejects.toMatchObject({ code: "SERVICE_BUSY", extra: { retry_after_seconds: 1 } });
    now += 100; // the next second: a new share
    expect(await Promise.all([5, 6, 7].map((n) => gate.run(async () => n)))).toEqual([5, 6, 7]);
    await expect(gate.run(async () => 8)).rejects.toMatchObject({ code: "SERVICE_BUSY" });
  });

  it("will not serve beyond this machine without PUBLIC_URL (the resource URL never comes from Host)", () => {
    expect(() => loadConfig({ HOST: "0.0.0.0" })).toThrow(/PUBLIC_URL is required/);
    expect(loadConfig({ HOST: "0.0.0.0", PUBLIC_URL: "https://billpay.example" }).PUBLIC_URL).toBe("https://billpay.example");
    expect(loadConfig({}).HOST).toBe("127.0.0.1");
  });

  /** A link made the way the link route makes one, for when the route's own budget is spent. */
  async function linkAgentDirect(account: Account): Promise<string> {
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: account.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    return key;
  }
});
