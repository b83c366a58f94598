import { x402Client } from "@x402/core/client";
import { decodePaymentResponseHeader, x402HTTPClient } from "@x402/core/http";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmSchemeV1 } from "@x402/evm/exact/v1/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import { parseUnits, toFunctionSelector, type Address, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { CONTRACT_SIGNATURE_GAS } from "../../lib/contract-signature.ts";
import { randomNonce, TRANSFER_WITH_AUTHORIZATION_TYPES } from "../../lib/eip3009.ts";
import { checkSignature, PaymentRejected, type DecodedPayment } from "../../server/x402-protocol/payment.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import legacyRetry from "../fixtures/x402-fetch/v1-paid-retry.json" with { type: "json" };
import { freePort, waitForLedgerBlock } from "../../stack/ledger-process.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import type { Db } from "../../server/db.ts";
import { workOnce, type WorkerDeps } from "../../server/orders/worker.ts";
import { reconcileAuthorizationPayments } from "../../server/orders/ledger-pass.ts";
import { settle } from "../../server/orders/x402-flow.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { billHash } from "../../server/quote/quote.ts";
import { paymentRequestSchema } from "../../server/schemas.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { lockAsCrashedRequest } from "../support/orders.ts";
import { startRpcProxy } from "../support/rpc-proxy.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { paymentHeader, requirementsOf } from "../support/x402-wire.ts";

type Result = { success: boolean; status: string; request_id: string; tx_hash: string | null; purchased_code: string | null; units: string | null; refund?: { status: string; tx_hash: string | null } };

