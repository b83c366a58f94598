import { x402HTTPClient } from "@x402/core/http";
import { wrapFetchWithPayment } from "@x402/fetch";
import { Hono } from "hono";
import { airtimeBill } from "../support/bills.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { createApp } from "../../server/app.ts";
import { type CallbackOptions, Callbacks, callbackKeyOf, callbackSignature, type Resolve } from "../../server/orders/callbacks.ts";
import { loadConfig } from "../../server/config.ts";
import type { Log } from "../../server/log.ts";
import { startWorker } from "../../server/orders/worker.ts";
import { callbackOptions } from "../../server/services.ts";
import { freePort } from "../../stack/ledger-process.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { chainActors } from "../support/actors.ts";
import { listen } from "../support/http-server.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Received = { signature: string; body: string };

describe("callbacks: a bill's final result POSTed, signed, retried", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let receiver: Awaited<ReturnType<typeof listen>>;
  const received: Received[] = [];
  let failNext = 0;
  /** Every request the receiver took, on any path, with the Host it named. */
  const hits: Array<{ path: string; host: string }> = [];
  /** /slow answers only once this is called. */
  let answerSlow = () => {};
  let slowAnswered = new Promise<void>((r) => (answerSlow = r));
  const payer = accounts(11);

  const airtime = airtimeBill;
  const deliverAll = async () => {
    for (let i = 0; i < 5; i++) {
      await service.flow.callbacks!.deliverDue();
      await new Promise((r) => setTimeout(r, 30));
    }
  };
  const verify = (r: Received, key: string) => {
    const t = Number(/t=(\d+)/.exec(r.signature)![1]);
    expect(Math.abs(t - Date.now() / 1000)).toBeLessThan(60);
    expect(r.signature).toBe(callbackSignature(key, t, r.body));
  };

  // An agent's orders naming a callback_url, for the tests of how a delivery is bounded.
  let agent: { apiKey: string; mcp: Awaited<ReturnType<typeof mcpAgent>> } | undefined;
  const orderWithCallback = async (callback_url: string): Promise<string> => {
    if (!agent) {
      const account = accounts(16);
      await chainActors(paying.chains.deployments, "CELO").approveAndAllow(account, "USDC", 100_000_000n);
      agent = { apiKey: await linkAgent(service.urls.service, account), mcp: await mcpAgent(service.urls.service) };
    }
    const paid = await agent.mcp.call("pay_bill", { api_key: agent.apiKey, pin: "1234", allow_duplicate: true, ...airtime({ callback_url }) });
    expect(paid.data).toMatchObject({ status: "SUCCESS" });
    return String(paid.data.request_id);
  };
  /** The order's callback sent again to `url`, as if new. */
  const requeue = (requestId: string, url: string) =>
    service.db.query(`UPDATE callback_delivery SET url = $2, status = 'PENDING', attempts = 0, next_attempt_at = now() WHERE request_id = $1`, [requestId, url]);
  const callbacksWith = (options: Partial<CallbackOptions>, log?: Log) =>
    new Callbacks(service.db, service.flow.orders, { ...callbackOptions(service.config), ...options }, log);
  const shown = async (requestId: string) =>
    ((await (await fetch(`${service.urls.service}/api/orders/${requestId}`)).json()) as { callback: Record<string, unknown> }).callback;

  beforeAll(async () => {
    receiver = await listen(
      new Hono()
        .use(async (c, next) => {
          hits.push({ path: c.req.path, host: c.req.header("host") ?? "" });
          await next();
        })
        .post("/slow", async (c) => {
          await slowAnswered;
          return c.text("ok");
        })
        // An answer without end: read whole, it would never be over.
        .post("/huge", (c) => c.body(new ReadableStream({ pull: (ctrl) => ctrl.enqueue(new Uint8Array(64 * 1024)) })))
        .post("/hook", async (c) => {
        received.push({ signature: c.req.header("x-billpay-signature") ?? "", body: await c.req.text() });
        if (failNext > 0) {
          failNext--;
          return c.text("try again", 500);
        }
        return c.text("ok");
      }).fetch,
    );
    // Loopback receivers are allowed here, as in local development only.
    // A long delivery timeout: the receiver that never answers is held by the test, not cut off mid-check.
    paying = await startPayingStackOnSharedChains(accounts, { CALLBACK_ALLOW_PRIVATE: "1", CALLBACK_BACKOFF_MS: "10", CALLBACK_TIMEOUT_MS: "30000" });
    service = paying.service;
  });
  afterAll(async () => {
    answerSlow();
    await agent?.mcp.close();
    await paying?.close();
    await receiver?.close();
  });

  it("x402: delivers once the order is final, retries after a failure, signs with SHA-256 of the order secret", async () => {
    failNext = 1;
    received.length = 0;
    const payingFetch = wrapFetchWithPayment(fetch, x402ClientFor(payer, paying.chains.deployments));
    const body = { ...airtime({ callback_url: `${receiver.url}/hook` }), token: "USDC", blockchain: "CELO", wallet_address: payer.address };
    const res = await payingFetch(`${service.urls.service}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const result = (await res.json()) as { status: string; request_id: string; order_secret: string };
    expect(result.status).toBe("SUCCESS");
    await deliverAll();
    expect(received).toHaveLength(2); // a 500, then the delivery
    expect(received[0]!.body).toBe(received[1]!.body);
    const payload = JSON.parse(received[1]!.body) as { event: string; order: { request_id: string; status: string } };
    expect(payload).toMatchObject({ event: "order.final", order: { request_id: result.request_id, status: "SUCCESS" } });
    verify(received[1]!, callbackKeyOf(result.order_secret));
    const orderPath = `${service.urls.service}/api/orders/${result.request_id}`;
    const order = (await (await fetch(orderPath, { headers: { authorization: `Bearer ${result.order_secret}` } })).json()) as Record<string, unknown>;
    expect(order.callback).toMatchObject({ url: `${receiver.url}/hook`, status: "DELIVERED", attempts: 2, last_status: 200, last_outcome: "delivered" });
    // Anyone else holding the id sees how it went, not where it went.
    const seen = (await (await fetch(orderPath)).json()) as { callback: Record<string, unknown> };
    expect(seen.callback).toMatchObject({ status: "DELIVERED" });
    expect(seen.callback).not.toHaveProperty("url");
    await deliverAll();
    expect(received).toHaveLength(2); // delivered once
  });

  it("agent hub and schedules: the result, signed with SHA-256 of the api_key", async () => {
    received.length = 0;
    const account = accounts(14);
    await chainActors(paying.chains.deployments, "CELO").approveAndAllow(account, "USDC", 100_000_000n);
    const apiKey = await linkAgent(service.urls.service, account);
    const mcp = await mcpAgent(service.urls.service);
    try {
      const paid = await mcp.call("pay_bill", { api_key: apiKey, pin: "1234", ...airtime({ billersCode: "08099999999", callback_url: `${receiver.url}/hook` }) });
      expect(paid.data).toMatchObject({ status: "FAILED_VENDING" });
      await deliverAll();
      expect(received).toHaveLength(1);
      expect(JSON.parse(received[0]!.body)).toMatchObject({ order: { request_id: paid.data.request_id, refund: { status: "REFUNDED" } } });
      verify(received[0]!, callbackKeyOf(apiKey));

      // A scheduled bill carries its callback_url to the order each run makes.
      received.length = 0;
      const scheduled = await mcp.call("schedule_bill", {
        api_key: apiKey,
        pin: "1234",
        ...airtime({ nairaAmount: 1700, callback_url: `${receiver.url}/hook` }),
        run_at: new Date(Date.now() + 300).toISOString(),
      });
      expect(scheduled.data).toMatchObject({ status: "ACTIVE" });
      await new Promise((r) => setTimeout(r, 500));
      expect(await service.hub.runDueSchedules()).toBe(1);
      await deliverAll();
      expect(received).toHaveLength(1);
      const run = JSON.parse(received[0]!.body) as { order: { status: string; request_id: string } };
      expect(run.order.status).toBe("SUCCESS");
      verify(received[0]!, callbackKeyOf(apiKey));
    } finally {
      await mcp.close();
    }
  });

  it("gives up after the last attempt, and refuses private or loopback URLs unless allowed", async () => {
    received.length = 0;
    failNext = 100;
    const account = accounts(15);
    await chainActors(paying.chains.deployments, "CELO").approveAndAllow(account, "USDC", 100_000_000n);
    const apiKey = await linkAgent(service.urls.service, account);
    const mcp = await mcpAgent(service.urls.service);
    try {
      const paid = await mcp.call("pay_bill", { api_key: apiKey, pin: "1234", ...airtime({ nairaAmount: 1600, callback_url: `${receiver.url}/hook` }) });
      const row = async () =>
        (await service.db.query<{ status: string; attempts: number }>(`SELECT status, attempts FROM callback_delivery WHERE request_id = $1`, [paid.data.request_id]))[0];
      // Backoff doubles from 10 ms: the last of 8 attempts comes about 1.3 s after the first.
      await expect.poll(async () => (await service.flow.callbacks!.deliverDue(), (await row())!.status), { timeout: 15_000, interval: 50 }).toBe("FAILED");
      expect(await row()).toMatchObject({ attempts: service.config.CALLBACK_MAX_ATTEMPTS });
      expect(await service.flow.callbacks!.status(String(paid.data.request_id))).toMatchObject({ status: "FAILED", last_status: 500, last_outcome: "http_error" });
      expect(received).toHaveLength(service.config.CALLBACK_MAX_ATTEMPTS);
    } finally {
      failNext = 0;
      await mcp.close();
    }

    const strict = createApp({
      config: loadConfig({ LOG_REQUESTS: "0" }),
      db: service.db,
      deployments: paying.chains.deployments,
      rates: new ConfiguredRate(1_550_000n),
      flow: service.flow,
    });
    for (const url of [
      "https://127.0.0.1:9/hook",
      "https://10.1.2.3/hook",
      "https://[::1]/hook",
      "https://localhost/hook",
      "https://localhost./hook",
      "https://app.localhost./hook",
      "https://LOCALHOST/hook",
      "https://169.254.169.254/latest",
      // Public, but in the clear: the result carries the purchased code.
      "http://receiver.example/hook",
    ]) {
      const res = await strict.request("/api/pay/x402", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ...airtime({ callback_url: url }), token: "USDC", blockchain: "CELO", wallet_address: payer.address }),
      });
      expect(res.status, url).toBe(422);
      expect(((await res.json()) as { code: string }).code).toBe("CALLBACK_URL_NOT_ALLOWED");
    }
    const notHttp = await strict.request("/api/pay/x402", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...airtime({ callback_url: "ftp://example.com/x" }), token: "USDC", blockchain: "CELO", wallet_address: payer.address }),
    });
    expect(notHttp.status).toBe(400);
  });
  it("a receiver that never answers holds only its own delivery: not another order's callback, not the worker's pass", async () => {
    const slow = await orderWithCallback(`${receiver.url}/slow`);
    const fast = await orderWithCallback(`${receiver.url}/hook`);
    hits.length = 0;
    slowAnswered = new Promise<void>((r) => (answerSlow = r));
    let passes = 0;
    const worker = startWorker(service.flow, 50, [async () => passes++]);
    try {
      await expect.poll(() => hits.some((h) => h.path === "/slow"), { timeout: 5_000 }).toBe(true);
      // /slow still holds its request, yet the fast receiver has its callback and the worker keeps passing.
      await expect.poll(async () => (await service.flow.callbacks!.status(fast))?.status, { timeout: 10_000 }).toBe("DELIVERED");
      const before = passes;
      await expect.poll(() => passes, { timeout: 10_000 }).toBeGreaterThan(before + 2);
      expect(await service.flow.callbacks!.status(slow)).toMatchObject({ status: "PENDING", attempts: 1, last_outcome: null });
    } finally {
      answerSlow();
      await worker.stop(); // waits for the delivery in flight
    }
    expect(await service.flow.callbacks!.status(slow)).toMatchObject({ status: "DELIVERED", last_outcome: "delivered" });
  });

  it("a payment replayed after its callback_url became one this service refuses is answered with its order, not refused", async () => {
    // Paid where http and loopback receivers are taken (this stack); replayed to an instance that takes neither.
    const body = { ...airtime({ nairaAmount: 1560, callback_url: `${receiver.url}/hook` }), token: "USDC", blockchain: "CELO", wallet_address: payer.address };
    const post = (fetcher: (url: string, init: RequestInit) => Response | Promise<Response>, headers: Record<string, string> = {}) =>
      fetcher("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", host: "localhost", ...headers }, body: JSON.stringify(body) });
    const here = (path: string, init: RequestInit) => fetch(`${service.urls.service}${path}`, init);
    const challenged = await post(here);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const paid = (await (await post(here, client.encodePaymentSignatureHeader(payload))).json()) as { status: string; request_id: string };
    expect(paid.status).toBe("SUCCESS");
    const strict = createApp({ config: loadConfig({ LOG_REQUESTS: "0" }), db: service.db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow: service.flow });
    const fresh = await post((path, init) => strict.request(path, init));
    expect(fresh.status).toBe(422); // a new bill with it is refused
    const replayed = await post((path, init) => strict.request(path, init), client.encodePaymentSignatureHeader(payload));
    expect(replayed.status).toBe(200);
    expect(await replayed.json()).toMatchObject({ status: "SUCCESS", request_id: paid.request_id });
    await deliverAll(); // its own callback, out of the way of the tests of the queue
  });

  it("first deliveries go before retries: receivers that never answer hold their slots only behind every other first delivery", async () => {
    const retried = await orderWithCallback(`${receiver.url}/hook`);
    const fresh = await orderWithCallback(`${receiver.url}/hook`);
    // The retry has waited longer; the fresh one is due now, at its first attempt.
    await service.db.query(`UPDATE callback_delivery SET status = 'PENDING', attempts = 3, next_attempt_at = now() - interval '1 hour' WHERE request_id = $1`, [retried]);
    await service.db.query(`UPDATE callback_delivery SET status = 'PENDING', attempts = 0, next_attempt_at = now() WHERE request_id = $1`, [fresh]);
    // One slot: the first delivery takes it.
    expect(await callbacksWith({ concurrency: 1 }).deliverDue(1)).toBe(1);
    expect(await service.flow.callbacks!.status(fresh)).toMatchObject({ status: "DELIVERED" });
    expect(await service.flow.callbacks!.status(retried)).toMatchObject({ status: "PENDING", attempts: 3 });
    await callbacksWith({ concurrency: 1 }).deliverDue(1);
    expect(await service.flow.callbacks!.status(retried)).toMatchObject({ status: "DELIVERED" });
  });

  it("connects only to the address it checked: a private answer is refused, a second answer never used", async () => {
    const id = await orderWithCallback(`${receiver.url}/hook`);
    const port = new URL(receiver.url).port;
    const named = `http://receiver.test:${port}/hook`; // no DNS knows it: only the resolver given here
    let asked = 0;
    const loopback: Resolve = async () => (asked++, { address: "127.0.0.1", family: 4 });

    // A name that resolves to loopback: refused, nothing sent.
    hits.length = 0;
    await requeue(id, named);
    expect(await callbacksWith({ allowPrivate: false, resolve: loopback }).deliverDue()).toBe(0);
    expect(await shown(id)).toMatchObject({ status: "PENDING", attempts: 1, last_status: null, last_outcome: "refused_private_address" });
    expect(asked).toBe(1);
    expect(hits).toEqual([]);

    // Rebinding: public when checked, loopback when asked again. The connection goes to the one
    // checked answer (TEST-NET-1, which leads nowhere), never to the loopback receiver.
    asked = 0;
    const rebinding: Resolve = async () => ({ address: asked++ === 0 ? "192.0.2.1" : "127.0.0.1", family: 4 });
    await requeue(id, named);
    expect(await callbacksWith({ allowPrivate: false, resolve: rebinding, timeoutMs: 1_000 }).deliverDue()).toBe(0);
    expect(asked).toBe(1);
    expect(hits).toEqual([]);
    expect(["unreachable", "timeout"]).toContain((await shown(id)).last_outcome);

    // Private addresses allowed: no check, the same pinning; Host still names the name.
    await requeue(id, named);
    expect(await callbacksWith({ allowPrivate: true, resolve: loopback }).deliverDue()).toBe(1);
    expect(hits).toEqual([{ path: "/hook", host: `receiver.test:${port}` }]);
    expect(await shown(id)).toMatchObject({ status: "DELIVERED", last_status: 200, last_outcome: "delivered" });
  });

  it("reads at most 64 KiB of an answer: one without end is delivered, not read until the timeout", async () => {
    const id = await orderWithCallback(`${receiver.url}/huge`);
    expect(await callbacksWith({ timeoutMs: 3_000 }).deliverDue()).toBe(1);
    expect(await shown(id)).toMatchObject({ status: "DELIVERED", last_status: 200, last_outcome: "delivered" });
  });

  it("the order route shows a coarse outcome, never the error's text (which goes to the log)", async () => {
    const id = await orderWithCallback(`${receiver.url}/hook`);
    const warned: Array<Record<string, unknown> | undefined> = [];
    const log: Log = { debug() {}, info() {}, error() {}, warn: (_msg, fields) => void warned.push(fields) };

    await requeue(id, `http://127.0.0.1:${await freePort()}/hook`); // nothing listens there
    await callbacksWith({}, log).deliverDue();
    const refused = await shown(id);
    expect(refused).toMatchObject({ status: "PENDING", attempts: 1, last_status: null, last_outcome: "unreachable" });
    // Without the payer's proof, not where the result goes either: a receiver's URL may carry its own token.
    expect(Object.keys(refused).sort()).toEqual(["attempts", "delivered_at", "last_outcome", "last_status", "status"]);
    expect(JSON.stringify(refused)).not.toMatch(/ECONNREFUSED/);
    expect(String(warned[0]?.error)).toMatch(/ECONNREFUSED/);

    slowAnswered = new Promise<void>((r) => (answerSlow = r));
    await requeue(id, `${receiver.url}/slow`);
    await callbacksWith({ timeoutMs: 300 }).deliverDue();
    answerSlow();
    expect(await shown(id)).toMatchObject({ status: "PENDING", last_status: null, last_outcome: "timeout" });

    failNext = 1;
    await requeue(id, `${receiver.url}/hook`);
    await callbacksWith({}).deliverDue();
    expect(await shown(id)).toMatchObject({ status: "PENDING", last_status: 500, last_outcome: "http_error" });

    // A row written before outcomes were words holds the error's text: shown as no outcome.
    await service.db.query(`UPDATE callback_delivery SET last_error = 'connect ECONNREFUSED 10.0.0.5:6379' WHERE request_id = $1`, [id]);
    expect(await shown(id)).toMatchObject({ last_outcome: null });
  });
});
