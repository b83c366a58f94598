/**
 * Idempotent x402 (server/orders/payment-id.ts) against the real local stack, paid with the
 * official x402 client and the payment-identifier extension's own client helper: a client
 * that signs again under the same id pays once and gets the first order; the same id for
 * another bill is 409; an id still in flight gets its own answer; a malformed id changes
 * nothing; the `Idempotency-Key` header works the same way; an id is the payer's own. Each
 * case ends on balances, what the biller delivered, and the audit.
 */
import { decodePaymentRequiredHeader, x402HTTPClient } from "@x402/core/http";
import type { FacilitatorClient } from "@x402/core/server";
import { appendPaymentIdentifierToExtensions, generatePaymentId } from "@x402/extensions/payment-identifier";
import type { Account, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { x402Bill } from "../support/bills.ts";
import { deliveredBy } from "../support/orders.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Body = Record<string, unknown>;

describe("x402 with a payment id: a retry pays once", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;

  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const bill = (payer: Account, nairaAmount = 1500) => x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount });

  /**
   * Signs a fresh authorization for `body` with the official client (a new nonce each time),
   * naming `id` through the extension when given; `headers` go beside it.
   */
  async function pay(payer: Account, body: Body, options: { id?: string; headers?: Record<string, string>; echoed?: (extension: { info: { id?: string }; schema?: unknown }) => void } = {}): Promise<{ status: number; json: Body; headers: Headers }> {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = x402ClientFor(payer, paying.chains.deployments);
    if (options.id) {
      client.onBeforePaymentCreation(async ({ paymentRequired }) => {
        const extensions = appendPaymentIdentifierToExtensions((paymentRequired.extensions ??= {}), options.id);
        // What the client echoes back, changed by the test.
        options.echoed?.(extensions["payment-identifier"] as { info: { id?: string }; schema?: unknown });
      });
    }
    const http = new x402HTTPClient(client);
    const payload = await http.createPaymentPayload(http.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const res = await post(body, { ...http.encodePaymentSignatureHeader(payload), ...options.headers });
    return { status: res.status, json: (await res.json()) as Body, headers: res.headers };
  }

  const delivered = (requestId: unknown) => deliveredBy(service, requestId);
  const ordersOf = async (payer: Account) => service.db.query<{ request_id: string }>(`SELECT request_id FROM bill_order WHERE payer = $1`, [payer.address.toLowerCase()]);

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts);
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
  });
  afterAll(async () => {
    await paying?.close();
  });

  it("declares the payment-identifier extension, optional, in the 402", async () => {
    const challenged = await post(bill(accounts(5)));
    const required = decodePaymentRequiredHeader(challenged.headers.get("PAYMENT-REQUIRED")!);
    expect(required.extensions?.["payment-identifier"]).toMatchObject({ info: { required: false } });
  });

  it("signing again under the same id returns the first order, with the code, and charges once", async () => {
    const payer = accounts(5);
    const before = await usdc(payer.address);
    const id = generatePaymentId();
    const first = await pay(payer, bill(payer), { id });
    expect(first.status).toBe(200);
    expect(first.json).toMatchObject({ status: "SUCCESS" });
    const charged = before - (await usdc(payer.address));
    expect(charged).toBeGreaterThan(0n);

    const again = await pay(payer, bill(payer), { id });
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ status: "SUCCESS", request_id: first.json.request_id, purchased_code: first.json.purchased_code, tx_hash: first.json.tx_hash });
    expect(again.json.payment_not_used).toMatch(/not used/);
    expect(again.headers.get("PAYMENT-RESPONSE")).toBe(first.headers.get("PAYMENT-RESPONSE"));
    expect(before - (await usdc(payer.address))).toBe(charged);
    expect(await delivered(first.json.request_id)).toEqual(["delivered"]);
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("the same id for another bill is 409 PAYMENT_ID_REUSED, and nothing is charged or locked", async () => {
    const payer = accounts(6);
    const id = generatePaymentId();
    expect((await pay(payer, bill(payer, 1500), { id })).json).toMatchObject({ status: "SUCCESS" });
    const before = await usdc(payer.address);
    const other = await pay(payer, bill(payer, 1700), { id });
    expect(other.status).toBe(409);
    expect(other.json).toMatchObject({ code: "PAYMENT_ID_REUSED" });
    expect(other.json.request_id).toBeUndefined();
    expect(await usdc(payer.address)).toBe(before);
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("the Idempotency-Key header works as the extension does; a malformed id, or two that differ, is 400 and changes nothing", async () => {
    const payer = accounts(7);
    const key = `order-${generatePaymentId("")}`;
    const first = await pay(payer, bill(payer), { headers: { "Idempotency-Key": key } });
    expect(first.json).toMatchObject({ status: "SUCCESS" });
    const before = await usdc(payer.address);
    const again = await pay(payer, bill(payer), { headers: { "Idempotency-Key": key } });
    expect(again.json).toMatchObject({ status: "SUCCESS", request_id: first.json.request_id });

    for (const options of [{ headers: { "Idempotency-Key": "short" } }, { headers: { "Idempotency-Key": "has spaces in it, sixteen+" } }, { id: generatePaymentId(), headers: { "Idempotency-Key": key } }]) {
      const refused = await pay(payer, bill(payer, 1600), options);
      expect(refused.status).toBe(400);
      expect(refused.json).toMatchObject({ code: "PAYMENT_ID_INVALID" });
    }
    expect(await usdc(payer.address)).toBe(before);
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("an id is checked by its own pattern, never by compiling the schema a client echoes back: a schema no validator compiles changes nothing; a malformed id is refused", async () => {
    const payer = accounts(14);
    const nonsense = (e: { schema?: unknown }) => void (e.schema = { type: "not-a-json-type", properties: { id: { pattern: "(" } } });
    const id = generatePaymentId();
    const first = await pay(payer, bill(payer, 1700), { id, echoed: nonsense });
    expect(first.json).toMatchObject({ status: "SUCCESS" });
    const again = await pay(payer, bill(payer, 1700), { id, echoed: nonsense });
    expect(again.json).toMatchObject({ status: "SUCCESS", request_id: first.json.request_id });
    const malformed = await pay(payer, bill(payer, 1710), { id: generatePaymentId(), echoed: (e) => (nonsense(e), (e.info.id = "short")) });
    expect(malformed.status).toBe(400);
    expect(malformed.json).toMatchObject({ code: "PAYMENT_ID_INVALID" });
  });

  /**
   * Two requests under `id` while CELO's settlements take 1.5 s (as on a busy chain): the
   * second goes once the first holds its order, settling, whatever this machine's pace
   * (`beforeSecond` runs just before it). Both answers, first's first.
   */
  async function whileFirstSettles(payer: Account, id: string, beforeSecond = () => {}) {
    const real = service.flow.facilitators.CELO!;
    const slow: FacilitatorClient["settle"] = async (p, r) => {
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      return real.settle(p, r);
    };
    service.flow.facilitators.CELO = { ...real, verify: real.verify.bind(real), getSupported: real.getSupported.bind(real), settle: slow };
    try {
      const firstPaid = pay(payer, bill(payer), { id });
      await expect.poll(async () => (await ordersOf(payer)).length, { timeout: 10_000, interval: 20 }).toBe(1);
      beforeSecond();
      return await Promise.all([firstPaid, pay(payer, bill(payer), { id })]);
    } finally {
      service.flow.facilitators.CELO = real;
    }
  }

  it("an id whose first request is still settling: a second, at once, is 409 PAYMENT_ID_IN_FLIGHT with Retry-After; asked again later, the first order", async () => {
    const payer = accounts(8);
    const before = await usdc(payer.address);
    const id = generatePaymentId();
    const [first, second] = await whileFirstSettles(payer, id);
    expect(first.json).toMatchObject({ status: "SUCCESS" });
    expect(second.status).toBe(409);
    expect(second.json).toMatchObject({ code: "PAYMENT_ID_IN_FLIGHT", request_id: first.json.request_id, retry_after_seconds: 2 });
    expect(second.headers.get("retry-after")).toBe("2");

    const later = await pay(payer, bill(payer), { id });
    expect(later.json).toMatchObject({ status: "SUCCESS", request_id: first.json.request_id });
    const order = (await service.flow.orders.get(first.json.request_id as string))!;
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(await delivered(first.json.request_id)).toEqual(["delivered"]);
  });

  it("a second request under an id whose first order appeared between its two lookups (by id, then by bill) is 409 PAYMENT_ID_IN_FLIGHT too, not 'still settling'", async () => {
    const payer = accounts(13);
    const before = await usdc(payer.address);
    const id = generatePaymentId();
    // The second's lookup by id comes up empty, as it does when it runs a moment before the
    // first writes its order; its lookup by bill then finds that order settling.
    const byId = vi.spyOn(service.flow.orders, "findByIdempotencyKeys");
    const [first, second] = await whileFirstSettles(payer, id, () => void byId.mockResolvedValueOnce([])).finally(() => byId.mockRestore());
    expect(first.json).toMatchObject({ status: "SUCCESS" });
    expect(second.status).toBe(409);
    expect(second.json).toMatchObject({ code: "PAYMENT_ID_IN_FLIGHT", request_id: first.json.request_id });
    expect(await ordersOf(payer)).toHaveLength(1);
    expect(before - (await usdc(payer.address))).toBe((await service.flow.orders.get(first.json.request_id as string))!.amount);
  });

  it("two requests under one id at the same moment: one order, one charge", async () => {
    const payer = accounts(9);
    const before = await usdc(payer.address);
    const id = generatePaymentId();
    const answers = await Promise.all([pay(payer, bill(payer), { id }), pay(payer, bill(payer), { id })]);
    const served = answers.filter((a) => a.json.status === "SUCCESS");
    expect(served.length).toBeGreaterThanOrEqual(1);
    for (const a of answers) {
      if (a.json.status !== "SUCCESS") expect(a.json).toMatchObject({ code: "PAYMENT_ID_IN_FLIGHT" });
      else expect(a.json.request_id).toBe(served[0]!.json.request_id);
    }
    const [order] = await ordersOf(payer);
    expect(await ordersOf(payer)).toHaveLength(1);
    expect(before - (await usdc(payer.address))).toBe((await service.flow.orders.get(order!.request_id))!.amount);
  });

  it("retrying an id settles nothing, so each retry counts against the payer's unsettled budget: past it, 429 before the payment is checked", async () => {
    const payer = accounts(12);
    const id = generatePaymentId();
    expect((await pay(payer, bill(payer), { id })).json).toMatchObject({ status: "SUCCESS" });
    const budget = service.config.RATE_LIMIT_UNSETTLED_PAYER.points;
    for (let i = 0; i < budget; i++) expect((await pay(payer, bill(payer), { id })).status).toBe(200);
    const past = await pay(payer, bill(payer), { id });
    expect(past.status).toBe(429);
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("an id is the payer's own: another payer naming it pays for its own bill; the audit is clean", async () => {
    const [owner, stranger] = [accounts(10), accounts(11)];
    const id = generatePaymentId();
    const owned = await pay(owner, bill(owner), { id });
    const before = await usdc(stranger.address);
    const theirs = await pay(stranger, bill(stranger), { id });
    expect(theirs.json).toMatchObject({ status: "SUCCESS" });
    expect(theirs.json.request_id).not.toBe(owned.json.request_id);
    expect(before - (await usdc(stranger.address))).toBe((await service.flow.orders.get(theirs.json.request_id as string))!.amount);

    const audit = await auditOnSharedChains(paying, { url });
    expect(audit.discrepancies).toEqual([]);
  });
});
