/**
 * An operator acting on what the console shows, against the real local stack (chains, Ponder
 * ledger, facilitator, biller sandbox), in Debian's chromium through playwright-core:
 *   - an x402 payment landed under an order's nonce with another amount (NEEDS_REVIEW) is
 *     refunded from the console: exactly what the ledger shows paid goes back to the payer on
 *     chain, the order is REFUNDED, the action is recorded with who, when and why, and the
 *     audit lists it as resolved, not as open;
 *   - the refusals: serve and close with a mismatched payment present, refund with no ledger
 *     payment, a missing reason, a cross-site POST (from another site's page, without the
 *     form's token, with another Origin, with another form's token), a GET;
 *   - `npm run review` (scripts/review.ts): refund and close from the command line;
 *   - a served order held for review after a reorganisation-style loss is served again from
 *     the console without a second pay to the biller;
 *   - serving an order whose refund is still unmined (sent before the biller said it delivered
 *     after all) is refused, naming the transaction, before the ledger could show it; once
 *     mined, the order closes as refunded, nothing sent twice;
 *   - an x402 payment no order accounts for is closed as refunded by hand, the transaction
 *     checked on chain (a wrong one refused).
 * Screenshots are kept in test-artifacts/console-review-form.png (the decision form) and
 * console-review.png (the order refunded, with its recorded action).
 */
