/**
 * The receipt path (server/chain/receipt-payment.ts): a payment counted from the service's own
 * node's receipt the moment its block exists, by the ledger's own predicate
 * (lib/payment-logs.ts). Attacked as a stranger would, against the real local stack: the
 * receipt of another transaction, of another token, of another amount, of a reverted
 * transaction, of a transfer that is not an authorization's; and a facilitator that answers
 * "settled" with a hash that is not the payment. None of them vends or charges. What the
 * receipt shows is what the ledger then books, row for row. A payment reorganised away after
 * the answer is test/ledger/reorg.test.ts's; a block replaced before the confirmation depth is
 * this file's last case.
 */
import { decodePaymentResponseHeader, x402HTTPClient } from "@x402/core/http";
import type { FacilitatorClient } from "@x402/core/server";
import { createWalletClient, encodeFunctionData, http, type Account, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { viemChain } from "../../lib/chains.ts";
import { randomNonce } from "../../lib/eip3009.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { paymentsFromReceipt } from "../../server/chain/receipt-payment.ts";
import { isPaymentOf, paymentMismatch } from "../../server/ledger-client.ts";
import { onChainOrderId } from "../../server/chain/order-id.ts";
import { SETTLEMENT_PENDING } from "../../server/x402-protocol/facilitator-answer.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { x402Bill } from "../support/bills.ts";
import { deliveredBy } from "../support/orders.ts";
import { startPayingStack } from "../support/stack.ts";
import { metricSum } from "../support/metrics.ts";

type Body = Record<string, unknown>;
const USDC = (n: number) => BigInt(Math.round(n * 1_000_000));

describe("a payment confirmed from its receipt", () => {
  let paying: Awaited<ReturnType<typeof startPayingStack>>;
  let service: ServiceStack;
  let celo: ChainActors;
  let url: string;

  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const rpc = (method: string, params: unknown[] = []) => celo.publicClient.request({ method: method as never, params: params as never }) as Promise<unknown>;
  /** The order key a receipt is matched against, for x402 (chain, token, payer, nonce). */
  const x402Key = (payer: Hex, nonce: Hex, symbol: "USDC" | "USD₮" = "USDC", amount = USDC(1)) => ({
    chain: "CELO",
    token: symbol,
    rail: "x402",
    onchainOrderId: `0x${"0".repeat(64)}`,
    tokenAddress: celo.tokenAddress(symbol),
    payer,
    authNonce: nonce,
    amount,
  });
  const fromReceipt = (hash: Hex) => paymentsFromReceipt(service.flow, "CELO", hash, 2_000);
  const post = (body: Body, headers: Record<string, string> = {}) =>
    fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const metric = (name: string) => metricSum(url, name);

  /** Pays a bill with the official x402 client; answers the service's answer. */
  async function payAnswer(payer: Account, body: Body): Promise<Response> {
    const challenged = await post(body);
    expect(challenged.status).toBe(402);
    const client = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    return post(body, client.encodePaymentSignatureHeader(payload));
  }
  /** The same, answering the service's JSON. */
  const pay = async (payer: Account, body: Body): Promise<Body> => (await (await payAnswer(payer, body)).json()) as Body;

  const delivered = (requestId: unknown) => deliveredBy(service, requestId);

  /**
   * The facilitator replaced, for one case, by one that answers `settle` itself. `ledgerWaitMs`:
   * how long a request waits for the ledger (by default not the 15 s of a real wait, for a
   * payment the ledger will not show either).
   */
  async function withFacilitator<T>(settle: FacilitatorClient["settle"], act: () => Promise<T>, ledgerWaitMs = 1_500): Promise<T> {
    const real = service.flow.facilitators.CELO!;
    const wait = service.flow.ledgerWaitMs;
    service.flow.facilitators.CELO = { ...real, verify: real.verify.bind(real), getSupported: real.getSupported.bind(real), settle };
    service.flow.ledgerWaitMs = ledgerWaitMs;
    try {
      return await act();
    } finally {
      service.flow.facilitators.CELO = real;
      service.flow.ledgerWaitMs = wait;
    }
  }

  beforeAll(async () => {
    paying = await startPayingStack();
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    url = service.urls.service;
  });
  afterAll(async () => {
    await paying?.close();
  });

  it("finds exactly what the ledger books: the same row, under the same key, of the same amount", async () => {
    const payer = hardhatAccount(6);
    const { receipt, nonce } = await celo.payByAuthorization(payer, "USDC", USDC(1.25));
    const shown = await fromReceipt(receipt.transactionHash);
    const ours = shown!.find(isPaymentOf(x402Key(payer.address, nonce)));
    expect(ours).toMatchObject({ rail: "authorization", amount: "1250000", txHash: receipt.transactionHash, blockNumber: String(receipt.blockNumber) });
    expect(paymentMismatch(x402Key(payer.address, nonce, "USDC", USDC(1.25)), ours!)).toBeNull();

    const booked = await service.flow.ledger.awaitPayment(isPaymentOf(x402Key(payer.address, nonce)), async () => (await service.flow.ledger.authorization("CELO", celo.tokenAddress("USDC"), payer.address, nonce)).payment, 10_000, () => {});
    expect(booked).toMatchObject(ours!); // the ledger's row carries a few more columns
  });

  it("finds nothing of an order in another payer's transaction, or in another token's payment under the same nonce", async () => {
    const [a, b] = [hardhatAccount(6), hardhatAccount(7)];
    const paidByB = await celo.payByAuthorization(b, "USDC", USDC(1));
    expect((await fromReceipt(paidByB.receipt.transactionHash))!.find(isPaymentOf(x402Key(a.address, paidByB.nonce)))).toBeUndefined();

    // EIP-3009 nonces are per token: the same payer and nonce in USD₮ is not the USDC order's payment.
    const nonce = randomNonce();
    const auth = await celo.signAuthorization(a, "USD₮", USDC(1), celo.billPay, { nonce });
    const inTether = await celo.submitAuthorization("USD₮", auth);
    const shown = (await fromReceipt(inTether.transactionHash))!;
    expect(shown).toHaveLength(1);
    expect(shown.find(isPaymentOf(x402Key(a.address, nonce, "USDC")))).toBeUndefined();
    expect(shown.find(isPaymentOf(x402Key(a.address, nonce, "USD₮")))).toBeDefined();
  });

  it("holds another amount under the order's key to the order: a mismatch, never a payment of the order", async () => {
    const payer = hardhatAccount(6);
    const { receipt, nonce } = await celo.payByAuthorization(payer, "USDC", USDC(0.5));
    const order = x402Key(payer.address, nonce, "USDC", USDC(2));
    const found = (await fromReceipt(receipt.transactionHash))!.find(isPaymentOf(order))!;
    expect(paymentMismatch(order, found)).toBe(`the chain shows 0.5 USDC on CELO paid under this key; the order is for 2 USDC on CELO`);
  });

  it("finds nothing in a reverted transaction, or in a plain transfer that follows an unrelated authorization", async () => {
    const payer = hardhatAccount(6);
    // A transferWithAuthorization whose signature is someone else's, mined and reverted. (An
    // automining Hardhat node refuses a reverting transaction at send; a mined block takes it.)
    const auth = await celo.signAuthorization(hardhatAccount(7), "USDC", USDC(1));
    const wallet = createWalletClient({ account: payer, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    await rpc("evm_setAutomine", [false]);
    let hash: Hex;
    try {
      hash = await wallet.sendTransaction({
        to: celo.tokenAddress("USDC"),
        gas: 200_000n,
        data: encodeFunctionData({ abi: eip3009TokenAbi, functionName: "transferWithAuthorization", args: [payer.address, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, auth.signature] }),
      });
      await rpc("evm_mine");
    } finally {
      await rpc("evm_setAutomine", [true]);
    }
    const reverted = await celo.publicClient.waitForTransactionReceipt({ hash });
    expect(reverted.status).toBe("reverted");
    expect(await fromReceipt(hash)).toBeNull();

    // The payer's authorization pays someone else; a plain transfer into BillPay follows it.
    const elsewhere = await celo.signAuthorization(payer, "USDC", USDC(0.1), hardhatAccount(8).address);
    const mixed = await celo.authorizationThenTransfer(payer, "USDC", elsewhere, USDC(1));
    expect(await fromReceipt(mixed.transactionHash)).toEqual([]);
  });

  it("finds a pull by its order id only", async () => {
    const payer = hardhatAccount(9);
    await celo.approveAndAllow(payer, "USDC", USDC(10));
    const [mine, other] = [onChainOrderId("ord_receipt_mine"), onChainOrderId("ord_receipt_other")];
    const receipt = await celo.pull(mine, payer.address, "USDC", USDC(1));
    const shown = (await fromReceipt(receipt.transactionHash))!;
    const pullKey = (id: Hex) => ({ ...x402Key(payer.address, randomNonce()), rail: "pull", onchainOrderId: id });
    expect(shown.find(isPaymentOf(pullKey(mine)))).toMatchObject({ rail: "pull", amount: "1000000" });
    expect(shown.find(isPaymentOf(pullKey(other)))).toBeUndefined();
  });

  it("a facilitator that answers 'settled' with another transaction's hash, or one no chain holds, vends nothing and charges nothing", async () => {
    const stranger = hardhatAccount(7);
    const someoneElses = (await celo.payByAuthorization(stranger, "USDC", USDC(5))).receipt.transactionHash;
    // A payer each: the first order's authorization is still valid, and once the real
    // facilitator is back, the worker may settle it for real while the second case runs.
    for (const [n, hash] of [someoneElses, `0x${"ab".repeat(32)}`].entries()) {
      const payer = hardhatAccount(15 + n);
      const [payerBefore, billPayBefore] = [await usdc(payer.address), await usdc(celo.billPay)];
      const lies = async () => ({ success: true, transaction: hash, network: "eip155:42220" as const, payer: payer.address });
      const answer = await withFacilitator(lies, () => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1000 + n })));
      expect(answer.status).not.toBe("SUCCESS");
      expect(await delivered(answer.request_id)).toEqual([]);
      expect((await service.flow.orders.get(answer.request_id as string))!.status).toBe("SETTLING");
      expect(await usdc(payer.address)).toBe(payerBefore);
      expect(await usdc(celo.billPay)).toBe(billPayBefore);
    }
  });

  it("a facilitator that settles but names another transaction: served from what the chain shows, and x402's receipt names the chain's transaction, not the named one", async () => {
    const named = (await celo.payByAuthorization(hardhatAccount(7), "USDC", USDC(2))).receipt.transactionHash;
    const real = service.flow.facilitators.CELO!;
    // x402's receipt is signed early and reused for the order's own transaction only: no receipt may name the one merely said.
    const misnames: FacilitatorClient["settle"] = async (payload, requirements) => ({ ...(await real.settle(payload, requirements)), transaction: named });
    const payer = hardhatAccount(12);
    const res = await withFacilitator(misnames, () => payAnswer(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1300 })), 15_000);
    const body = (await res.json()) as Body;
    expect(body.status).toBe("SUCCESS");
    const settlement = decodePaymentResponseHeader(res.headers.get("PAYMENT-RESPONSE")!);
    const order = (await service.flow.orders.get(body.request_id as string))!;
    expect(settlement.transaction).toBe(order.txHash);
    expect(settlement.transaction).not.toBe(named);
    const x402Receipt = (settlement.extensions as Record<string, { info: { receipt: { payload: { transaction: string } } } }>)["offer-receipt"]!.info.receipt;
    expect(x402Receipt.payload.transaction).toBe(order.txHash);
    expect((body.receipt as { payload: { transaction: string } }).payload.transaction).toBe(order.txHash);
  });

  it("a settlement the service's node shows before the facilitator answers is served from the chain, without waiting for the answer", async () => {
    const real = service.flow.facilitators.CELO!;
    const payer = hardhatAccount(13);
    const [payerBefore, billPayBefore] = [await usdc(payer.address), await usdc(celo.billPay)];
    let onChain: Hex | undefined;
    let answerReleased!: () => void;
    const released = new Promise<void>((r) => (answerReleased = r));
    // Settles for real, then holds its answer until the payer has his (or, should the service
    // wait for it after all, for 20 s: the test then fails on what released it).
    let releasedBy: "the payer's answer" | "the safety timeout" | undefined;
    const holds: FacilitatorClient["settle"] = async (payload, requirements) => {
      const settled = await real.settle(payload, requirements);
      onChain = settled.transaction as Hex;
      const timer = setTimeout(() => ((releasedBy ??= "the safety timeout"), answerReleased()), 20_000);
      await released;
      clearTimeout(timer);
      return settled;
    };
    const res = await withFacilitator(
      holds,
      async () => {
        const answer = await payAnswer(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1400 }));
        releasedBy ??= "the payer's answer";
        answerReleased();
        return answer;
      },
      15_000,
    );
    expect(releasedBy).toBe("the payer's answer");
    const body = (await res.json()) as Body;
    expect(body.status).toBe("SUCCESS");
    const order = (await service.flow.orders.get(body.request_id as string))!;
    expect(order.txHash).toBe(onChain);
    expect(decodePaymentResponseHeader(res.headers.get("PAYMENT-RESPONSE")!).transaction).toBe(onChain);
    expect(await delivered(body.request_id)).toHaveLength(1);
    const amount = BigInt(order.amount);
    expect(await usdc(payer.address)).toBe(payerBefore - amount);
    expect(await usdc(celo.billPay)).toBe(billPayBefore + amount);
  });

  it("the same payer and nonce used in another token while the settlement is pending is not the order's payment: nothing is vended or charged", async () => {
    const payer = hardhatAccount(14);
    const [payerBefore, billPayBefore] = [await usdc(payer.address), await usdc(celo.billPay)];
    // Instead of settling, the payer's nonce is used in USD₮ (a payment of its own, not the
    // order's), mined and announced; then the facilitator answers that it did not settle.
    const elsewhere: FacilitatorClient["settle"] = async (payload) => {
      const nonce = (payload.payload as { authorization: { nonce: Hex } }).authorization.nonce;
      const auth = await celo.signAuthorization(payer, "USD₮", USDC(1), celo.billPay, { nonce });
      const mined = await celo.submitAuthorization("USD₮", auth);
      while (service.flow.heads.latest("CELO") < mined.blockNumber) await new Promise((r) => setTimeout(r, 20));
      await rpc("hardhat_mine", ["0x1"]); // one more block for the service to look at
      return { success: false, errorReason: "invalid_exact_evm_payload_authorization_nonce", transaction: "", network: "eip155:42220" as const, payer: payer.address };
    };
    const answer = await withFacilitator(elsewhere, () => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1500 })));
    expect(answer.status).not.toBe("SUCCESS");
    expect(await delivered(answer.request_id)).toEqual([]);
    const order = (await service.flow.orders.get(answer.request_id as string))!;
    expect(["REFUSED", "PAYMENT_FAILED"]).toContain(order.status);
    expect(await usdc(payer.address)).toBe(payerBefore);
    expect(await usdc(celo.billPay)).toBe(billPayBefore);
  });

  it("a settlement the facilitator answers pending, naming its transaction, is served once its receipt shows it: one pay attempt, the one recorded while it settled", async () => {
    const payer = hardhatAccount(15);
    const before = await usdc(payer.address);
    const wallet = createWalletClient({ account: payer, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    // Broadcasts the authorization unmined and answers pending with its hash; the block comes a moment later.
    const pending: FacilitatorClient["settle"] = async (payload) => {
      const { authorization: a, signature } = payload.payload as { authorization: Record<"from" | "to" | "value" | "validAfter" | "validBefore" | "nonce", string>; signature: Hex };
      await rpc("evm_setIntervalMining", [0]);
      await rpc("evm_setAutomine", [false]);
      const hash = await wallet.writeContract({
        address: celo.tokenAddress("USDC"),
        abi: eip3009TokenAbi,
        functionName: "transferWithAuthorization",
        args: [a.from as Hex, a.to as Hex, BigInt(a.value), BigInt(a.validAfter), BigInt(a.validBefore), a.nonce as Hex, signature],
      });
      setTimeout(() => void rpc("evm_mine"), 300);
      return { success: false, errorReason: SETTLEMENT_PENDING, transaction: hash, network: "eip155:42220" as const, payer: payer.address };
    };
    let answer: Body;
    try {
      answer = await withFacilitator(pending, () => pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1350 })), 15_000);
    } finally {
      await rpc("evm_setAutomine", [true]);
      await rpc("evm_setIntervalMining", [1_000]);
    }
    expect(answer).toMatchObject({ status: "SUCCESS" });
    expect((await service.flow.orders.get(answer.request_id as string))!.txHash).toBeTruthy();
    // Noting the pending transaction (SETTLING to SETTLING) kept the attempt recorded ahead; it went once.
    expect(await delivered(answer.request_id)).toEqual(["delivered"]);
    const order = (await service.flow.orders.get(answer.request_id as string))!;
    expect(await usdc(payer.address)).toBe(before - order.amount);
  });

  it("a real settlement is confirmed from its receipt, and served", async () => {
    const before = await metric('billpay_payment_confirmations_total{chain="CELO",rail="x402",source="receipt"}');
    const payer = hardhatAccount(8);
    const answer = await pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1200 }));
    expect(answer).toMatchObject({ status: "SUCCESS" });
    expect(await metric('billpay_payment_confirmations_total{chain="CELO",rail="x402",source="receipt"}')).toBe(before + 1);
  });

  // Last: the ledger follows the chain back, and this file asks nothing of it after.
  it("with a confirmation depth, a settlement whose block is replaced before that depth is never served on its receipt", async () => {
    const payer = hardhatAccount(13);
    service.flow.confirmations.CELO = 2;
    const wait = service.flow.ledgerWaitMs;
    service.flow.ledgerWaitMs = 3_000;
    try {
      // No idle blocks meanwhile (the local chains mine one a second, hardhat.config.ts): one
      // landing between the settlement and the revert would reach the depth on its own.
      await rpc("evm_setIntervalMining", [0]);
      const before = await usdc(payer.address);
      const snapshot = await rpc("evm_snapshot");
      const answer = pay(payer, x402Bill(payer.address, { billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1550 }));
      await expect.poll(() => usdc(payer.address), { timeout: 10_000 }).toBeLessThan(before);
      await rpc("evm_revert", [snapshot]); // the block holding the settlement is gone
      await celo.mine(3);
      const answered = await answer;
      expect(answered.status).toBe("TIMEOUT");
      expect(await service.flow.attempts.of(answered.request_id as string)).toEqual([]);
      expect(await usdc(payer.address)).toBe(before);
    } finally {
      await rpc("evm_setIntervalMining", [1_000]);
      service.flow.confirmations.CELO = 0;
      service.flow.ledgerWaitMs = wait;
    }
  });
});
