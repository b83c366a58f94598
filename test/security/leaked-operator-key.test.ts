/**
 * The operator key in a stranger's hands, against the real local stack. BillPay bounds it on
 * chain: it pulls only from payers that set an allowance, only into BillPay, and at most the
 * operator-wide pull budget per period, which a refund does not give back. The service says
 * so at once: a pull with no pull order (none at all, or an x402 order's id taken) is an error
 * line and a metric (alert BillPayOrphanPull) on the ledger pass that finds it, and it is
 * refunded to its payer.
 */
import { x402HTTPClient } from "@x402/core/http";
import { keccak256, toBytes, type Account, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mcpAgent } from "../../lib/agent-client.ts";
import { operatorAccount } from "../../lib/local-accounts.ts";
import { hashApiKey, newApiKey } from "../../server/credentials.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { refundOrderIdOnceTaken } from "../../server/chain/order-id.ts";
import { reconcileOrphanPulls } from "../../server/orders/ledger-pass.ts";
import { resolveOrder, ReviewRecords } from "../../server/orders/review.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { x402Bill } from "../support/bills.ts";
import { takenBackByBiller } from "../support/orders.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { metricSum } from "../support/metrics.ts";

const USDC = (n: number) => BigInt(Math.round(n * 1_000_000));
const strayId = (tag: string) => keccak256(toBytes(`stolen-key-${tag}-${Date.now()}`));

