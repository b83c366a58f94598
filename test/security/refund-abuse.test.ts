/**
 * Refunds are never free and never starved, against the real local stack: a bill its
 * token's refund budget could never return is refused before any challenge or pull; a
 * payer whose bill failed the biller's number check has its next bills checked before it
 * pays; one payer's refunds take at most its share of the budget; a refund the budget
 * cannot take waits its computed turn (never retried in a loop) and goes to an operator
 * past the deadline; a renewal at a wrong amount counts as a failed check; a refund mined and reverted is tried again a bounded number of times,
 * then held; and paid calls that settle nothing are limited per payer.
 */
import { createWalletClient, http, parseGwei, type Account, type Hex } from "viem";
import { x402HTTPClient } from "@x402/core/http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mcpAgent, type ToolAnswer } from "../../lib/agent-client.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { hashApiKey, newApiKey } from "../../server/credentials.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { refund } from "../../server/orders/fulfil.ts";
import type { OrderStatus } from "../../server/orders/store.ts";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { viemChain } from "../../lib/chains.ts";
import { deployerAccount } from "../../lib/local-accounts.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import { createApp } from "../../server/app.ts";
import { VtpassClient } from "../../server/biller/vtpass/client.ts";
import { CustomerChecks } from "../../server/biller/customer-check.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { x402Bill } from "../support/bills.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { metricSum } from "../support/metrics.ts";

type Body = Record<string, unknown>;
const USDC = (n: number) => BigInt(Math.round(n * 1_000_000));

