/**
 * x402 through Permit2, end to end on the local stack: USD₮ on Base has no EIP-3009, so its
 * 402 asks for a Permit2 permit (x402 scheme_exact_evm.md), the official x402 client signs it,
 * the facilitator settles it through x402's exact proxy, the ledger books it under its own
 * key, and a failed bill is refunded by BillPay.refundPermit2. Every attack a stranger with a
 * wallet could try ends on the balances and the audit.
 */
import { x402HTTPClient } from "@x402/core/http";
import type { PaymentPayload, PaymentRequired } from "@x402/core/types";
import { decodePaymentResponseHeader } from "@x402/core/http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWalletClient, encodeFunctionData, http, maxUint256, multicall3Abi, parseAbi, parseSignature, serializeCompactSignature, signatureToCompactSignature, type Account, type Hex } from "viem";
import { eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { MULTICALL3_ADDRESS, viemChain } from "../../lib/chains.ts";
import { PERMIT2, PERMIT2_WITNESS_TYPES, permit2Domain, X402_EXACT_PROXY, x402ExactProxyAbi } from "../../lib/permit2.ts";
import { refunderAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { reconcileAuthorizationPayments } from "../../server/orders/ledger-pass.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";
import { lockAsCrashedRequest } from "../support/orders.ts";
import { closeExpiredRefusals, reconcileSettling, settle } from "../../server/orders/x402-flow.ts";
import { resolveOrder, ReviewRecords } from "../../server/orders/review.ts";
import { ServiceError } from "../../server/errors.ts";

/** The secp256k1 group order: n - s is the other, high-s spelling of a signature. */
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
type LedgerView = { payment: Record<string, unknown> | null; refunds: Array<Record<string, unknown>> };
const ledgerView = async (url: string) => (await (await fetch(url)).json()) as LedgerView;
type Result = { success: boolean; status: string; request_id: string; tx_hash: string | null; refund?: { status: string; tx_hash: string | null } };
const permit2InvalidateAbi = parseAbi(["function invalidateUnorderedNonces(uint256 wordPos, uint256 mask)"]);
type Permit2Payload = { signature: Hex; permit2Authorization: { from: Hex; permitted: { token: Hex; amount: string }; spender: Hex; nonce: string; deadline: string; witness: { to: Hex; validAfter: string } } };

describe("x402 through Permit2: USD₮ on Base", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let url: string;
  let base: ChainActors;
  let usdt: Hex;
  const payer = accounts(16);
  const stranger = accounts(17);

  const bill = (billersCode: string, who: Account = payer) => ({
    serviceID: "mtn",
    serviceCategory: "AIRTIME",
    network: "MTN",
    billersCode,
    nairaAmount: 1550,
    token: "USDT",
    blockchain: "BASE",
    wallet_address: who.address,
  });
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const balance = (who: Hex) => base.balanceOf("USD₮", who);
  const walletOf = (who: Account) => createWalletClient({ account: who, chain: viemChain("BASE", base.deployment.rpcUrl), transport: http(base.deployment.rpcUrl) });
  const approvePermit2 = async (who: Account, amount: bigint) =>
    base.mined(await walletOf(who).writeContract({ address: usdt, abi: eip3009TokenAbi, functionName: "approve", args: [PERMIT2, amount] }));

  /** The bill's 402 and the official client's payment for it. */
  async function challengeAndPayment(body: unknown, who: Account = payer) {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(who, paying.chains.deployments));
    const required = client.getPaymentRequiredResponse((name) => challenged.headers.get(name), await challenged.json()) as PaymentRequired;
    const payload = await client.createPaymentPayload(required);
    return { required, payload, headers: client.encodePaymentSignatureHeader(payload), client };
  }

  /** The proxy's settle of a signed permit, as calldata. */
  const settleCall = (payload: PaymentPayload) => {
    const { permit2Authorization: p, signature } = payload.payload as Permit2Payload;
    return encodeFunctionData({
      abi: x402ExactProxyAbi,
      functionName: "settle",
      args: [
        { permitted: { token: p.permitted.token, amount: BigInt(p.permitted.amount) }, nonce: BigInt(p.nonce), deadline: BigInt(p.deadline) },
        p.from,
        { to: p.witness.to, validAfter: BigInt(p.witness.validAfter) },
        signature,
      ],
    });
  };

  /** Anyone holding a signed permit has x402's proxy settle it, outside the service. */
  const settleAtProxy = (sender: Account, payload: PaymentPayload) => walletOf(sender).sendTransaction({ to: X402_EXACT_PROXY, data: settleCall(payload) });

  /**
   * A payer with Permit2 approved signs for `billersCode`, then moves all but less than the
   * price away: the facilitator's simulation of the settlement fails and the order is REFUSED.
   * Answers the payment, its amount, the payer's balance before, and the refusal.
   */
  async function refusedForBalance(who: Account, billersCode: string) {
    await approvePermit2(who, maxUint256);
    const start = await balance(who.address);
    const { payload, headers } = await challengeAndPayment(bill(billersCode, who), who);
    const amount = BigInt(payload.accepted.amount);
    await base.transfer(who, "USD₮", stranger.address, start - amount + 1n);
    const answer = await post(bill(billersCode, who), headers);
    const refused = (await answer.json()) as Result & { code: string; charged: boolean; reason: string; late_payment: string };
    expect(answer.status, JSON.stringify(refused)).toBe(402);
    expect((await paying.service.flow.orders.get(refused.request_id))!.status).toBe("REFUSED");
    return { payload, amount, start, refused };
  }

  /**
   * The refused order's permit lapses (as if its deadline had passed, by both clocks: the
   * service's, which picks it, and the chain's at `block`, which must agree), and the pass that
   * closes lapsed refusals runs until it moves the order (once the ledger has indexed as far as
   * the chain was read). The order as it ends.
   */
  async function lapsedAndClosed(requestId: string, blockNumber: bigint) {
    const block = await base.publicClient.getBlock({ blockNumber });
    const lapsed = [block.timestamp, BigInt(Math.floor(Date.now() / 1000))].reduce((a, b) => (a < b ? a : b)) - 1n;
    await paying.service.db.query(`UPDATE bill_order SET auth_valid_before = $2 WHERE request_id = $1`, [requestId, lapsed.toString()]);
    const status = async () => (await closeExpiredRefusals(paying.service.flow), (await paying.service.flow.orders.get(requestId))!.status);
    await expect.poll(status, { timeout: 20_000, interval: 250 }).not.toBe("REFUSED");
    return (await paying.service.flow.orders.get(requestId))!;
  }

  /** The payer spends his permit's nonce on Permit2's invalidation: the bit is set, no token moves. */
  async function burnNonce(who: Account, payload: PaymentPayload) {
    const nonce = BigInt((payload.payload as Permit2Payload).permit2Authorization.nonce);
    const burnt = await base.mined(
      await walletOf(who).writeContract({ address: PERMIT2, abi: permit2InvalidateAbi, functionName: "invalidateUnorderedNonces", args: [nonce >> 8n, 1n << (nonce & 0xffn)] }),
    );
    await waitForLedgerBlock(paying.ledger.url, 8453, burnt.blockNumber);
    return burnt;
  }

  /** A permit the test signs itself from the client's, with some terms changed, as a tampering payer would. */
  async function tampered(payload: PaymentPayload, change: Partial<Permit2Payload["permit2Authorization"]>, signer: Account = payer) {
    const p = { ...(payload.payload as Permit2Payload).permit2Authorization, ...change };
    const signature = await signer.signTypedData!({
      domain: permit2Domain(8453),
      types: PERMIT2_WITNESS_TYPES,
      primaryType: "PermitWitnessTransferFrom",
      message: {
        permitted: { token: p.permitted.token, amount: BigInt(p.permitted.amount) },
        spender: p.spender,
        nonce: BigInt(p.nonce),
        deadline: BigInt(p.deadline),
        witness: { to: p.witness.to, validAfter: BigInt(p.witness.validAfter) },
      },
    });
    const changed = { ...payload, payload: { signature, permit2Authorization: p } } as PaymentPayload;
    return new x402HTTPClient(x402ClientFor(signer, paying.chains.deployments)).encodePaymentSignatureHeader(changed);
  }

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts);
    url = paying.service.urls.service;
    base = chainActors(paying.chains.deployments, "BASE");
    usdt = base.tokenAddress("USD₮");
  });
  afterAll(() => paying?.close());

  it("the local chain carries Permit2 and x402's exact proxy at their canonical addresses", async () => {
    expect(await base.publicClient.getCode({ address: PERMIT2 })).toMatch(/^0x[0-9a-f]{200,}/);
    const permit2 = await base.publicClient.readContract({ address: X402_EXACT_PROXY, abi: x402ExactProxyAbi, functionName: "PERMIT2" });
    expect(permit2.toLowerCase()).toBe(PERMIT2.toLowerCase());
  });

  it("a bill in USD₮ on Base is offered through Permit2; without the payer's approval it is refused with what to approve, and nothing moves", async () => {
    const { required, headers } = await challengeAndPayment(bill("08011111111"));
    expect(required.accepts).toHaveLength(1);
    expect(required.accepts[0]).toMatchObject({ network: "eip155:8453", asset: usdt, extra: { assetTransferMethod: "permit2" } });
    expect(required.accepts[0]!.extra).not.toHaveProperty("primaryType");

    const before = await balance(payer.address);
    const res = await post(bill("08011111111"), headers);
    expect(res.status).toBe(412);
    const problem = (await res.json()) as { code: string; approval: { token: string; spender: string; at_least: string; calldata: Hex } };
    expect(problem.code).toBe("PERMIT2_ALLOWANCE_REQUIRED");
    expect(problem.approval).toMatchObject({ token: usdt, spender: PERMIT2, at_least: required.accepts[0]!.amount, current_allowance: "0" });
    expect(problem.approval.calldata).toBe(encodeFunctionData({ abi: eip3009TokenAbi, functionName: "approve", args: [PERMIT2, BigInt(required.accepts[0]!.amount)] }));
    expect(await balance(payer.address)).toBe(before);
  });

  it("an approval withdrawn after the service's own check: the settlement fails, the order is refused, and the payer is told what to approve", async () => {
    const unapproved = accounts(19);
    const before = await balance(unapproved.address);
    const { payload } = await challengeAndPayment(bill("08066666666", unapproved), unapproved);
    // As a request that passed the service's allowance check and then met the facilitator.
    const order = await lockAsCrashedRequest(paying.service.flow, { body: bill("08066666666", unapproved), payload, payer: unapproved.address, tokenAddress: usdt, tag: "permit2-no-allowance", chain: "BASE", token: "USD₮" });
    const thrown = await settle(paying.service.flow, order, { fresh: true }).catch((err: unknown) => err as ServiceError);
    expect(thrown).toBeInstanceOf(ServiceError);
    expect((thrown as ServiceError).code).toBe("PERMIT2_ALLOWANCE_REQUIRED");
    const extra = (thrown as ServiceError).extra as { charged: boolean; chain: string; approval: { token: string; spender: string; at_least: string } };
    expect(extra, JSON.stringify(extra)).toMatchObject({ charged: false, chain: "BASE", approval: { spender: PERMIT2, at_least: payload.accepted.amount } });
    expect(extra.approval.token.toLowerCase()).toBe(usdt.toLowerCase());
    expect((await paying.service.flow.orders.get(order.requestId))!.status).toBe("REFUSED");
    expect(await balance(unapproved.address)).toBe(before);
  });

  it("once approved, the official client's permit pays the bill: settled through the proxy, booked by the ledger under its Permit2 nonce", async () => {
    await approvePermit2(payer, maxUint256);
    const before = await balance(payer.address);
    const treasuryBefore = await balance(base.billPay);
    const { payload, headers } = await challengeAndPayment(bill("08011111111"));
    const res = await post(bill("08011111111"), headers);
    const result = (await res.json()) as Result;
    expect(res.status, JSON.stringify(result)).toBe(200);
    expect(result).toMatchObject({ success: true, status: "SUCCESS" });
    const amount = BigInt(payload.accepted.amount);
    expect(await balance(payer.address)).toBe(before - amount);
    expect(await balance(base.billPay)).toBe(treasuryBefore + amount);
    expect(decodePaymentResponseHeader(res.headers.get("PAYMENT-RESPONSE")!)).toMatchObject({ success: true, transaction: result.tx_hash, network: "eip155:8453" });
    const receipt = await base.publicClient.getTransactionReceipt({ hash: result.tx_hash as Hex });
    expect(receipt.to?.toLowerCase()).toBe(X402_EXACT_PROXY.toLowerCase());

    const nonce = `0x${BigInt((payload.payload as Permit2Payload).permit2Authorization.nonce).toString(16).padStart(64, "0")}`;
    await waitForLedgerBlock(paying.ledger.url, 8453, receipt.blockNumber);
    const asPermit2 = await ledgerView(`${paying.ledger.url}/ledger/authorizations/8453/${usdt}/${payer.address}/${nonce}?rail=permit2`);
    expect(asPermit2.payment).toMatchObject({ rail: "permit2", amount: amount.toString(), txHash: result.tx_hash });
    // Its own key: not an EIP-3009 payment under the same nonce.
    expect((await ledgerView(`${paying.ledger.url}/ledger/authorizations/8453/${usdt}/${payer.address}/${nonce}`)).payment).toBeNull();

    // Replayed as is: the same order, paid once. Concurrent copies too.
    const replays = await Promise.all([post(bill("08011111111"), headers), post(bill("08011111111"), headers)]);
    for (const r of replays) expect(((await r.json()) as Result).request_id).toBe(result.request_id);
    // Reused for another bill: refused.
    const reused = await post(bill("08022222222"), headers);
    expect(reused.status).toBe(402);
    expect(((await reused.json()) as { code: string }).code).toBe("PAYMENT_ALREADY_USED");
    expect(await balance(payer.address)).toBe(before - amount);
  });

  it("refunds a failed bill on chain through BillPay.refundPermit2: the payer is whole, the ledger shows the refund on the Permit2 rail", async () => {
    const before = await balance(payer.address);
    const { headers, payload } = await challengeAndPayment(bill("08099999999"));
    const result = (await (await post(bill("08099999999"), headers)).json()) as Result;
    expect(result).toMatchObject({ success: false, status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
    expect(await balance(payer.address)).toBe(before);
    const nonce = `0x${BigInt((payload.payload as Permit2Payload).permit2Authorization.nonce).toString(16).padStart(64, "0")}`;
    const refundReceipt = await base.publicClient.getTransactionReceipt({ hash: result.refund!.tx_hash as Hex });
    await waitForLedgerBlock(paying.ledger.url, 8453, refundReceipt.blockNumber);
    const seen = await ledgerView(`${paying.ledger.url}/ledger/authorizations/8453/${usdt}/${payer.address}/${nonce}?rail=permit2`);
    expect(seen.refunds).toEqual([expect.objectContaining({ rail: "permit2", txHash: result.refund!.tx_hash, amount: payload.accepted.amount })]);
  });

  it("refuses forged, mismatched and redirected permits before anything is stored or settled", async () => {
    const before = await balance(payer.address);
    const { payload } = await challengeAndPayment(bill("08033333333"));
    const amount = BigInt(payload.accepted.amount);
    const other = `0x${"ab".repeat(20)}` as Hex;
    const cases: Array<[string, Promise<Record<string, string>>]> = [
      ["AMOUNT_MISMATCH", tampered(payload, { permitted: { token: usdt, amount: (amount - 1n).toString() } })],
      ["PAYEE_MISMATCH", tampered(payload, { witness: { to: stranger.address, validAfter: "0" } })],
      ["PERMIT2_SPENDER_INVALID", tampered(payload, { spender: other })],
      ["PAYMENT_ASSET_MISMATCH", tampered(payload, { permitted: { token: base.tokenAddress("USDC"), amount: amount.toString() } })],
      ["SIGNATURE_INVALID", tampered(payload, {}, stranger).then((h) => h)],
    ];
    for (const [code, headers] of cases) {
      const res = await post(bill("08033333333"), await headers);
      expect(res.status, code).toBe(402);
      expect(((await res.json()) as { code: string }).code, code).toBe(code);
    }
    // The payer's own signature in its compact (EIP-2098) form: Permit2 would take it, but BillPay
    // (OpenZeppelin's ECDSA, 65 bytes only) could not check it to refund; the service refuses it.
    const compact = { ...payload, payload: { ...(payload.payload as Permit2Payload), signature: serializeCompactSignature(signatureToCompactSignature(parseSignature((payload.payload as Permit2Payload).signature))) } } as PaymentPayload;
    const compactRes = await post(bill("08033333333"), new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments)).encodePaymentSignatureHeader(compact));
    const compactBody = (await compactRes.json()) as { code: string; error: string };
    expect(compactBody, JSON.stringify(compactBody).slice(0, 300)).toMatchObject({ code: "SIGNATURE_INVALID" });
    // The same signature malleated (s -> n - s, the other v): Permit2's ecrecover would settle it,
    // but BillPay could not check it to refund; refused too.
    const signature = (payload.payload as Permit2Payload).signature;
    const highS = (SECP256K1_N - BigInt(`0x${signature.slice(66, 130)}`)).toString(16).padStart(64, "0");
    const flippedV = signature.slice(130) === "1b" ? "1c" : "1b";
    const malleated = { ...payload, payload: { ...(payload.payload as Permit2Payload), signature: `${signature.slice(0, 66)}${highS}${flippedV}` } } as PaymentPayload;
    const malleatedRes = await post(bill("08033333333"), new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments)).encodePaymentSignatureHeader(malleated));
    expect(((await malleatedRes.json()) as { code: string; error: string })).toMatchObject({ code: "SIGNATURE_INVALID", error: expect.stringContaining("low s") });
    // Both shapes in one payload: the facilitator could settle the one not checked here.
    const both = { ...payload, payload: { ...(payload.payload as Permit2Payload), authorization: { from: payer.address, to: base.billPay, value: amount.toString(), validAfter: "0", validBefore: "9999999999", nonce: `0x${"33".repeat(32)}` } } } as PaymentPayload;
    const bothRes = await post(bill("08033333333"), new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments)).encodePaymentSignatureHeader(both));
    expect(((await bothRes.json()) as { code: string }).code).toBe("INVALID_PAYMENT_HEADER");
    // The same permit on the wrong chain, and an EIP-3009 payment for this Permit2 token.
    const celoPayload = { ...payload, accepted: { ...payload.accepted, network: "eip155:42220" } } as PaymentPayload;
    const wrongChain = await post(bill("08033333333"), new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments)).encodePaymentSignatureHeader(celoPayload));
    expect(((await wrongChain.json()) as { code: string }).code).toBe("PAYMENT_NETWORK_MISMATCH");
    const eip3009 = { ...payload, payload: { signature: "0x" + "11".repeat(65), authorization: { from: payer.address, to: base.billPay, value: amount.toString(), validAfter: "0", validBefore: String(Math.floor(Date.now() / 1000) + 300), nonce: "0x" + "22".repeat(32) } } } as PaymentPayload;
    const wrongMethod = await post(bill("08033333333"), new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments)).encodePaymentSignatureHeader(eip3009));
    expect(((await wrongMethod.json()) as { code: string }).code).toBe("PAYMENT_METHOD_MISMATCH");
    expect(await balance(payer.address)).toBe(before);
  });

  it("a permit the facilitator refuses (the payer cannot cover it) is not charged; landed later by anyone, it is refunded", async () => {
    const late = accounts(18);
    const { payload, amount, start, refused: refusedBody } = await refusedForBalance(late, "08055555555");
    expect(refusedBody).toMatchObject({ code: "PAYMENT_NOT_SETTLED", charged: false });
    // @x402/evm's facilitator diagnoses the failed simulation: the payer's balance.
    expect(refusedBody.reason).toBe("facilitator: permit2_insufficient_balance");
    expect(refusedBody.late_payment).toMatch(/refunded/);
    expect(await balance(late.address)).toBe(amount - 1n);
    const order = (await paying.service.flow.orders.get(refusedBody.request_id))!;

    // The funds come back, and anyone holding the signed permit lands it before its deadline.
    await base.transfer(stranger, "USD₮", late.address, start - amount + 1n);
    const landed = await base.mined(await settleAtProxy(stranger, payload));
    expect(await balance(late.address)).toBe(start - amount);
    await waitForLedgerBlock(paying.ledger.url, 8453, landed.blockNumber);
    // The ledger pass finds the payment under the refused order's key, and refunds exactly it.
    await expect
      .poll(async () => (await reconcileAuthorizationPayments(paying.service.flow), (await paying.service.flow.orders.get(order.requestId))!.status), { timeout: 20_000 })
      .toBe("REFUNDED");
    expect(await balance(late.address)).toBe(start);
  });

  it("a Permit2 payment made to BillPay outside the service is booked, kept for an operator, and the audit agrees with every balance", async () => {
    // The stranger approves Permit2 and has the proxy settle a permit to BillPay itself: no order, no bill.
    await approvePermit2(stranger, maxUint256);
    const { payload } = await challengeAndPayment(bill("08044444444", stranger), stranger);
    const p = (payload.payload as Permit2Payload).permit2Authorization;
    const before = await balance(base.billPay);
    const hash = await settleAtProxy(stranger, payload);
    const receipt = await base.mined(hash);
    expect(await balance(base.billPay)).toBe(before + BigInt(p.permitted.amount));
    await waitForLedgerBlock(paying.ledger.url, 8453, receipt.blockNumber);

    // The worker's ledger pass records it for an operator; the audit lists it for review, and finds nothing amiss.
    const orphans = async () => {
      await reconcileAuthorizationPayments(paying.service.flow);
      return (await paying.service.db.query<{ rail: string }>(`SELECT rail FROM orphan_payment WHERE tx_hash = $1`, [hash])).map((r) => r.rail);
    };
    await expect.poll(orphans, { timeout: 20_000 }).toEqual(["permit2"]);
    const audit = await auditOnSharedChains(paying, { url });
    expect(audit.discrepancies).toEqual([]);
    expect(audit.orders?.review.join("\n")).toContain(hash);
  });

  it("a refused permit later settled through another contract (a batcher) is held for an operator when it lapses, never closed as not charged; the audit agrees", async () => {
    const who = accounts(15);
    const { payload, amount, start, refused } = await refusedForBalance(who, "08066666666");
    expect(refused.code).toBe("PAYMENT_NOT_SETTLED");
    expect(refused.late_payment).toMatch(/settled through another contract, it is held for an operator/);

    // The funds come back, and a stranger lands the permit through Multicall3, not by calling
    // the proxy itself: BillPay is paid, but the ledger cannot read the permit from the call.
    await base.transfer(stranger, "USD₮", who.address, start - amount + 1n);
    const treasury = await balance(base.billPay);
    const batched = await base.mined(
      await walletOf(stranger).writeContract({ address: MULTICALL3_ADDRESS, abi: multicall3Abi, functionName: "aggregate3", args: [[{ target: X402_EXACT_PROXY, allowFailure: false, callData: settleCall(payload) }]] }),
    );
    expect(await balance(base.billPay)).toBe(treasury + amount);
    expect(await balance(who.address)).toBe(start - amount);
    await waitForLedgerBlock(paying.ledger.url, 8453, batched.blockNumber);
    await reconcileAuthorizationPayments(paying.service.flow);
    expect((await paying.service.flow.orders.get(refused.request_id))!.status).toBe("REFUSED");

    // The permit lapses: its nonce is spent, the ledger shows nothing under it, and the payer
    // may well have paid (his transfer into BillPay is unaccounted for). Held, with why.
    const held = await lapsedAndClosed(refused.request_id, batched.blockNumber);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toMatch(/Permit2 nonce is spent.*another contract/);
    expect(await balance(who.address)).toBe(start - amount); // nothing sent on a guess

    // Nor may an operator close it as not charged: refused, recorded, and still held.
    const service = paying.service;
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const closing = await resolveOrder(review, { requestId: refused.request_id, action: "close", reason: "the ledger shows nothing", operator: "bob" });
    expect(closing.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(closing.record.detail).toMatch(/Permit2 nonce is spent on chain.*cannot be closed as not charged/);
    expect(closing.record.detail).toContain(batched.transactionHash);
    expect((await service.flow.orders.get(refused.request_id))!.status).toBe("NEEDS_REVIEW");

    const audit = await auditOnSharedChains(paying, { url });
    expect(audit.discrepancies).toEqual([]);
    expect(audit.orders?.review.join("\n")).toContain(refused.request_id);
  });

  it("a refused permit whose payer spends its nonce on an invalidation, with no transfer of its amount into BillPay, is closed as not charged when it lapses; an operator may close one held before", async () => {
    const who = accounts(14);
    const { payload, amount, refused } = await refusedForBalance(who, "08077777777");
    // Dust sent to BillPay is not this permit's settlement (the exact proxy moves the permitted amount).
    await base.transfer(who, "USD₮", base.billPay, 1n);
    const burnt = await burnNonce(who, payload);
    const closed = await lapsedAndClosed(refused.request_id, burnt.blockNumber);
    expect(closed.status).toBe("PAYMENT_FAILED");
    expect(closed.failureReason).toMatch(/spent on chain on something else.*nothing was charged/);
    expect(await balance(who.address)).toBe(amount - 2n); // as the refusal and the dust left it: nothing taken, nothing sent

    // An order held under the earlier rule (every spent Permit2 nonce held) can now be closed
    // by an operator, on the same reading of the ledger.
    await paying.service.db.query(`UPDATE bill_order SET status = 'NEEDS_REVIEW' WHERE request_id = $1`, [refused.request_id]);
    const service = paying.service;
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const closing = await resolveOrder(review, { requestId: refused.request_id, action: "close", reason: "nonce invalidated by the payer", operator: "bob" });
    expect(closing.record).toMatchObject({ outcome: "DONE", status_after: "PAYMENT_FAILED" });

    // A payer who sent BillPay a plain transfer of the permit's amount is held instead: the
    // ledger cannot say that transfer was not this permit's.
    const other = await refusedForBalance(accounts(13), "08078888888");
    await base.transfer(stranger, "USD₮", accounts(13).address, 1n);
    const sent = await base.transfer(accounts(13), "USD₮", base.billPay, other.amount);
    const held = await lapsedAndClosed(other.refused.request_id, (await burnNonce(accounts(13), other.payload)).blockNumber);
    expect(held.status).toBe("NEEDS_REVIEW");
    expect(held.failureReason).toContain(sent.transactionHash);

    const audit = await auditOnSharedChains(paying, { url });
    expect(audit.discrepancies).toEqual([]);
  });

  it("a settling permit whose answer was lost, its nonce then burnt by its payer, is closed as not charged by the worker's pass", async () => {
    const who = accounts(12);
    const body = bill("08079999999", who);
    const before = await balance(who.address);
    const { payload } = await challengeAndPayment(body, who);
    // As a request that crashed while the facilitator settled: the worker finds it SETTLING.
    const order = await lockAsCrashedRequest(paying.service.flow, { body, payload, payer: who.address, tokenAddress: usdt, tag: "permit2-burnt-while-settling", chain: "BASE", token: "USD₮" });
    expect(order.status).toBe("SETTLING");
    await burnNonce(who, payload);
    // A pass decides only once the ledger has indexed the block it read the nonce at, which
    // may be a block or two past the burn (the chains mine every second): until then it leaves
    // the order for the next pass, as the worker's loop does.
    await expect
      .poll(async () => (await reconcileSettling(paying.service.flow, order), (await paying.service.flow.orders.get(order.requestId))!.status), { timeout: 20_000, interval: 250 })
      .toBe("PAYMENT_FAILED");
    const closed = (await paying.service.flow.orders.get(order.requestId))!;
    expect(closed.status).toBe("PAYMENT_FAILED");
    expect(closed.failureReason).toMatch(/spent on chain on something else.*nothing was charged/);
    expect(await balance(who.address)).toBe(before);
  });

  it("permits held for their payer's transfers into BillPay: each transfer is taken by one hold before anything is sent, given back once, and holds no other order", async () => {
    const who = accounts(10);
    const [a, b, c] = [await refusedForBalance(who, "08071111111"), await refusedForBalance(who, "08071111112"), await refusedForBalance(who, "08071111113")];
    expect([b.amount, c.amount]).toEqual([a.amount, a.amount]);
    const amount = a.amount;
    // A withdrawal to him before any transfer of his cannot give one back (the treasury is
    // topped up by someone else first, for a run of this case alone).
    await base.transfer(stranger, "USD₮", base.billPay, amount);
    const early = await base.withdraw("USD₮", who.address, amount);
    await base.transfer(stranger, "USD₮", who.address, 1n);
    // Two transfers of the permits' amount: three orders are held for them.
    const sent = [await base.transfer(who, "USD₮", base.billPay, amount), await base.transfer(who, "USD₮", base.billPay, amount)];
    for (const o of [a, b, c]) expect((await lapsedAndClosed(o.refused.request_id, (await burnNonce(who, o.payload)).blockNumber)).status).toBe("NEEDS_REVIEW");
    const service = paying.service;
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const decide = (o: typeof a, action: "close" | "hold" | "serve", refundTxHash?: Hex) =>
      resolveOrder(review, { requestId: o.refused.request_id, action, reason: "his transfer, back by hand", operator: "bob", refundTxHash });

    const unheld = await decide(a, "close");
    expect(unheld.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(unheld.record.detail).toContain("hold it for a refund by hand (before sending anything)");
    expect((await decide(a, "close", early.transactionHash)).record.detail).toContain("this one is not held so");
    // A refund of it recorded by a run that died before sending it, its refunder nonce unused:
    // held for a refund by hand now, the payer could have it back twice. Refused, and voided.
    const refunder = refunderAccount().address;
    const unused = await base.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" });
    const fees = await base.publicClient.estimateFeesPerGas();
    await service.flow.orders.refundSigned(a.refused.request_id, `0x${"ef".repeat(32)}`, { signer: refunder, nonce: unused, maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas });
    const whileLandable = await decide(a, "hold");
    expect(whileLandable.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(whileLandable.record.detail).toContain(`under nonce ${unused} of ${refunder.toLowerCase()} is in no pool and not mined`);
    await expect.poll(() => base.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" }), { timeout: 20_000 }).toBeGreaterThan(unused);
    // Each hold takes one transfer, the oldest left, before anything is sent.
    const heldA = await decide(a, "hold");
    expect(heldA.record, heldA.record.detail ?? "").toMatchObject({ outcome: "DONE", status_after: "NEEDS_REVIEW", hand_refund_inflow: expect.stringContaining(sent[0]!.transactionHash) });
    // Held, it closes by its refund alone: not again held, not closed as not charged (its
    // transfer, taken by the hold, no longer counts against a plain close's verdict).
    for (const again of ["hold", "close"] as const) {
      const refused = await decide(a, again);
      expect(refused.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
      expect(refused.record.detail).toContain("is held for a refund by hand of its payer's transfer");
    }
    expect((await decide(b, "hold")).record).toMatchObject({ outcome: "DONE", hand_refund_inflow: expect.stringContaining(sent[1]!.transactionHash) });
    // Both transfers taken, the third order is held by none: nothing to give back, closed as not charged.
    const heldC = await decide(c, "hold");
    expect(heldC.record.outcome).toBe("REFUSED");
    expect(heldC.record.detail).toContain("there is nothing to give back");
    expect((await decide(c, "close")).record).toMatchObject({ outcome: "DONE", status_after: "PAYMENT_FAILED" });

    // The refund's transaction is checked on chain: not one before the transfer, not a friend's, and named by a close only.
    const tooEarly = await decide(a, "close", early.transactionHash);
    expect(tooEarly.record.detail).toContain("comes before the transfer it would give back");
    const sideways = await base.transfer(stranger, "USD₮", who.address, amount);
    expect((await decide(a, "close", sideways.transactionHash)).record.detail).toContain("from BillPay or its admin");
    expect((await decide(a, "serve", sideways.transactionHash)).record.detail).toContain("only a close names a refund transaction");

    const before = await balance(who.address);
    const back = await base.withdraw("USD₮", who.address, amount);
    const closed = await decide(a, "close", back.transactionHash);
    expect(closed.record, closed.record.detail ?? "").toMatchObject({ outcome: "DONE", status_after: "REFUNDED", tx_hash: back.transactionHash.toLowerCase() });
    expect((await service.flow.orders.get(a.refused.request_id))!).toMatchObject({ status: "REFUNDED", refundTxHash: back.transactionHash });
    // One refund closes one order.
    const reused = await decide(b, "close", back.transactionHash);
    expect(reused.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(reused.record.detail).toContain("already closed another payment or order as refunded by hand");
    const backAgain = await base.withdraw("USD₮", who.address, amount);
    expect((await decide(b, "close", backAgain.transactionHash)).record).toMatchObject({ outcome: "DONE", status_after: "REFUNDED" });
    expect(await balance(who.address)).toBe(before + 2n * amount); // both transfers back, once each

    const audit = await auditOnSharedChains(paying, { url });
    expect(audit.discrepancies).toEqual([]);
    expect(audit.orders?.resolved.join("\n")).toContain(a.refused.request_id);
  });

  it("an operator may not close as not charged a held permit that can still be settled, and may once it has lapsed unspent", async () => {
    const who = accounts(11);
    const body = bill("08079999998", who);
    const { payload } = await challengeAndPayment(body, who);
    const order = await lockAsCrashedRequest(paying.service.flow, { body, payload, payer: who.address, tokenAddress: usdt, tag: "permit2-held-unspent", chain: "BASE", token: "USD₮" });
    await paying.service.db.query(`UPDATE bill_order SET status = 'NEEDS_REVIEW' WHERE request_id = $1`, [order.requestId]);
    const service = paying.service;
    const review = { ...service.flow, reviews: new ReviewRecords(service.db), db: service.db };
    const close = () => resolveOrder(review, { requestId: order.requestId, action: "close", reason: "nothing landed", operator: "bob" });
    // Settled later through a batcher, it would pay BillPay unseen under the key: refused.
    const early = await close();
    expect(early.record).toMatchObject({ outcome: "REFUSED", status_after: "NEEDS_REVIEW" });
    expect(early.record.detail).toMatch(/can still be settled until .*close it after that/);
    // Lapsed with its nonce unspent, it never can be: closed.
    const head = await base.publicClient.getBlock();
    const lapsed = [head.timestamp, BigInt(Math.floor(Date.now() / 1000))].reduce((a, b) => (a < b ? a : b)) - 1n;
    await service.db.query(`UPDATE bill_order SET auth_valid_before = $2 WHERE request_id = $1`, [order.requestId, lapsed.toString()]);
    const late = await close();
    expect(late.record).toMatchObject({ outcome: "DONE", status_after: "PAYMENT_FAILED" });
  });
});
