/**
 * A chain reorganised under a served bill, against the real local stack (Hardhat chain,
 * Ponder ledger, facilitator, biller sandbox). Each case takes an `evm_snapshot` before a
 * payment, pays and is served, then `evm_revert`s the chain and mines past the payment's
 * height, so the ledger drops the payment it had confirmed, as a real reorganisation does.
 * Payments are served on their own receipt, before the ledger holds them. The service must notice, say so, and collect the money again under the same key (the
 * payer's authorization; the same order id), or send the order to an operator, never
 * charging twice; a refunded bill whose payment went is closed as never paid. The chain's own
 * clock and ordering are held here too: a confirmation depth, and a payer's transaction put
 * ahead of an agent's pull in the same block.
 */
import { createWalletClient, erc20Abi, http, maxUint256, type Account, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { fundPayers } from "../../stack/local-deploy.ts";
import { asSigned } from "../../server/chain/node-transactions.ts";
import { viemChain } from "../../lib/chains.ts";
import { PERMIT2 } from "../../lib/permit2.ts";
import { x402HTTPClient } from "@x402/core/http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mcpAgent } from "../../lib/agent-client.ts";
import { deployerAccount, hardhatAccount, operatorAccount } from "../../lib/local-accounts.ts";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { runAudit } from "../../server/audit/ledger.ts";
import { isPaymentOf, waitForLedgerBlock } from "../../server/ledger-client.ts";
import { hashApiKey, newApiKey } from "../../server/credentials.ts";
import { refund } from "../../server/orders/fulfil.ts";
import { reconcileAuthorizationPayments } from "../../server/orders/ledger-pass.ts";
import { watchPayments, type LossOutcome } from "../../server/orders/payment-watch.ts";
import { watchRefunds } from "../../server/orders/refund-watch.ts";
import { resolveOrder, ReviewRecords } from "../../server/orders/review.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { x402Bill } from "../support/bills.ts";
import { deliveredBy, takenBackByBiller } from "../support/orders.ts";
import { budgetsOf, restoreBudgets, startPayingStack } from "../support/stack.ts";
import { metricSum } from "../support/metrics.ts";

type Body = Record<string, unknown>;
const USDC = (n: number) => BigInt(Math.round(n * 1_000_000));

describe("a payment reorganised off the chain after its bill was served", () => {
  let paying: Awaited<ReturnType<typeof startPayingStack>>;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;
  const errors: string[] = [];

  const rpc = (method: string, params: unknown[] = []) => celo.publicClient.request({ method: method as never, params: params as never }) as Promise<unknown>;
  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const orderOf = async (requestId: unknown) => (await service.flow.orders.get(requestId as string))!;
  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

  async function pay(payer: Account, body: Body): Promise<Body> {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    return (await (await post(body, client.encodePaymentSignatureHeader(payload))).json()) as Body;
  }

  /**
   * Does `act` on a chain that is then reorganised: everything `act` put on chain is gone, and
   * the chain has moved past it. The ledger is let see the blocks first, as a reorganisation
   * comes after a block has spread: Ponder 0.16 asks for the logs of a head it was told of by
   * its hash, and one reverted before that ask is asked for again and again, stalling the ledger.
   */
  async function reorganisedAway<T>(act: () => Promise<T>, on: ChainActors = celo): Promise<T> {
    const rpcOn = (method: string, params: unknown[] = []) => on.publicClient.request({ method: method as never, params: params as never }) as Promise<unknown>;
    const snapshot = await rpcOn("evm_snapshot");
    const result = await act();
    await waitForLedgerBlock(paying.ledger.url, on.deployment.chainId, await on.publicClient.getBlockNumber());
    await rpcOn("evm_revert", [snapshot]);
    return result;
  }
  const mine = (blocks = 4, on: ChainActors = celo) => on.mine(blocks);

  /** A transaction as it was signed and sent, which anyone who saw it can send again. */
  async function signedAsSent(hash: Hex): Promise<Hex> {
    return asSigned(await celo.publicClient.getTransaction({ hash })).serialized;
  }

  /** Runs the watch (as the worker does) until the order's lost payment reaches `outcome`. */
  async function watchUntil(requestId: unknown, outcome: LossOutcome) {
    await expect
      .poll(
        async () => {
          await watchPayments(service.flow).catch(() => 0);
          return (await service.flow.watches.losses()).find((l) => l.request_id === requestId)?.outcome;
        },
        { timeout: 30_000, interval: 250 },
      )
      .toBe(outcome);
    return (await service.flow.watches.losses()).find((l) => l.request_id === requestId)!;
  }

  const delivered = (requestId: unknown) => deliveredBy(service, requestId);

  /** The operator of a run that sends a refund through `method` and dies before it records it; `sent()` is the refund's hash. */
  function dyingAfterSending(method: "refund" | "refundAuthorization") {
    const real = service.flow.operator;
    let sent: Hex | undefined;
    const send = real[method].bind(real) as (a: never) => ReturnType<typeof real.refund>;
    const operator = Object.assign(Object.create(real) as typeof real, {
      [method]: async (a: never) => {
        const outcome = await send(a);
        sent = "txHash" in outcome ? outcome.txHash : undefined;
        throw new Error("the process died");
      },
    });
    return { operator, sent: () => sent! };
  }

  const metric = (name: string) => metricSum(url, name);

  async function linkedAgent(account: Account) {
    await celo.approveAndAllow(account, "USDC", USDC(100));
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: account.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    const mcp = await mcpAgent(url);
    return {
      pay: async () => (await mcp.call("pay_bill", { api_key: key, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 })).data,
      close: () => mcp.close(),
    };
  }

  beforeAll(async () => {
    paying = await startPayingStack();
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
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

  it("x402: the payer's still-valid authorization is settled again; charged once, served once, logged, counted, shown, audited clean", async () => {
    const payer = hardhatAccount(5);
    const [payerBefore, billPayBefore] = [await usdc(payer.address), await usdc(celo.billPay)];
    const paid = await reorganisedAway(() => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 })));
    expect(paid).toMatchObject({ status: "SUCCESS" });
    // Served on its settlement's receipt (the answer may come before the ledger has it at all).
    expect(await metric('billpay_payment_confirmations_total{chain="CELO",rail="x402",source="receipt"}')).toBe(1);
    const requestId = paid.request_id;
    const lostTx = (await orderOf(requestId)).txHash;
    expect(await usdc(payer.address)).toBe(payerBefore); // the chain no longer holds the payment
    await mine();

    const loss = await watchUntil(requestId, "RECOLLECTED");
    expect(loss.tx_hash).toBe(lostTx);
    const order = await orderOf(requestId);
    expect(order.status).toBe("SUCCESS");
    expect(order.txHash).not.toBe(lostTx);
    expect(order.txHash).toBe(loss.recollect_tx_hash);
    // Charged exactly once, and BillPay holds exactly that; the bill was vended once.
    expect(payerBefore - (await usdc(payer.address))).toBe(order.amount);
    expect((await usdc(celo.billPay)) - billPayBefore).toBe(order.amount);
    expect(await delivered(requestId)).toEqual(["delivered"]);

    expect(errors).toContain("a confirmed payment was reorganised off the chain");
    expect(await metric('billpay_payments_lost_total{chain="CELO",rail="authorization"}')).toBe(1);
    expect(await metric('billpay_lost_payment_outcomes_total{chain="CELO",rail="authorization",outcome="recollected"}')).toBe(1);
    const panel = await (await fetch(`${url}/console/money?panel=losses`)).text();
    expect(panel).toContain(String(requestId));
    expect(panel).toContain("RECOLLECTED");

    const audit = () => runAudit({ ledgerUrl: paying.ledger.url, deployments: paying.chains.deployments, service: { url } });
    await expect.poll(async () => (await audit()).discrepancies, { timeout: 10_000, interval: 500 }).toEqual([]);
  });

  it("x402: a payer who signed a second authorization of one unit under the same nonce, and lands it once a reorganisation took his payment, gets an operator, not a bill for a unit", async () => {
    const payer = hardhatAccount(17);
    const paid = await reorganisedAway(() => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 })));
    expect(paid).toMatchObject({ status: "SUCCESS" });
    const order = await orderOf(paid.request_id);
    // Before the watch collects the bill's own authorization again, the unit lands under its nonce.
    const unit = await celo.signAuthorization(payer, "USDC", 1n, celo.billPay, { nonce: order.authNonce as Hex });
    const landed = await celo.submitAuthorization("USDC", unit);
    // Past the dropped fork's height, so the ledger has left it for this one.
    await mine();
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    // The ledger leaves the dropped fork in its own time: the watch runs, as the worker's does, until it has.
    await expect.poll(async () => (await watchPayments(service.flow), (await orderOf(paid.request_id)).status), { timeout: 30_000, interval: 250 }).toBe("NEEDS_REVIEW");
    const held = await orderOf(paid.request_id);
    expect(held.failureReason).toContain("the chain shows 0.000001 USDC on CELO paid under this key; the order is for");
    expect(errors).toContain("a watched payment's key holds another payment now; the order waits for an operator");
    expect(errors).toContain("a confirmed payment was reorganised off the chain");
    expect((await service.flow.watches.losses()).find((l) => l.request_id === paid.request_id)).toMatchObject({ outcome: "REVIEW", detail: expect.stringContaining(landed.transactionHash) });
    // The bill was delivered once; what its payer still owes is an operator's to take up.
    expect(await delivered(paid.request_id)).toEqual(["delivered"]);
  });

  it("x402 through Permit2 (USD₮ on Base): the payer's still-valid permit is settled again through the proxy; charged once, served once, audited clean", async () => {
    const payer = hardhatAccount(12);
    const base = chainActors(paying.chains.deployments, "BASE");
    const usdt = (who: Hex) => base.balanceOf("USD₮", who);
    // The one-time approval of Permit2 stays: only the payment is reorganised away.
    await base.mined(await createWalletClient({ account: payer, chain: viemChain("BASE", base.deployment.rpcUrl), transport: http(base.deployment.rpcUrl) }).writeContract({ address: base.tokenAddress("USD₮"), abi: erc20Abi, functionName: "approve", args: [PERMIT2, maxUint256] }));
    const [payerBefore, billPayBefore] = [await usdt(payer.address), await usdt(base.billPay)];
    const paid = await reorganisedAway(() => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550, blockchain: "BASE", token: "USDT" })), base);
    expect(paid).toMatchObject({ status: "SUCCESS" });
    const lostTx = (await orderOf(paid.request_id)).txHash;
    expect(await usdt(payer.address)).toBe(payerBefore);
    await mine(4, base);

    const loss = await watchUntil(paid.request_id, "RECOLLECTED");
    expect(loss).toMatchObject({ rail: "permit2", tx_hash: lostTx });
    const order = await orderOf(paid.request_id);
    expect(order).toMatchObject({ status: "SUCCESS", txHash: loss.recollect_tx_hash });
    expect(payerBefore - (await usdt(payer.address))).toBe(order.amount);
    expect((await usdt(base.billPay)) - billPayBefore).toBe(order.amount);
    expect(await delivered(paid.request_id)).toEqual(["delivered"]);
    const audit = () => runAudit({ ledgerUrl: paying.ledger.url, deployments: paying.chains.deployments, service: { url } });
    await expect.poll(async () => (await audit()).discrepancies, { timeout: 10_000, interval: 500 }).toEqual([]);
  });

  it("a pull: the operator pulls again under the same order id; charged once, served once", async () => {
    const agent = await linkedAgent(hardhatAccount(6));
    try {
      const wallet = hardhatAccount(6).address;
      const before = await usdc(wallet);
      const paid = await reorganisedAway(() => agent.pay());
      expect(paid).toMatchObject({ status: "SUCCESS" });
      expect(await metric('billpay_payment_confirmations_total{chain="CELO",rail="pull",source="receipt"}')).toBe(1);
      expect(await usdc(wallet)).toBe(before);
      await mine();

      await watchUntil(paid.request_id, "RECOLLECTED");
      const order = await orderOf(paid.request_id);
      expect(order.status).toBe("SUCCESS");
      expect(before - (await usdc(wallet))).toBe(order.amount);
      const onChain = await celo.publicClient.readContract({ address: celo.billPay, abi: (await import("../../lib/generated/abis.ts")).billPayAbi, functionName: "orderOf", args: [order.onchainOrderId as Hex] });
      expect(onChain.paid).toBe(order.amount);
      expect(await delivered(paid.request_id)).toEqual(["delivered"]);
      expect(await metric('billpay_payments_lost_total{chain="CELO",rail="pull"}')).toBe(1);
    } finally {
      await agent.close();
    }
  });

  it("a pull whose allowance the payer revoked meanwhile cannot be collected: the order waits for an operator, the payer is not charged", async () => {
    const account = hardhatAccount(7);
    const agent = await linkedAgent(account);
    try {
      const before = await usdc(account.address);
      const paid = await reorganisedAway(() => agent.pay());
      expect(paid).toMatchObject({ status: "SUCCESS" });
      await celo.setSpendingAllowance(account, "USDC", 0n); // lands where the pull was
      await mine();

      const loss = await watchUntil(paid.request_id, "REVIEW");
      expect(loss.detail).toContain("SpendingAllowanceExceeded");
      const order = await orderOf(paid.request_id);
      expect(order.status).toBe("NEEDS_REVIEW");
      expect(order.failureReason).toContain("reorganised off the chain");
      expect(await usdc(account.address)).toBe(before);
      expect(errors).toContain("a lost payment could not be collected again; the order waits for an operator");
    } finally {
      await agent.close();
    }
  });

  it("a refunded bill whose payment and refund both went is closed as never paid: nothing owed either way", async () => {
    const payer = hardhatAccount(8);
    const before = await usdc(payer.address);
    let refundAsSent: Hex | undefined;
    const failed = await reorganisedAway(async () => {
      const answer = await pay(payer, x402Bill(payer.address, { billersCode: "08099999999", nairaAmount: 1550 }));
      refundAsSent = await signedAsSent((await orderOf(answer.request_id)).refundTxHash as Hex);
      return answer;
    });
    expect(failed).toMatchObject({ status: "FAILED_VENDING" });
    expect((await orderOf(failed.request_id)).status).toBe("REFUNDED");
    await mine();

    // The refund is in no block and no pool, but signed: the watch uses its nonce before it closes the order.
    await watchUntil(failed.request_id, "VOID");
    const order = await orderOf(failed.request_id);
    expect(order.status).toBe("PAYMENT_FAILED");
    expect(await usdc(payer.address)).toBe(before);
    // Whoever kept it cannot land it now, as the payer might after cancelling the authorization, which spends its nonce.
    await expect(celo.publicClient.sendRawTransaction({ serializedTransaction: refundAsSent! })).rejects.toThrow(/nonce/i);
    expect(await usdc(payer.address)).toBe(before);
  });

  it("a refund reorganised off the chain while its payment stands is held for an operator, who refunds it again: the payer is refunded once, logged, counted, audited clean", async () => {
    const payer = hardhatAccount(13);
    const before = await usdc(payer.address);
    const served = await pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1570 }));
    expect(served).toMatchObject({ status: "SUCCESS" });
    const requestId = served.request_id as string;
    const price = (await orderOf(requestId)).amount;
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    // As the biller taking the bill back leaves it for an operator, who refunds it.
    await takenBackByBiller(service, requestId);
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const refunded = await reorganisedAway(() => resolveOrder(review, { requestId, action: "refund", reason: "the biller took it back", operator: "bob" }));
    expect(refunded.record.outcome, refunded.record.detail ?? "").toBe("DONE");
    const lostTx = refunded.order!.refundTxHash;
    expect(await usdc(payer.address)).toBe(before - price); // the chain no longer holds the refund
    await mine();

    // The watch holds the order for an operator, saying why; nothing goes out by itself.
    await expect
      .poll(
        async () => {
          await watchRefunds(service.flow).catch(() => 0);
          return (await orderOf(requestId)).status;
        },
        { timeout: 30_000, interval: 250 },
      )
      .toBe("NEEDS_REVIEW");
    expect((await orderOf(requestId)).failureReason).toContain(`its refund (transaction ${lostTx!.toLowerCase()}) was reorganised off the chain while its payment stands`);
    expect(errors).toContain("a refund the service sent was reorganised off the chain; held for an operator to refund it again");
    expect(await metric('billpay_refunds_lost_total{chain="CELO",rail="x402"}')).toBe(1);
    expect(await usdc(payer.address)).toBe(before - price);
    // Not served: the lost refund is a signed transaction anyone may still land, after the bill.
    const serve = await resolveOrder(review, { requestId, action: "serve", reason: "paid after all", operator: "bob" });
    expect(serve.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(serve.record.detail).toContain("may still land");
    // The operator refunds it again: the ledger shows the payment and no refund under its key.
    const again = await resolveOrder(review, { requestId, action: "refund", reason: "its refund was reorganised away", operator: "bob" });
    expect(again.record.outcome, again.record.detail ?? "").toBe("DONE");
    expect(await usdc(payer.address)).toBe(before);
    const order = await orderOf(requestId);
    expect(order.status).toBe("REFUNDED");
    expect(order.refundTxHash).not.toBe(lostTx);
    // Past the ledger's depth, the watch ends.
    await mine(31);
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    await watchRefunds(service.flow);
    expect(await service.db.query(`SELECT 1 FROM refund_watch WHERE request_id = $1`, [requestId])).toEqual([]);
    const audit = () => runAudit({ ledgerUrl: paying.ledger.url, deployments: paying.chains.deployments, service: { url } });
    await expect.poll(async () => (await audit()).discrepancies, { timeout: 10_000, interval: 500 }).toEqual([]);
  });

  it("a lost refund landed again by anyone: the operator finds the order refunded, nothing more is sent, and that refund is watched", async () => {
    const payer = hardhatAccount(14);
    const before = await usdc(payer.address);
    const served = await pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1580 }));
    expect(served).toMatchObject({ status: "SUCCESS" });
    const requestId = served.request_id as string;
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    await takenBackByBiller(service, requestId);
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    // The refund's signed transaction, as anyone watching the chain saw it before the reorganisation.
    const signed = await reorganisedAway(async () => {
      const refunded = await resolveOrder(review, { requestId, action: "refund", reason: "the biller took it back", operator: "bob" });
      expect(refunded.record.outcome, refunded.record.detail ?? "").toBe("DONE");
      return signedAsSent(refunded.order!.refundTxHash as Hex);
    });
    await mine();
    await expect.poll(async () => (await watchRefunds(service.flow).catch(() => 0), (await orderOf(requestId)).status), { timeout: 30_000, interval: 250 }).toBe("NEEDS_REVIEW");

    // A stranger submits it again: the refund lands as first signed.
    const relanded = await celo.publicClient.request({ method: "eth_sendRawTransaction", params: [signed] });
    const receipt = await celo.publicClient.waitForTransactionReceipt({ hash: relanded });
    expect(receipt.status).toBe("success");
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, receipt.blockNumber);
    expect(await usdc(payer.address)).toBe(before);
    // The operator's refund finds it refunded: nothing is sent, and that refund is watched.
    const found = await resolveOrder(review, { requestId, action: "refund", reason: "look again", operator: "bob" });
    expect(found.record).toMatchObject({ outcome: "DONE", status_after: "REFUNDED", tx_hash: relanded });
    expect(await usdc(payer.address)).toBe(before);
    expect(await service.db.query(`SELECT tx_hash, lost_at FROM refund_watch WHERE request_id = $1`, [requestId])).toEqual([{ tx_hash: relanded.toLowerCase(), lost_at: null }]);
    await mine(31);
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    await watchRefunds(service.flow);
    expect(await service.db.query(`SELECT 1 FROM refund_watch WHERE request_id = $1`, [requestId])).toEqual([]);
  });

  it("with a confirmation depth, a bill is vended only once the chain has that many blocks on top of its payment", async () => {
    const payer = hardhatAccount(10);
    service.flow.confirmations.CELO = 2;
    try {
      const before = await usdc(payer.address);
      const answer = pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 }));
      // Settled (one block), but nothing on top of it: the order waits, nothing is vended.
      await expect.poll(() => usdc(payer.address), { timeout: 10_000 }).toBeLessThan(before);
      // Hold the chain still while the order waits: the local chains also mine an idle block a
      // second (hardhat.config.ts), and any leftover transaction would be a block on top too.
      await rpc("evm_setIntervalMining", [0]);
      await rpc("evm_setAutomine", [false]);
      // The head from the node itself (viem's getBlockNumber answers from a few seconds' cache).
      const head = () => rpc("eth_blockNumber");
      const settledAt = await head();
      await new Promise((r) => setTimeout(r, 1_000));
      expect(await head()).toBe(settledAt);
      const [waiting] = await service.db.query<{ request_id: string; status: string }>(`SELECT request_id, status FROM bill_order WHERE payer = $1`, [payer.address.toLowerCase()]);
      expect(waiting!.status).toBe("SETTLING");
      // Its first pay attempt may be recorded ahead (orders/fulfil.ts recordFirstAttempt), but the biller has heard of none.
      expect((await delivered(waiting!.request_id)).filter((status) => status !== undefined)).toEqual([]);
      await mine(2);
      expect(await answer).toMatchObject({ status: "SUCCESS", request_id: waiting!.request_id });
    } finally {
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1_000]);
      service.flow.confirmations.CELO = 0;
    }
  });

  it("an agent's pull its payer makes revert (his allowance lowered after the service's estimate) costs him his budget, one the service's own bound made revert does not: past it his pays are refused before anything is sent", async () => {
    const account = hardhatAccount(18);
    await celo.approveAndAllow(account, "USDC", USDC(100));
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: account.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    const mcp = await mcpAgent(url);
    // A bill of its own each time: the same bill again within minutes answers with its first order.
    const pay = async (nairaAmount: number, extra: Body = {}) =>
      (await mcp.call("pay_bill", { api_key: key, pin: "1234", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount, ...extra })).data;
    const code = (data: Body) => (data.error as { code?: string } | undefined)?.code;
    const operatorSent = () => celo.publicClient.getTransactionCount({ address: operatorAccount().address, blockTag: "pending" });
    const wallet = createWalletClient({ account, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    const budget = service.config.RATE_LIMIT_REVERTED_PAYER.points;
    const admin = createWalletClient({ account: deployerAccount(), chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    const fast = { maxPriorityFeePerGas: 50_000_000_000n, maxFeePerGas: 500_000_000_000n };
    const budgets = await budgetsOf(paying.chains.deployments);
    let firstId: string | undefined;
    try {
      // A pull the service's own bound makes revert (its admin lowers the pull budget in the
      // same block) is answered by that bound's name, and not counted against the payer.
      await rpc("evm_setIntervalMining", [0]);
      await rpc("evm_setAutomine", [false]);
      const sentFirst = await operatorSent();
      const bounded = pay(1_690);
      await expect.poll(operatorSent, { timeout: 10_000, interval: 50 }).toBeGreaterThan(sentFirst);
      await admin.writeContract({ address: celo.billPay, abi: billPayAbi, functionName: "setPullBudget", args: [celo.tokenAddress("USDC"), 1n, 3_600n], ...fast });
      await rpc("evm_mine");
      expect(code(await bounded)).toBe("PULL_BUDGET_EXHAUSTED");
      // The pay attempt recorded while the pull was mined was never sent, and is withdrawn.
      const unsent = await service.db.query<{ attempts: number }>(
        `SELECT (SELECT count(*)::int FROM biller_attempt a WHERE a.request_id = o.request_id) AS attempts FROM bill_order o WHERE lower(o.payer) = $1 AND o.status = 'PAYMENT_FAILED'`,
        [account.address.toLowerCase()],
      );
      expect(unsent).toEqual([{ attempts: 0 }]);
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1_000]);
      await restoreBudgets(paying.chains.deployments, budgets);
      for (let i = 0; i < budget; i++) {
        await rpc("evm_setIntervalMining", [0]);
        await rpc("evm_setAutomine", [false]);
        const sent = await operatorSent();
        const answer = pay(1_700 + i, i === 0 ? { idempotency_key: "reverted-first" } : {});
        await expect.poll(operatorSent, { timeout: 10_000, interval: 50 }).toBeGreaterThan(sent); // the pull waits in the pool
        // His own small transaction, paying more to go first in the block: his allowance to nothing.
        await wallet.writeContract({ address: celo.billPay, abi: billPayAbi, functionName: "setSpendingAllowance", args: [celo.tokenAddress("USDC"), 0n], ...fast });
        await rpc("evm_mine");
        const refused = await answer;
        expect(code(refused)).toBe("PULL_REVERTED");
        if (i === 0) firstId = (refused.error as { request_ids: string[] }).request_ids[0];
        await rpc("evm_setAutomine", [true]);
        await celo.setSpendingAllowance(account, "USDC", USDC(100));
      }
      // Past his budget: refused before any pull is priced or sent.
      const sent = await operatorSent();
      const limited = await pay(1_750);
      expect(code(limited)).toBe("RATE_LIMITED");
      expect(JSON.stringify(limited)).toContain("pulls of this wallet that reverted on chain");
      expect(await operatorSent()).toBe(sent);
      // A call its idempotency key answers with its first order is still answered: nothing new is pulled.
      const again = await pay(1_700, { idempotency_key: "reverted-first" });
      expect(code(again)).toBeUndefined();
      expect(again).toMatchObject({ request_id: firstId });
      expect(await operatorSent()).toBe(sent);
    } finally {
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1_000]);
      await mcp.close();
    }
  });

  it("a pay_bill_batch its payer makes revert counts each pull it carried against his budget: past it at once, his next pay is refused before anything is sent", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await fundPayers("CELO", celo.deployment.rpcUrl, paying.chains.deployments.chains.CELO!.tokens, [account.address], { gas: true });
    await celo.approveAndAllow(account, "USDC", USDC(100));
    const key = newApiKey();
    await service.hub.deps.links.link({ wallet: account.address, apiKeyHash: hashApiKey(key), pinHash: service.hub.deps.links.hashPin("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
    const mcp = await mcpAgent(url);
    const bill = (nairaAmount: number) => ({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: SANDBOX_NUMBERS.phone, nairaAmount });
    const code = (data: Body) => (data.error as { code?: string } | undefined)?.code;
    const operatorSent = () => celo.publicClient.getTransactionCount({ address: operatorAccount().address, blockTag: "pending" });
    const wallet = createWalletClient({ account, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    const budget = service.config.RATE_LIMIT_REVERTED_PAYER.points;
    try {
      await rpc("evm_setIntervalMining", [0]);
      await rpc("evm_setAutomine", [false]);
      const sent = await operatorSent();
      const answer = mcp.call("pay_bill_batch", { api_key: key, pin: "1234", bills: Array.from({ length: budget }, (_, i) => bill(1_800 + i)) }).then((r) => r.data);
      await expect.poll(operatorSent, { timeout: 10_000, interval: 50 }).toBeGreaterThan(sent);
      await wallet.writeContract({ address: celo.billPay, abi: billPayAbi, functionName: "setSpendingAllowance", args: [celo.tokenAddress("USDC"), 0n], maxPriorityFeePerGas: 50_000_000_000n, maxFeePerGas: 500_000_000_000n });
      await rpc("evm_mine");
      expect(code(await answer)).toBe("PULL_REVERTED");
      await rpc("evm_setAutomine", [true]);
      await celo.setSpendingAllowance(account, "USDC", USDC(100));
      const before = await operatorSent();
      const limited = (await mcp.call("pay_bill", { api_key: key, pin: "1234", ...bill(1_850) })).data;
      expect(code(limited)).toBe("RATE_LIMITED"); // on the code before: one count for the whole batch, and this pull sent
      expect(await operatorSent()).toBe(before);
    } finally {
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1_000]);
      await mcp.close();
    }
  });

  it("a payment watched on an earlier run of a local chain (another genesis) is never looked for, or collected, on the chain started afresh", async () => {
    const payer = hardhatAccount(11);
    const paid = await pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 }));
    expect(paid).toMatchObject({ status: "SUCCESS" });
    // As the row a previous chain left: same order, a block this chain's ledger does not hold it in.
    await service.db.query(`UPDATE payment_watch SET deployment = 'an-earlier-genesis', block_number = 1, payment_key = 'gone' WHERE request_id = $1`, [paid.request_id]);
    await mine();
    await watchPayments(service.flow);
    expect(await service.db.query(`SELECT 1 FROM payment_watch WHERE request_id = $1`, [paid.request_id])).toEqual([]);
    expect((await orderOf(paid.request_id)).status).toBe("SUCCESS");
  });

  it("a payment landing again below the time of a dropped fork's payment is still found by the ledger pass", async () => {
    const [stray, again] = [hardhatAccount(15), hardhatAccount(16)];
    const recorded = async (nonce: Hex) =>
      (await service.flow.orphans.all()).payments.some((p) => p.auth_nonce === nonce.toLowerCase());
    // On the fork that is dropped: a payment with no order, in a block ten minutes ahead (a
    // validator's clock may run ahead), read by the pass.
    const dropped = await reorganisedAway(async () => {
      const head = await celo.publicClient.getBlock();
      await rpc("evm_setNextBlockTimestamp", [Number(head.timestamp) + 600]);
      const paid = await celo.payByAuthorization(stray, "USDC", USDC(0.5));
      await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, paid.receipt.blockNumber);
      await expect.poll(async () => (await reconcileAuthorizationPayments(service.flow), recorded(paid.nonce)), { timeout: 10_000 }).toBe(true);
      return { nonce: paid.nonce, timestamp: (await celo.publicClient.getBlock({ blockNumber: paid.receipt.blockNumber })).timestamp };
    });
    // The chain the network keeps: another payment with no order, in a block earlier than the dropped one.
    const kept = await celo.payByAuthorization(again, "USDC", USDC(0.5));
    expect((await celo.publicClient.getBlock({ blockNumber: kept.receipt.blockNumber })).timestamp).toBeLessThan(dropped.timestamp);
    await mine();
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    await expect.poll(async () => (await reconcileAuthorizationPayments(service.flow), recorded(kept.nonce)), { timeout: 10_000 }).toBe(true);
  });

  for (const onlyTheNode of [false, true])
    it(`a refund sent by a run that died before recording it, found when the refund is tried again (${onlyTheNode ? "only the service's node holds it yet" : "the ledger shows it"}): recorded with its transaction and watched; reorganised away, its order is held for an operator`, async () => {
      const payer = hardhatAccount(onlyTheNode ? 18 : 17);
      const before = await usdc(payer.address);
      const served = await pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: onlyTheNode ? 1600 : 1590 }));
      expect(served).toMatchObject({ status: "SUCCESS" });
      const requestId = served.request_id as string;
      const price = (await orderOf(requestId)).amount;
      await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
      // The biller took it back; the order is held, as whoever works it holds it, so the worker keeps out.
      await takenBackByBiller(service, requestId);
      const held = (await service.flow.orders.claim(requestId, 120))!;
      const dying = dyingAfterSending("refundAuthorization");
      const refunded = await reorganisedAway(async () => {
        expect((await refund({ ...service.flow, operator: dying.operator }, await orderOf(requestId), "the biller took it back", ["NEEDS_REVIEW"])).status).toBe("REFUNDING");
        expect(await usdc(payer.address)).toBe(before);
        // Tried again, BillPay answers that the payment is refunded. The ledger may still be a
        // block behind the node: then it shows the payment, and no refund, as it did before it.
        const refundBlock = (await celo.publicClient.getTransactionReceipt({ hash: dying.sent() })).blockNumber;
        const ledger = onlyTheNode
          ? Object.assign(Object.create(service.flow.ledger) as typeof service.flow.ledger, {
              indexedBlock: async () => refundBlock - 1n,
              authorization: async (...a: Parameters<typeof service.flow.ledger.authorization>) => ({ ...(await service.flow.ledger.authorization(...a)), refunds: [] }),
            })
          : service.flow.ledger;
        return refund({ ...service.flow, ledger }, await orderOf(requestId), "refund retried", ["REFUNDING"]);
      });
      expect(refunded.status).toBe("REFUNDED");
      expect(refunded.refundTxHash?.toLowerCase()).toBe(dying.sent().toLowerCase());
      expect(await service.db.query(`SELECT tx_hash, lost_at FROM refund_watch WHERE request_id = $1`, [requestId])).toEqual([{ tx_hash: dying.sent().toLowerCase(), lost_at: null }]);
      await service.flow.orders.release(requestId, held.leaseToken);
      expect(await usdc(payer.address)).toBe(before - price); // the chain no longer holds the refund
      await mine();

      await expect
        .poll(async () => (await watchRefunds(service.flow).catch(() => 0), (await orderOf(requestId)).status), { timeout: 30_000, interval: 250 })
        .toBe("NEEDS_REVIEW");
      expect((await orderOf(requestId)).failureReason).toContain(`its refund (transaction ${dying.sent().toLowerCase()}) was reorganised off the chain while its payment stands`);
      expect(await usdc(payer.address)).toBe(before - price);
    });

  it("a pull's refund sent by a run that died before recording it is found on the service's node while the ledger is a block behind: recorded with its transaction and watched", async () => {
    const account = hardhatAccount(4);
    const agent = await linkedAgent(account);
    try {
      const paid = await agent.pay();
      expect(paid).toMatchObject({ status: "SUCCESS" });
      const requestId = paid.request_id as string;
      await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
      await takenBackByBiller(service, requestId);
      const held = (await service.flow.orders.claim(requestId, 120))!;
      const before = await usdc(account.address);
      const dying = dyingAfterSending("refund");
      expect((await refund({ ...service.flow, operator: dying.operator }, await orderOf(requestId), "the biller took it back", ["NEEDS_REVIEW"])).status).toBe("REFUNDING");
      const order = await orderOf(requestId);
      expect(await usdc(account.address)).toBe(before + order.amount);
      // Tried again, BillPay answers AlreadyRefunded; the ledger, a block behind, shows the pull and no refund.
      const refundBlock = (await celo.publicClient.getTransactionReceipt({ hash: dying.sent() })).blockNumber;
      const ledger = Object.assign(Object.create(service.flow.ledger) as typeof service.flow.ledger, {
        indexedBlock: async () => refundBlock - 1n,
        order: async (id: string) => ({ ...(await service.flow.ledger.order(id)), refunds: [] }),
      });
      const refunded = await refund({ ...service.flow, ledger }, order, "refund retried", ["REFUNDING"]);
      expect(refunded.status).toBe("REFUNDED");
      expect(refunded.refundTxHash?.toLowerCase()).toBe(dying.sent().toLowerCase());
      expect(await service.db.query(`SELECT tx_hash, block_number::text AS block, lost_at FROM refund_watch WHERE request_id = $1`, [requestId])).toEqual([
        { tx_hash: dying.sent().toLowerCase(), block: refundBlock.toString(), lost_at: null },
      ]);
      expect(await usdc(account.address)).toBe(before + order.amount);
      await service.flow.orders.release(requestId, held.leaseToken);
    } finally {
      await agent.close();
    }
  });

  /** A bill of payer 19's served, then taken back by the biller (held for review, its payment indexed): what a refund starts from. */
  async function servedThenTakenBack(nairaAmount: number) {
    const payer = hardhatAccount(19);
    const served = await pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount }));
    expect(served).toMatchObject({ status: "SUCCESS" });
    const requestId = served.request_id as string;
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, await celo.publicClient.getBlockNumber());
    await takenBackByBiller(service, requestId);
    return { payer, requestId };
  }

  it("a refund found on chain that gave back less than the order is owed (a leaked refunder key's) holds the order for an operator; it is never closed as refunded", async () => {
    const { payer, requestId } = await servedThenTakenBack(1610);
    const order = await orderOf(requestId);
    const before = await usdc(payer.address);
    // Whoever holds the refunder key refunds the payment's key first, one unit short.
    const stored = order.payment as unknown as { authorization: Record<string, string>; signature: Hex };
    const a = stored.authorization;
    const authorization = { from: a.from as Hex, to: a.to as Hex, value: BigInt(a.value!), validAfter: BigInt(a.validAfter!), validBefore: BigInt(a.validBefore!), nonce: a.nonce as Hex };
    const theirs = await service.flow.operator.refundAuthorization({ chain: "CELO", requestId, token: order.tokenAddress as Hex, authorization, signature: stored.signature, amount: order.amount - 1n });
    expect("txHash" in theirs).toBe(true);
    expect(await usdc(payer.address)).toBe(before + order.amount - 1n);

    // The service's refund finds the key refunded, by another amount: held, saying so; nothing more is sent.
    const held = await refund(service.flow, await orderOf(requestId), "the biller took it back", ["NEEDS_REVIEW"]);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toContain(`of ${order.amount - 1n}, not the ${order.amount} owed`);
    expect(errors).toContain("refund held for review: BillPay holds the payment refunded by another amount");
    expect(await usdc(payer.address)).toBe(before + order.amount - 1n);
  });

  it("a refund whose order moved on between REFUNDING and its signature (an operator served it, a late delivery held it) is not sent: nothing is recorded, the refunder signs nothing, and the payer keeps only the bill", async () => {
    const { payer, requestId } = await servedThenTakenBack(1620);
    const before = await usdc(payer.address);
    const refunder = service.flow.operator.addresses.refunder;
    const sent = await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" });
    // Right before the refund is signed (its record read), the order is moved on, as an operator's serve or a webhook would.
    const orders = Object.assign(Object.create(service.flow.orders) as typeof service.flow.orders, {
      signedRefunds: async (id: string) => {
        await service.db.query(`UPDATE bill_order SET status = 'NEEDS_REVIEW' WHERE request_id = $1`, [id]);
        return service.flow.orders.signedRefunds(id);
      },
    });
    const after = await refund({ ...service.flow, orders }, await orderOf(requestId), "the biller took it back", ["NEEDS_REVIEW"]);
    // On the code before: sent and landed, the order left REFUNDING-less with its bill served and its payment back.
    expect(after.status).toBe("NEEDS_REVIEW");
    expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" })).toBe(sent);
    expect(await service.flow.orders.signedRefunds(requestId)).toEqual([]);
    expect(await usdc(payer.address)).toBe(before);
  });

  it("a late landing's refund reads its payment again once deep: a payment as a dropped stream last pushed it, in a block the ledger no longer holds it in, is not refunded", async () => {
    const { payer, requestId } = await servedThenTakenBack(1630);
    // Refunded as a late landing is: its payment must stand where the ledger shows it.
    await service.db.query(`UPDATE bill_order SET late_refund = true WHERE request_id = $1`, [requestId]);
    const before = await usdc(payer.address);
    const refunder = service.flow.operator.addresses.refunder;
    const sent = await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" });
    // The payment as a stream that dropped last pushed it: a block (and transaction) a reorganisation has since replaced.
    const ledger = Object.assign(Object.create(service.flow.ledger) as typeof service.flow.ledger, {
      awaitPayment: async (...a: Parameters<typeof service.flow.ledger.awaitPayment>) => {
        const p = await service.flow.ledger.awaitPayment(...a);
        return p && { ...p, blockNumber: String(BigInt(p.blockNumber) + 1n), txHash: `0x${"ee".repeat(32)}` };
      },
    });
    const after = await refund({ ...service.flow, ledger }, await orderOf(requestId), "the biller took it back", ["NEEDS_REVIEW"]);
    expect(after.status).toBe("REFUNDING"); // it waits for the ledger to agree; on the code before: REFUNDED
    expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" })).toBe(sent);
    expect(await usdc(payer.address)).toBe(before);
    // The ledger as it stands: the refund goes.
    expect((await refund(service.flow, after, "the biller took it back", ["REFUNDING"])).status).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(before + after.amount);
  });

  it("a refunded bill whose payment a reorganisation replaced with the payer's cancellation of its nonce, while its refund landed again, is held for an operator: BillPay paid out a refund of nothing", async () => {
    const payer = hardhatAccount(8);
    const before = await usdc(payer.address);
    // The refund's signed transaction, as anyone watching the chain saw it before the reorganisation.
    const { failed, nonce, signed } = await reorganisedAway(async () => {
      const failed = await pay(payer, x402Bill(payer.address, { billersCode: "08099999999", nairaAmount: 1590 }));
      expect(failed).toMatchObject({ status: "FAILED_VENDING" });
      const order = await orderOf(failed.request_id);
      expect(order.status).toBe("REFUNDED");
      return { failed, nonce: order.authNonce as Hex, signed: await signedAsSent(order.refundTxHash as Hex) };
    });
    // In the payment's place, in one block: his cancellation of its nonce, then the refund,
    // landed again (BillPay's refundAuthorization asks only that the nonce be spent).
    const relanded = await celo.miningPaused(async (mineOne) => {
      await celo.cancelAuthorization(payer, "USDC", nonce, { sentOnly: true });
      const relanded = await celo.publicClient.request({ method: "eth_sendRawTransaction", params: [signed] });
      await mineOne();
      return relanded;
    });
    const receipt = await celo.publicClient.waitForTransactionReceipt({ hash: relanded });
    expect(receipt.status).toBe("success");
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, receipt.blockNumber);
    await mine();

    const loss = await watchUntil(failed.request_id, "REVIEW");
    expect(loss.detail).toBe("its refund stands on chain without it");
    const order = await orderOf(failed.request_id);
    expect(order.status).toBe("NEEDS_REVIEW");
    expect(order.failureReason).toContain("its refund stands on chain without it");
    // What the operator is held for: the payer was refunded a payment that no longer exists,
    // which the audit names too. After every test that audits: the chain keeps that refund,
    // and those audits expect a clean one.
    expect(await usdc(payer.address)).toBe(before + order.amount);
    const audit = await runAudit({ ledgerUrl: paying.ledger.url, deployments: paying.chains.deployments, service: { url } });
    expect(audit.discrepancies).toContainEqual(expect.stringMatching(/has no inbound payment/));
    // The one decision left (no payment to refund or serve): closed as never paid, its standing refund no bar (BillPay refunds a key once), nothing moved.
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const closed = await resolveOrder(review, { requestId: failed.request_id as string, action: "close", reason: "the refund stands without its payment", operator: "bob" });
    expect(closed.record.outcome, closed.record.detail ?? "").toBe("DONE");
    expect((await orderOf(failed.request_id)).status).toBe("PAYMENT_FAILED");
    expect(await usdc(payer.address)).toBe(before + order.amount);
  });

  /**
   * An x402 bill served, its payment reorganised away and collected again through the
   * facilitator, all watched through a ledger that shows nothing under the order's key; then
   * the deadline for collecting it again passes. `indexedShort`: the ledger also stands a block
   * short of the one the payment came back in (the node has it, the ledger does not yet).
   * `lostMinutesAgo`: past the 600 s deadline, and by default short of twice it.
   */
  async function collectedAgainPastDeadline(payer: Account, nairaAmount: number, indexedShort: boolean, lostMinutesAgo = 15) {
    const before = await usdc(payer.address);
    const paid = await reorganisedAway(() => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount })));
    expect(paid).toMatchObject({ status: "SUCCESS" });
    const order = await orderOf(paid.request_id);
    await mine();
    const ours = isPaymentOf(order);
    const real = service.flow.ledger;
    let backIn: bigint | undefined;
    const behind = new Proxy(real, {
      get(target, key, receiver) {
        if (key === "payments") return async (q: Parameters<typeof real.payments>[0]) => ({ ...(await target.payments(q)), payments: (await target.payments(q)).payments.filter((p) => !ours(p)) });
        if (key === "authorization") return async (...args: Parameters<typeof real.authorization>) => ({ ...(await target.authorization(...args)), payment: null });
        if (key === "indexedBlock")
          return async (chainId: number) => {
            const indexed = await target.indexedBlock(chainId);
            return indexed !== null && backIn !== undefined && indexedShort && indexed >= backIn ? backIn - 1n : indexed;
          };
        const value = Reflect.get(target, key, receiver) as unknown;
        return typeof value === "function" ? value.bind(receiver) : value;
      },
    });
    const deps = { ...service.flow, ledger: behind };
    const lossOf = async () => (await service.flow.watches.losses()).find((l) => l.request_id === paid.request_id);
    // Collected again: the payer's authorization, settled once more through the facilitator, mined.
    await expect.poll(async () => (await watchPayments(deps).catch(() => 0), (await lossOf())?.recollect_tx_hash ?? null), { timeout: 30_000, interval: 250 }).not.toBeNull();
    backIn = (await celo.publicClient.getTransactionReceipt({ hash: (await lossOf())!.recollect_tx_hash as Hex })).blockNumber;
    await mine();
    await waitForLedgerBlock(paying.ledger.url, celo.deployment.chainId, backIn);
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    // The deadline passes.
    await service.db.query(`UPDATE payment_watch SET lost_at = now() - make_interval(mins => $2), attempted_at = now() - interval '1 minute' WHERE request_id = $1`, [paid.request_id, lostMinutesAgo]);
    await watchPayments(deps);
    return { requestId: paid.request_id as string, before, order, lossOf };
  }

  it("x402: past the deadline, a payment collected again that the service's node shows in a block the ledger has not indexed waits for the ledger, not an operator", async () => {
    const payer = hardhatAccount(3);
    const { requestId, before, order, lossOf } = await collectedAgainPastDeadline(payer, 1560, true);
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    expect(await lossOf()).toMatchObject({ outcome: "RECOLLECTING", detail: expect.stringContaining("back on chain") });
    // The ledger as it is: collected, served once, charged once.
    await watchUntil(requestId, "RECOLLECTED");
    expect((await orderOf(requestId)).status).toBe("SUCCESS");
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(await delivered(requestId)).toEqual(["delivered"]);
  });

  it("x402: a ledger that has not reached the block the node shows the payment back in by twice the deadline has stalled: an operator decides, nothing moves", async () => {
    const payer = hardhatAccount(3);
    const { requestId, before, order } = await collectedAgainPastDeadline(payer, 1562, true, 21);
    const held = await orderOf(requestId);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toMatch(/but the ledger has not indexed that block within 1200 s of the loss/);
    expect(before - (await usdc(payer.address))).toBe(order.amount); // collected once, nothing more
    expect(await delivered(requestId)).toEqual(["delivered"]);
  });

  it("x402: past the deadline, a ledger that has indexed past the block the node shows the payment in, still without it, is not lag: an operator decides", async () => {
    const payer = hardhatAccount(3);
    const { requestId } = await collectedAgainPastDeadline(payer, 1565, false);
    const held = await orderOf(requestId);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toMatch(/which the ledger has indexed past without it/);
  });

  it("x402: past the deadline, a payment the service's node does not show back goes to an operator", async () => {
    const payer = hardhatAccount(3);
    const before = await usdc(payer.address);
    const paid = await reorganisedAway(() => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1570 })));
    expect(paid).toMatchObject({ status: "SUCCESS" });
    await mine();
    // Lost, and not collected again since (its facilitator does not answer): the deadline passes.
    const silent = { CELO: { settle: async () => Promise.reject(new Error("connect ECONNREFUSED")) } } as unknown as typeof service.flow.facilitators;
    await expect.poll(async () => (await watchPayments({ ...service.flow, facilitators: silent }).catch(() => 0), (await service.flow.watches.losses()).find((l) => l.request_id === paid.request_id)?.outcome), { timeout: 30_000, interval: 250 }).toBe("RECOLLECTING");
    await service.db.query(`UPDATE payment_watch SET lost_at = now() - interval '20 minutes', attempted_at = now() - interval '1 minute' WHERE request_id = $1`, [paid.request_id]);
    await watchPayments(service.flow);
    expect((await orderOf(paid.request_id)).status).toBe("NEEDS_REVIEW");
    expect((await orderOf(paid.request_id)).failureReason).toMatch(/not collected again within 600 s/);
    expect(await usdc(payer.address)).toBe(before);
  });

  // Last: it moves the chain's clock three days on.
  it("x402: an authorization that expired before it could be submitted again sends the order to an operator; the payer is not charged", async () => {
    const payer = hardhatAccount(9);
    const before = await usdc(payer.address);
    const reviews = () => metric('billpay_lost_payment_outcomes_total{chain="CELO",rail="authorization",outcome="review"}');
    const reviewsBefore = await reviews();
    const paid = await reorganisedAway(() => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 })));
    expect(paid).toMatchObject({ status: "SUCCESS" });
    await rpc("evm_increaseTime", [3 * 86_400]); // past the authorization (a quote lives a day)
    await mine();

    const loss = await watchUntil(paid.request_id, "REVIEW");
    expect(loss.detail).toContain("expired");
    expect((await orderOf(paid.request_id)).status).toBe("NEEDS_REVIEW");
    expect(await usdc(payer.address)).toBe(before);
    expect(await reviews()).toBe(reviewsBefore + 1);
  });

});
