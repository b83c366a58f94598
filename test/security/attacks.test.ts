/**
 * The service tried as a stranger with a wallet and a few units would try it, against the
 * real local stack (chains, ledger, facilitator, biller sandbox): mismatched, reused, forged,
 * late and withdrawn payments. Each attack ends with the attacker no richer than it began,
 * nothing vended that the chain does not show paid in full, and, at the end, an audit of
 * ledger and orders with no discrepancy.
 */
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from "@x402/core/http";
import { x402Bill } from "../support/bills.ts";
import type { PaymentRequirements } from "@x402/core/types";
import { keccak256, parseUnits, toBytes, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomNonce } from "../../lib/eip3009.ts";
import { orderProofMessage } from "../../lib/order-proof.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { ServiceError } from "../../server/errors.ts";
import { reconcileAuthorizationPayments } from "../../server/orders/ledger-pass.ts";
import { startPullOrders } from "../../server/orders/pull-flow.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { closeExpiredRefusals } from "../../server/orders/x402-flow.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { legacyPlan } from "../../server/biller/catalogue/plans.ts";
import { chainActors, type ChainActors, type SignedAuthorization } from "../support/actors.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Body = Record<string, unknown>;
type Problem = { code: string; detail: string; status: number };

describe("attacks on the money paths", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let ledger: SharedPayingStack["ledger"];
  let celo: ChainActors;
  let url: string;
  const attacker = accounts(12);
  const victim = accounts(13);
  const agentWallet = accounts(14);
  const started = new Map<string, bigint>();

  const bill = (wallet: Hex, extra: Body = {}): Body => x402Bill(wallet, extra);
  const electricity = (wallet: Hex, meter: string, nairaAmount: number): Body =>
    bill(wallet, { serviceID: "ikeja-electric", serviceCategory: "ELECTRICITY", network: "IKEJA", billersCode: meter, variation_code: "prepaid", nairaAmount });
  const post = (body: Body, headers: Record<string, string> = {}, base = url) =>
    fetch(`${base}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const ledgerAtHead = async () => waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());

  /** The bill's 402 requirements, as a client reads them. */
  async function required(body: Body): Promise<{ accepted: PaymentRequirements; resource: { url: string; description: string; mimeType: string } }> {
    const res = await post(body);
    expect(res.status).toBe(402);
    const r = decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED")!);
    return { accepted: r.accepts[0]!, resource: r.resource as { url: string; description: string; mimeType: string } };
  }
  /** A PAYMENT-SIGNATURE header around a signed authorization (the x402 v2 wire format). */
  function header(auth: SignedAuthorization, req: Awaited<ReturnType<typeof required>>, signature: Hex = auth.signature) {
    const payload = {
      x402Version: 2 as const,
      resource: req.resource,
      accepted: req.accepted,
      payload: {
        authorization: {
          from: auth.from,
          to: auth.to,
          value: auth.value.toString(),
          validAfter: auth.validAfter.toString(),
          validBefore: auth.validBefore.toString(),
          nonce: auth.nonce,
        },
        signature,
      },
    };
    return { "PAYMENT-SIGNATURE": encodePaymentSignatureHeader(payload) };
  }
  const now = () => BigInt(Math.floor(Date.now() / 1000));
  const orderOf = (auth: SignedAuthorization) => service.flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), auth.from, auth.nonce);
  /** Whether the order's payment is watched for reorganisations (orders/payment-watch.ts): a row until it is final. */
  const watchedPayment = async (requestId: string) => (await service.db.query(`SELECT 1 FROM payment_watch WHERE request_id = $1`, [requestId])).length === 1;
  /** The worker's passes, as the running service makes them. */
  async function workerPasses() {
    await ledgerAtHead();
    for (let i = 0; i < 2; i++) {
      await workOnce(service.flow);
      await reconcileAuthorizationPayments(service.flow);
      await closeExpiredRefusals(service.flow);
    }
  }

  /**
   * Runs the worker's passes until the order reaches `status`: a payment lands, the ledger
   * indexes it, and a later pass acts on it, each at its own pace.
   */
  async function passesUntil(auth: SignedAuthorization, status: string) {
    await expect
      .poll(
        async () => {
          await workerPasses();
          return (await orderOf(auth))?.status;
        },
        { timeout: 15_000, interval: 200 },
      )
      .toBe(status);
  }

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts, { LEDGER_WAIT_MS: "4000" });
    ({ service, ledger } = paying);
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
    for (const who of [attacker, victim, agentWallet]) started.set(who.address, await usdc(who.address));
  });
  afterAll(() => paying?.close());

  it("1. a small payment under a full authorization's nonce: the full one is refused at intake, the small one held for an operator; nothing vended, nothing refunded", async () => {
    for (const [meter, expectVend] of [
      [SANDBOX_NUMBERS.prepaidMeter, "would have vended"],
      ["9999999999999", "would have refunded the full amount"],
    ] as const) {
      const body = electricity(attacker.address, meter, 20_000);
      const req = await required(body);
      const nonce = randomNonce();
      const full = await celo.signAuthorization(attacker, "USDC", BigInt(req.accepted.amount), celo.billPay, { nonce });
      const oneUnit = await celo.signAuthorization(attacker, "USDC", 1n, celo.billPay, { nonce });
      await celo.submitAuthorization("USDC", oneUnit);
      await ledgerAtHead();
      const before = await usdc(attacker.address);

      const res = await post(body, header(full, req));
      const result = (await res.json()) as Body;
      expect(res.status, expectVend).toBe(402);
      expect(result).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false });
      expect(result.detail).toMatch(/a payment of 1 \(not this authorization's \d+\) already reached BillPay under its nonce/);
      expect(result.purchased_code ?? null).toBeNull();
      await workerPasses();
      expect(await orderOf(full)).toBeUndefined();
      expect(await usdc(attacker.address)).toBe(before);
      await ledgerAtHead(); // a refund the passes sent would be indexed by now
      const onLedger = (await (await fetch(`${ledger.url}/ledger/authorizations/42220/${celo.tokenAddress("USDC")}/${attacker.address}/${nonce}`)).json()) as {
        refunds: unknown[];
      };
      expect(onLedger.refunds).toEqual([]);
    }
  });

  it("2. a fixed-price plan is priced at the plan, or refused before any challenge or pull", async () => {
    const cases: Array<[Body, number, string]> = [
      [bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-100mb-1000", nairaAmount: 50 }), 422, "PLAN_AMOUNT_MISMATCH"],
      [bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-data-999999", nairaAmount: 50 }), 422, "PLAN_UNKNOWN"],
      // No plan costs the amount, or the biller prices the named code twice: no price to hold the bill to.
      [bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", nairaAmount: 1234 }), 422, "PLAN_REQUIRED"],
      [bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-xtratalk-300", nairaAmount: 200 }), 422, "PLAN_AMBIGUOUS"],
      [bill(attacker.address, { serviceID: "no-such-telco" }), 422, "SERVICE_UNKNOWN"],
      [bill(attacker.address, { nairaAmount: 10 }), 422, "AMOUNT_OUT_OF_RANGE"],
    ];
    for (const [body, status, code] of cases) {
      const res = await post(body);
      expect(res.status, code).toBe(status);
      expect(((await res.json()) as Problem).code).toBe(code);
    }
    const mismatch = (await (await post(cases[0]![0])).json()) as Body;
    expect(mismatch.plan_amount).toBe(1000);
    // At its own price the plan is quoted: 1000 NGN at 1550/USD = 0.645162 USD (+ fees), never
    // the 0.05 minimum; named, or found by its price in a bill of the interface's eight fields.
    const right = await required(bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-100mb-1000", nairaAmount: 1000 }));
    expect(BigInt(right.accepted.amount)).toBeGreaterThan(645_000n);
    const byPrice = await required(bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", nairaAmount: 1000 }));
    expect(byPrice.accepted.amount).toBe(right.accepted.amount);

    // The biller raises a plan's price after the catalogue was cached: the bill is vended at
    // the cached price, and the biller's own figure for it is flagged for operators.
    const { BILLER_API_KEY, BILLER_SECRET_KEY } = service.config;
    const repriced = await fetch(`${service.urls.biller}/sandbox/variations/mtn-data/mtn-10mb-100`, {
      method: "POST",
      headers: { "content-type": "application/json", "api-key": BILLER_API_KEY, "secret-key": BILLER_SECRET_KEY },
      body: JSON.stringify({ variation_amount: 120 }),
    });
    expect(repriced.status).toBe(200);
    const dataBill = bill(victim.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-10mb-100", nairaAmount: 100 });
    const dataReq = await required(dataBill);
    const dataAuth = await celo.signAuthorization(victim, "USDC", BigInt(dataReq.accepted.amount), celo.billPay, { validBefore: now() + 600n });
    expect(((await (await post(dataBill, header(dataAuth, dataReq))).json()) as Body).status).toBe("SUCCESS");
    expect(await orderOf(dataAuth)).toMatchObject({ status: "SUCCESS", billerAmount: "120", flag: expect.stringContaining("charged 120") });
    // That answer makes the next bill read the product's plans afresh: the old price is sold no more.
    const stale = await post(bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-10mb-100", nairaAmount: 100 }));
    expect(await stale.json()).toMatchObject({ code: "PLAN_AMOUNT_MISMATCH", plan_amount: 120 });
    expect((await required(bill(attacker.address, { serviceID: "mtn-data", serviceCategory: "DATA", variation_code: "mtn-10mb-100", nairaAmount: 120 }))).accepted).toBeDefined();

    // The agent rail checks the same catalogue before it creates an order or pulls.
    const link = { wallet: agentWallet.address, approvedChain: "CELO" as const, approvedToken: "USDC" as const, channel: "MCP", linkedAt: new Date(), apiKeyHash: "00" };
    const before = await service.db.query(`SELECT count(*)::int AS n FROM bill_order`);
    await expect(
      service.hub.payBill(link, { serviceID: "mtn-data", serviceCategory: "DATA", network: "MTN", billersCode: "08011111111", variation_code: "mtn-100mb-1000", nairaAmount: 50 }),
    ).rejects.toMatchObject({ code: "PLAN_AMOUNT_MISMATCH" });
    expect(await service.db.query(`SELECT count(*)::int AS n FROM bill_order`)).toEqual(before);
  });

  it("3. what a stranger reads from the chain gets them no order: no id in refusals, no code without proof", async () => {
    // The victim pays for an electricity token.
    const body = electricity(victim.address, SANDBOX_NUMBERS.prepaidMeter, 3000);
    const req = await required(body);
    const auth = await celo.signAuthorization(victim, "USDC", BigInt(req.accepted.amount), celo.billPay, { validBefore: now() + 600n });
    const paid = (await (await post(body, header(auth, req))).json()) as Body & { request_id: string; order_secret: string; purchased_code: string };
    expect(paid).toMatchObject({ status: "SUCCESS", purchased_code: expect.stringMatching(/^\d{20}$/), order_secret: expect.stringMatching(/^ors_/) });

    // The stranger copies (from, nonce) from the chain, with a junk signature, for another bill and for the same bill.
    const junk = `0x${"11".repeat(65)}` as Hex;
    for (const forged of [electricity(victim.address, SANDBOX_NUMBERS.prepaidMeter, 2500), body]) {
      const res = await post(forged, header(auth, req, junk));
      const text = await res.text();
      expect(res.status).toBe(402);
      expect(JSON.parse(text).code).toBe("PAYMENT_ALREADY_USED");
      expect(text).not.toContain(paid.request_id);
      expect(text).not.toContain(paid.purchased_code);
    }
    // A fresh nonce with a junk signature is refused before anything is locked.
    const fresh = { ...auth, nonce: randomNonce() };
    const refused = await post(body, header(fresh, req, junk));
    expect(refused.status).toBe(402);
    expect(((await refused.json()) as Body).code).toBe("SIGNATURE_INVALID");
    expect(await orderOf(fresh)).toBeUndefined();

    // The order route: where it stands for anyone, the code only with proof.
    const orderUrl = `${url}/api/orders/${paid.request_id}`;
    const open = (await (await fetch(orderUrl)).json()) as Body;
    expect(open).toMatchObject({ status: "SUCCESS", purchased_code: null, purchased_code_withheld: true });
    const wrong = await fetch(orderUrl, { headers: { authorization: "Bearer ors_notthesecretnotthesecretnotthes" } });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as Problem).code).toBe("ORDER_PROOF_INVALID");
    const proven = (await (await fetch(orderUrl, { headers: { authorization: `Bearer ${paid.order_secret}` } })).json()) as Body;
    expect(proven.purchased_code).toBe(paid.purchased_code);
    // The very payment, signature included, is public on chain once settled: a replay of it
    // gets where the order stands, and the code only with a proof.
    const replay = (await (await post(body, header(auth, req))).json()) as Body;
    expect(replay).toMatchObject({ request_id: paid.request_id, status: "SUCCESS", purchased_code: null, purchased_code_withheld: true });
    expect(replay.order_secret).toBeUndefined();
    const provenReplay = (await (await post(body, { ...header(auth, req), authorization: `Bearer ${paid.order_secret}` })).json()) as Body;
    expect(provenReplay.purchased_code).toBe(paid.purchased_code);
    // A payer whose paying response was lost proves itself with its wallet's signature.
    const signed = async (who: typeof victim, at = String(Date.now())) => ({
      "x-wallet-signature": await who.signMessage!({ message: orderProofMessage(paid.request_id, at) }),
      "x-wallet-timestamp": at,
    });
    expect(((await (await post(body, { ...header(auth, req), ...(await signed(victim)) })).json()) as Body).purchased_code).toBe(paid.purchased_code);
    expect(((await (await fetch(orderUrl, { headers: await signed(victim) })).json()) as Body).purchased_code).toBe(paid.purchased_code);
    // Another wallet's signature, or the payer's from long ago, proves nothing.
    for (const headers of [await signed(attacker), await signed(victim, String(Date.now() - 3_600_000))]) {
      const res = await fetch(orderUrl, { headers });
      expect(res.status).toBe(401);
      expect(await res.text()).not.toContain(paid.purchased_code);
    }
  });

  it("4. an authorization that cannot settle yet is refused before any order exists; a refused payment that lands later is refunded exactly once", async () => {
    // (a) Not valid yet: any wallet, even an empty one, can sign one, so it is rejected
    // before any order exists or any facilitator is asked: nothing to work later.
    const body = bill(attacker.address, { nairaAmount: 1240 });
    const req = await required(body);
    const early = await celo.signAuthorization(attacker, "USDC", BigInt(req.accepted.amount), celo.billPay, { validAfter: now() + 2n, validBefore: now() + 600n });
    const before = await usdc(attacker.address);
    const res = await post(body, header(early, req));
    expect(res.status).toBe(402);
    expect(((await res.json()) as Body).code).toBe("AUTHORIZATION_NOT_YET_VALID");
    expect(await orderOf(early)).toBeUndefined();
    // Its signature is the payer's, so the refusal is kept: whoever lands it anyway meets a
    // payment the service refunds on chain by itself, never serves, and leaves to nobody.
    await new Promise((r) => setTimeout(r, 3_000));
    await celo.submitAuthorization("USDC", early);
    expect(await usdc(attacker.address)).toBe(before - early.value);
    await passesUntil(early, "REFUNDED");
    expect((await orderOf(early))!.lateRefund).toBe(true);
    // Its payment is watched as every confirmed one is (a reorganisation taking it and its refund is met, not missed); before, none was.
    expect(await watchedPayment((await orderOf(early))!.requestId)).toBe(true);
    // Less what pays for the refund's gas: the service never sent it, so landing it costs its lander that.
    expect(await usdc(attacker.address)).toBe(before - parseUnits(service.config.LATE_LANDING_FEE, 6));
    const afterEarly = await usdc(attacker.address);

    // (b) A facilitator that answers "failed" while its transaction is still on its way.
    let held: SignedAuthorization | undefined;
    const flaky = {
      verify: async () => ({ isValid: true, payer: attacker.address }),
      settle: async () => ({ success: false, errorReason: "timeout", transaction: "", network: "eip155:42220" as const }),
      supported: async () => ({ kinds: [], extensions: [], signers: {} }),
    };
    const app = createApp({
      config: loadConfig({ LOG_REQUESTS: "0", WORKER_GRACE_SECONDS: "0" }),
      db: service.db,
      deployments: paying.chains.deployments,
      rates: new ConfiguredRate(1_550_000n),
      flow: { ...service.flow, facilitators: { CELO: flaky as never } },
    });
    const body2 = bill(attacker.address, { nairaAmount: 1250 });
    const req2 = await required(body2);
    held = await celo.signAuthorization(attacker, "USDC", BigInt(req2.accepted.amount), celo.billPay, { validBefore: now() + 600n });
    const res2 = await app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...header(held, req2) }, body: JSON.stringify(body2) });
    expect(res2.status).toBe(402);
    expect(((await res2.json()) as Problem).code).toBe("PAYMENT_NOT_SETTLED");
    await celo.submitAuthorization("USDC", held); // the "failed" transaction lands after all
    await passesUntil(held, "REFUNDED");
    expect(await watchedPayment((await orderOf(held))!.requestId)).toBe(true);
    expect(await usdc(attacker.address)).toBe(afterEarly);

    // (c) About to expire: rejected before anything is stored, and it can no longer land once expired.
    const body3 = bill(attacker.address, { nairaAmount: 1260 });
    const req3 = await required(body3);
    const expiring = await celo.signAuthorization(attacker, "USDC", BigInt(req3.accepted.amount), celo.billPay, { validBefore: now() + 3n });
    const res3 = await post(body3, header(expiring, req3));
    expect(res3.status).toBe(402);
    expect(((await res3.json()) as Body).code).toBe("AUTHORIZATION_EXPIRES_TOO_SOON");
    expect(await orderOf(expiring)).toBeUndefined();
    await new Promise((r) => setTimeout(r, 4_000));
    await celo.publicClient.request({ method: "evm_mine" as never, params: [] as never });
    await expect(celo.submitAuthorization("USDC", expiring)).rejects.toThrow();
    expect(await usdc(attacker.address)).toBe(afterEarly);
  });

  it("a payment its payer landed before offering it cannot be claimed by a stranger naming his own bill: it pays for no bill, and is refunded to its payer, less the refund's gas", async () => {
    const before = await usdc(victim.address);
    const body = bill(victim.address, { nairaAmount: 1270 });
    const req = await required(body);
    const auth = await celo.signAuthorization(victim, "USDC", BigInt(req.accepted.amount), celo.billPay, { validBefore: now() + 600n });
    await celo.submitAuthorization("USDC", auth); // the payer's own relayer was faster: its calldata is public now
    await ledgerAtHead();
    // The attacker copies the landed authorization and names his own bill at the same price
    // (another number, the payer's wallet, as the authorization's `from` must be).
    const theirs = bill(victim.address, { nairaAmount: 1270, billersCode: "08022222222" });
    const copied = await post(theirs, header(auth, await required(theirs)));
    expect(copied.status).toBe(402);
    expect(await copied.json()).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false, landed_tx: expect.stringMatching(/^0x/), detail: expect.stringContaining("refunded to its payer") });
    // Offered by its payer for his own bill, it pays for none either: whoever offers it is no proof.
    const own = await post(body, header(auth, req));
    expect(own.status).toBe(402);
    expect(((await own.json()) as Body).code).toBe("PAYMENT_NONCE_SPENT");
    expect(await orderOf(auth)).toBeUndefined();
    // The ledger pass refunds exactly it to its payer, once, with no operator; nothing was vended.
    await workerPasses();
    const refunded = await orderOf(auth);
    expect(refunded).toMatchObject({ status: "REFUNDED", purchasedCode: null, amount: auth.value });
    // Less what pays for the refund's gas: the service never sent it (orders/late-landing.ts).
    const lateFee = parseUnits(service.config.LATE_LANDING_FEE, 6);
    expect(await usdc(victim.address)).toBe(before - lateFee);
    const orphans = ((await (await fetch(`${url}/ops/orphans`)).json()) as { payments: Array<{ auth_nonce: string }> }).payments.map((o) => o.auth_nonce);
    expect(orphans).not.toContain(auth.nonce.toLowerCase());
    await workerPasses();
    expect(await usdc(victim.address)).toBe(before - lateFee);
  });

  it("a retired key or a cancelled schedule never pays", async () => {
    await celo.approveAndAllow(agentWallet, "USDC", 10_000_000n);
    const before = await usdc(agentWallet.address);
    const tokenAddress = celo.tokenAddress("USDC");
    const retiredBill = { ...bill(agentWallet.address) } as never;
    const priced = { bill: retiredBill, bodyHash: keccak256(toBytes(`retired-${Date.now()}`)), amount: 1_001_000n, vend: legacyPlan(retiredBill) };
    // A key no link holds any more (a re-link retired it after the call was authenticated).
    await expect(
      startPullOrders(service.flow, { wallet: agentWallet.address, chain: "CELO", token: "USDC", tokenAddress, bills: [priced], batch: false, guard: { apiKeyHash: "ab".repeat(32) } }),
    ).rejects.toMatchObject({ code: "API_KEY_RETIRED" });
    // A run claimed before its schedule was cancelled.
    const schedules = service.hub.deps.schedules;
    const s = await schedules.create({
      wallet: agentWallet.address,
      bill: { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 1550 },
      chain: "CELO",
      token: "USDC",
      runAt: new Date(Date.now() + 60_000),
      cron: null,
      firstRun: new Date(Date.now() + 60_000),
      maxRuns: 1,
      maxPerWallet: 50,
      apiKeyHash: null,
    });
    await schedules.cancel(agentWallet.address, s.id);
    const link = { wallet: agentWallet.address, approvedChain: "CELO" as const, approvedToken: "USDC" as const, channel: "SCHEDULE", linkedAt: new Date() };
    await expect(service.hub.payBill(link, s.bill, { scheduleId: s.id, idempotencyKey: `${s.id}@claimed` })).rejects.toBeInstanceOf(ServiceError);
    await expect(service.hub.payBill(link, s.bill, { scheduleId: s.id, idempotencyKey: `${s.id}@again` })).rejects.toMatchObject({ code: "SCHEDULE_NOT_ACTIVE" });
    const orders = await service.db.query<{ status: string; tx_hash: string | null }>(`SELECT status, tx_hash FROM bill_order WHERE payer = $1`, [agentWallet.address.toLowerCase()]);
    expect(orders.length).toBe(3);
    expect(orders.every((o) => o.status === "PAYMENT_FAILED" && o.tx_hash === null)).toBe(true);
    expect(await usdc(agentWallet.address)).toBe(before);
  });

  it("after the attacks: no wallet is richer, and the audit of ledger and orders finds no discrepancy", async () => {
    await workerPasses();
    for (const [who, start] of started) expect(await usdc(who as Hex), who).toBeLessThanOrEqual(start);
    const report = await auditOnSharedChains(paying, { url });
    expect(report.discrepancies).toEqual([]);
    expect(report.orders!.ordersChecked).toBeGreaterThanOrEqual(6);
    // The two small payments of attack 1 wait for an operator (the service holds no signature
    // for them); the not-yet-valid authorization of attack 4, landed though it had been
    // refused, was refunded by the service, and no order waits for anyone.
    const orphans = report.orders!.review.filter((r) => r.includes("has no order"));
    expect(orphans).toHaveLength(2);
    for (const o of orphans) expect(o.toLowerCase()).toContain(attacker.address.toLowerCase());
    expect(report.orders!.review.filter((r) => r.includes("NEEDS_REVIEW") && !r.includes("has no order"))).toHaveLength(0);
    // And the bill the biller charged differently from its price (attack 2).
    expect(report.orders!.review.filter((r) => r.includes("the biller charged 120"))).toHaveLength(1);
    expect(report.orders!.stuck).toEqual([]);
  });
});
