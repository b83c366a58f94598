/**
 * Money safety, third round, against the real local stack (Hardhat chain, Ponder ledger,
 * facilitator, biller sandbox), played the way a stranger with a wallet and a few units plays
 * it. Each case ends on balances and on what stays open, and the audit ends clean:
 *   - a payment the payer landed himself, refunded by hand, offered again: pays for nothing;
 *   - a payment landed by its payer before it was offered: pays for no bill (anyone could
 *     copy it from the chain and name his own), refunded to him on chain by the ledger pass,
 *     its orphan claimed by that refund so an operator cannot also refund it by hand;
 *   - authorizations whose nonce is spent (EIP-3009 cancelled): refused at intake, no order,
 *     no facilitator call, counted against the payer;
 *   - an honest payment refused as not yet valid and landed later: refunded with no operator,
 *     once its payment is as deep as a bill is vended on; junk is not kept, and what is kept
 *     is bounded per payer;
 *   - recycled stakes (fresh wallets landing refused payments): late refunds take the late
 *     slice only, and an honest failed bill is refunded at once meanwhile;
 *   - the biller's webhook for an earlier attempt: requeried by that attempt's own id; a late
 *     delivery is recorded, alerted and its code given to the payer; never refunded twice;
 *   - receipts are signed only for a payment the chain confirmed;
 *   - an orphan closes as refunded by hand only once held, and only with a transfer from BillPay
 *     or its admin that is no refund of another order.
 */
import { encodePaymentSignatureHeader, x402HTTPClient } from "@x402/core/http";
import type { PaymentPayload } from "@x402/core/types";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { parseUnits, type Account, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomNonce } from "../../lib/eip3009.ts";
import { deployerAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { waitForLedgerBlock } from "../../server/ledger-client.ts";
import { reconcileAuthorizationPayments } from "../../server/orders/ledger-pass.ts";
import { KEPT_AT_MOST_SECONDS, PER_PAYER } from "../../server/orders/refused-payments.ts";
import { resolveOrder, resolveOrphanPayment, ReviewRecords } from "../../server/orders/review.ts";
import { actOnBillerState, fulfil } from "../../server/orders/fulfil.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { closeExpiredRefusals } from "../../server/orders/x402-flow.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors, type ChainActors, type SignedAuthorization } from "../support/actors.ts";
import { PENDING_NUMBER, x402Bill } from "../support/bills.ts";
import { lockAsCrashedRequest } from "../support/orders.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { paymentHeader, requirementsOf, type Required } from "../support/x402-wire.ts";
import { metricSum } from "../support/metrics.ts";

type Body = Record<string, unknown>;
const USDC = (n: number) => BigInt(Math.round(n * 1_000_000));

