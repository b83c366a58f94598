/**
 * pay_bill paid per call with x402 inside MCP (server/agent/x402-tools.ts), against the real
 * local stack, with the official MCP client and the official x402 client: an unpaid call
 * answers the PaymentRequired as x402's MCP transport has it; a paid call settles, vends and
 * answers with the settlement in `_meta`; and a stranger's tries (replayed, underpaid, forged,
 * wrong chain, wrong token, an empty wallet, a v1 payload, a payment with an api_key, a batch)
 * change nothing or charge exactly once. A failed vend is refunded on chain. Each case ends on
 * balances; the suite ends on the audit.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { PaymentRequiredV2Schema } from "@x402/core/schemas";
import type { PaymentPayload, PaymentRequired } from "@x402/core/types";
import { BAZAAR, extractDiscoveryInfoFromExtension, type DiscoveryExtension } from "@x402/extensions/bazaar";
import { appendPaymentIdentifierToExtensions, generatePaymentId } from "@x402/extensions/payment-identifier";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { createWalletClient, erc20Abi, http, maxUint256, type Account, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent } from "../../lib/agent-client.ts";
import { callToolPaid } from "../../lib/mcp-x402-client.ts";
import { chainInfo, viemChain } from "../../lib/chains.ts";
import { PERMIT2 } from "../../lib/permit2.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { createApp } from "../../server/app.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { airtimeBill } from "../support/bills.ts";
import { deliveredBy } from "../support/orders.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Body = Record<string, unknown>;
/** Paid calls that may settle nothing from one address (every call here comes from 127.0.0.1). */
const UNSETTLED_BUDGET = 30;