import { mkdir } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { decodePaymentSignatureHeader } from "@x402/core/http";
import { wrapFetchWithPayment } from "@x402/fetch";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { keccak256, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { randomNonce } from "../../lib/eip3009.ts";
import { operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";
import { amountIn } from "../../lib/token-amounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { runReview } from "../../scripts/review.ts";
import { asSigned } from "../../server/chain/node-transactions.ts";
import { ChainOperator } from "../../server/chain/operator.ts";
import { FormTokens } from "../../server/operator/csrf.ts";
import { reconcileAuthorizationPayments } from "../../server/orders/ledger-pass.ts";
import type { ReviewRecord } from "../../server/orders/review.ts";
import { refund } from "../../server/orders/fulfil.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { closeExpiredRefusals } from "../../server/orders/x402-flow.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { chainActors, type ChainActors, type SignedAuthorization } from "../support/actors.ts";
import { x402Bill } from "../support/bills.ts";
import { lockAsCrashedRequest } from "../support/orders.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { paymentHeader, requirementsOf, type Required } from "../support/x402-wire.ts";

const TOKEN = "review-test-token-0123456789";
type Body = Record<string, unknown>;

describe("an operator resolves what waits for review, from the console and the command line", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;
  let browser: Browser;
  let alice: BrowserContext;
  const mismatched = accounts(15);
  const second = accounts(16);
  const cancelling = accounts(17);
  const served = accounts(18);
  const outsider = accounts(19);
  const waiting = accounts(11);
  const reversed = accounts(13);
  const dropped = accounts(14);
  let evil: Server;
  let evilUrl: string;
  let evilPage = "";

  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const ledgerAtHead = async () => waitForLedgerBlock(paying.ledger.url, 42220, await celo.publicClient.getBlockNumber());

  async function required(body: Body): Promise<Required> {
    const res = await post(body);
    expect(res.status).toBe(402);
    return requirementsOf(res);
  }
  const header = paymentHeader;
  const orderOf = (auth: SignedAuthorization) => service.flow.orders.findByPayment("CELO", celo.tokenAddress("USDC"), auth.from, auth.nonce);
  async function workerPasses() {
    await ledgerAtHead();
    await workOnce(service.flow);
    await reconcileAuthorizationPayments(service.flow);
    await closeExpiredRefusals(service.flow);
  }
  async function passesUntil(auth: SignedAuthorization, status: string) {
    await expect
      .poll(
        async () => {
          await workerPasses();
          return (await orderOf(auth))?.status;
        },
        { timeout: 30_000, interval: 300 },
      )
      .toBe(status);
  }

  /**
   * An x402 order whose nonce carried a payment of `landed` instead of its price: held for
   * review. The payer spends the nonce on a smaller authorization while the order is settling
   * (its request has locked the payment and then died): a race past the intake, which refuses
   * a nonce already spent before any order exists.
   */
  async function mismatchedOrder(payer: typeof mismatched, landed: bigint) {
    const body = x402Bill(payer.address);
    const req = await required(body);
    const nonce = randomNonce();
    const full = await celo.signAuthorization(payer, "USDC", BigInt(req.accepted.amount), celo.billPay, { nonce });
    const small = await celo.signAuthorization(payer, "USDC", landed, celo.billPay, { nonce });
    const payload = decodePaymentSignatureHeader(header(full, req)["PAYMENT-SIGNATURE"]);
    await lockAsCrashedRequest(service.flow, { body, payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: `mismatched-${nonce}` });
    await celo.submitAuthorization("USDC", small);
    await ledgerAtHead();
    await passesUntil(full, "NEEDS_REVIEW");
    const order = (await orderOf(full))!;
    expect(order.failureReason).toContain(`shows ${amountIn("CELO", "USDC", landed)} paid under this key`);
    return order;
  }

  const actions = (requestId: string) => service.db.query<ReviewRecord>(`SELECT id::text AS id, action, operator, reason, outcome, detail, amount::text AS amount FROM review_action WHERE request_id = $1 ORDER BY review_action.id`, [requestId]);
  const audit = () => auditOnSharedChains(paying, { url, token: TOKEN });

  /** The order's page, as `context`'s operator sees it. */
  async function orderPage(context: BrowserContext, requestId: string): Promise<Page> {
    const page = await context.newPage();
    const res = await page.goto(`${url}/console/orders/${requestId}`);
    expect(res?.status()).toBe(200);
    return page;
  }
  /** Decides from the order's page: fills the reason, clicks the action's button, lands on the page again. */
  async function decide(page: Page, action: string, reason: string) {
    await page.fill('#review-form textarea[name="reason"]', reason);
    await Promise.all([page.waitForURL(/\?review=\d+/), page.click(`#review-${action}`)]);
    return page.locator("#review-result");
  }

  beforeAll(async () => {
    // It sets USDC's refund budget; close gives every budget back as lent.
    paying = await startPayingStackOnSharedChains(accounts, { OPS_TOKEN: TOKEN, LEDGER_WAIT_MS: "2000" }, { restoresBudgets: true });
    service = paying.service;
    url = service.urls.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium", args: ["--no-sandbox"] });
    // The basic-auth user name is the operator's name: every decision is recorded with it.
    alice = await browser.newContext({ httpCredentials: { username: "alice", password: TOKEN }, viewport: { width: 1400, height: 1600 } });
    // Another site, which the operator's browser visits while it holds the console's credentials.
    evil = createServer((_req, res) => res.writeHead(200, { "content-type": "text/html" }).end(evilPage));
    await new Promise<void>((r) => evil.listen(0, "127.0.0.2", r));
    evilUrl = `http://127.0.0.2:${(evil.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    evil?.close();
    await browser?.close();
    await paying?.close();
  });

  it("refunds, from the console, exactly what the ledger shows paid under a NEEDS_REVIEW order's key; records who, when and why; the audit lists it as resolved", async () => {
    const order = await mismatchedOrder(mismatched, 400_000n);
    const payerBefore = await usdc(mismatched.address);
    const treasuryBefore = await usdc(celo.billPay);
    expect((await audit()).orders!.review.some((r) => r.includes(order.requestId))).toBe(true);

    // From the overview's "waiting for review" list to the order.
    const page = await alice.newPage();
    await page.goto(`${url}/console`);
    await page.locator(`#review tr[data-request-id="${order.requestId}"] a`).click();
    expect(await page.locator('#order [data-field="status"]').textContent()).toBe("NEEDS_REVIEW");
    // What the ledger shows under the key, and what each action would meet.
    expect(await page.locator('#review [data-field="ledger-paid"]').getAttribute("data-units")).toBe("400000");
    expect(await page.locator('[data-refused="refund"]').textContent()).toContain("allowed");
    expect(await page.locator('[data-refused="serve"]').textContent()).toContain("would be refused");
    expect(await page.locator('[data-refused="close"]').textContent()).toContain("would be refused");

    await mkdir("test-artifacts", { recursive: true });
    await page.screenshot({ path: "test-artifacts/console-review-form.png", fullPage: true });
    const result = await decide(page, "refund", "the payer's wallet landed 0.4 USDC under the bill's nonce; giving it back");
    expect(await result.getAttribute("data-outcome")).toBe("DONE");
    expect(await page.locator('#order [data-field="status"]').textContent()).toBe("REFUNDED");
    const row = page.locator("#review-actions tbody tr").last();
    expect(await row.getAttribute("data-action")).toBe("refund");
    expect(await row.locator('[data-field="operator"]').textContent()).toBe("alice");
    expect(await row.locator('[data-field="reason"]').textContent()).toContain("giving it back");
    expect(await row.locator('[data-field="outcome"]').textContent()).toBe("DONE");
    await page.screenshot({ path: "test-artifacts/console-review.png", fullPage: true });

    // The chain: exactly what landed went back to the payer, never the order's own amount.
    expect(await usdc(mismatched.address)).toBe(payerBefore + 400_000n);
    expect(await usdc(celo.billPay)).toBe(treasuryBefore - 400_000n);
    const after = (await service.flow.orders.get(order.requestId))!;
    expect(after).toMatchObject({ status: "REFUNDED" });
    expect(after.refundTxHash).toMatch(/^0x[0-9a-f]{64}$/);
    const recorded = await actions(order.requestId);
    expect(recorded).toEqual([expect.objectContaining({ action: "refund", operator: "alice", outcome: "DONE", amount: "400000" })]);
    // A payment of another amount paid for no bill: no signed receipt names the order's amount against it.
    const seen = (await (await fetch(`${url}/api/orders/${order.requestId}`)).json()) as Record<string, unknown>;
    expect(seen).toMatchObject({ status: "FAILED_VENDING" });
    expect(seen.receipt).toBeUndefined(); // on the code before: a receipt of the order's amount, paid by the transaction that moved 400000
    await ledgerAtHead();
    const onLedger = (await (await fetch(`${paying.ledger.url}/ledger/authorizations/42220/${celo.tokenAddress("USDC")}/${mismatched.address}/${order.authNonce}`)).json()) as { refunds: Array<{ amount: string }> };
    expect(onLedger.refunds.map((r) => r.amount)).toEqual(["400000"]);

    // The audit: resolved, not open, and no discrepancy.
    const report = await audit();
    expect(report.discrepancies).toEqual([]);
    expect(report.orders!.review.some((r) => r.includes(order.requestId))).toBe(false);
    expect(report.orders!.resolved.find((r) => r.includes(order.requestId))).toMatch(/REFUNDED.*refund by alice .*giving it back.*DONE/);
    await page.close();
  });

  it("refuses what the ledger does not allow, a missing reason and every cross-site POST, with nothing moved; then `npm run review` refunds it", async () => {
    const order = await mismatchedOrder(second, 250_000n);
    const payerBefore = await usdc(second.address);
    const page = await orderPage(alice, order.requestId);

    // Serve with a mismatched payment, close with a payment present: refused and recorded.
    expect(await (await decide(page, "serve", "try to vend it anyway")).getAttribute("data-outcome")).toBe("REFUSED");
    expect(await page.locator("#review-result").textContent()).toContain("only a payment of exactly the order's amount");
    expect(await (await decide(page, "close", "try to close it")).getAttribute("data-outcome")).toBe("REFUSED");
    expect(await page.locator("#review-result").textContent()).toContain("refund it or serve it");
    expect(await page.locator('#order [data-field="status"]').textContent()).toBe("NEEDS_REVIEW");
    expect((await actions(order.requestId)).map((a) => `${a.action}:${a.outcome}:${a.operator}`)).toEqual(["serve:REFUSED:alice", "close:REFUSED:alice"]);

    // The form's token, as the page has it, and a POST the way the form sends it.
    const csrf = (await page.locator('#review-form input[name="csrf"]').getAttribute("value"))!;
    const authorization = `Basic ${Buffer.from(`alice:${TOKEN}`).toString("base64")}`;
    const send = (path: string, fields: Record<string, string>, headers: Record<string, string> = {}) =>
      fetch(`${url}${path}`, { method: "POST", redirect: "manual", headers: { authorization, "content-type": "application/x-www-form-urlencoded", ...headers }, body: new URLSearchParams(fields).toString() });
    const reviewPath = `/console/orders/${order.requestId}/review`;

    // A missing (or blank) reason: nothing recorded, nothing moved.
    for (const reason of ["", "   "]) {
      const res = await send(reviewPath, { csrf, action: "refund", reason });
      expect(res.status).toBe(400);
      expect(await res.text()).toContain("a reason is required");
    }
    // Without the form's token, with a made-up one, with another order's, or from another origin.
    const elsewhere = (await service.db.query<{ request_id: string }>(`SELECT request_id FROM bill_order WHERE request_id <> $1 LIMIT 1`, [order.requestId]))[0]!.request_id;
    // A genuine token (the key is derived from OPS_TOKEN, as every instance derives it), but for another order's form.
    const otherToken = new FormTokens(TOKEN).issue(TOKEN, "alice", `order:${elsewhere}`);
    const refusals: Array<[Record<string, string>, Record<string, string>]> = [
      [{ action: "refund", reason: "forged" }, {}],
      [{ csrf: `${Math.floor(Date.now() / 1000)}.${"A".repeat(43)}`, action: "refund", reason: "forged" }, {}],
      [{ csrf, action: "refund", reason: "forged" }, { origin: "http://evil.example" }],
      [{ csrf, action: "refund", reason: "forged" }, { "sec-fetch-site": "cross-site" }],
      // Bob's name with Alice's form token: bound to who it was issued to.
      [{ csrf, action: "refund", reason: "forged" }, { authorization: `Basic ${Buffer.from(`bob:${TOKEN}`).toString("base64")}` }],
      [{ csrf: otherToken, action: "refund", reason: "forged" }, {}],
    ];
    for (const [fields, headers] of refusals) {
      const res = await send(reviewPath, fields, headers);
      expect(res.status, JSON.stringify({ fields, headers })).toBe(403);
      expect(await res.json()).toMatchObject({ code: "OPS_CROSS_SITE" });
    }
    // A GET never changes anything: there is no such route.
    expect((await fetch(`${url}${reviewPath}?action=refund&reason=x&csrf=${csrf}`, { headers: { authorization } })).status).toBe(404);
    // Another site's page makes the operator's browser (holding the console's credentials) POST the form.
    evilPage = `<form id="f" method="post" action="${url}${reviewPath}"><input name="action" value="refund"><input name="reason" value="forged"></form><script>document.getElementById("f").submit()</script>`;
    const attacked = await alice.newPage();
    const [answer] = await Promise.all([attacked.waitForResponse((r) => r.url().endsWith(reviewPath) && r.status() !== 401), attacked.goto(evilUrl)]);
    expect(answer.status()).toBe(403);
    expect(await answer.json()).toMatchObject({ code: "OPS_CROSS_SITE" });
    await attacked.close();

    expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");
    expect((await actions(order.requestId)).length).toBe(2);
    expect(await usdc(second.address)).toBe(payerBefore);

    // The command line: the same decision, recorded under the name it gives.
    const shown = await runReview(["show", order.requestId], { url, token: TOKEN, operator: "bob" });
    expect(shown.lines.join("\n")).toMatch(/ledger under its key: 0\.25 USDC on CELO paid/);
    const noReason = runReview(["refund", order.requestId], { url, token: TOKEN, operator: "bob" });
    await expect(noReason).rejects.toThrow(/needs --reason/);
    // A misspelt or foreign option is refused, never read as absent (nothing is sent).
    await expect(runReview(["close-orphan", "--chain", "CELO", "--refund_tx", "0x01", "--reason", "x"], { url, token: TOKEN, operator: "bob" })).rejects.toThrow(
      /close-orphan takes no --refund_tx; its options: .*--refund-tx/,
    );
    await expect(runReview(["refund", order.requestId, "--refund-tx", "0x01", "--reason", "x"], { url, token: TOKEN, operator: "bob" })).rejects.toThrow(/refund takes no --refund-tx/);
    await expect(runReview(["refund", order.requestId, "--reason", "a", "--reason", "b"], { url, token: TOKEN, operator: "bob" })).rejects.toThrow(/given twice/);
    expect((await actions(order.requestId)).length).toBe(2);
    // A payment not yet as deep as a bill is vended on is refunded by no one: BillPay's refund
    // asks only that its nonce be spent, and a reorganisation could put the payer's
    // cancelAuthorization in the payment's place, the refund standing.
    service.flow.confirmations.CELO = 1_000;
    try {
      const shallow = await runReview(["refund", order.requestId, "--reason", "too soon"], { url, token: TOKEN, operator: "bob" });
      expect(shallow.ok).toBe(false);
      expect(shallow.lines.join("\n")).toMatch(/not yet as deep as 1000 confirmations/);
    } finally {
      service.flow.confirmations.CELO = 0;
    }
    expect(await usdc(second.address)).toBe(payerBefore);
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");
    const refunded = await runReview(["refund", order.requestId, "--reason", "support ticket 42: refund what landed"], { url, token: TOKEN, operator: "bob" });
    expect(refunded.ok, refunded.lines.join("\n")).toBe(true);
    expect(refunded.lines[0]).toMatch(/^taken: #\d+ .* refund by bob \(support ticket 42: refund what landed\): DONE -> REFUNDED, amount 0\.25 USDC on CELO/);
    expect(await usdc(second.address)).toBe(payerBefore + 250_000n);
    await page.close();
  });

  it("refuses to refund or serve an order the ledger shows no payment for, and closes it with no money moved", async () => {
    // An order held with nothing under its key: the payer burnt the authorization's nonce while
    // its order was settling. (The service now closes such an EIP-3009 order by itself, and
    // refuses a spent nonce at intake; an order held so by an earlier release, or a Permit2 one,
    // is what an operator meets.)
    const body = x402Bill(cancelling.address);
    const req = await required(body);
    const full = await celo.signAuthorization(cancelling, "USDC", BigInt(req.accepted.amount));
    const payload = decodePaymentSignatureHeader(header(full, req)["PAYMENT-SIGNATURE"]);
    const locked = await lockAsCrashedRequest(service.flow, { body, payload, payer: cancelling.address, tokenAddress: celo.tokenAddress("USDC"), tag: `cancelled-${full.nonce}` });
    await celo.cancelAuthorization(cancelling, "USDC", full.nonce);
    await service.flow.orders.transition(locked.requestId, ["SETTLING"], "NEEDS_REVIEW", { failureReason: "the authorization's nonce is consumed on chain but no payment reached BillPay under it" });
    const order = (await orderOf(full))!;
    const before = await usdc(cancelling.address);

    const page = await orderPage(alice, order.requestId);
    expect(await page.locator('#review [data-field="ledger-paid"]').textContent()).toContain("no payment");
    expect(await (await decide(page, "refund", "give it back")).getAttribute("data-outcome")).toBe("REFUSED");
    expect(await page.locator("#review-result").textContent()).toContain("the ledger shows no payment under the order's key");
    const serve = await runReview(["serve", order.requestId, "--reason", "vend it"], { url, token: TOKEN, operator: "bob" });
    expect(serve.ok).toBe(false);
    expect(serve.lines[0]).toMatch(/not taken: .*serve by bob .*REFUSED/);
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");

    // A refund transaction is named only by a close of a Permit2 order held for its payer's
    // transfer: a malformed one is not taken, and on this order even a real-looking one is refused.
    const byHand = (refund_tx_hash: string) =>
      fetch(`${url}/ops/review/orders/${order.requestId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", "x-operator": "bob" },
        body: JSON.stringify({ action: "close", reason: "refunded by hand", refund_tx_hash }),
      });
    const malformed = await byHand("0x1234");
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { code: string }).code).toBe("VALIDATION_FAILED");
    const notHeldForATransfer = await byHand(`0x${"ab".repeat(32)}`);
    expect(notHeldForATransfer.status).toBe(409);
    expect(((await notHeldForATransfer.json()) as { detail: string }).detail).toContain("a close names a refund transaction only for a Permit2 order held");
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");

    // A refund of it was recorded by a run that died before sending it: signed, in no pool, its
    // refunder nonce unused. Closed as never paid, that refund, sent later by whoever kept it,
    // would pay out what BillPay never kept: refused, and voided by the refunder.
    const refunder = refunderAccount().address;
    const unused = await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" });
    const fees = await celo.publicClient.estimateFeesPerGas();
    await service.flow.orders.refundSigned(order.requestId, `0x${"cd".repeat(32)}`, { signer: refunder, nonce: unused, maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas });
    const whileLandable = await runReview(["close", order.requestId, "--reason", "the payer cancelled the authorization; nothing was paid"], { url, token: TOKEN, operator: "bob" });
    expect(whileLandable.ok).toBe(false);
    expect(whileLandable.lines.join("\n")).toContain(`under nonce ${unused} of ${refunder.toLowerCase()} is in no pool and not mined`);
    expect(whileLandable.lines.join("\n")).toContain("the refunder now sends itself nothing under that nonce");
    await expect.poll(() => celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" }), { timeout: 20_000 }).toBeGreaterThan(unused);
    const voided = await celo.publicClient.getBlockNumber();
    await expect.poll(() => celo.publicClient.getBlockNumber(), { timeout: 20_000 }).toBeGreaterThanOrEqual(voided + BigInt(service.flow.confirmations.CELO ?? 0));
    await ledgerAtHead();

    const closed = await runReview(["close", order.requestId, "--reason", "the payer cancelled the authorization; nothing was paid"], { url, token: TOKEN, operator: "bob" });
    expect(closed.ok, closed.lines.join("\n")).toBe(true);
    const after = (await service.flow.orders.get(order.requestId))!;
    expect(after.status).toBe("PAYMENT_FAILED");
    expect(after.failureReason).toMatch(/^closed by an operator \(review #\d+\)/);
    expect(after.failureReason).not.toContain("bob");
    expect(await usdc(cancelling.address)).toBe(before);
    expect((await actions(order.requestId)).map((a) => `${a.action}:${a.outcome}:${a.operator}`)).toEqual(["refund:REFUSED:alice", "serve:REFUSED:bob", "close:REFUSED:bob", "close:REFUSED:bob", "close:DONE:bob"]);
    // The payer sees a bill that was not charged, and neither the operator's name nor his note.
    const seen = await (await fetch(`${url}/api/orders/${order.requestId}`)).json();
    expect(seen).toMatchObject({ status: "FAILED_VENDING", charged: false });
    expect(JSON.stringify(seen)).not.toMatch(/bob|the payer cancelled/);
    await page.close();
  });

  /** A bill `payer` pays as any x402 client does, served; the ledger then at the chain's head. */
  async function servedBill(payer: typeof served): Promise<{ request_id: string; status: string }> {
    const res = await wrapFetchWithPayment(fetch, x402ClientFor(payer, paying.chains.deployments))(`${url}/api/pay/x402`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(x402Bill(payer.address)),
    });
    const paid = (await res.json()) as { request_id: string; status: string };
    expect(paid.status).toBe("SUCCESS");
    // The answer came on the settlement's receipt; the decisions read the ledger's record of it.
    await ledgerAtHead();
    return paid;
  }

  it("serves again an order held for review whose exact payment the ledger shows, without a second pay to the biller", async () => {
    const paid = await servedBill(served);
    // As the reorganisation watch does when a served order's payment could not be collected again in time.
    await service.flow.orders.transition(paid.request_id, ["SUCCESS"], "NEEDS_REVIEW", { failureReason: "its payment was reorganised off the chain (as a test sets it)" });
    const before = await usdc(served.address);

    const page = await orderPage(alice, paid.request_id);
    expect(await page.locator('[data-refused="serve"]').textContent()).toContain("allowed");
    expect(await page.locator('[data-refused="close"]').textContent()).toContain("would be refused");
    expect(await (await decide(page, "serve", "the payment is back on chain; the bill was delivered")).getAttribute("data-outcome")).toBe("DONE");
    expect(await page.locator('#order [data-field="status"]').textContent()).toBe("SUCCESS");
    expect(await page.locator('#order [data-field="biller-request-id"]').count()).toBe(1);
    expect(await usdc(served.address)).toBe(before);
    await page.close();
  });

  it("refuses to serve an order whose refund is still waiting to be mined, which the ledger cannot show yet: the payer gets the refund, never the bill as well", async () => {
    const paid = await servedBill(reversed);
    const order = (await service.flow.orders.get(paid.request_id))!;
    const before = await usdc(reversed.address);
    await celo.miningPaused(async (mine) => {
      // The biller took the bill back: its refund is signed and sent, and sits unmined (fees, a slow chain).
      const refunding = refund(service.flow, order, "the biller reversed the bill after delivering it (as a test sets it)", ["SUCCESS"]);
      await expect.poll(() => service.flow.orders.signedRefunds(order.requestId), { timeout: 20_000 }).toHaveLength(1);
      const [pending] = await service.flow.orders.signedRefunds(order.requestId);
      // Then the biller says an attempt was delivered after all (orders/fulfil.ts actOnBillerState): held for an operator.
      await service.flow.orders.transition(order.requestId, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: "the biller then delivered the bill while its refund was not yet done (as a test sets it)" });
      const serve = await runReview(["serve", order.requestId, "--reason", "the biller delivered it after all"], { url, token: TOKEN, operator: "bob" });
      expect(serve.lines[0]).toMatch(/not taken: .*serve by bob .*REFUSED/);
      expect(serve.lines.join("\n")).toContain(`its refund (transaction ${pending}) is waiting to be mined`);
      expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");
      await mine();
      await refunding;
    });
    // Mined: the payer has the payment back, once; the order stays with the operator, and serving it is still refused (the ledger shows the refund).
    expect(await usdc(reversed.address)).toBe(before + order.amount);
    await ledgerAtHead();
    const again = await runReview(["serve", order.requestId, "--reason", "the biller delivered it after all"], { url, token: TOKEN, operator: "bob" });
    expect(again.lines[0]).toMatch(/not taken: .*serve by bob .*REFUSED/);
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");
    // The operator closes it as what the chain shows, refunded: BillPay holds the key refunded, and nothing is sent again.
    const closed = await runReview(["refund", order.requestId, "--reason", "the refund went before the late delivery"], { url, token: TOKEN, operator: "bob" });
    expect(closed.ok, closed.lines.join("\n")).toBe(true);
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("REFUNDED");
    expect(await usdc(reversed.address)).toBe(before + order.amount);
    expect((await actions(order.requestId)).map((a) => `${a.action}:${a.outcome}`)).toEqual(["serve:REFUSED", "serve:REFUSED", "refund:DONE"]);
  });

  it("refuses to serve an order whose refund the node's pool dropped while its nonce is unused, which anyone could send again; once the refunder's nonce is used, serves it and the old refund cannot land", async () => {
    const paid = await servedBill(dropped);
    const order = (await service.flow.orders.get(paid.request_id))!;
    const before = await usdc(dropped.address);
    const refunder = refunderAccount();
    // A run that refunds the bill (the biller reversed it) and dies before its refund is mined.
    const died = new ChainOperator(paying.chains.deployments, { operator: operatorAccount(), refunder }, { replaceAfterMs: 300, maxReplacements: 0, lastWaitMs: 300 });
    const raw = await celo.miningPaused(async () => {
      await refund({ ...service.flow, operator: died }, order, "the biller reversed the bill after delivering it (as a test sets it)", ["SUCCESS"]);
      const [hash] = await service.flow.orders.signedRefunds(order.requestId);
      // Anyone watching the pool keeps what it broadcast: the transaction as signed.
      const tx = await celo.publicClient.getTransaction({ hash: hash! });
      const signed = asSigned(tx).serialized;
      expect(keccak256(signed)).toBe(hash);
      // The node forgets it (a restart, a fee eviction): in no pool, not mined, and its nonce unused.
      await celo.publicClient.request({ method: "hardhat_dropTransaction" as never, params: [hash] as never });
      return { hash: hash!, nonce: tx.nonce, signed };
    });
    // Then the biller says the bill was delivered after all: held for an operator.
    await service.flow.orders.transition(order.requestId, ["REFUNDING"], "NEEDS_REVIEW", { failureReason: "the biller then delivered the bill while its refund was not yet done (as a test sets it)" });
    await ledgerAtHead();
    const serve = await runReview(["serve", order.requestId, "--reason", "the biller delivered it after all"], { url, token: TOKEN, operator: "bob" });
    expect(serve.lines[0]).toMatch(/not taken: .*serve by bob .*REFUSED/);
    expect(serve.lines.join("\n")).toContain(`under nonce ${raw.nonce} of ${refunder.address.toLowerCase()} is in no pool and not mined`);
    expect(serve.lines.join("\n")).toContain("the refunder now sends itself nothing under that nonce");
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("NEEDS_REVIEW");

    // The service voided it: the refunder's transfer of nothing to itself took that nonce, as deep as a bill is vended on.
    const depth = BigInt(service.flow.confirmations.CELO ?? 0);
    await expect.poll(() => celo.publicClient.getTransactionCount({ address: refunder.address, blockTag: "latest" }), { timeout: 20_000 }).toBeGreaterThan(raw.nonce);
    const voidBlock = await celo.publicClient.getBlockNumber();
    await expect.poll(async () => (await celo.publicClient.getBlockNumber()) >= voidBlock + depth, { timeout: 20_000 }).toBe(true);
    await ledgerAtHead();
    const served = await runReview(["serve", order.requestId, "--reason", "the biller delivered it after all"], { url, token: TOKEN, operator: "bob" });
    expect(served.ok, served.lines.join("\n")).toBe(true);
    expect((await service.flow.orders.get(order.requestId))!.status).toBe("SUCCESS");
    // The refund as signed can no longer land: its nonce is used.
    await expect(celo.publicClient.sendRawTransaction({ serializedTransaction: raw.signed })).rejects.toThrow(/nonce/i);
    expect(await usdc(dropped.address)).toBe(before);
    expect((await actions(order.requestId)).map((a) => `${a.action}:${a.outcome}`)).toEqual(["serve:REFUSED", "serve:DONE"]);
  });

  it("a refund the budget makes wait is accepted, and the worker finishes it with the amount the operator approved", async () => {
    const order = await mismatchedOrder(waiting, 200_000n);
    const before = await usdc(waiting.address);
    const [limit, period] = await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "refundBudget", args: [celo.tokenAddress("USDC")] });
    await celo.setRefundBudget("USDC", 100_000n, 86_400n);
    service.flow.refundBudgets.forget("CELO", celo.tokenAddress("USDC"));
    try {
      const accepted = await runReview(["refund", order.requestId, "--reason", "refund what landed"], { url, token: TOKEN, operator: "bob" });
      expect(accepted.ok, accepted.lines.join("\n")).toBe(true);
      expect(accepted.lines[0]).toMatch(/ACCEPTED -> REFUNDING/);
      expect(await usdc(waiting.address)).toBe(before);
    } finally {
      await celo.setRefundBudget("USDC", limit, period);
      service.flow.refundBudgets.forget("CELO", celo.tokenAddress("USDC"));
    }
    // Once the budget has refilled (a limit set again keeps what was available, and refills at
    // limit per period) and its wait is over, the worker sends what the operator approved, not
    // the order's amount, and does not send it back to review.
    await expect
      .poll(async () => {
        service.flow.refundBudgets.forget("CELO", celo.tokenAddress("USDC"));
        await service.db.query(`UPDATE bill_order SET not_before = NULL WHERE request_id = $1`, [order.requestId]);
        await workOnce(service.flow);
        return (await service.flow.orders.get(order.requestId))!.status;
      }, { timeout: 20_000, interval: 500 })
      .toBe("REFUNDED");
    expect(await usdc(waiting.address)).toBe(before + 200_000n);
  });

  it("closes an x402 payment no order accounts for as refunded by hand, only once held and only with a transaction that refunded it; the audit lists it as resolved", async () => {
    const { nonce, receipt } = await celo.payByAuthorization(outsider, "USDC", 300_000n);
    await ledgerAtHead();
    await expect.poll(async () => (await reconcileAuthorizationPayments(service.flow), (await audit()).orders!.review.filter((r) => r.includes("has no order")).length), { timeout: 20_000 }).toBe(1);

    const page = await alice.newPage();
    await page.goto(`${url}/console/money`);
    await page.locator('#orphan-payments tr[data-status="NEEDS_REVIEW"] a', { hasText: "Decide" }).click();
    expect(await page.locator('#orphan [data-field="status"]').textContent()).toBe("NEEDS_REVIEW");

    // A refund by hand is closed only once the payment was held for it (before sending anything).
    await page.fill('#review-form input[name="refund_tx_hash"]', receipt.transactionHash);
    expect(await (await decide(page, "close", "refunded by hand")).getAttribute("data-outcome")).toBe("REFUSED");
    expect(await page.locator("#review-result").textContent()).toContain("hold this payment for a refund by hand first");
    expect(await (await decide(page, "hold", "the payer asked for it back; refunding from the treasury")).getAttribute("data-outcome")).toBe("DONE");
    expect(await page.locator('#orphan [data-field="status"]').textContent()).toBe("REFUNDING_BY_HAND");
    expect(await page.locator("#review-hold").count()).toBe(0);
    // Still waiting for an operator: the money page leads to it to decide.
    await page.goto(`${url}/console/money`);
    await page.locator('#orphan-payments tr[data-status="REFUNDING_BY_HAND"] a', { hasText: "Decide" }).click();
    expect(await page.locator('#orphan [data-field="status"]').textContent()).toBe("REFUNDING_BY_HAND");
    // The payment's own transaction refunds nothing: refused.
    await page.fill('#review-form input[name="refund_tx_hash"]', receipt.transactionHash);
    expect(await (await decide(page, "close", "refunded by hand")).getAttribute("data-outcome")).toBe("REFUSED");
    // Amounts as an operator reads them: decimals, symbol and chain, never raw units of an address.
    expect(await page.locator("#review-result").textContent()).toContain("no transfer of exactly 0.3 USDC on CELO to");
    expect(await page.locator('#orphan [data-field="amount"]').textContent()).toBe("0.3 USDC on CELO");
    // The admin sends it back from the treasury; that transaction closes it.
    const refundTx = (await celo.withdraw("USDC", outsider.address, 300_000n)).transactionHash;
    await page.fill('#review-form input[name="refund_tx_hash"]', refundTx);
    expect(await (await decide(page, "close", "sent to a shop's wallet by mistake; refunded by hand from the treasury")).getAttribute("data-outcome")).toBe("DONE");
    expect(await page.locator('#orphan [data-field="status"]').textContent()).toBe("REFUNDED");
    expect(await page.locator("#review-result").textContent()).toContain(`sent 0.3 USDC on CELO to ${outsider.address.toLowerCase()}`);
    expect(await page.locator('#review-actions tr[data-outcome="DONE"] [data-field="amount"]').allTextContents()).toEqual(["0.3 USDC on CELO", "0.3 USDC on CELO"]); // the hold and the close
    await page.close();

    // The same transaction cannot close another payment.
    await celo.payByAuthorization(outsider, "USDC", 300_000n);
    await ledgerAtHead();
    await expect.poll(async () => (await reconcileAuthorizationPayments(service.flow), (await service.db.query(`SELECT 1 FROM orphan_payment WHERE status = 'NEEDS_REVIEW'`)).length), { timeout: 20_000 }).toBe(1);
    const [open] = await service.db.query<{ auth_nonce: string }>(`SELECT auth_nonce FROM orphan_payment WHERE status = 'NEEDS_REVIEW'`);
    // `npm run review -- list` names it the same way, with the command that closes it.
    const listed = await runReview(["list"], { url, token: TOKEN, operator: "carol" });
    expect(listed.lines.join("\n")).toContain(`x402 payments without an order: 1\n  0.3 USDC on CELO from ${outsider.address.toLowerCase()}`);
    expect(listed.lines.join("\n")).toContain(`close-orphan --chain CELO --token ${celo.tokenAddress("USDC").toLowerCase()}`);
    expect(listed.lines.join("\n")).toContain(`hold-orphan --chain CELO --token ${celo.tokenAddress("USDC").toLowerCase()}`);
    const key = ["--chain", "CELO", "--token", celo.tokenAddress("USDC"), "--payer", outsider.address, "--nonce", open!.auth_nonce];
    const args = ["close-orphan", ...key];
    const held = await runReview(["hold-orphan", ...key, "--reason", "asked back"], { url, token: TOKEN, operator: "carol" });
    expect(held.ok, held.lines.join("\n")).toBe(true);
    const reused = await runReview([...args, "--reason", "refunded by hand", "--refund-tx", refundTx], { url, token: TOKEN, operator: "carol" });
    expect(reused.ok).toBe(false);
    expect(reused.lines[0]).toMatch(/REFUSED/);
    // Kept after all, saying why (a held payment may be): nothing is sent.
    const kept = await runReview([...args, "--reason", "the payer's test payment; agreed by email to keep it as credit"], { url, token: TOKEN, operator: "carol" });
    expect(kept.ok, kept.lines.join("\n")).toBe(true);
    expect(nonce).not.toBe(open!.auth_nonce);

    const report = await audit();
    expect(report.discrepancies).toEqual([]);
    // Nothing is left open: every order and payment held for review was decided.
    expect(report.orders!.review).toEqual([]);
    expect(report.orders!.resolved.filter((r) => r.includes("has no order"))).toEqual([
      expect.stringMatching(/REFUNDED, close-orphan by alice .*refunded by hand from the treasury.*DONE/),
      expect.stringMatching(/RESOLVED, close-orphan by carol .*keep it as credit.*DONE/),
    ]);
    expect(report.orders!.resolved.filter((r) => r.startsWith("order "))).toHaveLength(7);
    // Nothing waits: the list says so, and so does the console's empty table.
    expect((await runReview(["list"], { url, token: TOKEN, operator: "carol" })).lines).toEqual(["orders held for review: 0", "  none", "x402 payments without an order: 0", "  none"]);
    const empty = await alice.newPage();
    await empty.goto(`${url}/console/schedules`);
    expect(await empty.locator("#schedules tbody tr.none td").textContent()).toBe("none");
    await empty.close();
  });
});