describe("money safety, third round", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;
  const admin = deployerAccount(); // BillPay's admin on the set

  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  /** What a kept refusal's refund keeps back for its gas (LATE_LANDING_FEE), in USDC's units. */
  const lateFee = () => parseUnits(service.config.LATE_LANDING_FEE, 6);
  const airtime = (payer: Account, phone: string, nairaAmount: number) => x402Bill(payer.address, { billersCode: phone, nairaAmount });
  const now = () => BigInt(Math.floor(Date.now() / 1000));
  const ledgerAtHead = async () => waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());
  const orderCount = async () => Number((await service.db.query<{ n: string }>(`SELECT count(*)::text AS n FROM bill_order`))[0]!.n);
  const metric = (name: string) => metricSum(url, name);
  const keys = () => ({ "api-key": service.config.BILLER_API_KEY, "secret-key": service.config.BILLER_SECRET_KEY });
  const sandbox = async (billerRequestId: string, action: string, body: Body = {}, query = "") => {
    const res = await fetch(`${service.urls.biller}/sandbox/transactions/${billerRequestId}/${action}${query}`, { method: "POST", headers: { ...keys(), "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(res.status, await res.clone().text()).toBe(200);
  };
  const attemptsOf = (requestId: string) =>
    service.db.query<{ biller_request_id: string; attempt: number; outcome: string | null }>(`SELECT biller_request_id, attempt, outcome FROM biller_attempt WHERE request_id = $1 ORDER BY attempt`, [requestId]);
  const orderOf = async (requestId: unknown) => (await service.flow.orders.get(requestId as string))!;

  /** The bill's 402 requirements, as a client reads them. */
  async function required(body: Body): Promise<Required> {
    const res = await post(body);
    expect(res.status).toBe(402);
    return requirementsOf(res);
  }
  /** The bill's requirements, and an authorization of its price valid only from a few seconds on (refused as not yet valid, kept). */
  async function notYetValid(payer: Account, body: Body) {
    const req = await required(body);
    const soon = await celo.signAuthorization(payer, "USDC", BigInt(req.accepted.amount), celo.billPay, { validAfter: now() + 3n, validBefore: now() + 300n });
    return { req, soon };
  }
  /** Until `auth` is valid by the chain's clock too (a block's second past its start). */
  async function untilValid(auth: SignedAuthorization) {
    await expect.poll(() => now() > auth.validAfter, { timeout: 10_000 }).toBe(true);
    await new Promise((r) => setTimeout(r, 1_100));
  }
  /** A PAYMENT-SIGNATURE header around a signed authorization (the x402 v2 wire format). */
  const header = paymentHeader;
  /** The official client's payment for a bill: its header and the authorization inside it. */
  async function clientPayment(payer: Account, body: Body) {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload: PaymentPayload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const p = payload.payload as { authorization: Record<string, string>; signature: Hex };
    const auth: SignedAuthorization = {
      from: p.authorization.from as Hex,
      to: p.authorization.to as Hex,
      value: BigInt(p.authorization.value!),
      validAfter: BigInt(p.authorization.validAfter!),
      validBefore: BigInt(p.authorization.validBefore!),
      nonce: p.authorization.nonce as Hex,
      signature: p.signature,
    };
    return { headers: client.encodePaymentSignatureHeader(payload), auth, payload };
  }
  /** The worker's passes, as the running service makes them, after the ledger caught up. */
  async function passes(n = 2) {
    await ledgerAtHead();
    for (let i = 0; i < n; i++) {
      await workOnce(service.flow);
      await reconcileAuthorizationPayments(service.flow);
      await closeExpiredRefusals(service.flow);
    }
  }
  const ordersUnder = (auth: SignedAuthorization) => service.flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), auth.from, auth.nonce);
  const orphanOf = async (auth: SignedAuthorization) =>
    (await service.db.query<{ status: string }>(`SELECT status FROM orphan_payment WHERE payer = $1 AND auth_nonce = $2`, [auth.from.toLowerCase(), auth.nonce.toLowerCase()]))[0]?.status;
  /** A wallet of its own, funded with `units` of USDC (and gas) or nothing. */
  async function freshWallet(units = 0n) {
    const account = privateKeyToAccount(generatePrivateKey());
    await celo.publicClient.request({ method: "hardhat_setBalance" as never, params: [account.address, "0x56BC75E2D63100000"] as never });
    if (units > 0n) await celo.transfer(admin, "USDC", account.address, units);
    return account;
  }

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(
      accounts,
      {
        REFUND_BUDGET_CACHE_MS: "0",
        REFUND_PAYER_SHARE_PERCENT: "25",
        REFUND_LATE_SLICE_PERCENT: "20",
        BILLER_UNKNOWN_GRACE_MS: "0",
        RATE_LIMIT_UNSETTLED_PAYER: "10/600",
        LEDGER_WAIT_MS: "4000",
      },
      // Pending until the test resolves it; it sets USDC's refund budget, and close gives every budget back as lent.
      { sandbox: { pendingRequeries: 1_000 }, restoresBudgets: true },
    );
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
    // The admin holds USDC to fund fresh wallets (the deployer is not among the funded accounts).
    await celo.transfer(accounts(19), "USDC", admin.address, USDC(100));
  });
  afterAll(async () => {
    await paying?.close();
  });

  // First: the late slice sums a day of late refunds, and later cases make some.
  it("recycled stakes: fresh wallets landing refused payments take only the late slice, and an honest failed bill is refunded at once meanwhile", async () => {
    // 4 USDC a day: a payer's share 1 USDC, the late slice 0.8 USDC.
    await celo.setRefundBudget("USDC", USDC(4), 86_400n);
    // A bill above one payer's share is refused before anything is signed.
    const big = await post(airtime(accounts(9), SANDBOX_NUMBERS.phone, 1700));
    expect(big.status).toBe(422);
    expect(await big.json()).toMatchObject({ code: "BILL_ABOVE_REFUND_LIMIT", refund_limit: USDC(1).toString() });

    // Three fresh wallets sign with no balance (refused: the facilitator cannot settle), then are funded and land it themselves.
    const stakes: Array<{ wallet: Account; auth: SignedAuthorization }> = [];
    for (let i = 0; i < 3; i++) {
      const wallet = await freshWallet();
      const body = airtime(wallet, SANDBOX_NUMBERS.phone, 1000 + i);
      const { headers, auth } = await clientPayment(wallet, body);
      const refused = await post(body, headers);
      expect(refused.status, await refused.clone().text()).toBe(402);
      expect((await ordersUnder(auth))!.status).toBe("REFUSED");
      await celo.transfer(admin, "USDC", wallet.address, auth.value);
      await celo.submitAuthorization("USDC", auth);
      stakes.push({ wallet, auth });
    }
    await passes();
    const states = await Promise.all(stakes.map(async (s) => (await ordersUnder(s.auth))!));
    // The first takes the empty late slice; the others wait, drawing nothing from honest refunds' room.
    expect(states.map((o) => o.status).sort()).toEqual(["REFUNDED", "REFUNDING", "REFUNDING"]);
    expect(states.every((o) => o.lateRefund)).toBe(true);

    // An honest payer's failed bill, meanwhile: refunded at once.
    const honest = accounts(10);
    const start = await usdc(honest.address);
    const { headers } = await clientPayment(honest, airtime(honest, "08099999999", 1001));
    const paid = (await (await post(airtime(honest, "08099999999", 1001), headers)).json()) as Body;
    await passes(1);
    expect((await orderOf(paid.request_id)).status).toBe("REFUNDED");
    expect(await usdc(honest.address)).toBe(start);
    // The budget back as the stack lent it, full: the cases after this one start from it.
    const quick = await celo.setRefundBudget("USDC", USDC(5_000), 1n);
    const setAt = (await celo.publicClient.getBlock({ blockNumber: quick.blockNumber })).timestamp;
    await expect.poll(async () => (await celo.publicClient.getBlock()).timestamp > setAt, { timeout: 15_000 }).toBe(true);
    await celo.setRefundBudget("USDC", USDC(5_000), 86_400n);
  });

  it("a payment its payer landed himself, refunded by hand, then offered for a bill: pays for nothing, is not refunded twice, and nothing is vended", async () => {
    const payer = accounts(3);
    const start = await usdc(payer.address);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1601);
    const { headers, auth } = await clientPayment(payer, body);
    await celo.submitAuthorization("USDC", auth); // he lands it himself, with no order
    await passes();
    expect(await orphanOf(auth)).toBe("NEEDS_REVIEW");
    // He asks for it back. The operator holds it, the admin returns it from BillPay.
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const key = { chain: "CELO", token_address: celo.tokenAddress("USDC"), payer: payer.address, auth_nonce: auth.nonce, operator: "alice" };
    expect((await resolveOrphanPayment(review, { ...key, action: "hold", reason: "asked back" })).record.outcome).toBe("DONE");
    const back = await celo.withdraw("USDC", payer.address, auth.value);
    expect(await usdc(payer.address)).toBe(start);
    // Before the operator records it, he offers the landed authorization for a bill: refused,
    // and no refund of it is kept (BillPay's withdraw marks no key refunded, so the chain would
    // let the service refund it again through refundAuthorization).
    const meanwhile = await post(body, headers);
    expect(meanwhile.status).toBe(402);
    expect(await meanwhile.json()).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false, detail: expect.stringContaining("an operator is refunding it by hand") });
    expect(await service.db.query(`SELECT 1 FROM refused_payment WHERE payer = $1 AND auth_nonce = $2`, [payer.address.toLowerCase(), auth.nonce.toLowerCase()])).toEqual([]);
    await passes();
    expect(await usdc(payer.address)).toBe(start);
    expect(await orphanOf(auth)).toBe("REFUNDING_BY_HAND");
    const closed = await resolveOrphanPayment(review, { ...key, reason: "returned on request", refundTxHash: back.transactionHash });
    expect(closed.record.outcome).toBe("DONE");
    expect(await usdc(payer.address)).toBe(start);

    // The same authorization, now with the bill: refused at intake; no order, nothing vended.
    const orders = await orderCount();
    const offered = await post(body, headers);
    expect(offered.status).toBe(402);
    expect(await offered.json()).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false, detail: expect.stringContaining("an operator has settled it") });
    expect(await orderCount()).toBe(orders);
    expect(await ordersUnder(auth)).toBeUndefined();
    await passes();
    expect(await orphanOf(auth)).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start);
  });

  it("a payment landed by its payer before it was offered pays for no bill: it is refunded to him on chain less the refund's gas, and its orphan is claimed by that refund so an operator cannot also refund it by hand", async () => {
    const payer = accounts(4);
    const start = await usdc(payer.address);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1602);
    const { headers, auth } = await clientPayment(payer, body);
    const openBefore = await metric("billpay_orphan_payments_open");
    await celo.submitAuthorization("USDC", auth); // his own relayer was faster than the service
    await passes();
    expect(await orphanOf(auth)).toBe("NEEDS_REVIEW");
    expect(await metric("billpay_orphan_payments_open")).toBe(openBefore + 1);
    const orders = await orderCount();
    const offered = await post(body, headers);
    expect(offered.status).toBe(402);
    expect(await offered.json()).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false, detail: expect.stringContaining("refunded to its payer on chain, less 0.02 USDC on CELO for the refund's gas") });
    expect(await orderCount()).toBe(orders);
    // The next pass refunds it: what landed, less what pays for the refund's gas (the service
    // never sent it, and a refund costs about twice the landing's gas: landing, offering and
    // being refunded again and again costs the wallet more than the service), once, through an order of its own.
    const treasury = await usdc(celo.billPay);
    await passes();
    expect(await usdc(payer.address)).toBe(start - lateFee());
    expect(await usdc(celo.billPay)).toBe(treasury - auth.value + lateFee());
    const refund = (await ordersUnder(auth))!;
    expect(refund).toMatchObject({ status: "REFUNDED", amount: auth.value, purchasedCode: null });
    // Its payment is watched as every confirmed one is (read from the ledger: the pass had only its transaction); before, none was.
    expect(await service.db.query(`SELECT tx_hash FROM payment_watch WHERE request_id = $1`, [refund.requestId])).toEqual([{ tx_hash: refund.txHash!.toLowerCase() }]);
    expect(await orphanOf(auth)).toBe("CLAIMED");
    expect(await metric("billpay_orphan_payments_open")).toBe(openBefore); // an order holds it: nothing waits for an operator
    // The operator, asked for it back, cannot refund it by hand now: the refund's order holds it.
    const back = await celo.withdraw("USDC", payer.address, auth.value);
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const refused = await resolveOrphanPayment(review, { chain: "CELO", token_address: celo.tokenAddress("USDC"), payer: payer.address, auth_nonce: auth.nonce, reason: "asked back", operator: "alice", refundTxHash: back.transactionHash });
    expect(refused.record.outcome).toBe("REFUSED");
    await celo.transfer(payer, "USDC", celo.billPay, auth.value); // (the withdrawal above goes back to the treasury)
    // Offered again, it is the same refunded order: nothing vended, nothing charged.
    const again = await post(body, headers);
    const againBody = (await again.json()) as Body;
    expect(againBody.request_id).toBe(refund.requestId);
    // It paid for no bill: no receipt, and no settlement said to have paid for this one.
    expect(againBody.receipt).toBeUndefined();
    expect(again.headers.get("payment-response")).toBeNull();
    expect((await orderOf(refund.requestId)).status).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start - lateFee());
  });

  it("an authorization cancelled on chain is refused at intake: no order, no facilitator call, counted against the payer", async () => {
    const payer = accounts(6);
    const start = await usdc(payer.address);
    const verifies = await metric('billpay_upstream_seconds_count{upstream="facilitator",operation="verify"');
    const orders = await orderCount();
    const codes: number[] = [];
    for (let i = 0; i < 10; i++) {
      const body = airtime(payer, SANDBOX_NUMBERS.phone, 1610 + i);
      const req = await required(body);
      const auth = await celo.signAuthorization(payer, "USDC", BigInt(req.accepted.amount), celo.billPay, { nonce: randomNonce() });
      await celo.cancelAuthorization(payer, "USDC", auth.nonce);
      const res = await post(body, header(auth, req));
      codes.push(res.status);
      if (res.status === 402) expect(await res.json()).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false, detail: expect.stringContaining("with no payment to BillPay under it") });
    }
    expect(codes).toEqual(Array(10).fill(402));
    expect(await orderCount()).toBe(orders);
    expect(await metric('billpay_upstream_seconds_count{upstream="facilitator",operation="verify"')).toBe(verifies);
    expect(await usdc(payer.address)).toBe(start);
    // Each was counted against the payer's budget of payments that settle nothing (10 here): the next is refused before any work.
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1650);
    const req = await required(body);
    const next = await celo.signAuthorization(payer, "USDC", BigInt(req.accepted.amount), celo.billPay);
    const limited = await post(body, header(next, req));
    expect(limited.status).toBe(429);
    expect(await limited.json()).toMatchObject({ code: "RATE_LIMITED", detail: expect.stringContaining("payments that did not settle from this payer") });
  });

  it("an honest payment refused as not yet valid, landed later by anyone, is refunded with no operator; junk is not kept, and what is kept is bounded", async () => {
    const payer = accounts(7);
    const start = await usdc(payer.address);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1620);
    const { req, soon } = await notYetValid(payer, body);
    const refused = await post(body, header(soon, req));
    expect(refused.status).toBe(402);
    const reason = (await refused.json()) as Body;
    expect(JSON.stringify(reason)).toContain("AUTHORIZATION_NOT_YET_VALID");
    expect(JSON.stringify(reason)).toContain("it is refunded to the payer on chain");
    expect(await ordersUnder(soon)).toBeUndefined();
    // Once valid, a relayer submits it: BillPay is paid, and the service refunds it by itself.
    await untilValid(soon);
    await celo.submitAuthorization("USDC", soon);
    expect(await usdc(payer.address)).toBe(start - soon.value);
    await expect.poll(async () => (await passes(1), (await ordersUnder(soon))?.status), { timeout: 30_000, interval: 250 }).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start - lateFee());
    expect((await ordersUnder(soon))!).toMatchObject({ lateRefund: true, refundFee: lateFee() });

    // Junk (a signature that is not the payer's) is refused the same way, and not kept.
    const junk = await celo.signAuthorization(accounts(8), "USDC", BigInt(req.accepted.amount), celo.billPay, { validAfter: now() + 600n, validBefore: now() + 900n });
    const junkRes = await post(body, header({ ...junk, from: payer.address }, req));
    expect(JSON.stringify(await junkRes.json())).not.toContain("refunded to the payer");
    // So is a good signature from a wallet that holds nothing (it signs for free, and could not land it).
    const empty = await freshWallet();
    const emptyBody = airtime(empty, SANDBOX_NUMBERS.phone, 1625);
    const emptyReq = await required(emptyBody);
    const unfunded = await celo.signAuthorization(empty, "USDC", BigInt(emptyReq.accepted.amount), celo.billPay, { validAfter: now() + 600n, validBefore: now() + 900n });
    const emptyRes = JSON.stringify(await (await post(emptyBody, header(unfunded, emptyReq))).json());
    expect(emptyRes).toContain("AUTHORIZATION_NOT_YET_VALID");
    expect(emptyRes).toContain("does not hold the amount now, so it is not kept");
    expect(await service.db.query(`SELECT 1 FROM refused_payment WHERE payer = $1`, [empty.address.toLowerCase()])).toEqual([]);
    // Nor one worth no more than its refund's gas (LATE_LANDING_FEE): nothing would be left to give back.
    const small = await freshWallet(10_000_000n);
    const smallBody = airtime(small, SANDBOX_NUMBERS.phone, 1627);
    const smallReq = await required(smallBody);
    const cheap = await celo.signAuthorization(small, "USDC", BigInt(smallReq.accepted.amount), celo.billPay, { validAfter: now() + 600n, validBefore: now() + 900n });
    const fee = service.flow.lateLandingFee;
    service.flow.lateLandingFee = "1000";
    try {
      const smallRes = JSON.stringify(await (await post(smallBody, header(cheap, smallReq))).json());
      expect(smallRes).toContain("AUTHORIZATION_NOT_YET_VALID");
      expect(smallRes).toContain("worth no more than a refund's gas, so it is not kept");
    } finally {
      service.flow.lateLandingFee = fee;
    }
    expect(await service.db.query(`SELECT 1 FROM refused_payment WHERE payer = $1`, [small.address.toLowerCase()])).toEqual([]);
    // One valid for years (refused as too long) is kept for a week at most, and its payer is told so.
    const patient = await freshWallet(10_000_000n);
    const patientBody = airtime(patient, SANDBOX_NUMBERS.phone, 1626);
    const patientReq = await required(patientBody);
    const years = await celo.signAuthorization(patient, "USDC", BigInt(patientReq.accepted.amount), celo.billPay, { validBefore: now() + 10n * 365n * 86_400n });
    const yearsRes = JSON.stringify(await (await post(patientBody, header(years, patientReq))).json());
    expect(yearsRes).toContain("AUTHORIZATION_TOO_LONG");
    const keptUntil = /submitted anyway before (\S+), it is refunded to the payer on chain, less 0\.02 USDC on CELO for the refund's gas; after that, an operator must refund it/.exec(yearsRes);
    expect(keptUntil).not.toBeNull();
    const keptFor = (Date.parse(keptUntil![1]!) - Date.now()) / 1000;
    expect(keptFor).toBeGreaterThan(KEPT_AT_MOST_SECONDS - 3_600);
    expect(keptFor).toBeLessThanOrEqual(KEPT_AT_MOST_SECONDS);
    expect(await service.db.query(`SELECT 1 FROM refused_payment WHERE payer = $1`, [patient.address.toLowerCase()])).toHaveLength(1);
    // One payer's kept refusals are bounded: past PER_PAYER, refused without being kept.
    const told: boolean[] = [];
    for (let i = 0; i < PER_PAYER + 1; i++) {
      const b = airtime(payer, SANDBOX_NUMBERS.phone, 1630 + i);
      const r = await required(b);
      const a = await celo.signAuthorization(payer, "USDC", BigInt(r.accepted.amount), celo.billPay, { validAfter: now() + 600n, validBefore: now() + 900n });
      told.push(JSON.stringify(await (await post(b, header(a, r))).json()).includes("refunded to the payer on chain"));
    }
    // The one above is kept until it expires (landed and refunded or not), so PER_PAYER - 1 more are.
    expect(told).toEqual([...Array<boolean>(PER_PAYER - 1).fill(true), false, false]);
    const kept = await service.db.query(`SELECT 1 FROM refused_payment WHERE payer = $1`, [payer.address.toLowerCase()]);
    expect(kept.length).toBe(PER_PAYER);
  });

  it("a late landing is refunded only once its payment is as deep as a bill is vended on: a block that may yet be replaced refunds nothing", async () => {
    const payer = accounts(18);
    const start = await usdc(payer.address);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1630);
    const { req, soon } = await notYetValid(payer, body);
    expect(JSON.stringify(await (await post(body, header(soon, req))).json())).toContain("it is refunded to the payer on chain");
    await untilValid(soon);
    // A depth the chain will not reach during the test: its payment stays "a block that may be replaced".
    service.flow.confirmations.CELO = 1_000;
    try {
      await celo.submitAuthorization("USDC", soon);
      await expect.poll(async () => (await passes(1), (await ordersUnder(soon))?.status), { timeout: 30_000, interval: 250 }).toBe("REFUNDING");
      await passes(2);
      expect((await ordersUnder(soon))!.status).toBe("REFUNDING");
      expect(await usdc(payer.address)).toBe(start - soon.value);
    } finally {
      service.flow.confirmations.CELO = 0;
    }
    // Deep enough: refunded, once.
    await expect.poll(async () => (await passes(1), (await ordersUnder(soon))?.status), { timeout: 30_000, interval: 250 }).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start - lateFee());
  });

  it("the biller's webhook for an earlier attempt is requeried by that attempt's own id: a delivery after the refund is recorded, alerted and given to the payer, and nothing is refunded twice", async () => {
    const payer = accounts(11);
    const start = await usdc(payer.address);
    const body = x402Bill(payer.address, { serviceID: "showmax", serviceCategory: "CABLE", network: "SHOWMAX", billersCode: PENDING_NUMBER, variation_code: "mobile_only", nairaAmount: 1450 });
    const { headers } = await clientPayment(payer, body);
    const paid = (await (await post(body, headers)).json()) as Body;
    const requestId = paid.request_id as string;
    const [a1] = await attemptsOf(requestId);
    expect((await orderOf(requestId)).status).toBe("PENDING");
    // VTpass has queued attempt 1 and has no record of it yet: after the grace, attempt 2 goes out.
    await sandbox(a1!.biller_request_id, "hide");
    await workOnce(service.flow);
    const [, a2] = await attemptsOf(requestId);
    expect(a2).toBeDefined();
    // Attempt 2 fails (reversed), and its webhook comes: attempt 1 is asked again (no record), then the order is refunded.
    await sandbox(a2!.biller_request_id, "resolve", { status: "reversed" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start);
    const late = await metric("billpay_biller_late_deliveries_total");
    // VTpass processes attempt 1 after all and says so: recorded, alerted, the PIN given to the payer.
    await sandbox(a1!.biller_request_id, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(requestId)).flag, { timeout: 15_000 }).toMatch(/the biller delivered pay attempt 1 \(.+\) after the order was failed and refunded/);
    const order = await orderOf(requestId);
    expect(order.status).toBe("REFUNDED");
    expect(order.purchasedCodes).toEqual([{ label: "Voucher (attempt 1)", value: expect.stringMatching(/^SHM\d{12}$/) }]);
    expect(order.purchasedCode).toMatch(/^SHM\d{12}$/);
    expect(await metric("billpay_biller_late_deliveries_total")).toBe(late + 1);
    expect((await attemptsOf(requestId)).map((a) => a.outcome)).toEqual(["delivered", "reversed"]);
    expect(await usdc(payer.address)).toBe(start); // refunded once, nothing more sent
  });

  it("the biller delivering both attempts is recorded as paid twice; a failed latest attempt is not refunded while an earlier one was delivered, nor a bill whose duplicate delivery the biller took back", async () => {
    const payer = accounts(12);
    const start = await usdc(payer.address);
    const body = x402Bill(payer.address, { serviceID: "showmax", serviceCategory: "CABLE", network: "SHOWMAX", billersCode: PENDING_NUMBER, variation_code: "mobile_only", nairaAmount: 1450 });
    const { headers } = await clientPayment(payer, body);
    const requestId = ((await (await post(body, headers)).json()) as Body).request_id as string;
    const price = (await orderOf(requestId)).amount;
    const [a1] = await attemptsOf(requestId);
    await sandbox(a1!.biller_request_id, "hide");
    await workOnce(service.flow);
    const [, a2] = await attemptsOf(requestId);
    // Attempt 1 is delivered with no webhook (one that never arrives); then attempt 2 fails:
    // before refunding, attempt 1 is asked again, by its own id, and found delivered: served.
    await sandbox(a1!.biller_request_id, "resolve", { status: "delivered" }, "?notify=0");
    await sandbox(a2!.biller_request_id, "resolve", { status: "reversed" });
    await expect.poll(async () => (await orderOf(requestId)).status, { timeout: 15_000 }).toBe("SUCCESS");
    expect(await usdc(payer.address)).toBe(start - price);

    // Another bill: attempt 2 serves it, then attempt 1 is delivered too: the biller was paid twice.
    const body2 = { ...body, variation_code: "full", nairaAmount: 2900 };
    const { headers: h2 } = await clientPayment(payer, body2);
    const second = ((await (await post(body2, h2)).json()) as Body).request_id as string;
    const [b1] = await attemptsOf(second);
    await sandbox(b1!.biller_request_id, "hide");
    await workOnce(service.flow);
    const [, b2] = await attemptsOf(second);
    await sandbox(b2!.biller_request_id, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(second)).status, { timeout: 15_000 }).toBe("SUCCESS");
    const late = await metric("billpay_biller_late_deliveries_total");
    await sandbox(b1!.biller_request_id, "resolve", { status: "delivered" });
    await expect.poll(async () => (await orderOf(second)).flag, { timeout: 15_000 }).toMatch(/the biller delivered pay attempt 1 \(.+\) beside the attempt that served the order/);
    expect((await orderOf(second)).purchasedCodes?.map((c) => c.label)).toEqual(["Voucher", "Voucher (attempt 1)"]);
    expect(await metric("billpay_biller_late_deliveries_total")).toBe(late + 1);
    const price2 = (await orderOf(second)).amount;
    expect(await usdc(payer.address)).toBe(start - price - price2);

    // The biller takes back the duplicate, attempt 1 (its webhook left out: the same call is
    // made here, by the attempt it names). Attempt 2 still delivers the bill: nothing is refunded.
    const attempt = async (id: string) => (await service.flow.attempts.of(second)).find((a) => a.billerRequestId === id)!;
    await sandbox(b1!.biller_request_id, "reverse", {}, "?notify=0");
    expect((await actOnBillerState(service.flow, await orderOf(second), await attempt(b1!.biller_request_id))).status).toBe("SUCCESS");
    expect(await usdc(payer.address)).toBe(start - price - price2);
    // Then attempt 2 too: no delivery stands, and the payer is refunded, once.
    await sandbox(b2!.biller_request_id, "reverse", {}, "?notify=0");
    expect((await actOnBillerState(service.flow, await orderOf(second), await attempt(b2!.biller_request_id))).status).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start - price);
    expect((await actOnBillerState(service.flow, await orderOf(second), await attempt(b1!.biller_request_id))).status).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(start - price);
  });

  it("receipts and a settled answer are given only for a payment the chain confirmed, never for an order held with a facilitator's word", async () => {
    const payer = accounts(13);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1640);
    const { headers } = await clientPayment(payer, body);
    const served = (await (await post(body, headers)).json()) as Body & { receipt?: unknown };
    expect(served.status).toBe("SUCCESS");
    const requestId = served.request_id as string;
    expect((await (await fetch(`${url}/api/orders/${requestId}`)).json()) as Body).toHaveProperty("receipt");
    // The same order as one held after a facilitator reported a settlement pending under a hash that never landed.
    await service.db.query(`UPDATE bill_order SET status = 'NEEDS_REVIEW', tx_hash = $2 WHERE request_id = $1`, [requestId, `0x${"ab".repeat(32)}`]);
    expect((await (await fetch(`${url}/api/orders/${requestId}`)).json()) as Body).not.toHaveProperty("receipt");
    const replay = await post(body, headers);
    expect(replay.headers.get("PAYMENT-RESPONSE")).toBeNull();
    expect(((await replay.json()) as Body).receipt).toBeUndefined();
    await service.db.query(`UPDATE bill_order SET status = 'SUCCESS', tx_hash = $2 WHERE request_id = $1`, [requestId, served.tx_hash]);
  });

  it("an orphan closes as refunded by hand only with a transfer from BillPay or its admin, not one the payer sent himself nor a refund of another order", async () => {
    const payer = accounts(14);
    const friend = accounts(15);
    // A payment he lands himself, with no order, of the price of a bill of his the biller
    // will fail (the service then refunds that bill through BillPay: Refunded).
    const failing = airtime(payer, "08099999999", 1604);
    const { headers, auth: failingAuth } = await clientPayment(payer, failing);
    const value = failingAuth.value;
    const { authorization } = await celo.payByAuthorization(payer, "USDC", value);
    const failed = (await (await post(failing, headers)).json()) as { refund: { status: string; tx_hash: Hex } };
    expect(failed.refund.status).toBe("REFUNDED");
    await passes();
    expect(await orphanOf(authorization)).toBe("NEEDS_REVIEW");
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const key = { chain: "CELO", token_address: celo.tokenAddress("USDC"), payer: payer.address, auth_nonce: authorization.nonce, operator: "bob" };
    expect((await resolveOrphanPayment(review, { ...key, action: "hold", reason: "asked back" })).record.outcome).toBe("DONE");
    // The service's refund of the failed bill sent him exactly that amount from BillPay, but it was that order's.
    const notThis = await resolveOrphanPayment(review, { ...key, reason: "refunded by hand", refundTxHash: failed.refund.tx_hash });
    expect(notThis.record.outcome).toBe("REFUSED");
    expect(notThis.record.detail).toContain("is a refund of another payment through BillPay");
    // The payer has a friend send him the amount: it is not BillPay's money coming back.
    const sideways = await celo.transfer(friend, "USDC", payer.address, value);
    const refused = await resolveOrphanPayment(review, { ...key, reason: "refunded by hand", refundTxHash: sideways.transactionHash });
    expect(refused.record.outcome).toBe("REFUSED");
    expect(refused.record.detail).toContain("from BillPay or its admin");
    expect(await orphanOf(authorization)).toBe("REFUNDING_BY_HAND");
    // The admin's own transfer counts.
    await celo.transfer(accounts(19), "USDC", admin.address, value);
    const fromAdmin = await celo.transfer(admin, "USDC", payer.address, value);
    expect((await resolveOrphanPayment(review, { ...key, reason: "refunded by hand from the admin's wallet", refundTxHash: fromAdmin.transactionHash })).record.outcome).toBe("DONE");
  });

  it("one transaction refunds one orphan by hand: the second payment it would also match is refused, and stays held", async () => {
    const payer = accounts(17);
    const first = (await celo.payByAuthorization(payer, "USDC", 210_000n)).authorization;
    const second = (await celo.payByAuthorization(payer, "USDC", 210_000n)).authorization;
    await passes();
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const keyOf = (a: SignedAuthorization) => ({ chain: "CELO", token_address: celo.tokenAddress("USDC"), payer: payer.address, auth_nonce: a.nonce, operator: "bob" });
    for (const a of [first, second]) expect((await resolveOrphanPayment(review, { ...keyOf(a), action: "hold", reason: "asked back" })).record.outcome).toBe("DONE");
    const back = await celo.withdraw("USDC", payer.address, 210_000n);
    expect((await resolveOrphanPayment(review, { ...keyOf(first), reason: "refunded by hand", refundTxHash: back.transactionHash })).record.outcome).toBe("DONE");
    const again = await resolveOrphanPayment(review, { ...keyOf(second), reason: "refunded by hand", refundTxHash: back.transactionHash });
    expect(again.record).toMatchObject({ outcome: "REFUSED", status_after: "REFUNDING_BY_HAND" });
    expect(again.record.detail).toBe(`transaction ${back.transactionHash} already closed another payment as refunded by hand`);
    expect(await orphanOf(second)).toBe("REFUNDING_BY_HAND");
    // Its own refund closes it.
    const backAgain = await celo.withdraw("USDC", payer.address, 210_000n);
    expect((await resolveOrphanPayment(review, { ...keyOf(second), reason: "refunded by hand", refundTxHash: backAgain.transactionHash })).record.outcome).toBe("DONE");
  });

  it("a vended bill whose payment a reorganisation took, written off by an operator, then landed after all: held for an operator and served, never refunded", async () => {
    const payer = accounts(16);
    const start = await usdc(payer.address);
    const body = airtime(payer, SANDBOX_NUMBERS.phone, 1660);
    const { auth, payload } = await clientPayment(payer, body);
    // The order as a reorganisation and an operator leave it: its bill vended by the biller,
    // its payment gone from the chain, closed as unpaid (its authorization still unspent).
    const settling = await lockAsCrashedRequest(service.flow, { body, payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "vended-then-written-off" });
    await service.db.query(`UPDATE bill_order SET status = 'PAID' WHERE request_id = $1`, [settling.requestId]);
    const vended = await fulfil(service.flow, (await orderOf(settling.requestId)), { fresh: true });
    expect(vended.status).toBe("SUCCESS");
    await service.db.query(`UPDATE bill_order SET status = 'PAYMENT_FAILED', failure_reason = 'closed by an operator: the ledger shows no payment' WHERE request_id = $1`, [settling.requestId]);
    // The payer lands the authorization after all.
    await celo.submitAuthorization("USDC", auth);
    await passes();
    const held = await orderOf(settling.requestId);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toContain("its bill had been vended");
    expect(await usdc(payer.address)).toBe(start - auth.value); // nothing refunded
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    // While another operator's decision holds it, a second one is refused with nothing moved,
    // and neither it nor the payment watch takes the lease the first works under; the biller's
    // webhook is asked to come again rather than dropped.
    const first = (await service.flow.orders.claim(settling.requestId, 60))!;
    expect(first.status).toBe("NEEDS_REVIEW");
    const second = await resolveOrder(review, { requestId: settling.requestId, action: "serve", reason: "paid after all", operator: "bob" });
    expect(second.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(second.record.detail).toContain("another decision on this order");
    expect(await service.flow.orders.claim(settling.requestId, 60)).toBeUndefined();
    const [attempt] = await attemptsOf(settling.requestId);
    const webhook = () =>
      fetch(`${url}/api/biller/webhook`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ type: "transaction-update", data: { requestId: attempt!.biller_request_id } }),
      });
    expect((await webhook()).status).toBe(503);
    expect((await orderOf(settling.requestId)).leaseToken).toBe(first.leaseToken);
    expect(await attemptsOf(settling.requestId)).toHaveLength(1);
    await service.flow.orders.release(settling.requestId, first.leaseToken);
    // Copies of a webhook keep each other out too: the second is asked to come again, and
    // cannot take (nor, done, release) the lease the first works under.
    const copy = (await service.flow.orders.claim(settling.requestId, 60, "webhook"))!;
    expect((await webhook()).status).toBe(503);
    expect((await orderOf(settling.requestId)).leaseToken).toBe(copy.leaseToken);
    await service.flow.orders.release(settling.requestId, copy.leaseToken);
    expect((await webhook()).status).toBe(200);
    // The lease a finished request keeps on its order only nominally (unmarked) does not keep
    // an operator out: the decisions below take it over.
    await service.db.query(`UPDATE bill_order SET lease_until = now() + make_interval(secs => 60), lease_token = 'a-request/nominal' WHERE request_id = $1`, [settling.requestId]);
    // Nor may an operator refund it: the bill was delivered, and a refund would give it away.
    const refund = await resolveOrder(review, { requestId: settling.requestId, action: "refund", reason: "the payer asked", operator: "mallory" });
    expect(refund.record.outcome).toBe("REFUSED");
    expect(refund.record.detail).toContain("the biller delivered this bill");
    expect(await usdc(payer.address)).toBe(start - auth.value);
    // The operator serves it: the ledger shows exactly its payment, and the bill is not vended again.
    const served = await resolveOrder(review, { requestId: settling.requestId, action: "serve", reason: "paid after all", operator: "alice" });
    expect(served.record.outcome, served.record.detail ?? "").not.toBe("REFUSED");
    await expect.poll(async () => (await passes(1), (await orderOf(settling.requestId)).status), { timeout: 15_000 }).toBe("SUCCESS");
    expect(await attemptsOf(settling.requestId)).toHaveLength(1);
    expect(await usdc(payer.address)).toBe(start - auth.value);
  });

  it("the audit is clean after every attack, and lists for a person only what the biller did", async () => {
    await passes();
    const report = await auditOnSharedChains(paying, { url });
    expect(report.discrepancies).toEqual([]);
    expect(report.orders!.stuck).toEqual([]);
    // What it lists for a person is the biller's doing, flagged on served or refunded orders:
    // the two late deliveries (paid twice), and Showmax's fee; no payment and no order waits for one.
    const review = report.orders!.review;
    expect(review.every((r) => /^order req_\w+ \(x402, (SUCCESS|REFUNDED), \d+\): /.test(r)), review.join("\n")).toBe(true);
    expect(review.filter((r) => r.includes("the biller delivered pay attempt 1"))).toHaveLength(2);
    expect(review.filter((r) => !/the biller delivered pay attempt 1|convenience fee of 100 NGN/.test(r))).toEqual([]);
  });
});