describe("pay_bill over MCP, paid per call with x402", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let celo: ChainActors;
  let mcp: Client;

  const usdc = (who: Hex) => celo.balanceOf("USDC", who);
  const bill = (extra: Body = {}) => airtimeBill({ billersCode: SANDBOX_NUMBERS.phone, nairaAmount: 1500, ...extra });
  const call = async (args: Body, payment?: unknown, name = "pay_bill") =>
    (await mcp.callTool({ name, arguments: args, ...(payment === undefined ? {} : { _meta: { "x402/payment": payment } }) }, undefined, { timeout: 120_000 })) as CallToolResult;
  /** The PaymentRequired in a tool result, as the transport's page tells a client to read it. */
  const requiredOf = (result: CallToolResult): PaymentRequired => {
    expect(result.isError).toBe(true);
    const text = (result.content as Array<{ text: string }>)[0]!.text;
    expect(JSON.parse(text)).toEqual(result.structuredContent);
    return PaymentRequiredV2Schema.parse(result.structuredContent) as unknown as PaymentRequired;
  };
  /** Signs one of the accepts (the first that `pick` allows) with the official client. */
  const sign = async (payer: Account, required: PaymentRequired, pick: (a: PaymentRequired["accepts"][number]) => boolean = () => true): Promise<PaymentPayload> =>
    x402ClientFor(payer, paying.chains.deployments).createPaymentPayload({ ...required, accepts: required.accepts.filter(pick) });
  const onCelo = (a: PaymentRequired["accepts"][number]) => a.network === chainInfo("CELO").caip2 && a.asset.toLowerCase() === celo.tokenAddress("USDC").toLowerCase();
  const ordersOf = async (payer: Account) => service.db.query<{ request_id: string }>(`SELECT request_id FROM bill_order WHERE payer = $1`, [payer.address.toLowerCase()]);

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts, { RATE_LIMIT_UNSETTLED_ADDRESS: `${UNSETTLED_BUDGET}/600` });
    service = paying.service;
    celo = chainActors(paying.chains.deployments, "CELO");
    mcp = new Client({ name: "x402-mcp-test", version: "1.0.0" });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${service.urls.service}/api/mcp`)));
  });
  afterAll(async () => {
    await mcp?.close();
    await paying?.close();
  });

  it("tools/list: pay_bill needs no api_key or PIN, and says how to pay with x402", async () => {
    const { tools } = await mcp.listTools();
    const payBill = tools.find((t) => t.name === "pay_bill")!;
    expect(payBill.inputSchema.required).not.toContain("api_key");
    expect(payBill.inputSchema.required).not.toContain("pin");
    expect(payBill.inputSchema.required).toEqual(expect.arrayContaining(["serviceID", "billersCode", "nairaAmount"]));
    expect(payBill.description).toContain('_meta["x402/payment"]');
    // A tool that is not paid with x402 still needs its key.
    expect(tools.find((t) => t.name === "check_balance")!.inputSchema.required).toContain("api_key");
  });

  it("an unpaid call answers the PaymentRequired (structured and as text), offering every chain and token that settles, and charges nothing", async () => {
    const payer = accounts(5);
    const before = await usdc(payer.address);
    const required = requiredOf(await call(bill()));
    expect(required.x402Version).toBe(2);
    expect(required.resource.url).toBe("mcp://tool/pay_bill");
    // It declares the tool for catalogues as x402's bazaar has an MCP tool: its name and its tools/list schema.
    const { tools } = await mcp.listTools();
    const info = extractDiscoveryInfoFromExtension(required.extensions![BAZAAR.key] as DiscoveryExtension);
    expect(info.input).toMatchObject({ type: "mcp", toolName: "pay_bill", inputSchema: tools.find((t) => t.name === "pay_bill")!.inputSchema });
    const offered = required.accepts.map((a) => `${a.network} ${a.asset.toLowerCase()}`);
    for (const [chain, d] of Object.entries(paying.chains.deployments.chains)) {
      for (const t of d!.tokens.filter((t) => t.eip712Version !== null)) expect(offered).toContain(`${chainInfo(chain).caip2} ${t.address.toLowerCase()}`);
    }
    // Each pays BillPay on its own chain.
    const billPayOn = (network: string) => Object.entries(paying.chains.deployments.chains).find(([chain]) => chainInfo(chain).caip2 === network)![1]!.billPay.address.toLowerCase();
    for (const a of required.accepts) expect(a.payTo.toLowerCase()).toBe(billPayOn(a.network));
    // Naming the chain and token offers that one only.
    const named = requiredOf(await call(bill({ chain: "CELO", token: "USDC" })));
    expect(named.accepts).toHaveLength(1);
    expect(named.accepts[0]!.asset.toLowerCase()).toBe(celo.tokenAddress("USDC").toLowerCase());
    // The REST bill's name for the chain names it as well; two chains named are refused.
    const rest = requiredOf(await call(bill({ blockchain: "BASE", token: "USDC" })));
    expect(rest.accepts.map((a) => a.network)).toEqual([chainInfo("BASE").caip2]);
    const both = await call(bill({ chain: "CELO", blockchain: "BASE" }));
    expect(both.isError).toBe(true);
    expect((both.structuredContent as { error: Body }).error).toMatchObject({ code: "VALIDATION_FAILED" });
    // A callback to a private address is refused when the bill arrives, as on the REST route.
    const inside = await call(bill({ callback_url: "https://[64:ff9b::a00:5]/hook" }));
    expect((inside.structuredContent as { error: Body }).error).toMatchObject({ code: "CALLBACK_URL_NOT_ALLOWED" });
    expect(await usdc(payer.address)).toBe(before);
  });

  it("a paid call settles, vends and answers with the settlement in _meta; the same payment again is the same order, charged once", async () => {
    const payer = accounts(5);
    const before = await usdc(payer.address);
    const required = requiredOf(await call(bill()));
    const payment = await sign(payer, required, onCelo);
    const paid = await call(bill(), payment);
    expect(paid.isError).toBeFalsy();
    const result = paid.structuredContent as Body;
    expect(result).toMatchObject({ status: "SUCCESS", success: true });
    const settlement = (paid._meta as Body)["x402/payment-response"] as Body;
    expect(settlement).toMatchObject({ success: true, network: chainInfo("CELO").caip2, transaction: result.tx_hash });
    expect(String(settlement.payer).toLowerCase()).toBe(payer.address.toLowerCase());
    const order = (await service.flow.orders.get(result.request_id as string))!;
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(order.amount).toBe(BigInt(payment.accepted.amount));

    // Replayed: the very same payment is answered with its order; nothing moves again.
    const again = await call(bill(), payment);
    expect(again.structuredContent).toMatchObject({ status: "SUCCESS", request_id: result.request_id });
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(await deliveredBy(service, result.request_id)).toEqual(["delivered"]);
    // ...and the same payment for another bill is refused, charging nothing.
    const reused = await call(bill({ nairaAmount: 1600 }), payment);
    expect(reused.isError).toBe(true);
    expect(JSON.stringify(reused.structuredContent)).toContain("PAYMENT_ALREADY_USED");
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("an agent's pay-per-call loop (lib/mcp-x402-client.ts, as the example runs it) pays a bill that names only the bill", async () => {
    const payer = accounts(11);
    const before = await usdc(payer.address);
    const { result, required, settlement } = await callToolPaid(mcp, x402ClientFor(payer, paying.chains.deployments), "pay_bill", bill());
    expect(required?.accepts.length).toBeGreaterThan(1);
    expect(result.structuredContent).toMatchObject({ status: "SUCCESS" });
    expect(settlement).toMatchObject({ success: true });
    const order = (await service.flow.orders.get((result.structuredContent as Body).request_id as string))!;
    // The client chose the first option it can pay; the payment's own `accepted` told the service which.
    expect(settlement!.network).toBe(required!.accepts[0]!.network);
    expect(order.tokenAddress.toLowerCase()).toBe(required!.accepts[0]!.asset.toLowerCase());
    if (order.chain === "CELO" && order.token === "USDC") expect(before - (await usdc(payer.address))).toBe(order.amount);
  });

  it("a client that signs again under the same payment id (payment-identifier) pays once: the second call answers the first order", async () => {
    const payer = accounts(12);
    const before = await usdc(payer.address);
    const id = generatePaymentId();
    const signUnder = async () => {
      const required = requiredOf(await call(bill({ chain: "CELO", token: "USDC" })));
      appendPaymentIdentifierToExtensions((required.extensions ??= {}), id);
      return sign(payer, required);
    };
    const first = await call(bill({ chain: "CELO", token: "USDC" }), await signUnder());
    expect(first.structuredContent).toMatchObject({ status: "SUCCESS" });
    const again = await call(bill({ chain: "CELO", token: "USDC" }), await signUnder());
    expect(again.structuredContent).toMatchObject({ status: "SUCCESS", request_id: (first.structuredContent as Body).request_id });
    expect((again.structuredContent as Body).payment_not_used).toMatch(/not used/);
    const order = (await service.flow.orders.get((first.structuredContent as Body).request_id as string))!;
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(await ordersOf(payer)).toHaveLength(1);
  });

  it("the same payment sent twice at once makes one order and one charge", async () => {
    const payer = accounts(10);
    const before = await usdc(payer.address);
    const payment = await sign(payer, requiredOf(await call(bill())), onCelo);
    const answers = await Promise.all([call(bill(), payment), call(bill(), payment)]);
    const ids = new Set(answers.map((a) => (a.structuredContent as Body).request_id));
    expect(ids.size).toBe(1);
    expect(await ordersOf(payer)).toHaveLength(1);
    const order = (await service.flow.orders.get([...ids][0] as string))!;
    await expect.poll(async () => (await service.flow.orders.get(order.requestId))!.status, { timeout: 30_000 }).toBe("SUCCESS");
    expect(before - (await usdc(payer.address))).toBe(order.amount);
    expect(await deliveredBy(service, order.requestId)).toEqual(["delivered"]);
  });

  it("a bill the biller fails is refunded on chain, in full", async () => {
    const payer = accounts(6);
    const before = await usdc(payer.address);
    const failing = bill({ billersCode: "08099999999" });
    const payment = await sign(payer, requiredOf(await call(failing)), onCelo);
    const paid = await call(failing, payment);
    expect(paid.isError).toBeFalsy();
    const result = paid.structuredContent as Body;
    expect(result.status).toBe("FAILED_VENDING");
    expect((paid._meta as Body)["x402/payment-response"]).toMatchObject({ success: true });
    await expect.poll(async () => (await service.flow.orders.get(result.request_id as string))!.status, { timeout: 30_000 }).toBe("REFUNDED");
    expect(await usdc(payer.address)).toBe(before);
  });

  it("underpaid, forged, wrong chain and wrong token payments answer the PaymentRequired again with the reason, and lock or charge nothing", async () => {
    const payer = accounts(7);
    const victim = accounts(8);
    const before = [await usdc(payer.address), await usdc(victim.address)];
    const required = requiredOf(await call(bill({ chain: "CELO", token: "USDC" })));
    const accepted = required.accepts[0]!;

    const underpaid = await sign(payer, { ...required, accepts: [{ ...accepted, amount: (BigInt(accepted.amount) - 1n).toString() }] });
    const cases: Array<[string, Body, unknown]> = [
      ["AMOUNT_MISMATCH", bill(), underpaid],
      // Signed by the payer, for a bill naming the victim's wallet.
      ["PAYER_MISMATCH", bill({ wallet_address: victim.address }), await sign(payer, required)],
      // A signature that is not the signer's.
      ["SIGNATURE_INVALID", bill(), { ...(await sign(payer, required)), payload: { ...(await sign(payer, required)).payload, signature: (await sign(victim, required)).payload.signature } }],
      // Paid on CELO for a bill that names BASE.
      ["PAYMENT_NETWORK_MISMATCH", bill({ chain: "BASE", token: "USDC" }), await sign(payer, required)],
      // Paid in USDC for a bill that names USD₮.
      ["PAYMENT_ASSET_MISMATCH", bill({ chain: "CELO", token: "USDT" }), await sign(payer, required)],
      // Late: an authorization that lapses before it could settle (under the 30 s the service
      // needs, yet not expired by the time the calls before it are made).
      ["AUTHORIZATION_EXPIRES_TOO_SOON", bill(), await sign(payer, { ...required, accepts: [{ ...accepted, maxTimeoutSeconds: 20 }] })],
      // x402 v1's payload shape: the MCP transport carries version 2 only.
      ["INVALID_PAYMENT_HEADER", bill(), { x402Version: 1, scheme: "exact", network: "celo", payload: (await sign(payer, required)).payload }],
      ["INVALID_PAYMENT_HEADER", bill(), "not a payment"],
    ];
    for (const [code, args, payment] of cases) {
      const answer = await call(args, payment);
      const body = answer.structuredContent as Body;
      expect(answer.isError, code).toBe(true);
      expect(body.code, code).toBe(code);
      // The PaymentRequired again, so the client can pay properly.
      expect(PaymentRequiredV2Schema.safeParse(body).success, code).toBe(true);
      expect(String(body.error).length).toBeGreaterThan(0);
    }
    expect([await usdc(payer.address), await usdc(victim.address)]).toEqual(before);
    expect(await ordersOf(payer)).toHaveLength(0);
    expect(await ordersOf(victim)).toHaveLength(0);
  });

  it("a payment from a wallet that cannot cover it is refused by the facilitator: PAYMENT_NOT_SETTLED with the PaymentRequired, nothing charged", async () => {
    const empty = privateKeyToAccount(generatePrivateKey());
    const required = requiredOf(await call(bill({ chain: "CELO", token: "USDC" })));
    const answer = await call(bill(), await sign(empty, required));
    const body = answer.structuredContent as Body;
    expect(answer.isError).toBe(true);
    expect(body.code).toBe("PAYMENT_NOT_SETTLED");
    expect(PaymentRequiredV2Schema.safeParse(body).success).toBe(true);
    expect(body.request_id).toBeTruthy();
    expect(await usdc(empty.address)).toBe(0n);
    expect(await deliveredBy(service, body.request_id)).toEqual([]);
  });

  it("a payment beside an api_key, or on a tool x402 does not pay, is refused as VALIDATION_FAILED and charges nothing", async () => {
    const payer = accounts(9);
    const apiKey = await linkAgent(service.urls.service, payer, { pin: "2468" });
    const before = await usdc(payer.address);
    const payment = await sign(payer, requiredOf(await call(bill())), onCelo);
    for (const [name, args] of [
      ["pay_bill", { ...bill(), api_key: apiKey, pin: "2468" }],
      ["pay_bill_batch", { api_key: apiKey, pin: "2468", bills: [bill()] }],
      ["check_balance", { api_key: apiKey }],
    ] as Array<[string, Body]>) {
      const answer = await call(args, payment, name);
      expect(answer.isError, name).toBe(true);
      expect((answer.structuredContent as { error: Body }).error.code, name).toBe("VALIDATION_FAILED");
    }
    // A bill that is not valid is refused before any price is made.
    const invalid = await call(bill({ nairaAmount: -5 }));
    expect((invalid.structuredContent as { error: Body }).error.code).toBe("VALIDATION_FAILED");
    expect(await usdc(payer.address)).toBe(before);
    expect(await ordersOf(payer)).toHaveLength(0);
  });

  it("USD₮ on Base is paid through Permit2 over MCP: refused with the approval to make until the payer approves Permit2, then paid once", async () => {
    const payer = accounts(13);
    const base = chainActors(paying.chains.deployments, "BASE");
    const usdt = base.tokenAddress("USD₮");
    const before = await base.balanceOf("USD₮", payer.address);
    const tether = bill({ chain: "BASE", token: "USDT" });
    const required = requiredOf(await call(tether));
    expect(required.accepts).toHaveLength(1);
    expect(required.accepts[0]!.extra).toMatchObject({ assetTransferMethod: "permit2" });

    const unapproved = await call(tether, await sign(payer, required));
    expect(unapproved.isError).toBe(true);
    expect(unapproved.structuredContent, JSON.stringify(unapproved.structuredContent)).toMatchObject({ error: { code: "PERMIT2_ALLOWANCE_REQUIRED", approval: { spender: PERMIT2 } } });
    expect(await base.balanceOf("USD₮", payer.address)).toBe(before);

    const wallet = createWalletClient({ account: payer, chain: viemChain("BASE", base.deployment.rpcUrl), transport: http(base.deployment.rpcUrl) });
    await base.mined(await wallet.writeContract({ address: usdt, abi: erc20Abi, functionName: "approve", args: [PERMIT2, maxUint256] }));
    const payment = await sign(payer, requiredOf(await call(tether)));
    const paid = await call(tether, payment);
    expect(paid.structuredContent, JSON.stringify(paid.structuredContent)).toMatchObject({ status: "SUCCESS" });
    expect((await service.flow.orders.get((paid.structuredContent as Body).request_id as string))!.tokenAddress.toLowerCase()).toBe(usdt.toLowerCase());
    expect((paid._meta as Body)["x402/payment-response"]).toMatchObject({ success: true, network: chainInfo("BASE").caip2 });
    expect(await base.balanceOf("USD₮", payer.address)).toBe(before - BigInt(payment.accepted.amount));
    expect((await call(tether, payment)).structuredContent).toMatchObject({ request_id: (paid.structuredContent as Body).request_id });
    expect(await base.balanceOf("USD₮", payer.address)).toBe(before - BigInt(payment.accepted.amount));
  });

  it("an agent that names no wallet, refused once, signs anew from the challenge it was answered: that offer is honoured too", async () => {
    const payer = accounts(18);
    const before = await usdc(payer.address);
    const first = requiredOf(await call(bill({ nairaAmount: 1530 })));
    // Signed for a unit less than asked: refused, and answered the challenge of the signer's own bill.
    const short = await sign(payer, { ...first, accepts: first.accepts.map((a) => ({ ...a, amount: (BigInt(a.amount) - 1n).toString() })) }, onCelo);
    const again = requiredOf(await call(bill({ nairaAmount: 1530 }), short));
    const payment = await sign(payer, again, onCelo);
    const answer = await payAfterRateMoved(bill({ nairaAmount: 1530 }), payment, 10);
    expect(answer.isError, JSON.stringify(answer.structuredContent)).toBeFalsy();
    expect(answer.structuredContent).toMatchObject({ status: "SUCCESS" });
    expect(before - (await usdc(payer.address))).toBe(BigInt(payment.accepted.amount));
  });

  it("a stranger sending payments that cannot be read pays with his budget: past it, RATE_LIMITED before any price is made", async () => {
    const answers: string[] = [];
    for (let i = 0; i < UNSETTLED_BUDGET + 1; i++) {
      const answer = await call(bill(), { x402Version: 2, garbage: i });
      answers.push(String((answer.structuredContent as Body).code ?? ((answer.structuredContent as { error?: Body }).error?.code)));
      if (answers.at(-1) === "RATE_LIMITED") break;
    }
    expect(answers.at(-1)).toBe("RATE_LIMITED");
    // Every answer before it was the payment's own refusal; the earlier suites' refusals used the rest of the budget.
    expect(new Set(answers.slice(0, -1))).toEqual(new Set(["INVALID_PAYMENT_HEADER"]));
    expect(answers.length).toBeLessThanOrEqual(UNSETTLED_BUDGET + 1);
  });

  /** A pay_bill call with `payment` to an instance whose rate moved, the version that priced the challenge superseded `minutesAgo`. */
  const payAfterRateMoved = async (args: Body, payment: PaymentPayload, minutesAgo: number) => {
    const moved = createApp({ config: service.config, db: service.db, deployments: paying.chains.deployments, rates: new ConfiguredRate(775_000n), flow: service.flow });
    const version = (payment.accepted.extra as { rateVersion: string }).rateVersion;
    await service.db.query(`UPDATE rate_version SET live_until = now() - make_interval(mins => $2) WHERE id = $1`, [version, minutesAgo]);
    const res = await moved.request("http://localhost/api/mcp", {
      method: "POST",
      headers: { host: "localhost", "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "pay_bill", arguments: args, _meta: { "x402/payment": payment } } }),
    });
    return ((await res.json()) as { result: CallToolResult }).result;
  };

  it("an agent that names no wallet is held to its challenge's offer, signed for the bill of no wallet, past the grace", async () => {
    const payer = accounts(16);
    const before = await usdc(payer.address);
    const required = requiredOf(await call(bill({ nairaAmount: 1510 })));
    const payment = await sign(payer, required, onCelo);
    // Superseded longer ago than PRICE_GRACE_SECONDS (300): only the offer can honour the price.
    const answer = await payAfterRateMoved(bill({ nairaAmount: 1510 }), payment, 10);
    expect(answer.isError, JSON.stringify(answer.structuredContent)).toBeFalsy();
    expect(answer.structuredContent).toMatchObject({ status: "SUCCESS" });
    expect(before - (await usdc(payer.address))).toBe(BigInt(payment.accepted.amount));
  });

  it("an offer signed for another bill of no wallet buys nothing at its price, however recent", async () => {
    const payer = accounts(17);
    const before = await usdc(payer.address);
    const required = requiredOf(await call(bill({ nairaAmount: 1520 })));
    const payment = await sign(payer, required, onCelo);
    // The same amount for another number: the offer names the first bill, the price moved a minute ago.
    const answer = await payAfterRateMoved(bill({ nairaAmount: 1520, billersCode: "08022222222" }), payment, 1);
    expect(answer.isError).toBe(true);
    expect(answer.structuredContent).toMatchObject({ code: "AMOUNT_MISMATCH" });
    expect(await usdc(payer.address)).toBe(before);
    expect(await ordersOf(payer)).toEqual([]);
  });

  it("the audit agrees with every order the MCP payments made", async () => {
    const audit = await auditOnSharedChains(paying, { url: service.urls.service });
    expect(audit.discrepancies).toEqual([]);
  });
});