describe("refunds are never free and never starved", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;

  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const airtime = (payer: Account, phone: string, nairaAmount = 1550) => x402Bill(payer.address, { billersCode: phone, nairaAmount });
  const electricity = (payer: Account, meter: string, nairaAmount = 1550) =>
    x402Bill(payer.address, { serviceID: "ikeja-electric", serviceCategory: "ELECTRICITY", network: "IKEJA", billersCode: meter, variation_code: "prepaid", nairaAmount });

  /** Pays a bill the way any x402 client does: the 402, a signed authorization, the paid retry. */
  async function pay(payer: Account, body: Body): Promise<{ status: number; body: Body }> {
    const challenged = await post(body);
    if (challenged.status !== 402) return { status: challenged.status, body: (await challenged.json()) as Body };
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const paid = await post(body, client.encodePaymentSignatureHeader(payload));
    return { status: paid.status, body: (await paid.json()) as Body };
  }
  const orderOf = async (requestId: unknown) => (await service.flow.orders.get(requestId as string))!;
  async function passes(n = 2) {
    for (let i = 0; i < n; i++) await workOnce(service.flow);
  }
  const metric = (name: string) => metricSum(url, name);

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(
      accounts,
      {
        REFUND_BUDGET_CACHE_MS: "0", // the admin changes the budget between tests
        REFUND_PAYER_SHARE_PERCENT: "25",
        REFUND_WAIT_REVIEW_SECONDS: "60",
        RATE_LIMIT_UNSETTLED_PAYER: "3/600",
      },
      // It sets USDC's refund budget; close gives every budget back as lent.
      { restoresBudgets: true },
    );
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
    // 8 USDC at once, refilled over a day: a 1,550 NGN bill costs 1.001 USDC.
    await celo.setRefundBudget("USDC", USDC(8), 86_400n);
  });
  afterAll(async () => {
    await paying?.close();
  });

  it("refuses a bill above what the refund budget could return to one payer, before any challenge or pull", async () => {
    const payer = accounts(3);
    const big = airtime(payer, SANDBOX_NUMBERS.phone, 15_500); // 10.001 USDC > 8
    const quote = await fetch(`${url}/api/quote`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(big) });
    expect(quote.status).toBe(422);
    // The most one payer can be refunded (its 25% share of the 8 USDC budget): a dearer bill could not be.
    expect(await quote.json()).toMatchObject({ code: "BILL_ABOVE_REFUND_LIMIT", refund_limit: USDC(2).toString() });
    const challenge = await post(big);
    expect(challenge.status).toBe(422); // no 402: nothing to sign
    expect(((await challenge.json()) as Body).code).toBe("BILL_ABOVE_REFUND_LIMIT");

    // The agent hub: refused before the pull, so the wallet is not charged.
    const agent = accounts(4);
    await celo.approveAndAllow(agent, "USDC", USDC(100));
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: agent.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    const mcp = await mcpAgent(url);
    try {
      const before = await usdc(agent.address);
      const answer: ToolAnswer = await mcp.call("pay_bill", { api_key: key, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 15_500 });
      expect(answer.isError).toBe(true);
      expect((answer.data.error as Body).code).toBe("BILL_ABOVE_REFUND_LIMIT");
      expect(await usdc(agent.address)).toBe(before);
      // A batch of bills each within the share, together above it (3 x 1.001 USDC > 2): refused whole, before the pull.
      const bill = { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 };
      const batch: ToolAnswer = await mcp.call("pay_bill_batch", { api_key: key, pin: "1234", bills: [bill, { ...bill, nairaAmount: 1551 }, { ...bill, nairaAmount: 1552 }] });
      expect((batch.data.error as Body).code).toBe("BILL_ABOVE_REFUND_LIMIT");
      expect((batch.data.error as Body).detail).toMatch(/this batch costs 3\.00/);
      expect(await usdc(agent.address)).toBe(before);
      // A bill within the budget still pays.
      expect((await mcp.call("pay_bill", { api_key: key, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 })).data).toMatchObject({ status: "SUCCESS" });
    } finally {
      await mcp.close();
    }
  });

  it("verify_customer answers for free; a payer whose bill failed the number check is checked before paying from then on", async () => {
    // Free, before anything is paid, over REST and the agent tools.
    const ask = (billersCode: string) =>
      fetch(`${url}/api/verify-customer`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ serviceCategory: "ELECTRICITY", serviceID: "ikeja-electric", billersCode, variation_code: "prepaid" }),
      });
    const good = await ask(SANDBOX_NUMBERS.prepaidMeter);
    expect(good.status).toBe(200);
    expect(await good.json()).toMatchObject({ valid: true, customer_name: expect.any(String), meter_type: "prepaid" });
    expect(await (await ask("9999999999999")).json()).toMatchObject({ valid: false, reason: expect.any(String) });
    const mcp = await mcpAgent(url);
    try {
      const answer = await mcp.call("verify_customer", { serviceCategory: "CABLE", serviceID: "dstv", billersCode: SANDBOX_NUMBERS.smartcard });
      expect(answer.data).toMatchObject({ valid: true, customer_name: expect.any(String) });
      expect(((await mcp.call("verify_customer", { serviceCategory: "AIRTIME", serviceID: "mtn", billersCode: SANDBOX_NUMBERS.phone })).data.error as Body).code).toBe("VERIFY_NOT_OFFERED");
    } finally {
      await mcp.close();
    }
    // A product the biller does not list is refused from the cached lists, without asking it.
    const unknown = await fetch(`${url}/api/verify-customer`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ serviceCategory: "ELECTRICITY", serviceID: "no-such-disco", billersCode: "1111111111111" }),
    });
    expect(unknown.status).toBe(422);
    expect(((await unknown.json()) as Body).code).toBe("SERVICE_UNKNOWN");
    const bad = await fetch(`${url}/api/verify-customer`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ serviceID: "ikeja-electric" }) });
    expect(bad.status).toBe(400);

    // The stranger's first wrong meter settles and is refunded (the interface's settle-then-verify)...
    const stranger = accounts(5);
    const start = await usdc(stranger.address);
    const first = await pay(stranger, electricity(stranger, "9999999999999"));
    expect(first.body, JSON.stringify(first.body)).toMatchObject({ status: "FAILED_VENDING" });
    expect((await orderOf(first.body.request_id)).failureReason).toMatch(/^verification failed/);
    await passes();
    expect((await orderOf(first.body.request_id)).status).toBe("REFUNDED");
    expect(await usdc(stranger.address)).toBe(start);
    // ...but from then on the stranger's checkable bills are checked before any price is
    // shown: a wrong number is refused unpaid, with the reason.
    const second = await post(electricity(stranger, "9999999999998"));
    expect(second.status).toBe(422);
    expect(await second.json()).toMatchObject({ code: "CUSTOMER_NOT_VERIFIED", reason: expect.any(String) });
    // Asked with a payment attached (signed by anyone: a call with a payment is not counted as
    // a new bill), each wrong number the biller is asked about still counts against the caller.
    const guessing = createApp({ config: { ...service.config, RATE_LIMIT_CHALLENGE_ADDRESS: { points: 2, seconds: 600 } }, db: service.db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow: service.flow });
    const anyone = new x402HTTPClient(x402ClientFor(accounts(9), paying.chains.deployments));
    const challenged = await post(electricity(accounts(9), SANDBOX_NUMBERS.prepaidMeter));
    const junk = anyone.encodePaymentSignatureHeader(await anyone.createPaymentPayload(anyone.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json())));
    const guess = (meter: string) =>
      guessing.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...junk }, body: JSON.stringify(electricity(stranger, meter)) });
    expect((await guess("9999999999990")).status).toBe(422);
    expect((await guess("9999999999991")).status).toBe(422);
    expect((await guess("9999999999992")).status).toBe(429);
    // A right number still pays, and products without a check are not affected.
    expect((await pay(stranger, electricity(stranger, SANDBOX_NUMBERS.prepaidMeter))).body).toMatchObject({ status: "SUCCESS" });
    expect((await pay(stranger, airtime(stranger, SANDBOX_NUMBERS.phone, 1551))).body).toMatchObject({ status: "SUCCESS" });
    // Everyone else keeps settle-then-verify.
    const other = accounts(6);
    expect((await pay(other, electricity(other, "9999999999997"))).body).toMatchObject({ status: "FAILED_VENDING" });
  });

  it("one payer's refunds take at most its share of the budget; an honest payer's failed bill is refunded at once", async () => {
    await celo.setRefundBudget("USDC", USDC(8), 86_400n); // full again: 25% share = 2 USDC
    await passes(); // earlier tests' refunds are done
    const attacker = accounts(7);
    const honest = accounts(8);
    const waitingBefore = await metric("billpay_refunds_waiting_total");
    // Airtime to a number the biller fails: settled, then refunded.
    const failing = (who: Account, naira: number) => pay(who, airtime(who, "08099999999", naira));
    const a1 = await failing(attacker, 1560);
    const a2 = await failing(attacker, 1561);
    const a3 = await failing(attacker, 1562);
    await passes();
    const states = await Promise.all([a1, a2, a3].map(async (a) => (await orderOf(a.body.request_id)).status));
    // Two refunds (2.02 USDC) would pass the 2 USDC share: the first goes, the rest wait.
    expect(states.filter((s) => s === "REFUNDED")).toHaveLength(1);
    expect(states.filter((s) => s === "REFUNDING")).toHaveLength(2);
    expect(await metric("billpay_refunds_waiting_total")).toBeGreaterThan(waitingBefore);
    const waiting = await service.db.query<{ not_before: Date }>(`SELECT not_before FROM bill_order WHERE request_id = $1`, [a2.body.request_id]);
    expect(new Date(waiting[0]!.not_before).getTime()).toBeGreaterThan(Date.now() + 30_000); // not retried on the next passes
    // The honest payer's failed bill is refunded at once (by the request that paid it).
    const honestStart = await usdc(honest.address);
    const h = await failing(honest, 1563);
    await passes();
    expect((await orderOf(h.body.request_id)).status).toBe("REFUNDED");
    expect(await usdc(honest.address)).toBe(honestStart);
    // Gas spent on refunds is counted.
    expect(await metric("billpay_refund_gas_wei_total")).toBeGreaterThan(0);

    // A refund that waits past the deadline goes to an operator, with the reason.
    await service.db.query(`UPDATE bill_order SET refund_waiting_since = now() - interval '2 minutes', not_before = now() WHERE request_id = $1`, [a2.body.request_id]);
    await passes(1);
    const held = await orderOf(a2.body.request_id);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toMatch(/waited past 60 s/);
  });

  it("a refund the budget cannot take waits until it refills, then goes once", async () => {
    // 1.5 USDC at once, refilled over ten minutes; each payer's share is 0.375 USDC, so five
    // payers' failed bills of about 0.32 USDC each take more than the budget holds: four are
    // refunded, the fifth waits (the refill during the test is a few thousandths of a USDC).
    await celo.setRefundBudget("USDC", USDC(1.5), 600n);
    const payers = [9, 10, 14, 16, 17].map((n) => accounts(n));
    const bills: Array<{ status: number; body: Body }> = [];
    for (const [i, p] of payers.entries()) bills.push(await pay(p, airtime(p, "08099999999", 500 + i)));
    await passes();
    const statuses = await Promise.all(bills.map(async (b) => (await orderOf(b.body.request_id)).status));
    expect(statuses.filter((s) => s === "REFUNDED")).toHaveLength(4);
    const waitingId = bills[statuses.indexOf("REFUNDING")]!.body.request_id;
    // With under half of the budget left it is under pressure: a new payer's wrong number is now
    // checked before payment too, and refused unpaid (many wallets cannot each take a share).
    const newcomer = accounts(15);
    const pressed = await post(electricity(newcomer, "9999999999996"));
    expect(pressed.status).toBe(422);
    expect(await pressed.json()).toMatchObject({ code: "CUSTOMER_NOT_VERIFIED", detail: expect.stringContaining("refunds are heavy") });
    const failuresBefore = await metric("billpay_refund_failures_total");
    await passes(3); // within its wait: not sent, not failed
    expect((await orderOf(waitingId)).status).toBe("REFUNDING");
    expect(await metric("billpay_refund_failures_total")).toBe(failuresBefore);
    // The admin makes it refill within seconds (what is available is kept): it then goes, once.
    await celo.setRefundBudget("USDC", USDC(1.5), 5n);
    await expect
      .poll(
        async () => {
          await service.db.query(`UPDATE bill_order SET not_before = now() WHERE request_id = $1 AND status = 'REFUNDING'`, [waitingId]);
          await passes(1);
          return (await orderOf(waitingId)).status;
        },
        { timeout: 30_000, interval: 1_000 },
      )
      .toBe("REFUNDED");
  });

  it("a refund mined and reverted is tried again at most twice, each after a wait, then held for an operator: a wallet that fails its signature check in the block, not in the estimate, costs three refunds' gas, not one every pass", async () => {
    // A payer refused before any challenge above (nothing paid, nothing failed), and a budget that holds its refund.
    const payer = accounts(3);
    // (A limit set again keeps only what was available: a short period refills it within seconds.)
    await celo.setRefundBudget("USDC", USDC(8), 5n);
    await expect.poll(async () => (await service.flow.refundBudgets.read("CELO", celo.tokenAddress("USDC"))).available, { timeout: 20_000 }).toBeGreaterThanOrEqual(USDC(2));
    const served = await pay(payer, airtime(payer, SANDBOX_NUMBERS.phone));
    expect(served.body.status).toBe("SUCCESS");
    const requestId = served.body.request_id as string;
    await waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());
    const before = await usdc(payer.address);
    const rpcUrl = paying.chains.deployments.chains.CELO!.rpcUrl;
    const admin = createWalletClient({ account: deployerAccount(), chain: viemChain("CELO", rpcUrl), transport: http(rpcUrl) });
    const reason = "the biller reversed the bill after delivering it (as a test sets it)";
    // Each try: the refund's estimate passes, it is signed and sent; ahead of it in the block,
    // BillPay is paused (as the payer's wallet would turn its signature check off), so it reverts.
    const revertedTry = (from: OrderStatus[]) =>
      celo.miningPaused(async (mine) => {
        const signed = (await service.flow.orders.signedRefunds(requestId)).length;
        const trying = refund(service.flow, await orderOf(requestId), reason, from);
        await expect.poll(async () => (await service.flow.orders.signedRefunds(requestId)).length, { timeout: 20_000 }).toBe(signed + 1);
        await admin.writeContract({ address: celo.billPay, abi: billPayAbi, functionName: "pause", maxPriorityFeePerGas: parseGwei("50"), maxFeePerGas: parseGwei("100") });
        await mine();
        return trying;
      });
    const unpause = async () => {
      if (await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "paused" })) await celo.pause(false);
    };
    try {
      for (const n of [1, 2]) {
        const after = await revertedTry(n === 1 ? ["SUCCESS"] : ["REFUNDING"]);
        await unpause();
        expect(after.status).toBe("REFUNDING");
        // Not taken again until its wait is over: a pass leaves it as it is.
        const [row] = await service.db.query<{ reverts: number; waits: boolean }>(`SELECT refund_reverts AS reverts, not_before > now() + interval '200 seconds' AS waits FROM bill_order WHERE request_id = $1`, [requestId]);
        expect(row).toEqual({ reverts: n, waits: true });
        await workOnce(service.flow);
        expect((await service.flow.orders.signedRefunds(requestId)).length).toBe(n);
      }
      const held = await revertedTry(["REFUNDING"]);
      expect(held.status).toBe("NEEDS_REVIEW");
      expect(held.failureReason).toMatch(/its refund was mined and reverted 3 times, each at the service's gas/);
    } finally {
      await unpause();
    }
    expect((await service.flow.orders.signedRefunds(requestId)).length).toBe(3);
    expect(await usdc(payer.address)).toBe(before);
    // An operator's refund, with BillPay as it should be: the payment goes back once.
    expect((await refund(service.flow, await orderOf(requestId), "refunded by an operator", ["NEEDS_REVIEW"])).status).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(before + (await orderOf(requestId)).amount);
  });

  it("a renewal at another amount than the smartcard's is refunded once and counted as a failed check: the payer's next one is refused before payment", async () => {
    // The payer above, whose refunds were no failed bill of its own, with room in its share of
    // a budget that is not under pressure (more than half of it available).
    const payer = accounts(3);
    await celo.setRefundBudget("USDC", USDC(20), 5n);
    await expect.poll(async () => (await service.flow.refundBudgets.read("CELO", celo.tokenAddress("USDC"))).available, { timeout: 20_000 }).toBeGreaterThanOrEqual(USDC(15));
    const renewal = (nairaAmount: number) => x402Bill(payer.address, { serviceID: "dstv", serviceCategory: "CABLE", network: "DSTV", billersCode: SANDBOX_NUMBERS.smartcard, nairaAmount, subscription_type: "renew" });
    const start = await usdc(payer.address);
    const first = await pay(payer, renewal(1900));
    expect(first.body, JSON.stringify(first.body)).toMatchObject({ status: "FAILED_VENDING" });
    expect((await orderOf(first.body.request_id)).failureReason).toMatch(/^verification failed: renewing this smartcard's bouquet costs 1850 NGN/);
    await passes();
    expect((await orderOf(first.body.request_id)).status).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start);
    // Each such bill cost the service a settlement's check and a refund's gas: the next is refused unpaid.
    const second = await post(renewal(1901));
    expect(second.status).toBe(422);
    expect(await second.json()).toMatchObject({ code: "RENEWAL_AMOUNT_MISMATCH", reason: expect.stringContaining("costs 1850 NGN"), renewal_amount: "1850" });
    // At the renewal's own amount it is checked before payment and paid.
    expect((await pay(payer, renewal(1850))).body).toMatchObject({ status: "SUCCESS" });
  });

  it("a number check the biller cannot answer is retried, not refunded; only past its deadline is the bill refunded", async () => {
    // Refilled within two seconds (the last test left the budget nearly spent).
    const refill = await celo.setRefundBudget("USDC", USDC(8), 2n);
    const setAt = (await celo.publicClient.getBlock({ blockNumber: refill.blockNumber })).timestamp;
    // Full once the chain's clock is a period past the set (a block's time, not the wall's).
    await expect.poll(async () => (await celo.publicClient.getBlock()).timestamp >= setAt + 2n, { timeout: 15_000 }).toBe(true);
    // The biller unreachable for the number check: a closed port, a real connection refused.
    const c = service.config;
    const unreachable = new VtpassClient({ baseUrl: "http://127.0.0.1:9", apiKey: c.BILLER_API_KEY, secretKey: c.BILLER_SECRET_KEY, publicKey: c.BILLER_PUBLIC_KEY, timeoutMs: 500 });
    // The number check goes through its own cache, so the down biller gets checks of its own, with none kept.
    const down = { ...service.flow, biller: unreachable, customerChecks: new CustomerChecks(unreachable, 0, async () => 0, 1) };
    const app = createApp({ config: c, db: service.db, deployments: paying.chains.deployments, rates: new ConfiguredRate(1_550_000n), flow: down });
    const payer = accounts(13);
    const start = await usdc(payer.address);
    const body = electricity(payer, SANDBOX_NUMBERS.prepaidMeter, 1590);
    const ask = (h: Record<string, string> = {}) => app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...h }, body: JSON.stringify(body) });
    const challenged = await ask();
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const paid = (await (await ask(client.encodePaymentSignatureHeader(payload))).json()) as Body;
    // Settled, and told it is pending: not refunded for a check nobody could answer.
    expect(paid).toMatchObject({ status: "TIMEOUT", success: false });
    const waiting = await orderOf(paid.request_id);
    expect(waiting.status).toBe("PAID");
    expect(waiting.failureReason).toMatch(/^verification unavailable/);
    const amount = BigInt(waiting.amount);
    expect(await usdc(payer.address)).toBe(start - amount);
    // While the biller is still down the worker checks again, and the bill still waits.
    await service.db.query(`UPDATE bill_order SET not_before = now() WHERE request_id = $1`, [paid.request_id]);
    await workOnce(down);
    expect((await orderOf(paid.request_id)).status).toBe("PAID");
    // The biller is back: checked, vended, charged once, never refunded.
    await service.db.query(`UPDATE bill_order SET not_before = now() WHERE request_id = $1`, [paid.request_id]);
    await passes();
    expect((await orderOf(paid.request_id)).status).toBe("SUCCESS");
    expect(await usdc(payer.address)).toBe(start - amount);

    // A bill the biller could not check until the deadline (30 min after payment) is refunded.
    const late = (await pay(payer, electricity(payer, SANDBOX_NUMBERS.prepaidMeter, 1591))).body;
    expect((await orderOf(late.request_id)).status).toBe("SUCCESS"); // the biller answered this one
    const body2 = electricity(payer, SANDBOX_NUMBERS.postpaidMeter, 1592);
    const challenged2 = await app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body2) });
    const payload2 = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged2.headers.get(n), await challenged2.json()));
    const paid2 = (await (
      await app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...client.encodePaymentSignatureHeader(payload2) }, body: JSON.stringify(body2) })
    ).json()) as Body;
    expect((await orderOf(paid2.request_id)).status).toBe("PAID");
    await service.db.query(`UPDATE bill_order SET not_before = now(), created_at = now() - interval '31 minutes' WHERE request_id = $1`, [paid2.request_id]);
    await workOnce(down);
    const refunded = await orderOf(paid2.request_id);
    expect(refunded.status).toBe("REFUNDED");
    expect(refunded.failureReason).toMatch(/^verification unavailable for \d+ s/);
  });

  it("paid calls that settle nothing are limited per payer, whatever address they come from", async () => {
    const payer = accounts(11);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1580);
    const challenged = await post(body);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    // The same signed payment presented for other bills: each is refused (its amount does not fit).
    const codes: Array<number> = [];
    for (let i = 0; i < 4; i++) codes.push((await post(airtime(payer, SANDBOX_NUMBERS.phone, 1590 + i), client.encodePaymentSignatureHeader(payload))).status);
    expect(codes).toEqual([402, 402, 402, 429]);
    // A payment that settles is never counted, but this payer's budget is spent for now.
    expect((await post(body, client.encodePaymentSignatureHeader(payload))).status).toBe(429);
    // Another payer is not affected.
    const other = accounts(12);
    expect((await pay(other, airtime(other, SANDBOX_NUMBERS.phone, 1581))).body).toMatchObject({ status: "SUCCESS" });
  });

  it("a payer whose bills keep failing at the biller pays for no new bill a while, on either rail; others still pay", async () => {
    // An instance allowing two failed bills a payer an hour (the default is 20), on the same database and chains.
    const strict = createApp({
      config: { ...service.config, RATE_LIMIT_FAILED_VENDS_PAYER: { points: 2, seconds: 3600 } },
      db: service.db,
      deployments: paying.chains.deployments,
      rates: new ConfiguredRate(service.config.NGN_PER_USD),
      flow: service.flow,
    });
    const postStrict = (body: Body, headers: Record<string, string> = {}) =>
      strict.request("http://localhost/api/pay/x402", { method: "POST", headers: { host: "localhost", "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    const payStrict = async (payer: Account, body: Body) => {
      const challenged = await postStrict(body);
      const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
      const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
      const paid = await postStrict(body, client.encodePaymentSignatureHeader(payload));
      return { status: paid.status, body: (await paid.json()) as Body };
    };
    await celo.setRefundBudget("USDC", USDC(8), 86_400n);
    await passes();

    // x402: two bills to a number the biller fails, each settled and refunded; the third is refused unpaid.
    const payer = accounts(18);
    const start = await usdc(payer.address);
    for (const naira of [200, 201]) {
      const failed = await payStrict(payer, airtime(payer, "08099999999", naira));
      expect(failed.body, JSON.stringify(failed.body)).toMatchObject({ status: "FAILED_VENDING" });
    }
    await passes();
    expect(await usdc(payer.address)).toBe(start);
    const refused = await payStrict(payer, airtime(payer, SANDBOX_NUMBERS.phone, 202));
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ code: "RATE_LIMITED", retry_after_seconds: expect.any(Number) });
    expect(refused.body.detail).toMatch(/failed at the biller/);
    expect(await usdc(payer.address)).toBe(start);
    // Counted from the mark the refund left on each order, not from its reason: a later step
    // that writes the reason again (an operator's refund of a refund held for review) does not
    // take the bill out of the count.
    const rewritten = await service.db.query(`UPDATE bill_order SET failure_reason = 'refunded by an operator (alice)' WHERE payer = $1 AND failure_reason LIKE 'biller: %' RETURNING 1`, [payer.address.toLowerCase()]);
    expect(rewritten).toHaveLength(2);
    expect((await payStrict(payer, airtime(payer, SANDBOX_NUMBERS.phone, 204))).status).toBe(429);
    // The default instance's twenty are not spent: the bound is the setting's, read from the orders.
    expect((await pay(payer, airtime(payer, SANDBOX_NUMBERS.phone, 203))).body).toMatchObject({ status: "SUCCESS" });

    // The agent hub: the same count, before any pull.
    const wallet = accounts(19);
    await celo.approveAndAllow(wallet, "USDC", USDC(100));
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: wallet.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    const bill = (billersCode: string, nairaAmount: number) => ({ api_key: key, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode, nairaAmount });
    const toolStrict = async (name: string, args: Body) => {
      const res = await strict.request("http://localhost/api/mcp", {
        method: "POST",
        headers: { host: "localhost", "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
      });
      return ((await res.json()) as { result: { structuredContent: Body } }).result.structuredContent;
    };
    const walletStart = await usdc(wallet.address);
    for (const naira of [210, 211]) {
      const failed = await toolStrict("pay_bill", bill("08099999999", naira));
      expect(failed, JSON.stringify(failed)).toMatchObject({ status: "FAILED_VENDING" });
    }
    await passes();
    expect(await usdc(wallet.address)).toBe(walletStart);
    expect(((await toolStrict("pay_bill", bill(SANDBOX_NUMBERS.phone, 212))).error as Body).code).toBe("RATE_LIMITED");
    expect(((await toolStrict("pay_bill_batch", { api_key: key, pin: "1234", bills: [bill(SANDBOX_NUMBERS.phone, 213)].map(({ api_key: _k, pin: _p, ...b }) => b) })).error as Body).code).toBe("RATE_LIMITED");
    expect(await usdc(wallet.address)).toBe(walletStart);

    // Another payer on the strict instance pays (one failed bill of his, from an earlier test, is under the bound).
    const other = accounts(17);
    expect((await payStrict(other, airtime(other, SANDBOX_NUMBERS.phone, 204))).body).toMatchObject({ status: "SUCCESS" });
  });
});
