/**
 * pay_bill paid per call with x402 over A2A (a2a-x402 v0.2, server/agent/a2a-x402.ts),
 * against the real local stack, with @a2a-js/sdk's client and the official x402 client: the
 * Agent Card declares the extension; a call with no api_key becomes an input-required task
 * carrying the PaymentRequired; the payment submitted on the task is settled and the task
 * completes with its receipt, or fails with the page's error code; and a stranger's tries
 * (underpaid, forged, wrong chain, no payload, an empty wallet, a replay, an unknown task)
 * charge nothing or charge once. Each case ends on balances; the suite ends on the audit.
 */
import { Role, TaskState, type Message, type Task } from "@a2a-js/sdk";
import { ClientFactory, type Client } from "@a2a-js/sdk/client";
import { PaymentRequiredV2Schema } from "@x402/core/schemas";
import type { PaymentPayload, PaymentRequired } from "@x402/core/types";
import type { Account, Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chainInfo } from "../../lib/chains.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { airtimeBill } from "../support/bills.ts";
import { deliveredBy } from "../support/orders.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Body = Record<string, unknown>;
const EXTENSION = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2";

describe("pay_bill over A2A, paid per call with x402 (a2a-x402 v0.2)", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let a2a: Client;

  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const bill = (extra: Body = {}) => airtimeBill({ billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1500, ...extra });
  const send = async (message: Partial<Message>): Promise<Task | Message> =>
    a2a.sendMessage({
      tenant: "",
      message: { messageId: crypto.randomUUID(), contextId: "", taskId: "", role: Role.ROLE_USER, parts: [], metadata: undefined, extensions: [EXTENSION], referenceTaskIds: [], ...message },
      configuration: undefined,
      metadata: undefined,
    });
  const dataPart = (value: unknown) => ({ content: { $case: "data" as const, value }, metadata: undefined, filename: "", mediaType: "application/json" });
  /** Step 1: the call, answered with an input-required task. */
  const ask = async (args: Body) => {
    const task = (await send({ parts: [dataPart({ skill: "pay_bill", arguments: args })] })) as Task;
    expect(task.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const meta = task.status!.message!.metadata!;
    expect(meta["x402.payment.status"]).toBe("payment-required");
    return { task, required: PaymentRequiredV2Schema.parse(meta["x402.payment.required"]) as unknown as PaymentRequired };
  };
  /** Step 3: the payment (or a rejection) on the task. */
  const submit = async (task: Task, metadata: Body) => (await send({ taskId: task.id, contextId: task.contextId, parts: [{ content: { $case: "text", value: "Here is the payment." }, metadata: undefined, filename: "", mediaType: "text/plain" }], metadata })) as Task;
  const sign = (payer: Account, required: PaymentRequired, pick: (a: PaymentRequired["accepts"][number]) => boolean = () => true): Promise<PaymentPayload> =>
    x402ClientFor(payer, paying.chains.deployments).createPaymentPayload({ ...required, accepts: required.accepts.filter(pick) });
  const onCeloUsdc = (a: PaymentRequired["accepts"][number]) => a.network === chainInfo("CELO").caip2 && a.asset.toLowerCase() === celo.tokenAddress("USDC").toLowerCase();
  const submitted = (payload: unknown) => ({ "x402.payment.status": "payment-submitted", "x402.payment.payload": payload });
  const dataOf = (task: Task) => task.status!.message!.parts.map((p) => p.content).find((c) => c?.$case === "data")?.value as Body;
  const ordersOf = async (payer: Account) => service.db.query<{ request_id: string }>(`SELECT request_id FROM bill_order WHERE payer = $1`, [payer.address.toLowerCase()]);

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts);
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    a2a = await new ClientFactory().createFromUrl(service.urls.service);
  });
  afterAll(async () => {
    await paying?.close();
  });

  it("the Agent Card declares the extension, not required (an api_key still pays without it)", async () => {
    const card = (await (await fetch(`${service.urls.service}/.well-known/agent-card.json`)).json()) as { capabilities: { extensions: Array<{ uri: string; required: boolean }> } };
    expect(card.capabilities.extensions).toEqual([expect.objectContaining({ uri: EXTENSION, required: false })]);
  });

  it("a call with no api_key is an input-required task with the PaymentRequired; the payment submitted on it completes the task with its receipt, charged once", async () => {
    const payer = accounts(5);
    const before = await usdc(payer.address);
    const { task, required } = await ask(bill());
    expect(required.accepts.length).toBeGreaterThan(1);
    expect(await usdc(payer.address)).toBe(before);

    const payment = await sign(payer, required, onCeloUsdc);
    const done = await submit(task, submitted(payment));
    expect(done.id).toBe(task.id);
    expect(done.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    const meta = done.status!.message!.metadata!;
    expect(meta["x402.payment.status"]).toBe("payment-completed");
    const [receipt] = meta["x402.payment.receipts"] as Body[];
    expect(receipt).toMatchObject({ success: true, network: chainInfo("CELO").caip2 });
    const result = done.artifacts[0]!.parts[0]!.content!.value as Body;
    expect(result).toMatchObject({ status: "SUCCESS", tx_hash: receipt!.transaction });
    const order = (await service.flow.orders.get(result.request_id as string))!;
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(order.amount).toBe(BigInt(payment.accepted.amount));

    // The finished task takes no more payments; the same payment on a new task for the same bill is the same order.
    await expect(submit(done, submitted(payment))).rejects.toThrow();
    const again = await submit((await ask(bill())).task, submitted(payment));
    expect(again.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect((again.artifacts[0]!.parts[0]!.content!.value as Body).request_id).toBe(result.request_id);
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(await deliveredBy(service, result.request_id)).toEqual(["delivered"]);
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("a bill the biller fails completes the payment and is refunded on chain", async () => {
    const payer = accounts(6);
    const before = await usdc(payer.address);
    const failing = bill({ billersCode: "08099999999" });
    const { task, required } = await ask(failing);
    const done = await submit(task, submitted(await sign(payer, required, onCeloUsdc)));
    expect(done.status!.message!.metadata!["x402.payment.status"]).toBe("payment-completed");
    const result = done.artifacts[0]!.parts[0]!.content!.value as Body;
    expect(result.status).toBe("FAILED_VENDING");
    await expect.poll(async () => (await service.flow.orders.get(result.request_id as string))!.status, { timeout: 30_000 }).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(before);
  });

  it("underpaid, forged, wrong-chain and missing payments fail the task with the page's code and a receipt saying why; nothing is charged", async () => {
    const payer = accounts(7);
    const other = accounts(8);
    const before = await usdc(payer.address);
    const cases: Array<[string, Body, (r: PaymentRequired) => Promise<unknown>]> = [
      ["INVALID_AMOUNT", bill({ chain: "CELO", token: "USDC" }), (r) => sign(payer, { ...r, accepts: [{ ...r.accepts[0]!, amount: (BigInt(r.accepts[0]!.amount) - 1n).toString() }] })],
      [
        "INVALID_SIGNATURE",
        bill({ chain: "CELO", token: "USDC" }),
        async (r) => {
          const mine = await sign(payer, r);
          return { ...mine, payload: { ...mine.payload, signature: (await sign(other, r)).payload.signature } };
        },
      ],
      // Priced on BASE, paid with a CELO authorization.
      ["NETWORK_MISMATCH", bill({ chain: "BASE", token: "USDC" }), async () => sign(payer, (await ask(bill({ chain: "CELO", token: "USDC" }))).required)],
      ["INVALID_PAYMENT_HEADER", bill(), async () => undefined],
    ];
    for (const [code, args, pay] of cases) {
      const { task, required } = await ask(args);
      const payload = await pay(required);
      const failed = await submit(task, payload === undefined ? { "x402.payment.status": "payment-submitted" } : submitted(payload));
      expect(failed.status!.state, code).toBe(TaskState.TASK_STATE_FAILED);
      const meta = failed.status!.message!.metadata!;
      expect(meta["x402.payment.status"], code).toBe("payment-failed");
      expect(meta["x402.payment.error"], code).toBe(code);
      expect(meta["x402.payment.receipts"], code).toEqual([expect.objectContaining({ success: false, transaction: "", errorReason: expect.any(String) })]);
      expect(dataOf(failed).code, code).toBeTruthy();
    }
    expect(await usdc(payer.address)).toBe(before);
    expect(await ordersOf(payer)).toHaveLength(0);
  });

  it("a wallet that cannot cover the payment: the facilitator refuses it, SETTLEMENT_FAILED, nothing charged", async () => {
    const empty = privateKeyToAccount(generatePrivateKey());
    const { task, required } = await ask(bill({ chain: "CELO", token: "USDC" }));
    const failed = await submit(task, submitted(await sign(empty, required)));
    expect(failed.status!.state).toBe(TaskState.TASK_STATE_FAILED);
    expect(failed.status!.message!.metadata!["x402.payment.error"]).toBe("SETTLEMENT_FAILED");
    expect(dataOf(failed)).toMatchObject({ code: "PAYMENT_NOT_SETTLED" });
    expect(await usdc(empty.address)).toBe(0n);
  });

  it("a declined price cancels the task; a payment on a task this service never priced is refused; neither charges", async () => {
    const payer = accounts(9);
    const before = await usdc(payer.address);
    const { task, required } = await ask(bill());
    const declined = await submit(task, { "x402.payment.status": "payment-rejected" });
    expect(declined.status!.state).toBe(TaskState.TASK_STATE_CANCELED);
    expect(declined.status!.message!.metadata!["x402.payment.status"]).toBe("payment-rejected");
    const payment = await sign(payer, required, onCeloUsdc);
    await expect(submit({ ...task, id: crypto.randomUUID() }, submitted(payment))).rejects.toThrow();
    expect(await usdc(payer.address)).toBe(before);
    expect(await ordersOf(payer)).toHaveLength(0);
  });

  it("a bill that is not valid is answered with VALIDATION_FAILED before any task or price", async () => {
    const answer = await send({ parts: [dataPart({ skill: "pay_bill", arguments: bill({ nairaAmount: -5 }) })] });
    expect("parts" in answer).toBe(true);
    const data = (answer as Message).parts.map((p) => p.content).find((c) => c?.$case === "data")?.value as { error: Body };
    expect(data.error.code).toBe("VALIDATION_FAILED");
  });

  it("the audit agrees with every order the A2A payments made", async () => {
    const audit = await auditOnSharedChains(paying, { url: service.urls.service });
    expect(audit.discrepancies).toEqual([]);
  });
});