describe("a leaked operator key", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  const errors: string[] = [];
  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const metric = (name: string) => metricSum(service.urls.service, name);

  const post = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fetch(`${service.urls.service}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  async function payX402(payer: Account, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    return (await (await post(body, client.encodePaymentSignatureHeader(payload))).json()) as Record<string, unknown>;
  }

  beforeAll(async () => {
    // It sets USDC's pull budget; close gives every budget back as lent.
    paying = await startPayingStackOnSharedChains(accounts, {}, { restoresBudgets: true });
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    const log = service.flow.log;
    const error = log.error.bind(log);
    log.error = (msg, fields) => {
      errors.push(msg);
      error(msg, fields);
    };
  });
  afterAll(async () => {
    await paying?.close();
  });

  it("a pull under an x402 order's own order id is an orphan pull too, alerted and refunded; that order's refund goes under another id, and with both taken, to an operator, never marked refunded without a refund", async () => {
    const [payer, victim] = [accounts(15), accounts(16)];
    await celo.approveAndAllow(victim, "USDC", USDC(10));
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    /** A served x402 bill the biller took back: it waits for an operator's refund. */
    const takenBack = async (nairaAmount: number) => {
      const served = await payX402(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount }));
      expect(served).toMatchObject({ status: "SUCCESS" });
      const requestId = served.request_id as string;
      await takenBackByBiller(service, requestId);
      return (await service.flow.orders.get(requestId))!;
    };
    const alerts = () => errors.filter((e) => e.startsWith("a pull with no order reached BillPay")).length;
    /** Whoever holds the key pulls from another payer under `id` (an order id is known from the chain once used, or worked out from the request id). */
    const pullUnder = async (id: Hex) => {
      const alerted = alerts();
      await celo.pull(id, victim.address, "USDC", USDC(0.5));
      await waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());
      await expect.poll(() => reconcileOrphanPulls(service.flow), { timeout: 10_000, interval: 200 }).toBe(1);
      expect(alerts()).toBe(alerted + 1);
    };
    const victimBefore = await usdc(victim.address);

    // Its own id taken: alerted and refunded to the victim; the order's refund goes under another id, once.
    const order = await takenBack(1550);
    const payerBefore = await usdc(payer.address);
    await pullUnder(order.onchainOrderId as Hex);
    expect(await usdc(victim.address)).toBe(victimBefore);
    const refunded = await resolveOrder(review, { requestId: order.requestId, action: "refund", reason: "the biller took it back", operator: "bob" });
    expect(refunded.record, refunded.record.detail ?? "").toMatchObject({ outcome: "DONE", status_after: "REFUNDED" });
    expect(await usdc(payer.address)).toBe(payerBefore + order.amount);
    const receipt = await celo.publicClient.getTransactionReceipt({ hash: refunded.order!.refundTxHash as Hex });
    expect(receipt.logs.some((l) => l.topics[1] === refundOrderIdOnceTaken(order.requestId))).toBe(true);
    expect(await service.db.query(`SELECT tx_hash FROM refund_watch WHERE request_id = $1`, [order.requestId])).toEqual([{ tx_hash: receipt.transactionHash.toLowerCase() }]);

    // Both its ids taken: held for an operator, saying why; nothing is sent, nothing marked refunded.
    const second = await takenBack(1560);
    const payerThen = await usdc(payer.address);
    await pullUnder(second.onchainOrderId as Hex);
    await pullUnder(refundOrderIdOnceTaken(second.requestId));
    const held = await resolveOrder(review, { requestId: second.requestId, action: "refund", reason: "the biller took it back", operator: "bob" });
    expect(held.record).toMatchObject({ outcome: "FAILED", status_after: "NEEDS_REVIEW" });
    const after = (await service.flow.orders.get(second.requestId))!;
    expect(after.refundTxHash ?? null).toBeNull();
    expect(after.failureReason).toContain("its order ids are taken, and the payment is not refunded");
    expect(errors).toContain("refund held for review: BillPay's order ids for it are taken, and the payment is not refunded");
    expect(await usdc(payer.address)).toBe(payerThen);
    expect(await usdc(victim.address)).toBe(victimBefore);
  });

  it("pulls at most the pull budget, only from payers with an allowance; each pull with no order is alerted at once and refunded, and the refund gives the key nothing back", async () => {
    // Six USDC a day may be pulled, by anyone holding the key.
    await celo.setPullBudget("USDC", USDC(6), 86_400n);
    const [first, second, unset, agent] = [accounts(11), accounts(12), accounts(13), accounts(14)];
    const alerts = () => errors.filter((e) => e.startsWith("a pull with no order reached BillPay")).length;
    const [alerted, counted] = [alerts(), await metric('billpay_orphan_pulls_total{chain="CELO"}')];
    for (const payer of [first, second, agent]) await celo.approveAndAllow(payer, "USDC", USDC(100));
    const before = new Map(await Promise.all([first, second, unset, agent].map(async (a) => [a.address, await usdc(a.address)] as const)));
    const vault = await usdc(celo.billPay);
    const thief = operatorAccount().address;
    const thiefBefore = await usdc(thief);

    // Four of the six go; four more do not; a payer who set no allowance gives nothing.
    await celo.pull(strayId("a"), first.address, "USDC", USDC(4));
    await expect(celo.pull(strayId("b"), second.address, "USDC", USDC(4))).rejects.toThrow(/PullBudgetExceeded/);
    await expect(celo.pull(strayId("c"), unset.address, "USDC", USDC(1))).rejects.toThrow(/SpendingAllowanceExceeded/);
    expect(await usdc(second.address)).toBe(before.get(second.address));
    expect(await usdc(unset.address)).toBe(before.get(unset.address));

    // The ledger pass that finds it says so at once, and refunds it.
    await waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());
    await expect.poll(() => reconcileOrphanPulls(service.flow), { timeout: 10_000, interval: 200 }).toBe(1);
    expect(alerts()).toBe(alerted + 1);
    expect(await metric('billpay_orphan_pulls_total{chain="CELO"}')).toBe(counted + 1);
    expect(await usdc(first.address)).toBe(before.get(first.address));

    // The refund restored the payer's allowance, not the key's budget: two is all that is left.
    await expect(celo.pull(strayId("d"), first.address, "USDC", USDC(3))).rejects.toThrow(/PullBudgetExceeded/);
    await celo.pull(strayId("e"), first.address, "USDC", USDC(2));

    // With the budget spent, the service's own pulls are refused plainly, and charge nothing.
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: agent.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    const mcp = await mcpAgent(service.urls.service);
    try {
      const answer = await mcp.call("pay_bill", { api_key: key, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 });
      expect(answer.isError).toBe(true);
      expect(answer.data.error).toMatchObject({ code: "PULL_BUDGET_EXHAUSTED" });
    } finally {
      await mcp.close();
    }
    expect(await usdc(agent.address)).toBe(before.get(agent.address));

    // Nothing ever reached the key's own wallet: everything it pulled sits in BillPay, and the
    // second orphan is refunded like the first.
    expect(await usdc(thief)).toBe(thiefBefore);
    await waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());
    await expect.poll(() => reconcileOrphanPulls(service.flow), { timeout: 10_000, interval: 200 }).toBe(1);
    expect(await usdc(first.address)).toBe(before.get(first.address));
    expect(await usdc(celo.billPay)).toBe(vault);
    expect(await metric('billpay_orphan_pulls_total{chain="CELO"}')).toBe(counted + 2);
    // (It refills at six a day: a few seconds on, a few hundred raw units.)
    expect(await metric('billpay_pull_budget_available_units{chain="CELO",token="USDC"}')).toBeLessThan(Number(USDC(0.01)));
  });
});