describe("x402 route: paying a bill end to end", () => {
  let paying: SharedPayingStack;
  let stack: SharedPayingStack["chains"];
  let service: ServiceStack;
  let db: Db;
  let url: string;
  let flow: WorkerDeps;
  let celo: ChainActors;
  let ledger: SharedPayingStack["ledger"];
  let facilitatorUrl: string;
  const accounts = freshAccounts();
  const payer = accounts(11);

  const bill = (billersCode: string, extra: Record<string, unknown> = {}) => ({
    serviceID: "mtn",
    serviceCategory: "AIRTIME",
    network: "MTN",
    billersCode,
    nairaAmount: 1550,
    token: "USDC",
    blockchain: "CELO",
    wallet_address: payer.address,
    ...extra,
  });
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const usdc = () => celo.balanceOf("USDC", payer.address);

  /** The payment headers the official client makes for this bill's challenge. */
  async function paymentFor(body: unknown) {
    const challenged = await post(body);
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    const required = client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json());
    const payload = await client.createPaymentPayload(required);
    return { headers: client.encodePaymentSignatureHeader(payload), payload };
  }

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts);
    ({ chains: stack, ledger, service } = paying);
    celo = chainActors(stack.deployments, "CELO");
    ({ db, flow } = service);
    url = service.urls.service;
    facilitatorUrl = service.urls.facilitator;
  });
  afterAll(() => paying?.close());

  it("answers its 402 over HTTP with the route's headers: open to browsers, the x402 headers exposed, and its request id", async () => {
    const exposed = (res: Response) => (res.headers.get("access-control-expose-headers") ?? "").split(",");
    for (const res of [await post(bill("08011111112")), await fetch(`${url}/api/pay/x402`), await post(bill("08011111112"), { "X-Request-Id": "caller-chosen-1" })]) {
      expect(res.status).toBe(402);
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
      expect(exposed(res)).toEqual(expect.arrayContaining(["PAYMENT-REQUIRED", "PAYMENT-RESPONSE", "X-PAYMENT-RESPONSE", "X-Token-Fallback"]));
      expect(res.headers.get("payment-required")).toMatch(/^[A-Za-z0-9+/=]+$/);
      expect(Number(res.headers.get("content-length"))).toBe(Buffer.byteLength(await res.text()));
    }
    const [own, kept] = [await post(bill("08011111112")), await post(bill("08011111112"), { "X-Request-Id": "caller-chosen-1" })];
    expect(own.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    expect(kept.headers.get("x-request-id")).toBe("caller-chosen-1");
  });

  it("pays with the official x402 client (protocol 2): settle first, then vend, SUCCESS", async () => {
    const before = await usdc();
    const treasuryBefore = await celo.balanceOf("USDC", celo.billPay);
    const payingFetch = wrapFetchWithPayment(fetch, x402ClientFor(payer, stack.deployments));
    const res = await payingFetch(`${url}/api/pay/x402`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(bill("08011111111")),
    });
    expect(res.status).toBe(200);
    const result = (await res.json()) as Result;
    expect(result).toMatchObject({ success: true, status: "SUCCESS", purchased_code: null, units: null });
    expect(result.request_id).toMatch(/^req_\d{12}[0-9a-f]{20}$/);
    expect(result.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    const settlement = decodePaymentResponseHeader(res.headers.get("PAYMENT-RESPONSE")!);
    expect(settlement).toMatchObject({ success: true, transaction: result.tx_hash, network: "eip155:42220" });
    expect(await usdc()).toBe(before - 1_001_000n);
    expect(await celo.balanceOf("USDC", celo.billPay)).toBe(treasuryBefore + 1_001_000n);
    // The paying response carries the order's secret, once; the order route shows the rest.
    const { order_secret, ...shown } = result as Result & { order_secret?: string };
    expect(order_secret).toMatch(/^ors_[A-Za-z0-9_-]{32}$/);
    const order = await (await fetch(`${url}/api/orders/${result.request_id}`)).json();
    expect(order).toEqual(shown);
    // The biller's answer is kept on its attempt by the very statement that served the order
    // (one transaction, so one now()): never a served order whose attempt says nothing.
    const [kept] = await db.query<{ outcome: string; same: boolean }>(
      `SELECT a.outcome, a.outcome_at = o.updated_at AS same FROM biller_attempt a JOIN bill_order o USING (request_id) WHERE a.request_id = $1`,
      [result.request_id],
    );
    expect(kept).toEqual({ outcome: "delivered", same: true });
  });

  it("refunds on chain when the biller fails the bill: FAILED_VENDING, payer whole again, both in the ledger", async () => {
    const before = await usdc();
    const { headers, payload } = await paymentFor(bill("08099999999"));
    const res = await post(bill("08099999999"), headers);
    const result = (await res.json()) as Result;
    expect(result).toMatchObject({ success: false, status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
    expect(result.refund!.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(result.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await usdc()).toBe(before);

    // The ledger shows the x402 payment and its refund, matched by the authorization.
    const nonce = (payload.payload as { authorization: { nonce: string } }).authorization.nonce;
    await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());
    const seen = (await (
      await fetch(`${ledger.url}/ledger/authorizations/42220/${celo.tokenAddress("USDC")}/${payer.address}/${nonce}`)
    ).json()) as { payment: { txHash: string; amount: string } | null; refunds: Array<{ txHash: string; amount: string }> };
    expect(seen.payment).toMatchObject({ txHash: result.tx_hash, amount: "1001000" });
    expect(seen.refunds).toEqual([expect.objectContaining({ txHash: result.refund!.tx_hash, amount: "1001000" })]);
  });

  it("verifies meters after settlement: a wrong one is refunded, a right one vends a token", async () => {
    const electricity = (meter: string) =>
      bill(meter, { serviceID: "ikeja-electric", serviceCategory: "ELECTRICITY", network: "IKEJA", variation_code: "prepaid", nairaAmount: 3100 });
    const before = await usdc();
    const wrong = (await (await post(electricity("9999999999999"), (await paymentFor(electricity("9999999999999"))).headers)).json()) as Result;
    expect(wrong).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
    expect(await usdc()).toBe(before);
    const right = (await (await post(electricity(SANDBOX_NUMBERS.prepaidMeter), (await paymentFor(electricity(SANDBOX_NUMBERS.prepaidMeter))).headers)).json()) as Result;
    expect(right).toMatchObject({ status: "SUCCESS", units: "124.0 kWh" });
    expect(right.purchased_code).toMatch(/^\d{20}$/);
    // In the interface's eight fields: no variation_code; the meter's check says it is postpaid.
    const { variation_code: _type, ...eightFields } = electricity(SANDBOX_NUMBERS.postpaidMeter) as Record<string, unknown>;
    const postpaid = (await (await post(eightFields, (await paymentFor(eightFields)).headers)).json()) as Result;
    expect(postpaid).toMatchObject({ status: "SUCCESS", purchased_code: null });
  });

  it("pays an international bill found through GET /api/international; a mismatched one is refused before any challenge", async () => {
    const steps = (await (await fetch(`${url}/api/international?country_code=GH&product_type_id=1&operator_id=5&foreignAmount=20`)).json()) as { bill: Record<string, unknown> };
    expect(steps.bill).toMatchObject({ serviceID: "foreign-airtime", nairaAmount: 2110, foreignAmount: 20, country_code: "GH" });
    const intl = { ...steps.bill, billersCode: "233241234567", phone: "08011111111", token: "USDC", blockchain: "CELO", wallet_address: payer.address };
    const before = await usdc();
    const { headers, payload } = await paymentFor(intl);
    const result = (await (await post(intl, headers)).json()) as Result;
    expect(result).toMatchObject({ success: true, status: "SUCCESS" });
    const value = BigInt((payload.payload as { authorization: { value: string } }).authorization.value);
    // 2,110 NGN at 1,550 NGN per USD, plus the 0.001 USD facilitator fee, rounded up to a unit.
    expect(value).toBe(1_362_291n);
    expect(await usdc()).toBe(before - value);

    const mismatched = await post({ ...intl, nairaAmount: 2000 });
    expect(mismatched.status).toBe(422);
    expect(await mismatched.json()).toMatchObject({ code: "FOREIGN_AMOUNT_MISMATCH", naira_amount: 2110 });
    const domestic = await post(bill("08011111111", { country_code: "GH" }));
    expect(await domestic.json()).toMatchObject({ status: 422, code: "INTERNATIONAL_FIELDS_INVALID" });
    const badQuery = await fetch(`${url}/api/international?country_code=Ghana`);
    expect(badQuery.status).toBe(400);
    expect(await badQuery.json()).toMatchObject({ code: "VALIDATION_FAILED" });
    const unknownCountry = await fetch(`${url}/api/international?country_code=ZZ`);
    expect(await unknownCountry.json()).toMatchObject({ status: 422, code: "INTERNATIONAL_OPTION_UNKNOWN" });
  });

  it("runs a payment once: a replay returns the original result; another bill is refused (402, the challenge again)", async () => {
    const { headers } = await paymentFor(bill("08011111111", { nairaAmount: 775 }));
    const first = (await (await post(bill("08011111111", { nairaAmount: 775 }), headers)).json()) as Result;
    const afterFirst = await usdc();
    const replay = await post(bill("08011111111", { nairaAmount: 775 }), headers);
    expect(replay.status).toBe(200);
    // The same result, without the order's secret: that is handed out once.
    const { order_secret, ...shown } = first as Result & { order_secret?: string };
    expect(order_secret).toMatch(/^ors_/);
    expect(await replay.json()).toEqual(shown);
    const swapped = await post(bill("08012345678", { nairaAmount: 775 }), headers);
    expect(swapped.status).toBe(402);
    // The bill's challenge, to sign anew: in the body and the header.
    expect(swapped.headers.get("payment-required")).toBeTruthy();
    expect(await swapped.json()).toMatchObject({ code: "PAYMENT_ALREADY_USED", x402Version: 1, accepts: [expect.objectContaining({ payTo: expect.any(String) })] });
    expect(await usdc()).toBe(afterFirst);
  });

  it("honours the price a challenge showed after the rate moved, within its lifetime; a forged extra.rateVersion changes nothing", async () => {
    const body = bill("08011111111", { nairaAmount: 1240 });
    const { headers, payload } = await paymentFor(body); // shown at 1550 NGN/USD
    const shownAmount = BigInt(payload.accepted.amount);
    const shownVersion = (payload.accepted.extra as { rateVersion: string }).rateVersion;
    // Another instance on the same database whose rate source has moved: the naira doubles in value.
    const moved = createApp({ config: service.config, db, deployments: stack.deployments, rates: new ConfiguredRate(775_000n), flow });
    const ask = (h: Record<string, string> = {}) =>
      moved.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...h }, body: JSON.stringify(body) });
    const now = (await (await ask()).json()) as { accepts: Array<{ maxAmountRequired: string; extra: { rateVersion: string } }> };
    expect(BigInt(now.accepts[0]!.maxAmountRequired)).toBe(2n * shownAmount - 1_000n); // today's price (the 0.001 fee is not doubled)
    expect(now.accepts[0]!.extra.rateVersion).not.toBe(shownVersion);
    const [superseded] = await db.query<{ live_until: Date | null }>(`SELECT live_until FROM rate_version WHERE id = $1`, [shownVersion]);
    expect(superseded!.live_until).not.toBeNull();

    // The payment signed for the price shown, its unsigned `accepted.extra` naming a version that never was.
    const forged = { ...payload, accepted: { ...payload.accepted, extra: { ...payload.accepted.extra, rateVersion: "999999" } } };
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    const before = await usdc();
    const res = await ask(client.encodePaymentSignatureHeader(forged));
    expect(res.status).toBe(200);
    const result = (await res.json()) as Result;
    expect(result.status).toBe("SUCCESS");
    expect(await usdc()).toBe(before - shownAmount);
    // The order records the amount and the server's own version that priced it, not the client's claim.
    const [order] = await db.query<{ amount: string; version: string }>(
      `SELECT amount::text AS amount, requirements->'extra'->>'rateVersion' AS version FROM bill_order WHERE request_id = $1`,
      [result.request_id],
    );
    expect(order).toEqual({ amount: shownAmount.toString(), version: shownVersion });
  });

  it("honours a moved price only through the signed offer of the payment's own challenge; without one, only within the grace", async () => {
    const body = bill("08011111111", { nairaAmount: 1241 });
    const { payload } = await paymentFor(body); // shown at 1550 NGN/USD, with its signed offer
    const shownAmount = BigInt(payload.accepted.amount);
    const extra = payload.accepted.extra as { rateVersion: string; offer: string };
    expect(extra.offer).toMatch(new RegExp(`^${extra.rateVersion}\\.\\d+\\.[A-Za-z0-9_-]{43}$`));
    // Another instance whose rate has moved; the version that priced the payment was superseded ten minutes ago.
    const moved = createApp({ config: service.config, db, deployments: stack.deployments, rates: new ConfiguredRate(775_000n), flow });
    const ask = (b: unknown, h: Record<string, string> = {}) =>
      moved.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...h }, body: JSON.stringify(b) });
    const other = (await (await ask(bill("08011111111", { nairaAmount: 1242 }))).json()) as { accepts: Array<{ extra: { offer: string } }> };
    // Superseded a minute ago, within the grace: the grace is x402 v1's, which echoes no offer;
    // a v2 payment that drops its offer is held to the price shown now.
    await db.query(`UPDATE rate_version SET live_until = now() - interval '1 minute' WHERE id = $1`, [extra.rateVersion]);
    const client = new x402HTTPClient(x402ClientFor(payer, stack.deployments));
    const withOffer = (offer: string | undefined) => {
      const { offer: _o, ...rest } = extra;
      return client.encodePaymentSignatureHeader({ ...payload, accepted: { ...payload.accepted, extra: offer === undefined ? rest : { ...rest, offer } } });
    };
    const before = await usdc();
    const refusedWith = async (offer: string | undefined) => {
      const res = await ask(body, withOffer(offer));
      expect(res.status).toBe(402);
      return ((await res.json()) as { code: string }).code;
    };
    expect(await refusedWith(undefined)).toBe("AMOUNT_MISMATCH");
    await db.query(`UPDATE rate_version SET live_until = now() - interval '10 minutes' WHERE id = $1`, [extra.rateVersion]);
    // No offer: the old price is past the grace too. Another bill's offer, or
    // this one's with its expiry moved, is no offer of this price for this bill.
    expect(await refusedWith(undefined)).toBe("AMOUNT_MISMATCH");
    expect(await refusedWith(other.accepts[0]!.extra.offer)).toBe("AMOUNT_MISMATCH");
    const [version, expires, mac] = extra.offer.split(".");
    expect(await refusedWith(`${version}.${Number(expires) + 86_400}.${mac}`)).toBe("AMOUNT_MISMATCH");
    expect(await usdc()).toBe(before);
    // Its own offer, echoed: honoured at the price shown, within the offer's lifetime.
    const res = await ask(body, withOffer(extra.offer));
    expect(res.status).toBe(200);
    expect(((await res.json()) as Result).status).toBe("SUCCESS");
    expect(await usdc()).toBe(before - shownAmount);
  });

  it("asks a contract wallet whether it signed, within a gas cap: its owner's signature passes, a wallet that burns gas is refused", async () => {
    const owner = accounts(9);
    const [owned, burner] = [await celo.deployOwnedWallet(owner.address), await celo.deployGasBurningWallet()];
    const token = stack.deployments.chains.CELO!.tokens.find((t) => t.symbol === "USDC")!;
    const domain = { name: token.name, version: token.eip712Version!, chainId: 42220, verifyingContract: token.address as Hex };
    const paymentFrom = async (from: Hex): Promise<DecodedPayment> => {
      const authorization = { from, to: celo.billPay, value: 1_001_000n, validAfter: 0n, validBefore: BigInt(Math.floor(Date.now() / 1000) + 600), nonce: randomNonce() };
      const signature = await owner.signTypedData!({ domain, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType: "TransferWithAuthorization", message: authorization });
      return { x402Version: 2, method: "eip3009", header: "PAYMENT-SIGNATURE", scheme: "exact", network: "eip155:42220", authorization, signature, raw: {} };
    };
    // Every eth_call the check makes is seen, with the gas it was given.
    const gasGiven: Array<bigint | undefined> = [];
    const client = {
      getCode: (a: { address: Hex }) => celo.publicClient.getCode(a),
      call: (args: Parameters<typeof celo.publicClient.call>[0]) => (gasGiven.push(args.gas), celo.publicClient.call(args)),
    };
    const check = (p: DecodedPayment) => checkSignature(p, { name: token.name, version: token.eip712Version!, chainId: 42220, address: token.address }, client as never);
    await expect(check(await paymentFrom(owned))).resolves.toBeUndefined();
    await expect(check(await paymentFrom(burner))).rejects.toBeInstanceOf(PaymentRejected);
    expect(gasGiven).toEqual([CONTRACT_SIGNATURE_GAS, CONTRACT_SIGNATURE_GAS]);
    // BillPay's address in a case that is not its checksum (a payment header with one is refused before any check: payment-checks.test.ts): the check itself refuses it as a signature that is not the wallet's, not with viem's error.
    const miscased = await paymentFrom(owned);
    miscased.authorization = { ...miscased.authorization, to: `0x${celo.billPay.slice(2).toUpperCase()}` as Hex };
    await expect(check(miscased)).rejects.toMatchObject({ code: "SIGNATURE_INVALID" });
  });

  it("asks the facilitator once: a funded payer's bill only settles; a payer short of the amount is only verified, refused, and charged nothing", async () => {
    const real = new HTTPFacilitatorClient({ url: facilitatorUrl });
    const calls: string[] = [];
    const counting = {
      verify: (...a: Parameters<typeof real.verify>) => (calls.push("verify"), real.verify(...a)),
      settle: (...a: Parameters<typeof real.settle>) => (calls.push("settle"), real.settle(...a)),
      getSupported: real.getSupported.bind(real),
    };
    const app = createApp({ config: service.config, db, deployments: stack.deployments, rates: new ConfiguredRate(1_550_000n), flow: { ...flow, facilitators: { CELO: counting, BASE: counting } } });
    const send = (body: unknown, headers: Record<string, string>) => app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

    const before = await usdc();
    const body = bill("08011111111", { nairaAmount: 1113 });
    const { headers, payload } = await paymentFor(body);
    expect(((await (await send(body, headers)).json()) as Result).status).toBe("SUCCESS");
    expect(calls).toEqual(["settle"]);
    expect(await usdc()).toBe(before - BigInt(payload.accepted.amount));

    // A wallet holding nothing: the intake's own read sees it short, so the facilitator is
    // asked to verify and refuses it, naming why; nothing is broadcast.
    calls.length = 0;
    const empty = privateKeyToAccount(generatePrivateKey());
    const poor = bill("08011111111", { nairaAmount: 1114, wallet_address: empty.address });
    const challenged = await post(poor);
    const client = new x402HTTPClient(x402ClientFor(empty, stack.deployments));
    const signed = await client.createPaymentPayload(client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json()));
    const refused = await send(poor, client.encodePaymentSignatureHeader(signed));
    expect(refused.status).toBe(402);
    const refusal = (await refused.json()) as Record<string, unknown>;
    expect(refusal).toMatchObject({ code: "PAYMENT_NOT_SETTLED", charged: false, reason: expect.stringMatching(/^facilitator: \w*insufficient_(funds|balance)/) });
    // A 402 is the bill's challenge as well, in the body and the header: an x402 client reads it and signs anew.
    expect(refusal).toMatchObject({ x402Version: 1, error: expect.any(String), accepts: expect.arrayContaining([expect.objectContaining({ maxAmountRequired: signed.accepted.amount })]) });
    const again = client.getPaymentRequiredResponse((name) => refused.headers.get(name), refusal);
    expect(again.accepts.map((a) => a.amount)).toContain(signed.accepted.amount);
    expect(calls).toEqual(["verify"]);
    expect(await celo.balanceOf("USDC", empty.address)).toBe(0n);
    // The pay attempt recorded while the payment settled was never sent, and is withdrawn: the refused order has none.
    const poorNonce = (signed.payload as { authorization: { nonce: string } }).authorization.nonce;
    const poorOrder = await flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), empty.address, poorNonce);
    expect(poorOrder?.status).toBe("REFUSED");
    expect(await flow.attempts.of(poorOrder!.requestId)).toEqual([]);
  });

  it("a payer who spends his nonce between the intake's read and the settlement settles nothing, and each such call counts against his budget of unsettled payments", async () => {
    // The payer cancels each authorization on chain just as the service settles it (EIP-3009's
    // cancelAuthorization; Permit2's invalidateUnorderedNonces is the same move): the facilitator
    // refuses, the nonce is spent, and no payment reaches BillPay.
    const real = flow.facilitators.CELO!;
    const cancelling = {
      verify: real.verify.bind(real),
      settle: async (...a: Parameters<typeof real.settle>) => {
        await celo.cancelAuthorization(payer, "USDC", (a[0].payload as { authorization: { nonce: Hex } }).authorization.nonce);
        return real.settle(...a);
      },
      getSupported: real.getSupported.bind(real),
    };
    const app = createApp({
      config: loadConfig({ WORKER_GRACE_SECONDS: "0", LOG_REQUESTS: "0", RATE_LIMIT_UNSETTLED_PAYER: "2/600" }),
      db,
      deployments: stack.deployments,
      rates: new ConfiguredRate(1_550_000n),
      flow: { ...flow, ledgerWaitMs: 500, facilitators: { CELO: cancelling, BASE: cancelling } },
    });
    const send = (body: unknown, headers: Record<string, string>) => app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    const before = await usdc();
    for (const nairaAmount of [1121, 1122]) {
      const body = bill("08011111111", { nairaAmount });
      const { headers, payload } = await paymentFor(body);
      const answer = (await (await send(body, headers)).json()) as Result;
      expect(answer.success).toBe(false);
      const nonce = (payload.payload as { authorization: { nonce: string } }).authorization.nonce;
      expect((await flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), payer.address, nonce))!.status).not.toMatch(/^(PAID|PENDING|SUCCESS)$/);
    }
    expect(await usdc()).toBe(before);
    // The third paid call from this payer is held off before its payment is even checked.
    const body = bill("08011111111", { nairaAmount: 1123 });
    const { headers } = await paymentFor(body);
    const limited = await send(body, headers);
    expect(limited.status).toBe(429);
    expect(await limited.json()).toMatchObject({ code: "RATE_LIMITED" });
  });

  it("junk naming a payer counts against its sender's budget of unsettled payments, never the payer's: his own payment still goes through", async () => {
    const app = createApp({
      config: loadConfig({ WORKER_GRACE_SECONDS: "0", LOG_REQUESTS: "0", RATE_LIMIT_UNSETTLED_PAYER: "2/600" }),
      db,
      deployments: stack.deployments,
      rates: new ConfiguredRate(1_550_000n),
      flow,
    });
    const send = (body: unknown, headers: Record<string, string>) => app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    // A stranger signs payments with his own key and writes the payer's address into them:
    // one for the price, one for another amount, one more. None is the payer's signature.
    // (The payer's budget here: 2.)
    const stranger = privateKeyToAccount(generatePrivateKey());
    for (const [nairaAmount, value, code] of [[1131, undefined, "SIGNATURE_INVALID"], [1132, "1", "AMOUNT_MISMATCH"], [1133, undefined, "SIGNATURE_INVALID"]] as const) {
      const body = bill("08011111111", { nairaAmount });
      const challenged = await post(body);
      const client = new x402HTTPClient(x402ClientFor(stranger, stack.deployments));
      const signed = await client.createPaymentPayload(client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json()));
      const authorization = (signed.payload as { authorization: Record<string, string> }).authorization;
      authorization.from = payer.address;
      if (value) authorization.value = value;
      const answer = await send(body, client.encodePaymentSignatureHeader(signed));
      expect(answer.status).toBe(402);
      expect(await answer.json()).toMatchObject({ code });
    }
    // A payment the payer signed to someone else (public once it lands there), replayed here:
    // his signature holds, but it is not to BillPay.
    for (const nairaAmount of [1135, 1136]) {
      const body = bill("08011111111", { nairaAmount });
      const req = requirementsOf(await post(body));
      const elsewhere = await celo.signAuthorization(payer, "USDC", BigInt(req.accepted.amount), accounts(12).address);
      const answer = await send(body, paymentHeader(elsewhere, req));
      expect(answer.status).toBe(402);
    }
    // The payer's own payment is checked and settled, not held off.
    const before = await usdc();
    const body = bill("08011111111", { nairaAmount: 1134 });
    const { headers, payload } = await paymentFor(body);
    const paid = await send(body, headers);
    expect(paid.status).toBe(200);
    expect(((await paid.json()) as Result).status).toBe("SUCCESS");
    expect(await usdc()).toBe(before - BigInt(payload.accepted.amount));
  });

  it("a payment whose nonce the service's node cannot read makes no order and reaches no facilitator: CHAIN_UNAVAILABLE, and the same payment goes through once the node answers", async () => {
    // The node, through a proxy that answers EIP-3009's authorizationState with an error
    // (the signature check's reads still pass): the intake cannot tell whether the nonce
    // was spent, so nothing is made of the payment.
    const proxy = await startRpcProxy(stack.deployments.chains.CELO!.rpcUrl);
    try {
      const deployments = { ...stack.deployments, chains: { ...stack.deployments.chains, CELO: { ...stack.deployments.chains.CELO!, rpcUrl: proxy.url } } };
      const real = flow.facilitators.CELO!;
      const calls: string[] = [];
      const counting = {
        verify: (...a: Parameters<typeof real.verify>) => (calls.push("verify"), real.verify(...a)),
        settle: (...a: Parameters<typeof real.settle>) => (calls.push("settle"), real.settle(...a)),
        getSupported: real.getSupported.bind(real),
      };
      const app = createApp({ config: service.config, db, deployments, rates: new ConfiguredRate(1_550_000n), flow: { ...flow, deployments, facilitators: { CELO: counting, BASE: counting } } });
      const send = (body: unknown, headers: Record<string, string>) => app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
      const body = bill("08011111111", { nairaAmount: 1117 });
      const { headers, payload } = await paymentFor(body);
      const nonce = (payload.payload as { authorization: { nonce: string } }).authorization.nonce;
      const before = await usdc();
      proxy.failCalls(toFunctionSelector("authorizationState(address,bytes32)"));
      const res = await send(body, headers);
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ code: "CHAIN_UNAVAILABLE", charged: false, detail: expect.stringContaining("was not used") });
      expect(calls).toEqual([]);
      expect(await flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), payer.address, nonce)).toBeUndefined();
      expect(await usdc()).toBe(before);
      // The node answers again: the very same payment pays for the bill, once.
      proxy.failCalls(undefined);
      expect(((await (await send(body, headers)).json()) as Result).status).toBe("SUCCESS");
      expect(calls).toEqual(["settle"]);
      expect(await usdc()).toBe(before - BigInt(payload.accepted.amount));
    } finally {
      await proxy.close();
    }
  });

  it("says stage by stage where a paid bill's time went, in Server-Timing, when SERVER_TIMING=1, and says nothing of it otherwise", async () => {
    const timed = createApp({ config: loadConfig({ WORKER_GRACE_SECONDS: "0", LOG_REQUESTS: "0", SERVER_TIMING: "1" }), db, deployments: stack.deployments, rates: new ConfiguredRate(1_550_000n), flow });
    const body = bill("08011111111", { nairaAmount: 1115 });
    const { headers } = await paymentFor(body);
    const res = await timed.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    expect(((await res.json()) as Result).status).toBe("SUCCESS");
    const stages = new Map(res.headers.get("server-timing")!.split(", ").map((p) => [p.split(";")[0]!, Number(p.split("dur=")[1])]));
    for (const name of ["price", "payment checks", "chain reads", "lock payment", "facilitator settle", "payment confirmed", "vend", "receipts", "other", "total"]) expect(stages.get(name), name).toBeGreaterThanOrEqual(0);
    // The stages do not overlap, so with `other` they add up to the total.
    const parts = [...stages].filter(([name]) => name !== "total").reduce((sum, [, ms]) => sum + ms, 0);
    expect(Math.abs(parts - stages.get("total")!)).toBeLessThan(0.1);
    // The running service leaves it off.
    const untimed = await paymentFor(bill("08011111111", { nairaAmount: 1116 }));
    expect((await post(bill("08011111111", { nairaAmount: 1116 }), untimed.headers)).headers.get("server-timing")).toBeNull();
  });

  it("a facilitator that cannot be reached is a plain 'not charged', never settled later; a second payment for a bill still settling is not used", async () => {
    const body = bill("08011111111", { nairaAmount: 1111 });
    const { headers, payload } = await paymentFor(body);
    const unreachable = new HTTPFacilitatorClient({ url: `http://127.0.0.1:${await freePort()}` }); // nothing listens there: the connection is refused
    const down = createApp({ config: service.config, db, deployments: stack.deployments, rates: new ConfiguredRate(1_550_000n), flow: { ...flow, facilitators: { CELO: unreachable, BASE: unreachable } } });
    const before = await usdc();
    const res = await down.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await res.json()).toMatchObject({ code: "FACILITATOR_UNAVAILABLE", charged: false });
    const nonce = (payload.payload as { authorization: { nonce: string } }).authorization.nonce;
    const downOrder = (await flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), payer.address, nonce))!;
    expect(downOrder.status).toBe("REFUSED");
    expect(await flow.attempts.of(downOrder.requestId)).toEqual([]); // nothing was sent, and nothing is left to follow up
    // The facilitator is back and the worker passes: that authorization is never settled by the service.
    await workOnce(flow);
    expect(await usdc()).toBe(before);
    // The payer signs again, as any x402 client would: charged once.
    const again = await paymentFor(body);
    expect(((await (await post(body, again.headers)).json()) as Result).status).toBe("SUCCESS");
    expect(await usdc()).toBe(before - BigInt(again.payload.accepted.amount));

    // A bill whose first payment is still settling (its settle gave no answer): a second
    // payment for it is not used, and the payer is pointed at the first order.
    const body2 = bill("08011111111", { nairaAmount: 1112 });
    const first = await paymentFor(body2);
    const hash = billHash(paymentRequestSchema.parse(body2), { chain: "CELO", token: "USDC" });
    const settling = await lockAsCrashedRequest(flow, { body: body2, payload: first.payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: hash });
    const second = await paymentFor(body2);
    const beforeSecond = await usdc();
    const answer = (await (await post(body2, second.headers)).json()) as Result & { payment_not_used?: string };
    expect(answer).toMatchObject({ request_id: settling.requestId, status: "TIMEOUT", payment_not_used: expect.stringContaining("still settling") });
    const secondNonce = (second.payload.payload as { authorization: { nonce: string } }).authorization.nonce;
    expect(await flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), payer.address, secondNonce)).toBeUndefined();
    expect(await usdc()).toBe(beforeSecond);
    // Ended here so later passes leave it be.
    await flow.orders.transition(settling.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "test: ended by hand" });

    // Such a payment settles nothing, so it counts against its payer's budget of those: fresh
    // authorizations behind one settling bill are refused past it, before any check of theirs.
    const flooder = accounts(13);
    const body3 = bill("08011111111", { nairaAmount: 1117, wallet_address: flooder.address });
    const signFor = async () => {
      const challenged = await post(body3);
      const client = new x402HTTPClient(x402ClientFor(flooder, stack.deployments));
      const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json()));
      return { headers: client.encodePaymentSignatureHeader(payload), payload };
    };
    const held = await lockAsCrashedRequest(flow, { body: body3, payload: (await signFor()).payload, payer: flooder.address, tokenAddress: celo.tokenAddress("USDC"), tag: billHash(paymentRequestSchema.parse(body3), { chain: "CELO", token: "USDC" }) });
    const budget = service.config.RATE_LIMIT_UNSETTLED_PAYER.points;
    const statuses: number[] = [];
    for (let i = 0; i <= budget; i++) statuses.push((await post(body3, (await signFor()).headers)).status);
    expect(statuses).toEqual([...Array<number>(budget).fill(200), 429]);
    await flow.orders.transition(held.requestId, ["SETTLING"], "PAYMENT_FAILED", { failureReason: "test: ended by hand" });
  });

  it("settles one payment once although many copies arrive at once", async () => {
    const body = bill("08011111111", { nairaAmount: 1000 });
    const { headers } = await paymentFor(body);
    const before = await usdc();
    const responses = await Promise.all(Array.from({ length: 6 }, () => post(body, headers)));
    const results = (await Promise.all(responses.map((r) => r.json()))) as Result[];
    expect(responses.every((r) => r.status === 200)).toBe(true);
    expect(new Set(results.map((r) => r.request_id)).size).toBe(1);
    expect(results.filter((r) => r.status === "SUCCESS").length).toBeGreaterThanOrEqual(1);
    const quoted = BigInt((await db.query<{ amount: string }>("SELECT amount::text FROM bill_order WHERE request_id = $1", [results[0]!.request_id]))[0]!.amount);
    expect(await usdc()).toBe(before - quoted);
  });

  it("accepts protocol 1 in X-PAYMENT and answers X-PAYMENT-RESPONSE", async () => {
    const body = bill("08011111111", { nairaAmount: 900 });
    const { payload } = await paymentFor(body);
    const { accepted: _a, resource: _r, ...rest } = payload as typeof payload & { extensions?: unknown };
    const v1 = Buffer.from(JSON.stringify({ ...rest, x402Version: 1, scheme: "exact", network: "eip155:42220" })).toString("base64");
    const res = await post(body, { "X-PAYMENT": v1 });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Result).status).toBe("SUCCESS");
    expect(decodePaymentResponseHeader(res.headers.get("X-PAYMENT-RESPONSE")!).success).toBe(true);
  });

  it("takes the legacy x402-fetch 1.2.0 client's paid retry, replayed key for key from its recorded fixture, on BASE with v1 network names", async () => {
    // test/fixtures/x402-fetch/v1-paid-retry.json: what that client sent, decoded, is its header.
    const recorded = legacyRetry.retry;
    expect(JSON.parse(Buffer.from(recorded.headers["x-payment"], "base64").toString())).toEqual(recorded.payment);
    const offered = legacyRetry.challenge.accepts[0]!;
    // The client's window: valid from ten minutes back, until maxTimeoutSeconds from now.
    const backdated = Number(recorded.payment.payload.authorization.validBefore) - Number(recorded.payment.payload.authorization.validAfter) - offered.maxTimeoutSeconds;
    expect(backdated).toBe(600);

    const base = chainActors(stack.deployments, "BASE");
    const before = await base.balanceOf("USDC", payer.address);
    const body = bill("08011111111", { blockchain: "BASE" });
    const challenged = await fetch(`${url}/api/pay/x402?networks=v1`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(challenged.status).toBe(402);
    const accepts = ((await challenged.json()) as { accepts: Array<typeof offered> }).accepts.find((a) => a.network === offered.network)!;
    expect(Object.keys(accepts).sort()).toEqual(expect.arrayContaining(Object.keys(offered).sort()));
    const now = Math.floor(Date.now() / 1000);
    const authorization = {
      from: payer.address,
      to: accepts.payTo as Address,
      value: accepts.maxAmountRequired,
      validAfter: String(now - backdated),
      validBefore: String(now + accepts.maxTimeoutSeconds),
      nonce: randomNonce(),
    };
    const signature = await payer.signTypedData!({
      domain: { name: accepts.extra.name, version: accepts.extra.version, chainId: base.deployment.chainId, verifyingContract: accepts.asset as Address },
      types: TRANSFER_WITH_AUTHORIZATION_TYPES,
      primaryType: "TransferWithAuthorization",
      message: { ...authorization, value: BigInt(authorization.value), validAfter: BigInt(authorization.validAfter), validBefore: BigInt(authorization.validBefore) },
    });
    const payment = { x402Version: 1, scheme: "exact", network: offered.network, payload: { signature, authorization } };
    // The same keys, in the same order, at every level, as the client's own.
    const shape = (v: unknown): unknown => (v && typeof v === "object" ? Object.entries(v).map(([k, x]) => [k, shape(x)]) : typeof v);
    expect(shape(payment)).toEqual(shape(recorded.payment));

    const res = await fetch(`${url}/api/pay/x402?networks=v1`, {
      method: "POST",
      headers: { ...recorded.headers, "x-payment": Buffer.from(JSON.stringify(payment)).toString("base64") },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Result).status).toBe("SUCCESS");
    expect(decodePaymentResponseHeader(res.headers.get("X-PAYMENT-RESPONSE")!)).toMatchObject({ success: true, network: "eip155:8453" });
    expect(await base.balanceOf("USDC", payer.address)).toBe(before - BigInt(accepts.maxAmountRequired));
  });

  it("is paid by @x402/fetch in protocol 1 mode, when the server offers protocol 1 only", async () => {
    // Protocol 1 names networks ("base"); the package's types only spell CAIP-2 ids.
    const base = "base" as `${string}:${string}`;
    const client = x402Client.fromConfig({
      schemes: [{ network: base, client: new ExactEvmSchemeV1(toClientEvmSigner(payer as never)), x402Version: 1 }],
      spendControls: { allowedAssets: [{ network: base, asset: chainActors(stack.deployments, "BASE").tokenAddress("USDC") }] },
    });
    const v1Fetch = wrapFetchWithPayment(fetch, client);
    const res = await v1Fetch(`${url}/api/pay/x402?networks=v1`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(bill("08011111111", { blockchain: "BASE", nairaAmount: 1240 })),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Result).status).toBe("SUCCESS");
    expect(decodePaymentResponseHeader(res.headers.get("X-PAYMENT-RESPONSE")!).success).toBe(true);
  });

  it("answers TIMEOUT for a bill still pending at the deadline, and finishes it in the background", async () => {
    const body = bill("201000000000");
    const result = (await (await post(body, (await paymentFor(body)).headers)).json()) as Result;
    expect(result).toMatchObject({ status: "TIMEOUT", success: false });
    expect(result.tx_hash).toMatch(/^0x/);
    for (let i = 0; i < 5; i++) await workOnce(flow);
    const later = (await (await fetch(`${url}/api/orders/${result.request_id}`)).json()) as Result;
    expect(later.status).toBe("SUCCESS");
  });

  it("finishes an order that a crash left between settlement and vending, once", async () => {
    const body = bill("08011111111", { nairaAmount: 620 });
    const { payload } = await paymentFor(body);
    const before = await usdc();
    // What a request does before vending: take the lock, then settle. Then it "crashes".
    const order = await lockAsCrashedRequest(flow, { body, payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "crashed-request" });
    expect((await settle(flow, order)).status).toBe("PAID");
    expect(await usdc()).toBe(before - BigInt(payload.accepted.amount));

    expect(await workOnce(flow)).toBe(1);
    const finished = (await (await fetch(`${url}/api/orders/${order.requestId}`)).json()) as Result;
    expect(finished).toMatchObject({ status: "SUCCESS", tx_hash: expect.stringMatching(/^0x/) });
    expect(await workOnce(flow)).toBe(0);
    expect(await usdc()).toBe(before - BigInt(payload.accepted.amount));
  });

  it("reconciles an order whose settlement answer was lost, from the ledger: paid means vend, unpaid means settle", async () => {
    // The facilitator verifies, then its settle answer never comes back: the orders stay
    // SETTLING (the payer is told TIMEOUT, with the order's id), and the chain decides.
    const real = new HTTPFacilitatorClient({ url: facilitatorUrl });
    const settleLost = {
      verify: real.verify.bind(real),
      settle: async () => {
        throw new Error("socket hang up");
      },
      getSupported: real.getSupported.bind(real),
    };
    const deaf = { ...flow, facilitators: { CELO: settleLost } };
    const lost = async (nairaAmount: number) => {
      const body = bill("08011111111", { nairaAmount });
      const { headers, payload } = await paymentFor(body);
      const app = createApp({ config: loadConfig({ WORKER_GRACE_SECONDS: "0", LOG_REQUESTS: "0" }), db, deployments: stack.deployments, rates: new ConfiguredRate(1_550_000n), flow: deaf });
      const res = await app.request("/api/pay/x402", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
      const result = (await res.json()) as Result;
      expect(result).toMatchObject({ status: "TIMEOUT", tx_hash: null });
      return { result, payload };
    };
    const before = await usdc();
    const landed = await lost(410);
    const neverSent = await lost(420);
    // The first one did reach the chain (its answer was lost on the way back).
    const settled = await new HTTPFacilitatorClient({ url: facilitatorUrl }).settle(landed.payload, landed.payload.accepted);
    expect(settled.success).toBe(true);
    await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());

    for (let i = 0; i < 3; i++) await workOnce(flow);
    for (const { result } of [landed, neverSent]) {
      const now = (await (await fetch(`${url}/api/orders/${result.request_id}`)).json()) as Result;
      expect(now, result.request_id).toMatchObject({ status: "SUCCESS", tx_hash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    }
    // Each charged exactly once.
    expect(await usdc()).toBe(before - BigInt(landed.payload.accepted.amount) - BigInt(neverSent.payload.accepted.amount));
  });

  it("a payment someone settled before it was offered is neither served nor written off: refused at intake, and refunded to its payer once, less the refund's gas", async () => {
    // Someone settles the payment before the service is offered it (a stale header, a fast
    // third party): its calldata is public now and names no bill, so it pays for none.
    const body = bill("08011111111", { nairaAmount: 430 });
    const { headers, payload } = await paymentFor(body);
    const before = await usdc();
    expect((await new HTTPFacilitatorClient({ url: facilitatorUrl }).settle(payload, payload.accepted)).success).toBe(true);
    const res = await post(body, headers);
    expect(res.status).toBe(402);
    expect(await res.json()).toMatchObject({ code: "PAYMENT_NONCE_SPENT", charged: false, detail: expect.stringContaining("refunded to its payer") });
    expect(await usdc()).toBe(before - BigInt(payload.accepted.amount));
    // The ledger pass refunds exactly it, once.
    await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());
    for (let i = 0; i < 2; i++) {
      await reconcileAuthorizationPayments(flow);
      await workOnce(flow);
    }
    // Less what pays for the refund's gas: the service never sent it (orders/late-landing.ts).
    expect(await usdc()).toBe(before - parseUnits(service.config.LATE_LANDING_FEE, 6));
  });

  it("answers a bad request_id with 400 and an unknown one with 404", async () => {
    expect((await fetch(`${url}/api/orders/nope`)).status).toBe(400);
    const missing = await fetch(`${url}/api/orders/req_202611211200${"0".repeat(20)}`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { code: string }).code).toBe("ORDER_NOT_FOUND");
  });
});
