/**
 * Property-based fuzzing (fast-check) of every public input against the real local stack:
 * the pay body, both payment headers, the link headers and body, every tool's arguments
 * over MCP and A2A, and the order route. Whatever arrives, the answer is a 4xx with a stable
 * code (or the tool-error equivalent), never a 5xx or INTERNAL; and nothing is charged or
 * stored: no order, no link, no rate version (a 402 writes nothing), no balance moved.
 */
import fc from "fast-check";
import { x402Bill } from "../support/bills.ts";
import type { Account } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, linkHeaders, mcpAgent } from "../../lib/agent-client.ts";
import { LINK_PATH } from "../../lib/agent-link.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { agentTools } from "../../server/agent/tools.ts";
import { ERRORS } from "../../server/errors.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

const RUNS = Number(process.env.FUZZ_RUNS ?? 60);
const CODES = new Set(Object.keys(ERRORS));

const hex = (minLength: number, maxLength: number) => fc.string({ unit: fc.constantFrom(..."0123456789abcdef"), minLength, maxLength });
/** JSON-ish values of every shape, small enough to send. */
const anyJson = fc.jsonValue({ maxDepth: 3 }).filter((v) => JSON.stringify(v).length < 4_000);
const validBill = (wallet: string) => x402Bill(wallet);
/** A valid bill with one field replaced by anything, or removed. */
const mutatedBill = (wallet: string) =>
  fc
    .record({ key: fc.constantFrom(...Object.keys(validBill(wallet)), "variation_code", "phone", "extra"), value: fc.option(anyJson, { nil: undefined }) })
    .map(({ key, value }) => {
      const bill: Record<string, unknown> = { ...validBill(wallet) };
      if (value === undefined) delete bill[key];
      else bill[key] = value;
      return bill;
    });

