import { wrapFetchWithPayment } from "@x402/fetch";
import { Hono } from "hono";
import { airtimeBill } from "../support/bills.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { createApp } from "../../server/app.ts";
import { callbackKeyOf, callbackSignature } from "../../server/callbacks.ts";
import { loadConfig } from "../../server/config.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { chainActors } from "../support/actors.ts";
import { listen } from "../support/http-server.ts";
import { startPayingStack } from "../support/stack.ts";

type Received = { signature: string; body: string };

describe("callbacks: a bill's final result POSTed, signed, retried", () => {
  let paying: Awaited<ReturnType<typeof startPayingStack>>;
  let service: ServiceStack;
  let receiver: Awaited<ReturnType<typeof listen>>;
  const received: Received[] = [];
  let failNext = 0;
  const payer = hardhatAccount(11);

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

  beforeAll(async () => {
    receiver = await listen(
      new Hono().post("/hook", async (c) => {
        received.push({ signature: c.req.header("x-billpay-signature") ?? "", body: await c.req.text() });
        if (failNext > 0) {
          failNext--;
          return c.text("try again", 500);
        }
        return c.text("ok");
      }).fetch,
    );
    // Loopback receivers are allowed here, as in local development only.
    paying = await startPayingStack({ CALLBACK_ALLOW_PRIVATE: "1", CALLBACK_BACKOFF_MS: "10" });
    service = paying.service;
  });
  afterAll(async () => {
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
    const order = (await (await fetch(`${service.urls.service}/api/orders/${result.request_id}`)).json()) as Record<string, unknown>;
    expect(order.callback).toMatchObject({ url: `${receiver.url}/hook`, status: "DELIVERED", attempts: 2, last_status: 200 });
    await deliverAll();
    expect(received).toHaveLength(2); // delivered once
  });

  it("agent hub and schedules: the result, signed with SHA-256 of the api_key", async () => {
    received.length = 0;
    const account = hardhatAccount(14);
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
    const account = hardhatAccount(15);
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
    for (const url of ["http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://[::1]/hook", "http://localhost/hook", "http://169.254.169.254/latest"]) {
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
});
