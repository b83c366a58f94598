/**
 * The service against a facilitator metered as Celo's hosted one is (celo-org/docs,
 * build/agents/x402): /settle needs X-API-Key, answers 401 without a valid one, 402 when the
 * credits are spent and 429 past its rate. The service sends its key (FACILITATOR_AUTH_CELO=
 * api-key), and each refusal reaches the payer as a clear 503 with nothing charged, and the
 * operator as a log line and a metric. And `settlement_pending`: a settlement broadcast but
 * not confirmed is never answered "not settled"; the ledger finishes it.
 */
import { HTTPFacilitatorClient } from "@x402/core/server";
import { x402HTTPClient } from "@x402/core/http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { facilitatorAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import type { Log } from "../../server/log.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { reconcileSettling } from "../../server/orders/x402-flow.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { facilitatorAuth } from "../../server/x402-protocol/facilitator-auth.ts";
import { isSettlementPending, settleAnswer } from "../../server/x402-protocol/facilitator-answer.ts";
import { createFacilitator, facilitatorApp } from "../../services/facilitator/app.ts";
import { x402Bill } from "../support/bills.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { listen } from "../support/http-server.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

const KEY = "celo-merchant-key-0123456789";

describe("Celo's hosted facilitator, as published", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let celo: ChainActors;
  const payer = accounts(13);
  const lines: Array<{ level: string; msg: string; fields?: Record<string, unknown> }> = [];
  const capture: Log = {
    debug: () => {},
    info: (msg, fields) => lines.push({ level: "info", msg, fields }),
    warn: (msg, fields) => lines.push({ level: "warn", msg, fields }),
    error: (msg, fields) => lines.push({ level: "error", msg, fields }),
  };

  beforeAll(async () => {
    // The facilitator wants the key on /settle, and answers settlement_pending (with the hash)
    // when it has not seen the receipt 300 ms after broadcasting.
    paying = await startPayingStackOnSharedChains(
      accounts,
      { FACILITATOR_AUTH_CELO: "api-key", FACILITATOR_API_KEY_CELO: KEY, LEDGER_WAIT_MS: "1500" },
      { facilitator: { metering: { apiKey: KEY }, confirmationTimeoutMs: 300 } },
    );
    celo = chainActors(paying.chains.deployments, "CELO");
  });
  afterAll(() => paying?.close());

  /** The service's app over the stack's state, its CELO facilitator replaced (with this key, or none). */
  function appWith(facilitatorUrl: string, key: string | undefined) {
    const { service, chains } = paying;
    const config = loadConfig(key ? { FACILITATOR_AUTH_CELO: "api-key", FACILITATOR_API_KEY_CELO: key } : {});
    const client = new HTTPFacilitatorClient({ url: facilitatorUrl, timeoutMs: 10_000, createAuthHeaders: facilitatorAuth(config, "CELO") });
    const flow = { ...service.flow, log: capture, facilitators: { ...service.flow.facilitators, CELO: client } };
    return createApp({ config: service.config, db: service.db, deployments: chains.deployments, rates: new ConfiguredRate(1_550_000n), flow, hub: service.hub });
  }

  async function pay(request: (path: string, init: RequestInit) => Promise<Response>, nairaAmount: number) {
    const body = JSON.stringify(x402Bill(payer.address, { nairaAmount }));
    const init = (headers: Record<string, string> = {}) => ({ method: "POST", headers: { "content-type": "application/json", ...headers }, body });
    const challenged = await request("/api/pay/x402", init());
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const required = client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json());
    const payload = await client.createPaymentPayload(required);
    return request("/api/pay/x402", init(client.encodePaymentSignatureHeader(payload)));
  }
  const viaService = (path: string, init: RequestInit) => fetch(`${paying.service.urls.service}${path}`, init);
  const viaApp = (app: ReturnType<typeof appWith>) => async (path: string, init: RequestInit) => app.request(path, init);
  const rpc = (method: string, params: unknown[] = []) =>
    fetch(paying.chains.rpcUrls.CELO, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }) });
  const refusals = async () => (await paying.service.flow.metrics.registry.getSingleMetric("billpay_facilitator_refusals_total")!.get()).values;

  it("sends its key to a facilitator that requires one, which settles; with none or a wrong one it refuses the service: 503, nothing charged", async () => {
    const before = await celo.balanceOf("USDC", payer.address);
    const paid = await pay(viaService, 700);
    expect(paid.status).toBe(200);
    expect(await paid.json()).toMatchObject({ status: "SUCCESS" });
    const charged = before - (await celo.balanceOf("USDC", payer.address));
    expect(charged).toBeGreaterThan(0n);

    for (const key of [undefined, "not-the-merchant-key-000"]) {
      const res = await pay(viaApp(appWith(paying.service.urls.facilitator, key)), 710);
      expect(res.status, String(key)).toBe(503);
      expect(await res.json(), String(key)).toMatchObject({ code: "FACILITATOR_UNAUTHORIZED", charged: false, request_id: expect.stringMatching(/^req_/) });
      expect(await celo.balanceOf("USDC", payer.address)).toBe(before - charged);
    }
    expect(lines.filter((l) => l.level === "error" && /refused the service's credentials/.test(l.msg))).toHaveLength(2);
    expect(await refusals()).toContainEqual(expect.objectContaining({ labels: { chain: "CELO", operation: "settle", status: "401" }, value: 2 }));
  });

  it("answers 'out of credits' and 'rate limited' when the facilitator says so, charging nothing", async () => {
    const before = await celo.balanceOf("USDC", payer.address);
    const chains = (["CELO"] as const).map((chain) => ({ chain, rpcUrl: paying.chains.rpcUrls[chain] }));
    for (const [metering, status, code] of [
      [{ apiKey: KEY, credits: 0 }, "402", "FACILITATOR_OUT_OF_CREDITS"],
      [{ apiKey: KEY, settlesPerMinute: 0 }, "429", "FACILITATOR_RATE_LIMITED"],
    ] as const) {
      const metered = await listen(facilitatorApp(createFacilitator(facilitatorAccount(), chains), metering).fetch);
      try {
        const res = await pay(viaApp(appWith(metered.url, KEY)), 730);
        expect(res.status, code).toBe(503);
        if (status === "429") expect(res.headers.get("retry-after")).toBe("60");
        expect(await res.json(), code).toMatchObject({ code, charged: false });
      } finally {
        await metered.close();
      }
      expect(await refusals()).toContainEqual(expect.objectContaining({ labels: { chain: "CELO", operation: "settle", status }, value: 1 }));
    }
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before);
  });

  it("reads a 401, 402 or 429 whatever its body (Celo documents the statuses, not the bodies); a 5xx is no answer; only settlement_pending is pending", async () => {
    for (const [status, body, kind] of [
      [401, "Missing X-API-Key", "refused-service"],
      [402, JSON.stringify({ error: "Out of credits" }), "refused-service"],
      [429, JSON.stringify({ success: false, errorReason: "rate_limited", transaction: "", network: "eip155:42220" }), "refused-service"],
      [500, "upstream timeout", "no-answer"],
      [500, JSON.stringify({ success: false, errorReason: "settlement_pending", transaction: "0xabc", network: "eip155:42220" }), "answered"],
      // A failure of another name with a hash (@x402/evm's for a settlement mined and reverted) is no pending word.
      [400, JSON.stringify({ success: false, errorReason: "invalid_transaction_state", transaction: `0x${"ab".repeat(32)}`, network: "eip155:42220" }), "answered"],
      [400, JSON.stringify({ success: false, errorReason: "invalid_signature", transaction: "", network: "eip155:42220" }), "answered"],
    ] as const) {
      const stub = await listen(() => new Response(body, { status, headers: { "content-type": "application/json" } }));
      try {
        const client = new HTTPFacilitatorClient({ url: stub.url, timeoutMs: 2_000 });
        const answer = await settleAnswer(() => client.settle({} as never, {} as never));
        expect(answer.kind, `${status} ${body}`).toBe(kind);
        if (answer.kind === "answered") expect(isSettlementPending(answer.response), body).toBe(/settlement_pending/.test(body));
      } finally {
        await stub.close();
      }
    }
  });

  /** The bill's 402 from the service, and the payer's payment for it, signed and not yet sent. */
  async function signedFor(url: string, body: string) {
    const challenged = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    return { client, payload };
  }

  it("never answers a settlement reported pending 'not settled': the order keeps its hash, and the ledger finishes it once the block comes, charged once", async () => {
    const before = await celo.balanceOf("USDC", payer.address);
    const body = JSON.stringify(x402Bill(payer.address, { nairaAmount: 640 }));
    const url = `${paying.service.urls.service}/api/pay/x402`;
    const { client, payload } = await signedFor(url, body);
    // No block until the test mines one: neither on each transaction nor on the local interval.
    await rpc("evm_setAutomine", [false]);
    await rpc("evm_setIntervalMining", [0]);
    let res: Response;
    try {
      res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...client.encodePaymentSignatureHeader(payload) }, body });
    } finally {
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1000]);
    }
    expect(res.status).toBe(200);
    const result = (await res.json()) as { status: string; tx_hash: string | null; request_id: string };
    expect(result.status).toBe("TIMEOUT");
    expect(result.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    // No settlement header while it is only pending.
    expect(res.headers.get("PAYMENT-RESPONSE")).toBeNull();
    const [row] = await paying.service.db.query<{ status: string; tx_hash: string }>(`SELECT status, tx_hash FROM bill_order WHERE request_id = $1`, [result.request_id]);
    expect(row).toEqual({ status: "SETTLING", tx_hash: result.tx_hash });

    await rpc("evm_mine");
    const statusOf = async () => ((await (await fetch(`${paying.service.urls.service}/api/orders/${result.request_id}`)).json()) as { status: string }).status;
    await expect.poll(async () => (await workOnce(paying.service.flow), await statusOf()), { timeout: 20_000, interval: 300 }).toBe("SUCCESS");
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before - BigInt(payload.accepted.amount));
  });

  it("a settlement reported pending is not refused when the worker's settle again meets a facilitator refusing the service: it stays SETTLING under its hash, and is served once it lands", async () => {
    const before = await celo.balanceOf("USDC", payer.address);
    const body = JSON.stringify(x402Bill(payer.address, { nairaAmount: 660 }));
    const url = `${paying.service.urls.service}/api/pay/x402`;
    const { client, payload } = await signedFor(url, body);
    const chains = (["CELO"] as const).map((chain) => ({ chain, rpcUrl: paying.chains.rpcUrls[chain] }));
    const limited = await listen(facilitatorApp(createFacilitator(facilitatorAccount(), chains), { apiKey: KEY, settlesPerMinute: 0 }).fetch);
    await rpc("evm_setAutomine", [false]);
    await rpc("evm_setIntervalMining", [0]);
    let requestId: string;
    try {
      const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...client.encodePaymentSignatureHeader(payload) }, body });
      const pending = (await res.json()) as { status: string; tx_hash: string; request_id: string };
      expect(pending).toMatchObject({ status: "TIMEOUT", tx_hash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
      requestId = pending.request_id;
      // The worker finds it SETTLING, its nonce unspent (the block not mined), and settles again: the facilitator now rate-limits the service.
      const order = (await paying.service.flow.orders.get(requestId))!;
      const config = loadConfig({ FACILITATOR_AUTH_CELO: "api-key", FACILITATOR_API_KEY_CELO: KEY });
      const refusing = new HTTPFacilitatorClient({ url: limited.url, timeoutMs: 10_000, createAuthHeaders: facilitatorAuth(config, "CELO") });
      await reconcileSettling({ ...paying.service.flow, log: capture, facilitators: { ...paying.service.flow.facilitators, CELO: refusing } }, order);
      // On the code before: REFUSED, and the landing then refunded from the late slice to a payer told to follow it.
      expect(await paying.service.flow.orders.get(requestId)).toMatchObject({ status: "SETTLING", txHash: pending.tx_hash });
      // Nor by an instance configured with no facilitator for the chain any more.
      await reconcileSettling({ ...paying.service.flow, log: capture, facilitators: {} }, (await paying.service.flow.orders.get(requestId))!);
      expect(await paying.service.flow.orders.get(requestId)).toMatchObject({ status: "SETTLING", txHash: pending.tx_hash });
    } finally {
      await limited.close();
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1000]);
    }
    await rpc("evm_mine");
    const statusOf = async () => ((await (await fetch(`${paying.service.urls.service}/api/orders/${requestId}`)).json()) as { status: string }).status;
    await expect.poll(async () => (await workOnce(paying.service.flow), await statusOf()), { timeout: 20_000, interval: 300 }).toBe("SUCCESS");
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before - BigInt(payload.accepted.amount));
  });
});