describe("fuzzing the public inputs", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;
  let mcp: Awaited<ReturnType<typeof mcpAgent>>;
  let agentKey: string;
  const payer = accounts(12);
  const agent = accounts(13);
  const count = async (sql: string) => (await service.db.query<{ n: number }>(sql))[0]!.n;
  const snapshot = async () => ({
    orders: await count(`SELECT count(*)::int AS n FROM bill_order`),
    links: await count(`SELECT count(*)::int AS n FROM agent_link`),
    rateVersions: await count(`SELECT count(*)::int AS n FROM rate_version`),
    payer: await celo.balanceOf("USDC", payer.address),
    agent: await celo.balanceOf("USDC", agent.address),
  });

  /** A refusal: 4xx (never 5xx), problem+json with a code from the catalogue. */
  async function expectRefusal(res: Response, allowed: number[] = []) {
    const text = await res.text();
    expect(res.status, text).toBeLessThan(500);
    if (allowed.includes(res.status)) return JSON.parse(text) as Record<string, unknown>;
    expect(res.status, text).toBeGreaterThanOrEqual(400);
    const body = JSON.parse(text) as Record<string, unknown>;
    expect(CODES.has(String(body.code)), text).toBe(true);
    return body;
  }

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts, {
      RATE_LIMIT_CHALLENGE_ADDRESS: "1000000/60",
      RATE_LIMIT_ORDER_ADDRESS: "1000000/60",
      RATE_LIMIT_LINK_ADDRESS: "1000000/60",
      RATE_LIMIT_LINK_WALLET: "1000000/60",
      RATE_LIMIT_PAYING_KEY: "1000000/60",
      RATE_LIMIT_TOOL_KEY: "1000000/60",
      RATE_LIMIT_AGENT_ADDRESS: "1000000/60",
      RATE_LIMIT_UNSETTLED_PAYER: "1000000/60",
      RATE_LIMIT_UNSETTLED_ADDRESS: "1000000/60",
    });
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
    mcp = await mcpAgent(url);
    await celo.approveAndAllow(agent, "USDC", 100_000_000n);
    agentKey = await linkAgent(url, agent as Account, { pin: "1234" });
    // The rate's first version, written by the first bill priced; the rate stays put from here on.
    expect((await fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(x402Bill(payer.address)) })).status).toBe(402);
  });
  afterAll(async () => {
    await mcp?.close();
    await paying?.close();
  });

  it("the pay body: any JSON, or a bill with any one field wrong, is a 402 challenge or a coded 4xx, and settles nothing", async () => {
    const before = await snapshot();
    await fc.assert(
      fc.asyncProperty(fc.oneof(anyJson, mutatedBill(payer.address)), async (body) => {
        const res = await fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        const answer = await expectRefusal(res, [402]);
        if (res.status === 402) expect(answer.x402Version ?? answer.code).toBeDefined();
      }),
      { numRuns: RUNS },
    );
    expect(await snapshot()).toEqual(before);
  });

  it("both payment headers: any value, or a well-formed payload with any field wrong, is refused and charges nothing", async () => {
    const before = await snapshot();
    const payload = fc.record({
      x402Version: fc.oneof(fc.constantFrom(1, 2), anyJson),
      scheme: fc.oneof(fc.constant("exact"), anyJson),
      network: fc.oneof(fc.constantFrom("eip155:42220", "celo"), anyJson),
      payload: fc.record({
        signature: fc.oneof(hex(0, 140).map((h: string) => `0x${h}`), anyJson),
        authorization: fc.record({
          from: fc.oneof(fc.constant(payer.address), anyJson),
          to: fc.oneof(fc.constant(celo.billPay), anyJson),
          value: fc.oneof(fc.bigInt({ min: -1n, max: 10n ** 30n }).map(String), anyJson),
          validAfter: fc.oneof(fc.constant("0"), anyJson),
          validBefore: fc.oneof(fc.integer().map(String), anyJson),
          nonce: fc.oneof(hex(0, 64).map((h: string) => `0x${h}`), anyJson),
        }),
      }),
    });
    const header = fc.oneof(
      fc.string({ maxLength: 200 }),
      anyJson.map((v) => Buffer.from(JSON.stringify(v)).toString("base64")),
      payload.map((p) => Buffer.from(JSON.stringify(p)).toString("base64")),
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("X-PAYMENT", "PAYMENT-SIGNATURE"), header, async (name, value) => {
        let res: Response;
        try {
          res = await fetch(`${url}/api/pay/x402`, {
            method: "POST",
            headers: { "content-type": "application/json", [name]: value },
            body: JSON.stringify(validBill(payer.address)),
          });
        } catch {
          return; // a value fetch itself will not put in a header (control characters): it never reaches the service
        }
        const answer = await expectRefusal(res, [402]);
        if (res.status === 402) expect(typeof answer.code === "string" || answer.x402Version === 1).toBe(true);
      }),
      { numRuns: RUNS },
    );
    expect(await snapshot()).toEqual(before);
  });

  it("the link route: any headers and body are a coded 4xx and link nothing", async () => {
    const before = await snapshot();
    const signed = await linkHeaders(accounts(14), "BillPay");
    const headerValue = fc.oneof(fc.string({ maxLength: 120 }), hex(0, 140).map((h: string) => `0x${h}`));
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            "x-wallet-address": fc.oneof(fc.constant(signed["x-wallet-address"]!), headerValue),
            "x-wallet-signature": fc.oneof(fc.constant(signed["x-wallet-signature"]!), headerValue),
            "x-wallet-timestamp": fc.oneof(fc.constant(signed["x-wallet-timestamp"]!), headerValue),
            "x-wallet-siwe": headerValue.map((v) => Buffer.from(v).toString("base64")),
          },
          { requiredKeys: [] },
        ),
        fc.oneof(anyJson, fc.record({ wallet_address: anyJson, channel: anyJson, pin: anyJson, approved_chain: anyJson, approved_token: anyJson }, { requiredKeys: [] })),
        async (headers, body) => {
          let res: Response;
          try {
            res = await fetch(`${url}${LINK_PATH}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
          } catch {
            return; // not sendable as a header
          }
          await expectRefusal(res);
        },
      ),
      { numRuns: RUNS },
    );
    expect(await snapshot()).toEqual(before);
  });

  it("every tool over MCP and A2A: any arguments are a coded tool error, never INTERNAL, and pay nothing", async () => {
    const before = await snapshot();
    const tools = agentTools(20).map((t) => t.name);
    const args = fc.dictionary(
      fc.oneof(fc.constantFrom("api_key", "pin", "serviceID", "serviceCategory", "nairaAmount", "bills", "chain", "token", "idempotency_key", "schedule_id", "cron", "run_at", "limit", "cursor"), fc.string({ maxLength: 12 })),
      anyJson,
      { maxKeys: 8 },
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...tools), args, fc.boolean(), fc.boolean(), async (tool, raw, withKey, overA2a) => {
        // Paying tools only ever get a key no wallet has: random input must not pay by chance.
        const definition = agentTools(20).find((t) => t.name === tool)!;
        const call = { ...raw, ...(withKey && !definition.paying ? { api_key: agentKey } : {}) };
        if (!overA2a) {
          const answer = await mcp.call(tool, call);
          const error = answer.data.error as { code?: string } | undefined;
          if (answer.isError) expect(CODES.has(error?.code ?? ""), JSON.stringify(answer.data)).toBe(true);
          expect(error?.code).not.toBe("INTERNAL");
          return;
        }
        const res = await fetch(`${url}/api/a2a`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            jsonrpc: "2.0",
            id: 1,
            method: "message/send",
            params: { message: { kind: "message", messageId: crypto.randomUUID(), role: "user", parts: [{ kind: "data", data: { skill: tool, arguments: call } }] } },
          }),
        });
        const text = await res.text();
        expect(res.status, text).toBeLessThan(500);
        const answer = JSON.parse(text) as { error?: unknown; result?: { parts: Array<{ kind: string; data?: { error?: { code?: string } } }> } };
        expect(answer.error, text).toBeUndefined(); // a bad call is the skill's refusal, not a JSON-RPC failure
        const error = answer.result!.parts.find((p) => p.kind === "data")?.data?.error;
        if (error) expect(CODES.has(error.code ?? ""), text).toBe(true);
        expect(error?.code).not.toBe("INTERNAL");
      }),
      { numRuns: RUNS * 2 },
    );
    expect(await snapshot()).toEqual(before);
  });

  it("the order route: any id is a coded 400 or 404", async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.string({ maxLength: 60 }), hex(20, 20).map((h: string) => `req_202611230000${h}`)), async (id) => {
        const res = await fetch(`${url}/api/orders/${encodeURIComponent(id)}`);
        const body = await expectRefusal(res);
        expect(["VALIDATION_FAILED", "ORDER_NOT_FOUND", "NOT_FOUND"]).toContain(body.code);
      }),
      { numRuns: RUNS },
    );
  });
});
