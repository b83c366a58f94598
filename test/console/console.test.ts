/**
 * The operator console in a real browser (Debian's chromium through playwright-core) and
 * /metrics, against the real stack: one bill paid by x402 and served, one paid by an agent
 * and refunded. The console's treasury must equal the chain's balance and the ledger's, its
 * order figures the orders made, and a wrong token must be refused. A screenshot is kept in
 * test-artifacts/console.png after each run.
 */
import { orderRef } from "../../server/log.ts";
import { mkdir, readFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { parse } from "yaml";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { wrapFetchWithPayment } from "@x402/fetch";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { airtimeBill, x402Bill } from "../support/bills.ts";
import { startPayingStack } from "../support/stack.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";

const TOKEN = "console-test-token-0123456789";
const basic = (password: string) => `Basic ${Buffer.from(`ops:${password}`).toString("base64")}`;

describe("operator console and metrics", () => {
  let paying: Awaited<ReturnType<typeof startPayingStack>>;
  let browser: Browser;
  let url: string;
  let celo: ChainActors;

  beforeAll(async () => {
    paying = await startPayingStack({ OPS_TOKEN: TOKEN });
    url = paying.service.urls.service;
    const { deployments } = paying.chains;
    celo = chainActors(deployments, "CELO");

    // One bill served (x402), one refunded (agent hub).
    const payer = hardhatAccount(9);
    const paid = await wrapFetchWithPayment(fetch, x402ClientFor(payer, deployments))(`${url}/api/pay/x402`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(x402Bill(payer.address)),
    });
    expect(await paid.json()).toMatchObject({ status: "SUCCESS" });
    const agent = hardhatAccount(10);
    await celo.approveAndAllow(agent, "USDC", 10_000_000n);
    const mcp = await mcpAgent(url);
    const refunded = await mcp.call("pay_bill", { api_key: await linkAgent(url, agent), pin: "1234", ...airtimeBill({ billersCode: "08099999999" }) });
    expect(refunded.data).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
    await mcp.close();
    await waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());

    browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium", args: ["--no-sandbox"] });
  });
  afterAll(async () => {
    await browser?.close();
    await paying?.close();
  });

  it("refuses a missing or wrong token, with a basic-auth challenge, on the console and /metrics", async () => {
    for (const path of ["/console", "/console/orders", "/metrics", "/ops/orders"]) {
      for (const authorization of [undefined, basic("wrong-token-0123456789"), `Bearer ${TOKEN}x`]) {
        const res = await fetch(`${url}${path}`, { headers: authorization ? { authorization } : {} });
        expect(res.status, `${path} ${authorization}`).toBe(401);
        expect(res.headers.get("www-authenticate")).toContain("Basic");
        expect(await res.json()).toMatchObject({ code: "OPS_UNAUTHORIZED" });
      }
    }
    const page = await (await browser.newContext({ httpCredentials: { username: "ops", password: "wrong-token-0123456789" } })).newPage();
    const response = await page.goto(`${url}/console`);
    expect(response?.status()).toBe(401);
    expect(await page.content()).not.toContain("Treasury");
  });

  it("is closed to everyone when no token is configured and the service is public, and to remote callers otherwise", async () => {
    const { db, flow, hub, config } = paying.service;
    for (const env of [{ PUBLIC_URL: "https://bills.example.org" }, {}]) {
      const app = createApp({ config: loadConfig({ ...env, LEDGER_URL: config.LEDGER_URL }), db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow, hub });
      // app.request has no socket: the caller is not on this machine.
      for (const path of ["/console", "/metrics", "/ops/orders"]) {
        const res = await app.request(path, { headers: { authorization: `Bearer ${TOKEN}` } });
        expect(res.status, `${path} ${JSON.stringify(env)}`).toBe(403);
        expect(await res.json()).toMatchObject({ code: "OPS_FORBIDDEN" });
      }
    }
  });

  it("shows the treasury as the chain and the ledger have it, the audit's verdict, and the orders", async () => {
    const context = await browser.newContext({ httpCredentials: { username: "ops", password: TOKEN }, viewport: { width: 1400, height: 1800 } });
    const page = await context.newPage();
    const response = await page.goto(`${url}/console`);
    expect(response?.status()).toBe(200);

    const row = page.locator('#treasury tr[data-chain="CELO"][data-token="USDC"]');
    const onChain = await row.locator('[data-field="onchain"]').getAttribute("data-units");
    const ledgerShown = await row.locator('[data-field="ledger"]').getAttribute("data-units");
    const chainBalance = await celo.balanceOf("USDC", celo.billPay);
    const ledgerTreasury = (await (await fetch(`${paying.ledger.url}/ledger/treasury`)).json()) as { treasury: Array<{ chainId: number; token: string; balance: string }> };
    const ledgerBalance = ledgerTreasury.treasury.find((t) => t.chainId === 42220 && t.token === celo.tokenAddress("USDC").toLowerCase())!.balance;
    expect(onChain).toBe(chainBalance.toString());
    expect(ledgerShown).toBe(ledgerBalance);
    expect(chainBalance).toBe(1_001_000n); // the served bill stays; the refunded one went back
    await expect.poll(() => page.locator("#audit-verdict").textContent()).toContain("no discrepancy");

    const count = (status: string, rail: string) => page.locator(`#order-counts tr[data-status="${status}"][data-rail="${rail}"] [data-field="count"]`).textContent();
    expect(await count("SUCCESS", "x402")).toBe("1");
    expect(await count("REFUNDED", "pull")).toBe("1");
    expect(Number(await page.locator("#volume").getAttribute("data-refunded"))).toBe(1_001_000);
    expect(Number(await page.locator("#volume").getAttribute("data-paid"))).toBe(2_002_000);
    expect(await page.locator('#health [data-field="rate"]').textContent()).toContain("1550 NGN/USD");
    // htmx, served by the service itself, refreshes a panel in place.
    expect(await page.evaluate(() => typeof (globalThis as unknown as { htmx?: unknown }).htmx)).toBe("object");
    await page.evaluate(() => (globalThis as unknown as { htmx: { trigger(el: string, ev: string): void } }).htmx.trigger("#counts-panel", "every 15s"));
    await mkdir("test-artifacts", { recursive: true });
    await page.screenshot({ path: "test-artifacts/console.png", fullPage: true });

    // The orders page filters, and an order shows its path with both transactions.
    await page.goto(`${url}/console/orders?status=REFUNDED`);
    const refundedRows = page.locator("#orders tbody tr");
    expect(await refundedRows.count()).toBe(1);
    await refundedRows.first().locator("a").click();
    expect(await page.locator('#order [data-field="status"]').textContent()).toBe("REFUNDED");
    expect(await page.locator("#order").textContent()).toMatch(/3\. Refund0x[0-9a-f]{64}/);
    // The request id the biller knows the pay by, for its support.
    expect(await page.locator('#order [data-field="biller-request-id"]').first().textContent()).toMatch(/^\d{12}[0-9a-f]{20}$/);
    // The reference the logs name the order by is on its page, and finds it.
    const requestId = (await page.locator("#order h2").textContent())!.replace("Order ", "");
    const ref = (await page.locator('#order [data-field="log-ref"]').textContent())!;
    expect(ref).toBe(orderRef(requestId));
    await page.goto(`${url}/console/orders/${ref}`);
    expect(page.url()).toBe(`${url}/console/orders/${requestId}`);
    // The agent's wallet: the allowance it set, what is left (the refund gave it back), paid and
    // refunded, by chain and token name; the x402 payer set no allowance and is not listed.
    await page.goto(`${url}/console/wallets`);
    const wallet = page.locator("#wallets tbody tr", { hasText: hardhatAccount(10).address.toLowerCase() });
    expect(await wallet.locator("td").allTextContents()).toEqual(expect.arrayContaining(["CELO", "USDC", "10", "1.001"]));
    expect(await page.locator("#wallets tbody tr", { hasText: hardhatAccount(9).address.toLowerCase() }).count()).toBe(0);
    // Refunds by name too, each leading to its order.
    await page.goto(`${url}/console/money`);
    const refundRow = page.locator("#refunds tbody tr").first();
    expect(await refundRow.locator("td").allTextContents()).toEqual(expect.arrayContaining(["CELO", "USDC", "pull", requestId]));
    await context.close();
  });

  it("runs the treasury panel's audit in-process: a request's Host never receives the operators' token", async () => {
    const seen: Array<string | undefined> = [];
    const trap = createServer((req, res) => {
      seen.push(req.headers.authorization);
      res.end("{}");
    });
    await new Promise<void>((r) => trap.listen(0, "127.0.0.1", r));
    try {
      const port = (trap.address() as AddressInfo).port;
      // The Host names the trap; an app that built the audit's URL from it would send the token there.
      const app = createApp({ config: loadConfig({ LOG_REQUESTS: "0", OPS_TOKEN: TOKEN, LEDGER_URL: paying.ledger.url }), db: paying.service.db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow: paying.service.flow });
      const res = await app.request(`http://127.0.0.1:${port}/console?panel=treasury`, { headers: { host: `127.0.0.1:${port}`, authorization: `Bearer ${TOKEN}` } });
      expect(res.status).toBe(200);
      expect(await res.text()).toContain("no discrepancy");
      expect(seen).toEqual([]);
    } finally {
      trap.close();
    }
  });

  it("exports /metrics in Prometheus format reflecting the paid bill and the refund", async () => {
    const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    expect(text).toMatch(/^billpay_orders\{status="SUCCESS",rail="x402"\} 1$/m);
    expect(text).toMatch(/^billpay_orders\{status="REFUNDED",rail="pull"\} 1$/m);
    expect(text).toMatch(/^billpay_refunds_total\{chain="CELO",token="USDC",rail="pull"\} 1$/m);
    expect(text).toMatch(/^billpay_refunded_units_total\{chain="CELO",token="USDC"\} 1001000$/m);
    expect(text).toMatch(/^billpay_vend_seconds_count\{outcome="delivered"\} 1$/m);
    expect(text).toMatch(/^billpay_vend_seconds_count\{outcome="failed"\} 1$/m);
    expect(text).toMatch(/^billpay_upstream_seconds_count\{upstream="facilitator",operation="settle",outcome="ok"\} 1$/m);
    expect(text).toMatch(/^billpay_upstream_seconds_count\{upstream="biller",operation="pay",outcome="ok"\} 2$/m);
    expect(text).toMatch(/^billpay_treasury_mismatch\{chain="CELO",token="USDC"\} 0$/m);
    expect(text).toMatch(/^billpay_treasury_onchain_units\{chain="CELO",token="USDC"\} 1001000$/m);
    expect(text).toMatch(/^billpay_ledger_lag_blocks\{chain="CELO"\} \d+$/m);
    // The local chains make a block a second: the service's node follows its chain.
    const headAge = Number(/^billpay_chain_head_age_seconds\{chain="CELO"\} (\d+)$/m.exec(text)?.[1]);
    expect(headAge).toBeLessThan(30);
    expect(text).toMatch(/^billpay_hot_key_gas_wei\{chain="CELO",role="refunder",address="0x[0-9a-fA-F]{40}"\} \d/m);
    expect(text).toMatch(/^billpay_orders_needs_review 0$/m);
    expect(text).toMatch(/^billpay_refund_budget_available_units\{chain="CELO",token="USDC"\} \d+/m);
    // Every metric the shipped alert rules use is one this service exports.
    const rules = parse(await readFile("ops/prometheus/billpay-rules.yml", "utf8")) as { groups: Array<{ rules: Array<{ alert: string; expr: string }> }> };
    const alerts = rules.groups.flatMap((g) => g.rules);
    expect(alerts.map((r) => r.alert)).toEqual(expect.arrayContaining(["BillPayTreasuryMismatch", "BillPayOrdersStuck", "BillPayOrdersNeedReview", "BillPayRefundBudgetLow", "BillPayHotKeyGasLow", "BillPayLedgerBehind", "BillPayChainHeadStale"]));
    for (const rule of alerts) {
      for (const metric of rule.expr.match(/billpay_[a-z_]+/g) ?? []) expect(text, `${rule.alert} uses ${metric}`).toMatch(new RegExp(`^# TYPE ${metric.replace(/_(count|sum|bucket)$/, "")} `, "m"));
    }
  });
});
