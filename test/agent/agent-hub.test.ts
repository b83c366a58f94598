/**
 * The agent hub end to end, against real local chains, a real Ponder ledger, the biller
 * sandbox and the service: linking, every tool over the official MCP client, the same
 * tools as A2A skills over the official A2A client (1.0) and raw 0.3 JSON-RPC, PIN
 * lockout, allowance exhaustion, batches with mixed outcomes, schedules, and the
 * reconciler closing what a crash leaves behind.
 */
import { ClientFactory } from "@a2a-js/sdk/client";
import { Role, type Message } from "@a2a-js/sdk";
import { createWalletClient, encodeFunctionData, erc20Abi, http, keccak256, serializeErc6492Signature, toBytes, type Account, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { viemChain } from "../../lib/chains.ts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { linkAgent, linkHeaders, mcpAgent, type ToolAnswer } from "../../lib/agent-client.ts";
import { LINK_NONCE_PATH, LINK_PATH, linkMessage } from "../../lib/agent-link.ts";
import { createSiweMessage } from "viem/siwe";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { buildHub } from "../../server/services.ts";
import { reconcileOrphanPulls } from "../../server/orders/ledger-pass.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { onChainOrderId } from "../../server/chain/operator.ts";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { operatorAccount } from "../../lib/local-accounts.ts";
import { newOrderIds } from "../../server/orders/store.ts";
import { hashApiKey } from "../../server/credentials.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

const USD = 1_000_000n;
const airtime = (billersCode: string, nairaAmount = 1550) => ({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode, nairaAmount });

describe("agent hub: link once, then pay over MCP and A2A from an on-chain allowance", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let stack: SharedPayingStack["chains"];
  let service: ServiceStack;
  let ledger: SharedPayingStack["ledger"];
  let celo: ChainActors;
  let url: string;
  let mcp: Awaited<ReturnType<typeof mcpAgent>>;

  /** A linked agent with an allowance: its wallet, key and a tool caller bound to its key. */
  async function agent(index: number, spending = 100n * USD, pin = "1234") {
    const account = accounts(index);
    await celo.approveAndAllow(account, "USDC", spending);
    const apiKey = await linkAgent(url, account, { pin });
    const call = (name: string, args: Record<string, unknown> = {}) => mcp.call(name, { api_key: apiKey, ...args });
    return { account, apiKey, call, pin };
  }
  const usdc = (who: Account) => celo.balanceOf("USDC", who.address);
  const errorCode = (a: ToolAnswer) => (a.data.error as { code?: string } | undefined)?.code;

  beforeAll(async () => {
    // Rate limits have their own suite (test/security/abuse.test.ts): here they stay out of the way.
    paying = await startPayingStackOnSharedChains(accounts, {
      PIN_MAX_ATTEMPTS: "3",
      PIN_LOCK_SECONDS: "600",
      SCHEDULE_MIN_INTERVAL_SECONDS: "1",
      BATCH_MAX_BILLS: "5",
      RATE_LIMIT_LINK_ADDRESS: "1000/60",
      RATE_LIMIT_LINK_WALLET: "1000/60",
    });
    ({ chains: stack, ledger, service } = paying);
    celo = chainActors(stack.deployments, "CELO");
    url = service.urls.service;
    mcp = await mcpAgent(url);
  });
  afterAll(async () => {
    await mcp?.close();
    await paying?.close();
  });

  describe("POST /api/agent/link", () => {
    const link = async (headers: Record<string, string>, body: Record<string, unknown>) => {
      const res = await fetch(`${url}/api/agent/link`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const wallet = accounts(3);
    const body = { wallet_address: wallet.address, channel: "MCP", pin: "4321", approved_chain: "CELO", approved_token: "USDT" };

    it("links with a fresh signature, once; a replay, a stale or a foreign signature is refused", async () => {
      const headers = await linkHeaders(wallet, "BillPay");
      const ok = await link(headers, body);
      expect(ok.status).toBe(200);
      expect(ok.body).toEqual({ success: true, api_key: expect.stringMatching(/^bpk_[A-Za-z0-9_-]{43}$/), cancelled_schedules: [], scope_chain: null });

      expect(await link(headers, body)).toMatchObject({ status: 409, body: { code: "SIGNATURE_REPLAYED" } });
      // The same signature re-encoded (v as 0/1 instead of 27/28) still recovers the wallet: still a replay.
      const sig = headers["x-wallet-signature"]!;
      const reencoded = `${sig.slice(0, -2)}${sig.endsWith("1b") ? "00" : "01"}`;
      expect(await link({ ...headers, "x-wallet-signature": reencoded }, body)).toMatchObject({ status: 409, body: { code: "SIGNATURE_REPLAYED" } });
      const stale = await linkHeaders(wallet, "BillPay", String(Date.now() - 10 * 60_000));
      expect(await link(stale, body)).toMatchObject({ status: 401, body: { code: "SIGNATURE_STALE" } });
      const future = await linkHeaders(wallet, "BillPay", String(Date.now() + 10 * 60_000));
      expect(await link(future, body)).toMatchObject({ status: 401, body: { code: "SIGNATURE_STALE" } });
      // Signed by another key, but claiming the wallet.
      const foreign = { ...(await linkHeaders(accounts(4), "BillPay")), "x-wallet-address": wallet.address };
      expect(await link(foreign, body)).toMatchObject({ status: 401, body: { code: "SIGNATURE_INVALID" } });
      // Signed over another service's name.
      expect(await link(await linkHeaders(wallet, "OtherService"), body)).toMatchObject({ status: 401, body: { code: "SIGNATURE_INVALID" } });

      // The key works, and it was linked for USD₮ (USDT is its alias).
      const balance = await mcp.call("check_balance", { api_key: ok.body.api_key, chain: "CELO" });
      expect(balance.isError).toBe(false);
      expect(balance.data).toMatchObject({ approved_chain: "CELO", approved_token: "USD₮" });
    });

    it("refuses malformed links with a code, and stores nothing", async () => {
      const headers = await linkHeaders(wallet, "BillPay");
      const cases: Array<[Record<string, string>, Record<string, unknown>, number, string]> = [
        [{}, body, 400, "WALLET_HEADERS_INVALID"],
        [{ ...headers, "x-wallet-timestamp": "yesterday" }, body, 400, "WALLET_HEADERS_INVALID"],
        [{ ...headers, "x-wallet-signature": "0x1234" }, body, 400, "WALLET_HEADERS_INVALID"],
        [headers, { ...body, pin: "12" }, 400, "VALIDATION_FAILED"],
        [headers, { ...body, pin: 1234 }, 400, "VALIDATION_FAILED"],
        [headers, { ...body, channel: "SMS" }, 400, "VALIDATION_FAILED"],
        [headers, { ...body, wallet_address: accounts(4).address }, 400, "WALLET_MISMATCH"],
        [headers, { ...body, approved_chain: "SOLANA" }, 422, "UNSUPPORTED_CHAIN"],
        [headers, { ...body, approved_chain: "BASE", approved_token: "USA₮" }, 422, "TOKEN_NOT_PULLABLE"], // USA₮ is Celo's only
      ];
      for (const [h, b, status, code] of cases) expect(await link(h, b), code).toMatchObject({ status, body: { code } });
      // None of those spent the signature: it still links.
      expect((await link(headers, body)).status).toBe(200);
      const notJson = await fetch(`${url}/api/agent/link`, { method: "POST", headers: { "content-type": "application/json", ...(await linkHeaders(wallet, "BillPay")) }, body: "{" });
      expect(notJson.status).toBe(400);
    });

    it("a new link retires the old key and cancels its schedules; an unknown key is told apart from a retired one", async () => {
      await celo.approveAndAllow(accounts(5), "USDC", 100n * USD); // so that a schedule that ran could pay
      const first = await linkAgent(url, accounts(5));
      const scheduled = await mcp.call("schedule_bill", { api_key: first, pin: "1234", ...airtime("08011111111"), cron: "0 9 1 * *" });
      expect(scheduled.data).toMatchObject({ status: "ACTIVE" });
      const relinked = await fetch(`${url}${LINK_PATH}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(await linkHeaders(accounts(5), "BillPay")) },
        body: JSON.stringify({ wallet_address: accounts(5).address, channel: "MCP", pin: "1234", approved_chain: "CELO", approved_token: "USDC" }),
      });
      const { api_key: second, cancelled_schedules } = (await relinked.json()) as { api_key: string; cancelled_schedules: string[] };
      const schedules = (await mcp.call("list_schedules", { api_key: second })).data.schedules as Array<{ status: string; schedule_id: string }>;
      expect(schedules.map((x) => x.status)).toEqual(["CANCELLED"]);
      // The link's answer says what it cancelled.
      expect(cancelled_schedules).toEqual([schedules[0]!.schedule_id]);
      expect(second).not.toBe(first);
      expect(errorCode(await mcp.call("check_balance", { api_key: first }))).toBe("API_KEY_RETIRED");
      expect((await mcp.call("check_balance", { api_key: second })).isError).toBe(false);
      expect(errorCode(await mcp.call("check_balance", { api_key: `bpk_${"A".repeat(43)}` }))).toBe("API_KEY_INVALID");

      // A schedule written under the old key while the re-link ran (the call had passed its key
      // and PIN checks, and was pricing): the store refuses it once the key is retired...
      const store = service.hub.deps.schedules;
      const later = new Date(Date.now() + 60_000);
      const bill = { serviceID: "mtn", serviceCategory: "AIRTIME" as const, network: "MTN", billersCode: "08011111111", nairaAmount: 1550 };
      const write = { wallet: accounts(5).address, bill, chain: "CELO" as const, token: "USDC" as const, runAt: null, cron: "0 9 1 * *", firstRun: later, maxRuns: null, maxPerWallet: 10, apiKeyHash: hashApiKey(first) };
      await expect(store.create(write)).rejects.toMatchObject({ code: "API_KEY_RETIRED" });
      // ...and one the re-link could not see (inserted just after it looked) never pays when due: it is cancelled.
      const raced = await store.create({ ...write, apiKeyHash: hashApiKey(second) });
      await service.db.query(`UPDATE bill_schedule SET api_key_hash = $2, next_run_at = date_trunc('milliseconds', now()) - interval '1 second' WHERE id = $1`, [raced.id, hashApiKey(first)]);
      const before = await usdc(accounts(5));
      await service.hub.runDueSchedules();
      const [after] = (await mcp.call("list_schedules", { api_key: second })).data.schedules as Array<{ schedule_id: string; status: string; last_runs: Array<{ outcome: string; error: string | null }> }>;
      expect(after).toMatchObject({ schedule_id: raced.id, status: "CANCELLED", last_runs: [{ outcome: "NOT_PAID", error: expect.stringMatching(/^API_KEY_RETIRED/) }] });
      expect(await usdc(accounts(5))).toBe(before);
      expect(await service.db.query(`SELECT 1 FROM bill_order WHERE schedule_id = $1`, [raced.id])).toEqual([]);
    });

    it("links with Sign-In with Ethereum: this domain, URI, chain and a server nonce, each nonce once", async () => {
      const account = accounts(6);
      const issued = (await (await fetch(`${url}${LINK_NONCE_PATH}`)).json()) as { nonce: string; domain: string; uri: string; statement: string; chain_ids: Record<string, number> };
      expect(issued).toMatchObject({ domain: new URL(url).host, uri: `${url}${LINK_PATH}`, chain_ids: { CELO: 42220, BASE: 8453 } });
      const siwe = (fields: Partial<Parameters<typeof createSiweMessage>[0]> = {}) =>
        createSiweMessage({
          domain: issued.domain,
          address: account.address,
          statement: issued.statement,
          uri: issued.uri,
          version: "1",
          chainId: 42220,
          nonce: issued.nonce,
          issuedAt: new Date(),
          ...fields,
        });
      const linkWith = async (message: string) => {
        const headers = {
          "x-wallet-address": account.address,
          "x-wallet-signature": await account.signMessage!({ message }),
          "x-wallet-siwe": Buffer.from(message, "utf8").toString("base64"),
        };
        return link(headers, { ...body, wallet_address: account.address, approved_token: "USDC" });
      };
      // Phished for another site, or for another chain: refused, and the nonce is not spent.
      expect(await linkWith(siwe({ domain: "evil.example" }))).toMatchObject({ status: 401, body: { code: "SIWE_MESSAGE_INVALID" } });
      expect(await linkWith(siwe({ chainId: 8453 }))).toMatchObject({ status: 401, body: { code: "SIWE_MESSAGE_INVALID" } });
      expect(await linkWith(siwe({ issuedAt: new Date(Date.now() - 3_600_000) }))).toMatchObject({ status: 401, body: { code: "SIGNATURE_STALE" } });
      const ok = await linkWith(siwe());
      expect(ok).toMatchObject({ status: 200, body: { success: true, api_key: expect.stringMatching(/^bpk_/), scope_chain: null } });
      // The nonce is spent; one the service never issued is refused too.
      expect(await linkWith(siwe())).toMatchObject({ status: 409, body: { code: "SIGNATURE_REPLAYED" } });
      expect(await linkWith(siwe({ nonce: "a1b2c3d4e5f6a7b8c9d0" }))).toMatchObject({ status: 409, body: { code: "SIGNATURE_REPLAYED" } });
      expect((await mcp.call("check_balance", { api_key: ok.body.api_key })).isError).toBe(false);
    });

    it("scopes a contract wallet's key to the chain its signature was checked on", async () => {
      const owner = accounts(9);
      const wallet = await celo.deployOwnedWallet(owner.address); // exists on CELO only
      const timestamp = Date.now().toString();
      const headers = {
        "x-wallet-address": wallet,
        "x-wallet-signature": await owner.signMessage!({ message: linkMessage("BillPay", timestamp) }),
        "x-wallet-timestamp": timestamp,
      };
      const linked = await link(headers, { ...body, wallet_address: wallet, approved_chain: "CELO", approved_token: "USDC" });
      expect(linked).toMatchObject({ status: 200, body: { scope_chain: "CELO" } });
      const key = linked.body.api_key as string;
      const onBase = await mcp.call("pay_bill", { api_key: key, pin: body.pin, ...airtime("08011111111"), chain: "BASE", token: "USDC" });
      expect(errorCode(onBase)).toBe("CHAIN_NOT_LINKED");
      // A signature the contract does not accept links nothing.
      const forged = { ...headers, "x-wallet-signature": await accounts(8).signMessage!({ message: linkMessage("BillPay", `${Number(timestamp) + 1}`) }), "x-wallet-timestamp": `${Number(timestamp) + 1}` };
      expect(await link(forged, { ...body, wallet_address: wallet })).toMatchObject({ status: 401, body: { code: "SIGNATURE_INVALID" } });
    });

    it("links a contract wallet not deployed yet (ERC-6492): its factory call is put to the validator, nothing is deployed, and another's signature links nothing", async () => {
      const owner = accounts(10);
      const { wallet, factory, factoryData } = await celo.counterfactualOwnedWallet(owner.address, keccak256(toBytes("agent-hub 6492")));
      expect(await celo.publicClient.getCode({ address: wallet })).toBeUndefined();
      const signed = async (signer: typeof owner, timestamp: string) => ({
        "x-wallet-address": wallet,
        "x-wallet-signature": serializeErc6492Signature({ address: factory, data: factoryData, signature: await signer.signMessage!({ message: linkMessage("BillPay", timestamp) }) }),
        "x-wallet-timestamp": timestamp,
      });
      const timestamp = Date.now().toString();
      // Another's signature, wrapped the same way: the wallet the factory would deploy refuses it.
      expect(await link(await signed(accounts(8), timestamp), { ...body, wallet_address: wallet })).toMatchObject({ status: 401, body: { code: "SIGNATURE_INVALID" } });
      const linked = await link(await signed(owner, `${Number(timestamp) + 1}`), { ...body, wallet_address: wallet, approved_chain: "CELO", approved_token: "USDC" });
      expect(linked).toMatchObject({ status: 200, body: { scope_chain: "CELO", api_key: expect.stringMatching(/^bpk_/) } });
      // Checked in a call that deploys nothing: the wallet is still to be made.
      expect(await celo.publicClient.getCode({ address: wallet })).toBeUndefined();
    });

    it("answers only the configured hosts and origins (DNS rebinding)", async () => {
      const res = await fetch(`${url}/api/mcp`, { method: "POST", headers: { "content-type": "application/json", origin: "http://evil.example" }, body: "{}" });
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({ code: "HOST_NOT_ALLOWED" });
      // Without OPS_TOKEN (this stack), the operator routes trust a loopback caller: a page that
      // rebinds its name to this machine is refused there too, and the machine's own pages are not.
      for (const path of ["/console", "/ops/review", "/metrics"]) {
        const rebound = await fetch(`${url}${path}`, { headers: { origin: "http://evil.example" } });
        expect(rebound.status, path).toBe(403);
        expect(await rebound.json()).toMatchObject({ code: "HOST_NOT_ALLOWED" });
        expect((await fetch(`${url}${path}`)).status, path).toBe(200);
      }
    });
  });

  describe("MCP", () => {
    it("lists the twelve tools (the interface's ten, get_quote and verify_customer), each with a description and an input schema", async () => {
      const { tools } = await mcp.client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(
        ["cancel_schedule", "check_balance", "describe_capabilities", "get_quote", "list_international_options", "list_plans", "list_schedules", "pay_bill", "pay_bill_batch", "schedule_bill", "transaction_history", "verify_customer"],
      );
      for (const t of tools) {
        expect(t.description!.length).toBeGreaterThan(40);
        expect(t.inputSchema.type).toBe("object");
        // MCP 2025-11-25's dialect for tool schemas (SEP-1613), declared; never draft-07's keywords.
        expect(t.inputSchema.$schema, t.name).toBe("https://json-schema.org/draft/2020-12/schema");
        expect(JSON.stringify(t.inputSchema), t.name).not.toMatch(/draft-07|"definitions"/);
      }
      const pay = tools.find((t) => t.name === "pay_bill")!;
      // The api_key and PIN are optional for pay_bill: without them it is paid per call with x402 (test/agent/mcp-x402.test.ts).
      expect(pay.inputSchema.required).toEqual(expect.arrayContaining(["serviceID", "billersCode", "nairaAmount"]));
      expect(pay.inputSchema.properties).toHaveProperty("api_key");
      expect(pay.inputSchema.properties).toHaveProperty("pin");
      // Read-only only where nothing changes: cancel_schedule moves no money, yet stops the wallet's bills.
      const readOnly = (name: string) => tools.find((t) => t.name === name)!.annotations?.readOnlyHint;
      expect([readOnly("check_balance"), readOnly("pay_bill"), readOnly("cancel_schedule")]).toEqual([true, false, false]);
    });

    it("advertises tools without list-change notifications (a stateless server's list never changes)", () => {
      // The initialize result's capabilities, as the official client received them.
      expect(mcp.client.getServerCapabilities()).toEqual({ tools: { listChanged: false } });
    });

    it("answers the interface's plain curl sample (no Accept header) with the balance at result.content[0].text", async () => {
      const a = await agent(6, 7n * USD);
      const res = await fetch(`${url}/api/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "check_balance", arguments: { api_key: a.apiKey, chain: "CELO" } } }),
      });
      expect(res.status).toBe(200);
      const rpc = (await res.json()) as { result: { content: Array<{ text: string }> } };
      const balance = JSON.parse(rpc.result.content[0]!.text) as { balances: Array<Record<string, { units: string }> & { token: string }> };
      const usdcRow = balance.balances.find((b) => b.token === "USDC")!;
      expect(usdcRow.balance!.units).toBe((await usdc(a.account)).toString());
      expect(usdcRow.spending_allowance!.units).toBe((7n * USD).toString());
      expect(usdcRow.spendable_now!.units).toBe((7n * USD).toString());
    });

    it("describe_capabilities tells an agent the chains, contracts, fees, limits and set-up calls", async () => {
      const { isError, data } = await mcp.call("describe_capabilities", {});
      expect(isError).toBe(false);
      const chains = data.chains as Array<{ chain: string; billpay_contract: string; tokens: Array<{ token: string; address: string }> }>;
      expect(chains.find((c) => c.chain === "CELO")!.billpay_contract).toBe(stack.deployments.chains.CELO!.billPay.address);
      expect(JSON.stringify(data.setup)).toContain("setSpendingAllowance(address token, uint256 amount)");
      expect(JSON.stringify(data.setup)).toContain("BillPay Agent Action: POST:/api/agent/link: ");
      expect(data.limits).toMatchObject({ batch_max_bills: 5 });
      expect((data.tools as unknown[]).length).toBe(12);
      expect(data.pricing).toMatchObject({ facilitator_fee_usd: "0.001", minimum_price_usd: "0.05" });
      // The compact answer names the products; detail gives their names and limits, and every tool's arguments.
      expect(data.products).toMatchObject({ AIRTIME: expect.arrayContaining(["mtn"]), CABLE: expect.arrayContaining(["dstv"]) });
      const full = (await mcp.call("describe_capabilities", { detail: "full" })).data;
      for (const t of full.tools as Array<{ arguments: { $schema: string } }>) expect(t.arguments.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
      expect(full.products).toMatchObject({ AIRTIME: expect.arrayContaining([{ serviceID: "mtn", name: expect.any(String), min_naira: 50, max_naira: 50000 }]), CABLE: expect.arrayContaining([expect.objectContaining({ serviceID: "dstv" })]) });
    });

    it("list_plans and list_international_options come from the biller; bad input is a tool error", async () => {
      const plans = await mcp.call("list_plans", { serviceID: "mtn-data" });
      expect(plans.isError).toBe(false);
      expect((plans.data.plans as unknown[]).length).toBeGreaterThan(0);
      expect(plans.data.plans).toEqual(expect.arrayContaining([expect.objectContaining({ variation_code: expect.any(String), nairaAmount: expect.any(Number) })]));
      const intl = await mcp.call("list_international_options", {});
      expect((intl.data.countries as unknown[]).length).toBeGreaterThan(0);
      // The biller answers "no such product" (012): bad input, said so, not "unavailable, try again".
      expect(errorCode(await mcp.call("list_plans", { serviceID: "no-such-product" }))).toBe("SERVICE_UNKNOWN");
      expect(errorCode(await mcp.call("list_plans", { serviceID: "foreign-airtime" }))).toBe("INTERNATIONAL_FIELDS_INVALID");
      const bad = await mcp.call("list_plans", { serviceID: "Not A Slug" });
      expect(bad.isError).toBe(true);
    });

    it("pay_bill pulls the price, vends, and shows in the ledger; a retry with the same idempotency_key pays nothing more", async () => {
      const a = await agent(7);
      const before = await usdc(a.account);
      const paid = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111"), idempotency_key: "first-bill" });
      expect(paid.isError).toBe(false);
      expect(paid.data).toMatchObject({ success: true, status: "SUCCESS", request_id: expect.stringMatching(/^req_/), tx_hash: expect.stringMatching(/^0x/), chain: "CELO", token: "USDC" });
      const amount = BigInt((paid.data.amount as { units: string }).units);
      expect(amount).toBe(1_001_000n); // 1550 NGN at 1550/USD + 0.001 fee
      expect(await usdc(a.account)).toBe(before - amount);
      // The pull may be served on its receipt before the ledger has indexed its block.
      const pulled = await celo.publicClient.getTransactionReceipt({ hash: paid.data.tx_hash as Hex });
      await waitForLedgerBlock(ledger.url, 42220, pulled.blockNumber);
      const order = (await (await fetch(`${ledger.url}/ledger/orders/${keccak256(toBytes(paid.data.request_id as string))}`)).json()) as { payments: unknown[] };
      expect(order.payments[0]).toMatchObject({ rail: "pull", amount: amount.toString() });

      const again = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111"), idempotency_key: "first-bill" });
      expect(again.data).toMatchObject({ request_id: paid.data.request_id, replayed: true });
      expect(await usdc(a.account)).toBe(before - amount);
      expect(errorCode(await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111", 999), idempotency_key: "first-bill" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      // The key is the call's, whichever tool makes it: a batch under it, or a bill under a batch's key, pays nothing.
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: [airtime("08011111111")], idempotency_key: "first-bill" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      const batch = await a.call("pay_bill_batch", { pin: a.pin, bills: [airtime("08011111111", 1000)], idempotency_key: "first-batch" });
      const batchAmount = BigInt((batch.data.results as Array<{ amount: { units: string } }>)[0]!.amount.units);
      expect(errorCode(await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111", 1000), idempotency_key: "first-batch" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      expect(await usdc(a.account)).toBe(before - amount - batchAmount);
      // The two tools under one key at once: one is charged at most.
      const racing = await Promise.all([
        a.call("pay_bill", { pin: a.pin, ...airtime("08011111111", 1010), idempotency_key: "racing" }),
        a.call("pay_bill_batch", { pin: a.pin, bills: [airtime("08011111111", 1020)], idempotency_key: "racing" }),
      ]);
      const charged = racing.flatMap((r) => (r.data.results as Array<{ amount: { units: string } }> | undefined)?.map((x) => BigInt(x.amount.units)) ?? (r.isError ? [] : [BigInt((r.data.amount as { units: string }).units)]));
      expect(charged.length).toBeLessThanOrEqual(1);
      for (const r of racing) if (r.isError) expect(errorCode(r)).toBe("IDEMPOTENCY_KEY_REUSED");
      expect(await usdc(a.account)).toBe(before - amount - batchAmount - charged.reduce((s, x) => s + x, 0n));
    });

    it("pay_bill refunds on chain when the biller fails the bill", async () => {
      const a = await agent(8);
      const before = await usdc(a.account);
      const failed = await a.call("pay_bill", { pin: a.pin, ...airtime("08099999999") });
      expect(failed.data).toMatchObject({ success: false, status: "FAILED_VENDING", refund: { status: "REFUNDED", tx_hash: expect.stringMatching(/^0x/) } });
      expect(await usdc(a.account)).toBe(before);
    });

    it("refuses, charging nothing, bad arguments, a wrong PIN, an unknown key and a short allowance", async () => {
      const a = await agent(9, 2n * USD);
      const before = await usdc(a.account);
      const cases: Array<[Record<string, unknown>, string | undefined]> = [
        [{ pin: a.pin, ...airtime("08011111111"), nairaAmount: -5 }, undefined],
        [{ pin: a.pin, ...airtime("08011111111"), serviceCategory: "GROCERIES" }, undefined],
        [{ pin: "12", ...airtime("08011111111") }, undefined],
        [{ pin: a.pin, ...airtime("08011111111"), chain: "SOLANA" }, "UNSUPPORTED_CHAIN"],
        [{ pin: a.pin, ...airtime("08011111111"), chain: "BASE", token: "USA₮" }, "TOKEN_NOT_PULLABLE"],
        [{ pin: a.pin, ...airtime("08011111111", 4650) }, "SPENDING_ALLOWANCE_INSUFFICIENT"], // 3 USD against 2
        [{ pin: a.pin, ...airtime("08011111111"), token: "USDT" }, "SPENDING_ALLOWANCE_INSUFFICIENT"], // no USD₮ allowance
      ];
      for (const [args, code] of cases) {
        const answer = await a.call("pay_bill", args);
        expect(answer.isError, JSON.stringify(args)).toBe(true);
        if (code) expect(errorCode(answer)).toBe(code);
      }
      expect(errorCode(await mcp.call("pay_bill", { api_key: `bpk_${"B".repeat(43)}`, pin: "1234", ...airtime("08011111111") }))).toBe("API_KEY_INVALID");
      // Token allowance short: spending allowance is there, the ERC-20 approval is not.
      await celo.approveAndAllow(a.account, "USDC", 50n * USD, 1n * USD);
      expect(errorCode(await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111", 3100) }))).toBe("TOKEN_ALLOWANCE_INSUFFICIENT");
      expect(await usdc(a.account)).toBe(before);
    });

    it("a bill in the REST body's eight fields pays as they say; two chains or tokens named, or another wallet, are refused and charge nothing", async () => {
      const a = await agent(13);
      const base = chainActors(stack.deployments, "BASE");
      await base.approveAndAllow(a.account, "USDC", 100n * USD);
      const onBase = () => base.balanceOf("USDC", a.account.address);
      const eight = (nairaAmount: number) => ({ ...airtime("08011111111", nairaAmount), token: "USDC", blockchain: "BASE", wallet_address: a.account.address });
      const [celoBefore, baseBefore] = [await usdc(a.account), await onBase()];
      const refusals: Array<[string, Record<string, unknown>, string]> = [
        ["pay_bill", { ...eight(1550), chain: "CELO" }, "VALIDATION_FAILED"],
        ["pay_bill", { ...eight(1550), token: "USDT", wallet_address: accounts(9).address }, "WALLET_MISMATCH"],
        ["schedule_bill", { ...eight(1550), wallet_address: accounts(9).address, cron: "0 9 1 * *" }, "WALLET_MISMATCH"],
        ["get_quote", { ...eight(1550), chain: "CELO" }, "VALIDATION_FAILED"],
        ["pay_bill_batch", { token: "USDC", bills: [eight(1550), { ...eight(1560), token: "USDT" }] }, "VALIDATION_FAILED"],
        ["pay_bill_batch", { bills: [eight(1550), { ...eight(1560), blockchain: "CELO" }] }, "VALIDATION_FAILED"],
        ["pay_bill_batch", { bills: [eight(1550), { ...eight(1560), chain: "CELO" }] }, "VALIDATION_FAILED"],
        ["pay_bill_batch", { bills: [eight(1550), { ...eight(1560), wallet_address: accounts(9).address }] }, "WALLET_MISMATCH"],
      ];
      for (const [tool, args, code] of refusals) expect(errorCode(await a.call(tool, { pin: a.pin, ...args })), `${tool} ${JSON.stringify(args)}`).toBe(code);
      expect([await usdc(a.account), await onBase()]).toEqual([celoBefore, baseBefore]);

      // The link approved CELO; the bill names BASE, and is paid there.
      const paid = await a.call("pay_bill", { pin: a.pin, ...eight(1550) });
      expect(paid.data, JSON.stringify(paid.data)).toMatchObject({ status: "SUCCESS" });
      const order = (await service.flow.orders.get(paid.data.request_id as string))!;
      expect(order.chain).toBe("BASE");
      const batch = await a.call("pay_bill_batch", { pin: a.pin, bills: [eight(1570), eight(1580)] });
      const results = batch.data.results as Array<{ request_id: string; status: string }>;
      expect(results.map((r) => r.status), JSON.stringify(batch.data)).toEqual(["SUCCESS", "SUCCESS"]);
      const batchOrders = await Promise.all(results.map(async (r) => (await service.flow.orders.get(r.request_id))!));
      expect(batchOrders.map((o) => o.chain)).toEqual(["BASE", "BASE"]);
      // Each order keeps the operator key's nonce and fees its pull was signed under (a pull a
      // pool drops is voided under that nonce before its order is written off: pull-reconciler.ts).
      const onBaseChain = chainActors(stack.deployments, "BASE");
      for (const o of [order, ...batchOrders]) {
        const tx = await onBaseChain.publicClient.getTransaction({ hash: o.txHash as Hex });
        expect((await service.flow.orders.signedPullRecord(o.requestId)).nonces).toEqual([{ signer: operatorAccount().address.toLowerCase(), nonce: tx.nonce, maxFeePerGas: tx.maxFeePerGas, maxPriorityFeePerGas: tx.maxPriorityFeePerGas }]);
      }
      expect(await usdc(a.account)).toBe(celoBefore);
      expect(baseBefore - (await onBase())).toBe(order.amount + batchOrders[0]!.amount + batchOrders[1]!.amount);
    });

    it("get_quote shows the price and breakdown that pay_bill then charges", async () => {
      const a = await agent(12);
      const bill = airtime("08011111111", 3100);
      const quoted = await a.call("get_quote", bill);
      expect(quoted.isError).toBe(false);
      const [q] = quoted.data.quotes as Array<{ chain: string; token: string; amount: { units: string }; breakdown: Record<string, unknown>; expires_at: string }>;
      expect(q).toMatchObject({ chain: "CELO", token: "USDC", amount: { units: "2001000" }, breakdown: { ngn_per_usd: "1550", rate_source: expect.any(String) } });
      const before = await usdc(a.account);
      const paid = await a.call("pay_bill", { pin: a.pin, ...bill, allow_duplicate: true });
      expect(paid.data).toMatchObject({ status: "SUCCESS", amount: { units: q!.amount.units } });
      expect(await usdc(a.account)).toBe(before - BigInt(q!.amount.units));
      expect(errorCode(await a.call("get_quote", { ...bill, serviceID: "no-such" }))).toBe("SERVICE_UNKNOWN");
    });

    it("get_quote locks its price until it expires: pay_bill charges it however the rate moved since; a bill not quoted pays today's price", async () => {
      const a = await agent(12);
      const [quotedBill, unquotedBill] = [airtime("08011111111", 3200), airtime("08011111111", 3300)];
      const amountOf = (answer: ToolAnswer) => BigInt((answer.data as { amount: { units: string } }).amount.units);
      const quoted = (await a.call("get_quote", quotedBill)).data.quotes as Array<{ amount: { units: string } }>;
      // The rate source moves (within the day's band): a new rate version prices from now on.
      const moved = vi.spyOn(service.hub.deps.rates, "ngnPerUsdMilli").mockResolvedValue(1_500_000n);
      try {
        const before = await usdc(a.account);
        const paid = await a.call("pay_bill", { pin: a.pin, ...quotedBill, allow_duplicate: true });
        expect(paid.data).toMatchObject({ status: "SUCCESS" });
        expect(amountOf(paid)).toBe(BigInt(quoted[0]!.amount.units));
        const today = await a.call("pay_bill", { pin: a.pin, ...unquotedBill, allow_duplicate: true });
        expect(today.data).toMatchObject({ status: "SUCCESS" });
        const todayQuote = (await a.call("get_quote", unquotedBill)).data.quotes as Array<{ amount: { units: string }; breakdown: { ngn_per_usd: string } }>;
        expect(todayQuote[0]).toMatchObject({ amount: { units: amountOf(today).toString() }, breakdown: { ngn_per_usd: "1500" } });
        expect(await usdc(a.account)).toBe(before - amountOf(paid) - amountOf(today));
        // Quoted again, the bill is locked to the new price.
        const requoted = (await a.call("get_quote", quotedBill)).data.quotes as Array<{ amount: { units: string } }>;
        expect(BigInt(requoted[0]!.amount.units)).toBeGreaterThan(BigInt(quoted[0]!.amount.units));
        expect(amountOf(await a.call("pay_bill", { pin: a.pin, ...quotedBill, allow_duplicate: true }))).toBe(BigInt(requoted[0]!.amount.units));
      } finally {
        moved.mockRestore();
      }
    });

    it("exhausts the allowance: pays while it lasts, then refuses", async () => {
      const a = await agent(10, 2_100_000n);
      const first = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111") });
      expect(first.data).toMatchObject({ status: "SUCCESS" });
      // The same bill again at once, with no idempotency_key: taken for a blind retry.
      const before = await usdc(a.account);
      const again = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111") });
      expect(again.data).toMatchObject({ request_id: first.data.request_id, replayed: true });
      expect(await usdc(a.account)).toBe(before);
      const meant = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111"), allow_duplicate: true });
      expect(meant.data).toMatchObject({ status: "SUCCESS" });
      expect(meant.data.request_id).not.toBe(first.data.request_id);
      const third = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111"), allow_duplicate: true });
      expect(errorCode(third)).toBe("SPENDING_ALLOWANCE_INSUFFICIENT");
      expect(third.data.error).toMatchObject({ required: "1001000", available: "98000" });
    });

    it("a periodic limit set on chain bounds pay_bill; check_balance shows what the period leaves, on the chain and in the ledger", async () => {
      const a = await agent(5);
      // One 1,550 NGN bill costs 1.001 USDC: the limit has room for one, not two.
      await celo.setSpendingLimit(a.account, "USDC", 1_500_000n, 3_600n);
      type Row = { token: string; spendable_now: { units: string }; period_limit: Record<string, any> | null; ledger: { period_limit: Record<string, any> | null } | null };
      const usdcRow = async () => ((await a.call("check_balance", { chain: "CELO" })).data.balances as Row[]).find((b) => b.token === "USDC")!;
      const ledgerLeft = async (units: string) => {
        for (let i = 0; i < 100 && (await usdcRow()).ledger?.period_limit?.left_this_period.units !== units; i++) await new Promise((r) => setTimeout(r, 100));
        return (await usdcRow()).ledger?.period_limit;
      };

      const fresh = await usdcRow();
      expect(fresh.period_limit).toMatchObject({ amount_per_period: { units: "1500000" }, period_seconds: 3600, spent_this_period: { units: "0" }, left_this_period: { units: "1500000" } });
      expect(Date.parse(fresh.period_limit!.period_ends) - Date.parse(fresh.period_limit!.period_started)).toBe(3_600_000);
      expect(fresh.spendable_now.units).toBe("1500000");

      // A failed bill is refunded within the period, and gives back what it used of it.
      const failed = await a.call("pay_bill", { pin: a.pin, ...airtime("08099999999") });
      expect(failed.data).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
      expect((await usdcRow()).period_limit).toMatchObject({ left_this_period: { units: "1500000" } });

      const paid = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111") });
      expect(paid.data).toMatchObject({ status: "SUCCESS", amount: { units: "1001000" } });
      const after = await usdcRow();
      expect(after.period_limit).toMatchObject({ spent_this_period: { units: "1001000" }, left_this_period: { units: "499000" } });
      expect(after.spendable_now.units).toBe("499000");
      expect(await ledgerLeft("499000")).toMatchObject({ amount_per_period: { units: "1500000" }, left_this_period: { units: "499000" }, period_ends: after.period_limit!.period_ends });

      // The next bill is refused before any pull, naming what is left and when the period ends; nothing is charged.
      const before = await usdc(a.account);
      const refused = await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111"), allow_duplicate: true });
      expect(refused.data.error).toMatchObject({ code: "SPENDING_LIMIT_EXCEEDED", required: "1001000", available: "499000", period_ends: after.period_limit!.period_ends });
      const batch = await a.call("pay_bill_batch", { pin: a.pin, bills: [airtime("08011111111", 620), airtime("08011111111", 620)] }); // 0.401 USDC each: 0.802 against 0.499 left
      expect(errorCode(batch)).toBe("SPENDING_LIMIT_EXCEEDED");
      expect(await usdc(a.account)).toBe(before);

      // Removing the limit on chain lifts it at once.
      await celo.setSpendingLimit(a.account, "USDC", 0n, 0n);
      expect((await usdcRow()).period_limit).toBeNull();
      expect((await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111"), allow_duplicate: true })).data).toMatchObject({ status: "SUCCESS" });
    });

    it("list_international_options leads to a bill pay_bill pays; one the biller fails is refunded", async () => {
      const a = await agent(6);
      expect((await a.call("list_international_options")).data.countries).toContainEqual(expect.objectContaining({ code: "CM", currency: "XAF" }));
      const steps = await a.call("list_international_options", { country_code: "cm", product_type_id: 1, operator_id: "21", foreignAmount: 500 });
      expect(steps.isError).toBe(false);
      const bill = { ...(steps.data.bill as Record<string, unknown>), billersCode: "237612345678" };
      // 500 XAF at 2.60 NGN per XAF.
      expect(bill).toMatchObject({ serviceID: "foreign-airtime", nairaAmount: 1300, foreignAmount: 500, country_code: "CM", operator_id: "21" });
      const before = await usdc(a.account);
      const paid = await a.call("pay_bill", { pin: a.pin, ...bill, phone: "08011111111" });
      expect(paid.data).toMatchObject({ success: true, status: "SUCCESS" });
      const charged = BigInt((paid.data.amount as { units: string }).units);
      expect(await usdc(a.account)).toBe(before - charged);
      // The sandbox fails any other customer phone: the pull is refunded on chain.
      const failed = await a.call("pay_bill", { pin: a.pin, ...bill, phone: "08099999999" });
      expect(failed.data).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
      expect(await usdc(a.account)).toBe(before - charged);
      expect(errorCode(await a.call("pay_bill", { pin: a.pin, ...bill, foreignAmount: 501 }))).toBe("FOREIGN_AMOUNT_MISMATCH");
      expect(errorCode(await a.call("list_international_options", { country_code: "KE", product_type_id: 4 }))).toBe("INTERNATIONAL_OPTION_UNKNOWN");
    });

    it("locks paying tools after too many wrong PINs; reading tools keep working", async () => {
      const a = await agent(11);
      const before = await usdc(a.account);
      const wrong = () => a.call("pay_bill", { pin: "9999", ...airtime("08011111111") });
      expect((await wrong()).data.error).toMatchObject({ code: "PIN_INVALID", attempts_left: 2 });
      expect((await wrong()).data.error).toMatchObject({ code: "PIN_INVALID", attempts_left: 1 });
      expect((await wrong()).data.error).toMatchObject({ code: "PIN_LOCKED", retry_after_seconds: expect.any(Number) });
      // Locked: even the right PIN is refused, on every paying tool.
      expect(errorCode(await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111") }))).toBe("PIN_LOCKED");
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: [airtime("08011111111")] }))).toBe("PIN_LOCKED");
      expect(errorCode(await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111"), run_at: new Date(Date.now() + 60_000).toISOString() }))).toBe("PIN_LOCKED");
      expect((await a.call("check_balance")).isError).toBe(false);
      expect(await usdc(a.account)).toBe(before);
    });

    it("pay_bill_batch pulls every bill in one transaction, vends each, refunds each failure by itself", async () => {
      const a = await agent(12);
      const before = await usdc(a.account);
      const treasuryBefore = await celo.balanceOf("USDC", celo.billPay);
      const bills = [airtime("08011111111", 1550), airtime("08099999999", 3100), airtime("08011111111", 775)];
      const answer = await a.call("pay_bill_batch", { pin: a.pin, bills, idempotency_key: "batch-1" });
      expect(answer.isError).toBe(false);
      const results = answer.data.results as Array<{ status: string; tx_hash: string; amount: { units: string }; refund?: { status: string } }>;
      expect(results.map((r) => r.status)).toEqual(["SUCCESS", "FAILED_VENDING", "SUCCESS"]);
      expect(new Set(results.map((r) => r.tx_hash)).size).toBe(1); // one pullBatch
      expect(results[1]!.refund).toMatchObject({ status: "REFUNDED" });
      expect(answer.data).toMatchObject({ succeeded: 2, failed: 1, pending: 0, batch_id: expect.stringMatching(/^bat_/) });
      const kept = BigInt(results[0]!.amount.units) + BigInt(results[2]!.amount.units);
      expect(await usdc(a.account)).toBe(before - kept);
      expect(await celo.balanceOf("USDC", celo.billPay)).toBe(treasuryBefore + kept);
      // A retry under the same key answers from the first batch and pulls nothing.
      const retry = await a.call("pay_bill_batch", { pin: a.pin, bills, idempotency_key: "batch-1" });
      expect(retry.data).toMatchObject({ replayed: true, batch_id: answer.data.batch_id });
      expect((retry.data.results as Array<{ request_id: string }>).map((r) => r.request_id)).toEqual((answer.data.results as Array<{ request_id: string }>).map((r) => r.request_id));
      expect(await usdc(a.account)).toBe(before - kept);
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: bills.slice(1), idempotency_key: "batch-1" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: bills.slice(0, 2), idempotency_key: "batch-1" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: [...bills, airtime("08011111111", 100)], idempotency_key: "batch-1" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      expect(await usdc(a.account)).toBe(before - kept);

      // Schema refusals (more than 5 bills, or none) carry the catalogue's code, as on A2A.
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: Array(6).fill(airtime("08011111111")) }))).toBe("VALIDATION_FAILED");
      expect(errorCode(await a.call("pay_bill_batch", { pin: a.pin, bills: [] }))).toBe("VALIDATION_FAILED");
      // A batch the allowance cannot cover is refused whole: nothing pulled.
      const small = await agent(13, 2n * USD);
      const smallBefore = await usdc(small.account);
      expect(errorCode(await small.call("pay_bill_batch", { pin: small.pin, bills: [airtime("08011111111"), airtime("08011111111")] }))).toBe("SPENDING_ALLOWANCE_INSUFFICIENT");
      expect(await usdc(small.account)).toBe(smallBefore);
    });

    it("transaction_history lists the wallet's orders newest first, with on-chain payment and refund, page by page", async () => {
      const a = await agent(14);
      await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111", 100) });
      await a.call("pay_bill", { pin: a.pin, ...airtime("08099999999", 200) });
      await a.call("pay_bill", { pin: a.pin, ...airtime("08011111111", 300) });
      // Read once the ledger has the refund (else the page is read again once it has: a second call).
      await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());
      // A page is one ledger call, however many orders it holds.
      const records = vi.spyOn(service.hub.deps.ledger, "records");
      const perOrder = [vi.spyOn(service.hub.deps.ledger, "order"), vi.spyOn(service.hub.deps.ledger, "authorization")];
      const first = await a.call("transaction_history", { limit: 2 });
      expect(records).toHaveBeenCalledTimes(1);
      for (const spy of perOrder) expect(spy).not.toHaveBeenCalled();
      for (const spy of [records, ...perOrder]) spy.mockRestore();
      const page1 = first.data.transactions as Array<{ bill: { nairaAmount: number }; status: string; onchain: { payment: { tx_hash: string } | null; refunds: unknown[] } }>;
      expect(page1.map((t) => t.bill.nairaAmount)).toEqual([300, 200]);
      expect(page1[1]).toMatchObject({ status: "FAILED_VENDING", onchain: { payment: { tx_hash: expect.stringMatching(/^0x/) }, refunds: [expect.objectContaining({ tx_hash: expect.any(String) })] } });
      expect(page1[0]!.onchain.refunds).toEqual([]);
      const second = await a.call("transaction_history", { limit: 2, cursor: first.data.next_cursor });
      expect((second.data.transactions as Array<{ bill: { nairaAmount: number } }>).map((t) => t.bill.nairaAmount)).toEqual([100]);
      expect(second.data.next_cursor).toBeNull();
      expect(errorCode(await a.call("transaction_history", { cursor: "bm9wZQ" }))).toBe("CURSOR_INVALID");
      expect((await a.call("transaction_history", { limit: 500 })).isError).toBe(true);
    });

    it("transaction_history and check_balance wait for the ledger to index the newest block: a refund just answered shows in both", async () => {
      const a = await agent(16);
      const failed = await a.call("pay_bill", { pin: a.pin, ...airtime("08099999999", 200) });
      expect(failed.data).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
      // The ledger as it stood before the refund, for its next few looks at its height: three
      // blocks short, with its records and totals as they were (as a ledger a poll behind answers).
      const hubLedger = service.hub.deps.ledger;
      await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());
      let lagLooks = 0;
      const lagging = () => lagLooks > 0;
      const realIndexed = hubLedger.indexedBlock.bind(hubLedger);
      const realRecords = hubLedger.records.bind(hubLedger);
      const realAccounts = hubLedger.accounts.bind(hubLedger);
      const spies = [
        vi.spyOn(hubLedger, "indexedBlock").mockImplementation(async (chainId) => {
          const indexed = await realIndexed(chainId);
          return indexed !== null && lagging() && lagLooks-- > 0 ? indexed - 3n : indexed;
        }),
        vi.spyOn(hubLedger, "records").mockImplementation(async (...args) => {
          const r = await realRecords(...args);
          return lagging() ? { ...r, refunds: [] } : r;
        }),
        vi.spyOn(hubLedger, "accounts").mockImplementation(async (wallet) => (lagging() ? [] : realAccounts(wallet))),
      ];
      const [heights] = spies;
      try {
        const looks = () => heights!.mock.calls.length;
        // A ledger that agrees with the service is read once, and its height not asked.
        expect((await a.call("transaction_history", { limit: 1 })).data).not.toHaveProperty("ledger_behind");
        expect(looks()).toBe(0);
        // The balance of a wallet whose order changed a moment ago looks once (the ledger is there).
        expect((await a.call("check_balance", { chain: "CELO" })).data).not.toHaveProperty("ledger_behind");
        expect(looks()).toBe(1);

        lagLooks = 3;
        const history = await a.call("transaction_history", { limit: 1 });
        const [newest] = history.data.transactions as Array<{ request_id: string; onchain: { refunds: Array<{ tx_hash: string }> } }>;
        expect(newest!.request_id).toBe(failed.data.request_id);
        expect(newest!.onchain.refunds).toEqual([expect.objectContaining({ tx_hash: (failed.data.refund as { tx_hash: string }).tx_hash })]);
        expect(history.data).not.toHaveProperty("ledger_behind");
        expect(looks()).toBeGreaterThanOrEqual(5); // three looks short, then there
        lagLooks = 3;
        const before = looks();
        const balance = await a.call("check_balance", { chain: "CELO" });
        expect((balance.data.balances as Array<{ token: string; ledger: { refunds: number } | null }>).find((b) => b.token === "USDC")!.ledger).toMatchObject({ refunds: 1 });
        expect(balance.data).not.toHaveProperty("ledger_behind");
        expect(looks() - before).toBeGreaterThanOrEqual(4);
      } finally {
        for (const spy of spies) spy.mockRestore();
      }
    });

    it("transaction_history shows purchased codes only with the PIN: with the key alone an exam PIN or a token is withheld", async () => {
      const a = await agent(14);
      const meter = { serviceID: "ikeja-electric", serviceCategory: "ELECTRICITY", network: "IKEJA", billersCode: "1111111111111", variation_code: "prepaid", nairaAmount: 1000 };
      const paid = await a.call("pay_bill", { pin: a.pin, ...meter });
      expect(paid.data).toMatchObject({ status: "SUCCESS", purchased_code: expect.any(String) });
      const newest = async (args: Record<string, unknown>) => ((await a.call("transaction_history", { limit: 1, ...args })).data.transactions as Array<Record<string, unknown>>)[0]!;
      expect(await newest({})).toMatchObject({ request_id: paid.data.request_id, status: "SUCCESS", purchased_code: null, purchased_code_withheld: true });
      expect(await newest({ pin: a.pin })).toMatchObject({ request_id: paid.data.request_id, purchased_code: paid.data.purchased_code });
      expect(await newest({ pin: a.pin })).not.toHaveProperty("purchased_code_withheld");
      expect(errorCode(await a.call("transaction_history", { pin: "0000" }))).toBe("PIN_INVALID");
      // The order route takes no api_key for proof: a key without its PIN reads no code there either.
      const orderUrl = `${url}/api/orders/${paid.data.request_id}`;
      expect(await (await fetch(orderUrl)).json()).toMatchObject({ status: "SUCCESS", purchased_code: null, purchased_code_withheld: true });
      const byKey = await fetch(orderUrl, { headers: { authorization: `Bearer ${a.apiKey}` } });
      const refused = await byKey.text();
      expect(byKey.status).toBe(401);
      expect(JSON.parse(refused)).toMatchObject({ code: "ORDER_PROOF_INVALID", detail: expect.stringContaining("an agent reads its codes with transaction_history and its PIN") });
      expect(refused).not.toContain(paid.data.purchased_code as string);
    });

    it("schedules a bill once per key: a blind retry answers with the first schedule, a key reused for another bill is refused, allow_duplicate makes another", async () => {
      const a = await agent(12);
      const bill = airtime("08011111111", 150);
      const runAt = new Date(Date.now() + 3_600_000).toISOString();
      const schedule = (args: Record<string, unknown> = {}) => a.call("schedule_bill", { pin: a.pin, ...bill, run_at: runAt, ...args });
      const first = await schedule();
      expect(first.data).toMatchObject({ status: "ACTIVE", schedule_id: expect.stringMatching(/^sch_/) });
      expect(first.data.replayed).toBeUndefined();
      // The answer was lost and the agent sends it again: the same schedule, not a second one paying the bill again.
      expect((await schedule()).data).toMatchObject({ schedule_id: first.data.schedule_id, replayed: true });
      const keyed = await schedule({ idempotency_key: "december-airtime" });
      expect(keyed.data.schedule_id).not.toBe(first.data.schedule_id);
      expect((await schedule({ idempotency_key: "december-airtime" })).data).toMatchObject({ schedule_id: keyed.data.schedule_id, replayed: true });
      expect(errorCode(await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111", 160), run_at: runAt, idempotency_key: "december-airtime" }))).toBe("IDEMPOTENCY_KEY_REUSED");
      const another = await schedule({ allow_duplicate: true });
      expect([first.data.schedule_id, keyed.data.schedule_id]).not.toContain(another.data.schedule_id);
      // A retry is answered before the call is checked again: one sent after its run_at has passed still finds its schedule.
      const soon = new Date(Date.now() + 3_000).toISOString();
      const due = await schedule({ run_at: soon, idempotency_key: "soon" });
      while (Date.now() < Date.parse(soon) + 1_500) await new Promise((r) => setTimeout(r, 250));
      expect((await schedule({ run_at: soon, idempotency_key: "soon" })).data).toMatchObject({ schedule_id: due.data.schedule_id, replayed: true });
      expect(errorCode(await schedule({ run_at: soon, idempotency_key: "later" }))).toBe("VALIDATION_FAILED");
      const active = (await a.call("list_schedules", { status: "ACTIVE" })).data.schedules as Array<{ schedule_id: string }>;
      expect(active.map((s) => s.schedule_id).sort()).toEqual([first.data.schedule_id, keyed.data.schedule_id, another.data.schedule_id, due.data.schedule_id].sort());
      for (const s of active) expect((await a.call("cancel_schedule", { schedule_id: s.schedule_id })).data).toMatchObject({ status: "CANCELLED" });
    });

    it("schedules a one-off and a recurring bill; each due time runs once, even with two instances; a cancelled one never runs", async () => {
      const a = await agent(15);
      const before = await usdc(a.account);
      const once = await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111", 100), run_at: new Date(Date.now() + 500).toISOString() });
      expect(once.data).toMatchObject({ status: "ACTIVE", kind: "once", schedule_id: expect.stringMatching(/^sch_/) });
      const recurring = await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111", 200), cron: "*/2 * * * * *", max_runs: 5 });
      expect(recurring.data).toMatchObject({ status: "ACTIVE", kind: "recurring" });

      // A second instance over the same database races the first for every due time.
      const other = buildHub(service.config, stack.deployments, service.db, service.flow, new ConfiguredRate(1_550_000n));
      const runBoth = () => Promise.all([service.hub.runDueSchedules(), other.runDueSchedules()]);
      await new Promise((r) => setTimeout(r, 2_100));
      await runBoth();
      await new Promise((r) => setTimeout(r, 2_100));
      await runBoth();

      const listed = (await a.call("list_schedules")).data.schedules as Array<{ schedule_id: string; status: string; runs: number; last_runs: Array<{ outcome: string; request_id: string; due_at: string }> }>;
      const onceNow = listed.find((s) => s.schedule_id === once.data.schedule_id)!;
      expect(onceNow).toMatchObject({ status: "COMPLETED", runs: 1, last_runs: [expect.objectContaining({ outcome: "SUCCESS" })] });
      const recurringNow = listed.find((s) => s.schedule_id === recurring.data.schedule_id)!;
      // Two passes 2 s apart reach at least two due times; on a slow machine a pass can find a
      // third one due while it runs. Whatever their number, each due time ran once, by one
      // instance, as an order of its own.
      expect(recurringNow.runs).toBeGreaterThanOrEqual(2);
      expect(recurringNow.last_runs).toHaveLength(recurringNow.runs);
      expect(recurringNow.last_runs.every((r) => r.outcome === "SUCCESS")).toBe(true);
      expect(new Set(recurringNow.last_runs.map((r) => r.request_id)).size).toBe(recurringNow.runs);
      expect(new Set(recurringNow.last_runs.map((r) => r.due_at)).size).toBe(recurringNow.runs);

      // The key alone cancels, as the interface has it (cancelling moves no money); a PIN sent is checked.
      expect(errorCode(await a.call("cancel_schedule", { pin: "0000", schedule_id: recurring.data.schedule_id }))).toBe("PIN_INVALID");
      const cancelled = await a.call("cancel_schedule", { schedule_id: recurring.data.schedule_id });
      expect(cancelled.data).toMatchObject({ status: "CANCELLED", next_run_at: null });
      await new Promise((r) => setTimeout(r, 2_100));
      await runBoth();
      const after = (await a.call("list_schedules", { status: "CANCELLED" })).data.schedules as Array<{ runs: number }>;
      expect(after[0]!.runs).toBe(recurringNow.runs); // cancelled: no run after it
      const history = (await a.call("transaction_history", { limit: 50 })).data.transactions as Array<{ schedule_id: string | null; amount: { units: string } }>;
      expect(history.filter((t) => t.schedule_id).length).toBe(1 + recurringNow.runs);
      const spent = history.reduce((s, t) => s + BigInt(t.amount.units), 0n);
      expect(await usdc(a.account)).toBe(before - spent);

      expect(errorCode(await a.call("cancel_schedule", { pin: a.pin, schedule_id: recurring.data.schedule_id }))).toBe("SCHEDULE_NOT_ACTIVE");
      expect(errorCode(await a.call("cancel_schedule", { pin: a.pin, schedule_id: "sch_00000000000000000000" }))).toBe("SCHEDULE_NOT_FOUND");
      expect(errorCode(await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111"), run_at: new Date().toISOString(), cron: "0 9 * * *" }))).toBe("VALIDATION_FAILED");
      expect(errorCode(await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111") }))).toBe("VALIDATION_FAILED");
      expect(errorCode(await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111"), cron: "not a cron" }))).toBe("VALIDATION_FAILED");
      expect(errorCode(await a.call("schedule_bill", { pin: a.pin, ...airtime("08011111111"), run_at: "2020-01-01T00:00:00Z" }))).toBe("VALIDATION_FAILED");
    });

    it("cancels a schedule whose wallet could not pay its last runs in a row: a schedule costs nothing to make, and its runs are not left to cost the service for ever", async () => {
      // A wallet linked with no allowance at all, as anyone can link one.
      const wallet = privateKeyToAccount(generatePrivateKey());
      const key = await linkAgent(url, wallet, { pin: "1234" });
      const made = await mcp.call("schedule_bill", { api_key: key, pin: "1234", ...airtime("08011111111", 100), cron: "*/2 * * * * *" });
      expect(made.data).toMatchObject({ status: "ACTIVE", kind: "recurring" });
      const id = made.data.schedule_id as string;
      const runNow = async () => {
        await service.db.query(`UPDATE bill_schedule SET next_run_at = date_trunc('milliseconds', now()) - interval '1 second' WHERE id = $1 AND status = 'ACTIVE'`, [id]);
        await service.hub.runDueSchedules();
      };
      const listed = async () => ((await mcp.call("list_schedules", { api_key: key })).data.schedules as Array<{ schedule_id: string; status: string; runs: number; last_runs: Array<{ outcome: string; error: string }> }>).find((x) => x.schedule_id === id)!;
      await runNow();
      await runNow();
      expect(await listed()).toMatchObject({ status: "ACTIVE", runs: 2 });
      await runNow();
      const cancelled = await listed();
      expect(cancelled).toMatchObject({ status: "CANCELLED", runs: 3 });
      expect(cancelled.last_runs.every((r) => r.outcome === "NOT_PAID" && r.error.startsWith("SPENDING_ALLOWANCE_INSUFFICIENT"))).toBe(true);
      expect(cancelled.last_runs[0]!.error).toContain("the schedule is cancelled after 3 runs in a row the wallet could not pay");
      await runNow();
      expect((await listed()).runs).toBe(3);
    });

    it("cancels at its next run a schedule whose callback_url the service no longer calls, paying nothing", async () => {
      const a = await agent(11);
      const before = await usdc(a.account);
      // Made when plain http was still taken (written as the store would have): every run would be refused.
      const s = await service.hub.deps.schedules.create({
        wallet: a.account.address,
        bill: { ...airtime("08011111111", 100), serviceCategory: "AIRTIME" as const, callback_url: "http://receiver.example/hook" },
        chain: "CELO",
        token: "USDC",
        runAt: null,
        cron: "*/2 * * * * *",
        firstRun: new Date(Date.now() - 1_000),
        maxRuns: null,
        maxPerWallet: 50,
        apiKeyHash: null,
      });
      await service.hub.runDueSchedules();
      const [listed] = ((await a.call("list_schedules")).data.schedules as Array<{ schedule_id: string; status: string; last_runs: Array<{ outcome: string; error: string }> }>).filter((x) => x.schedule_id === s.id);
      expect(listed).toMatchObject({ status: "CANCELLED", last_runs: [{ outcome: "NOT_PAID", error: expect.stringMatching(/^CALLBACK_URL_NOT_ALLOWED/) }] });
      expect(await usdc(a.account)).toBe(before);
    });
  });

  describe("onboarding", () => {
    it("takes the api_key as Authorization: Bearer on MCP and A2A; describe_capabilities gives absolute URLs and set-up calldata that works", async () => {
      const account = accounts(4);
      const apiKey = await linkAgent(url, account, { pin: "1234", token: "USDC" });
      const rpc = async (path: string, body: unknown, bearer: string | null = apiKey) => {
        const res = await fetch(`${url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }) },
          body: JSON.stringify(body),
        });
        return (await res.json()) as Record<string, any>;
      };
      const mcpCall = async (name: string, args: Record<string, unknown> = {}, bearer?: string | null) => {
        const answer = await rpc("/api/mcp", { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }, bearer);
        return { isError: answer.result.isError === true, data: answer.result.structuredContent as Record<string, any> };
      };

      const described = await mcpCall("describe_capabilities");
      expect(described.data.urls).toMatchObject({ x402_pay: `${url}/api/pay/x402`, order_status: `${url}/api/orders/{request_id}`, link: `${url}${LINK_PATH}` });
      expect(described.data.transports.mcp.url).toBe(`${url}/api/mcp`);
      const setup = described.data.your_setup as { chain: string; token: string; calls: Array<{ to: `0x${string}`; data: `0x${string}` }> };
      expect(setup).toMatchObject({ chain: "CELO", token: "USDC" });
      // The optional periodic limit comes ready to sign too (checked on chain in the periodic-limit test).
      expect((described.data.your_setup.optional as Array<{ to: string; data: string; what: string }>)[0]).toMatchObject({
        to: setup.calls[1]!.to,
        data: expect.stringMatching(/^0x[0-9a-f]{200}$/),
        what: expect.stringContaining("setSpendingLimit"),
      });
      // The wallet signs exactly the calls it was given: afterwards it can spend 100 USDC.
      const wallet = createWalletClient({ account, chain: viemChain("CELO", stack.deployments.chains.CELO!.rpcUrl), transport: http(stack.deployments.chains.CELO!.rpcUrl) });
      for (const call of setup.calls) await celo.mined(await wallet.sendTransaction({ to: call.to, data: call.data }));
      const balance = await mcpCall("check_balance"); // no api_key argument: the bearer header
      expect(balance.isError).toBe(false);
      const usdcRow = (balance.data.balances as Array<{ chain: string; token: string; spendable_now: { units: string } }>).find((b) => b.chain === "CELO" && b.token === "USDC")!;
      expect(usdcRow.spendable_now.units).toBe("100000000");
      // The token approval is the budget too, never unlimited (as npm run agent:link does it).
      expect(await celo.publicClient.readContract({ address: celo.tokenAddress("USDC"), abi: erc20Abi, functionName: "allowance", args: [account.address, celo.billPay] })).toBe(100_000_000n);
      // The argument wins over the header; a bad bearer is the catalogue's refusal.
      expect((await mcpCall("check_balance", { api_key: `bpk_${"C".repeat(43)}` })).data.error.code).toBe("API_KEY_INVALID");
      // A missing credential is named, with how to send it, not reported as a bad argument.
      const noKey = (await mcpCall("check_balance", {}, null)).data.error;
      expect(noKey).toMatchObject({ code: "API_KEY_MISSING", status: 401 });
      expect(noKey.detail).toContain("Authorization: Bearer <api_key>");
      expect(noKey.detail).not.toContain("expected string");
      const badHeader = (await mcpCall("check_balance", {}, "not-a-key")).data.error;
      expect(badHeader.code).toBe("API_KEY_MISSING");
      expect(badHeader.detail).toContain("an Authorization header came, but not as `Bearer bpk_...`");
      const noPin = (await mcpCall("pay_bill", { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 100 })).data.error;
      expect(noPin).toMatchObject({ code: "PIN_MISSING", status: 401 });
      const a2aNoKey = await rpc(
        "/api/a2a",
        { jsonrpc: "2.0", id: 3, method: "message/send", params: { message: { kind: "message", messageId: crypto.randomUUID(), role: "user", parts: [{ kind: "data", data: { skill: "check_balance", arguments: {} } }] } } },
        null,
      );
      expect(a2aNoKey.result.parts.find((p: { kind: string }) => p.kind === "data").data.error).toMatchObject({ code: "API_KEY_MISSING" });

      const a2a = await rpc("/api/a2a", {
        jsonrpc: "2.0",
        id: 2,
        method: "message/send",
        params: { message: { kind: "message", messageId: crypto.randomUUID(), role: "user", parts: [{ kind: "data", data: { skill: "check_balance", arguments: {} } }] } },
      });
      const data = a2a.result.parts.find((p: { kind: string }) => p.kind === "data").data;
      expect(data.error).toBeUndefined();
      expect(data.wallet.toLowerCase()).toBe(account.address.toLowerCase());
    });
  });

  describe("A2A", () => {
    const dataOf = (m: Message) => m.parts.map((p) => p.content).find((c) => c?.$case === "data")?.value as Record<string, unknown>;
    const message = (skill: string, args: Record<string, unknown>): Message => ({
      messageId: crypto.randomUUID(),
      contextId: "",
      taskId: "",
      role: Role.ROLE_USER,
      parts: [{ content: { $case: "data", value: { skill, arguments: args } }, metadata: undefined, filename: "", mediaType: "application/json" }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    });

    it("serves the Agent Card with the twelve skills, and pays over A2A 1.0 with the official client", async () => {
      const card = (await (await fetch(`${url}/.well-known/agent-card.json`)).json()) as { skills: Array<{ id: string }>; supportedInterfaces: Array<{ protocolVersion: string }> };
      expect(card.skills.map((s) => s.id)).toHaveLength(12);
      expect(card.supportedInterfaces.map((i) => i.protocolVersion).sort()).toEqual(["0.3", "1.0"]);

      const client = await new ClientFactory().createFromUrl(url);
      const a = await agent(16);
      const before = await usdc(a.account);
      const balance = (await client.sendMessage({ tenant: "", message: message("check_balance", { api_key: a.apiKey }), configuration: undefined, metadata: undefined })) as Message;
      expect(dataOf(balance)).toMatchObject({ approved_token: "USDC" });
      const paid = (await client.sendMessage({ tenant: "", message: message("pay_bill", { api_key: a.apiKey, pin: a.pin, ...airtime("08011111111") }), configuration: undefined, metadata: undefined })) as Message;
      expect(dataOf(paid)).toMatchObject({ status: "SUCCESS", tx_hash: expect.stringMatching(/^0x/) });
      expect(await usdc(a.account)).toBe(before - 1_001_000n);
      const refused = (await client.sendMessage({ tenant: "", message: message("pay_bill", { api_key: a.apiKey, pin: "0000", ...airtime("08011111111") }), configuration: undefined, metadata: undefined })) as Message;
      expect(dataOf(refused)).toMatchObject({ error: { code: "PIN_INVALID" } });
      const unknown = (await client.sendMessage({ tenant: "", message: message("buy_pizza", {}), configuration: undefined, metadata: undefined })) as Message;
      expect(dataOf(unknown)).toMatchObject({ error: { code: "VALIDATION_FAILED" } });
    });

    it("takes the 0.3 message/send method, with the call as JSON text too", async () => {
      const a = await agent(17);
      const rpc = async (parts: unknown[]) => {
        const res = await fetch(`${url}/api/a2a`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "message/send", params: { message: { kind: "message", messageId: crypto.randomUUID(), role: "user", parts } } }),
        });
        return (await res.json()) as { id: number; result?: { kind: string; parts: Array<{ kind: string; data?: Record<string, unknown> }> }; error?: unknown };
      };
      const viaData = await rpc([{ kind: "data", data: { skill: "pay_bill_batch", arguments: { api_key: a.apiKey, pin: a.pin, bills: [airtime("08011111111"), airtime("08011111111", 775)] } } }]);
      expect(viaData.id).toBe(7);
      expect(viaData.result!.kind).toBe("message");
      const batch = viaData.result!.parts.find((p) => p.kind === "data")!.data!;
      expect(batch).toMatchObject({ succeeded: 2 });
      const viaText = await rpc([{ kind: "text", text: JSON.stringify({ skill: "list_schedules", arguments: { api_key: a.apiKey } }) }]);
      expect(viaText.result!.parts.find((p) => p.kind === "data")!.data).toEqual({ schedules: [] });
      const badRpc = await (await fetch(`${url}/api/a2a`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id: 8, method: "no/such" }) })).json();
      expect(badRpc).toMatchObject({ id: 8, error: { code: expect.any(Number) } });
    });

    it("takes the interface's structured call in MCP's shape too: tools/call on /api/a2a answers as /api/mcp does", async () => {
      const a = await agent(17);
      const call = async (method: string, params: Record<string, unknown>) => {
        const res = await fetch(`${url}/api/a2a`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id: 9, method, params }) });
        return (await res.json()) as { id: number; result?: { content?: Array<{ text: string }>; structuredContent?: Record<string, unknown>; tools?: unknown[]; isError?: boolean } };
      };
      const balance = await call("tools/call", { name: "check_balance", arguments: { api_key: a.apiKey, chain: "CELO" } });
      expect(balance.id).toBe(9);
      expect(JSON.parse(balance.result!.content![0]!.text)).toEqual(balance.result!.structuredContent);
      expect(balance.result!.structuredContent).toMatchObject({ balances: expect.any(Array) });
      expect((await call("tools/list", {})).result!.tools).toHaveLength(12);
      const refused = await call("tools/call", { name: "pay_bill", arguments: { api_key: a.apiKey, ...airtime("08011111111") } });
      expect(refused.result).toMatchObject({ isError: true, structuredContent: { error: { code: "PIN_MISSING" } } });
    });
  });

  describe("reconciler", () => {
    /** A pull order as pay_bill writes it before pulling, its lease already run out. */
    async function pullOrder(account: Account, billersCode = "08011111111") {
      const { requestId } = newOrderIds();
      const { orders } = await service.flow.orders.createPullOrders(
        [
          {
            requestId,
            vend: null,
            bodyHash: `crash-${requestId}`,
            bill: { ...airtime(billersCode), token: "USDC", blockchain: "CELO", wallet_address: account.address },
            chain: "CELO",
            token: "USDC",
            tokenAddress: celo.tokenAddress("USDC"),
            payer: account.address,
            amount: 1_001_000n,
            batchId: null,
            scheduleId: null,
            idempotencyKey: null,
          },
        ],
        0,
      );
      return orders[0]!;
    }
    const pullFor = (order: { requestId: string }, account: Account) =>
      service.flow.operator.pull("CELO", { requestId: order.requestId, payer: account.address, token: celo.tokenAddress("USDC"), amount: 1_001_000n }, async (h) => {
        if (!(await service.flow.orders.setTxHash([order.requestId], h))) throw new Error("the order is no longer waiting for a pull");
      });
    const ledgerAtHead = async () => waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());

    it("finishes a pull whose request died before vending, exactly once", async () => {
      const account = accounts(18);
      await celo.approveAndAllow(account, "USDC", 10n * USD);
      const { flow } = service;
      const order = await pullOrder(account);
      // The pull lands, then the process "dies": no PAID, no vend.
      await pullFor(order, account);
      await ledgerAtHead();
      expect(await workOnce(flow)).toBeGreaterThanOrEqual(1);
      expect(await flow.orders.get(order.requestId)).toMatchObject({ status: "SUCCESS", purchasedCode: null });
      expect(await workOnce(flow)).toBe(0);

      // A pull that never landed (crash before sending) is written off: nothing moved.
      const never = await pullOrder(account);
      // (The worker retries a pass that failed, as it does every few seconds; a loaded machine can fail one.)
      await expect.poll(async () => (await workOnce(flow), (await flow.orders.get(never.requestId))?.status), { timeout: 10_000 }).toBe("PAYMENT_FAILED");
      expect(await flow.orders.get(never.requestId)).toMatchObject({ status: "PAYMENT_FAILED", failureReason: "no pull was sent" });
      // A request that wakes up after the write-off cannot send its pull any more.
      const balance = await usdc(account);
      await expect(pullFor(never, account)).rejects.toThrow(/no longer waiting for a pull/);
      expect(await usdc(account)).toBe(balance);
    });

    it("leaves a pull's order alone past its lease while a pull signed for it waits unmined in the node's pool (a fee ladder outlives the lease; the order names a replacement never sent), then serves it once it lands", async () => {
      const account = accounts(18);
      await celo.approveAndAllow(account, "USDC", 10n * USD);
      const { flow } = service;
      const order = await pullOrder(account);
      await celo.miningPaused(async (mine) => {
        const pulling = pullFor(order, account);
        await expect.poll(async () => (await flow.orders.get(order.requestId))?.txHash ?? null, { timeout: 20_000 }).toMatch(/^0x/);
        // Its request's lease and the order's youth both past, as a request still raising its fee leaves them.
        await service.db.query(`UPDATE bill_order SET lease_until = now() - interval '1 second', created_at = created_at - interval '1 hour' WHERE request_id = $1`, [order.requestId]);
        await workOnce(flow);
        expect((await flow.orders.get(order.requestId))!.status).toBe("PULLING");
        // A replacement at a higher fee recorded, and its send failed: the order names a
        // transaction the node never saw, while the one it replaced waits in the pool.
        const [sent] = await flow.orders.signedPulls(order.requestId);
        const unsent = `0x${"ab".repeat(32)}`;
        expect(await flow.orders.replaceTxHash([order.requestId], sent!, unsent)).toBe(true);
        expect(await flow.orders.signedPulls(order.requestId)).toEqual([sent, unsent]);
        await service.db.query(`UPDATE bill_order SET lease_until = now() - interval '1 second' WHERE request_id = $1`, [order.requestId]);
        await workOnce(flow);
        expect((await flow.orders.get(order.requestId))!.status).toBe("PULLING");
        await mine();
        await pulling;
      });
      await ledgerAtHead();
      await expect.poll(async () => (await workOnce(flow), (await flow.orders.get(order.requestId))?.status), { timeout: 10_000 }).toBe("SUCCESS");
    });

    it("does not write off a pull the node's pool dropped while its nonce is unused: the operator key voids the nonce first, and the pull can never land after", async () => {
      const account = accounts(18);
      await celo.approveAndAllow(account, "USDC", 10n * USD);
      const { flow } = service;
      const order = await pullOrder(account);
      const before = await usdc(account);
      // The pull as the operator signs one, recorded with its nonce and fees, then lost before
      // any pool kept it (a node restarted, an eviction): whoever saw it can still send it.
      const operatorKey = operatorAccount();
      const wallet = createWalletClient({ account: operatorKey, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
      const fees = await celo.publicClient.estimateFeesPerGas();
      const request = {
        type: "eip1559" as const,
        chainId: 42220,
        to: celo.billPay,
        data: encodeFunctionData({ abi: billPayAbi, functionName: "pull", args: [onChainOrderId(order.requestId), account.address, celo.tokenAddress("USDC"), 1_001_000n] }),
        gas: 300_000n,
        nonce: await celo.publicClient.getTransactionCount({ address: operatorKey.address, blockTag: "pending" }),
        maxFeePerGas: fees.maxFeePerGas,
        maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
      };
      const serialized = await wallet.signTransaction(request);
      const under = { signer: operatorKey.address, nonce: request.nonce, maxFeePerGas: request.maxFeePerGas, maxPriorityFeePerGas: request.maxPriorityFeePerGas };
      expect(await flow.orders.setTxHash([order.requestId], keccak256(serialized), undefined, undefined, under)).toBe(true);
      // Replaced at twice the fees (same nonce), and that lost too: the void must outbid the replacement.
      const raised = await wallet.signTransaction({ ...request, maxFeePerGas: request.maxFeePerGas * 2n, maxPriorityFeePerGas: request.maxPriorityFeePerGas * 2n });
      expect(await flow.orders.replaceTxHash([order.requestId], keccak256(serialized), keccak256(raised), false, { maxFeePerGas: request.maxFeePerGas * 2n, maxPriorityFeePerGas: request.maxPriorityFeePerGas * 2n })).toBe(true);
      // Its request's lease and the order's youth both past.
      await service.db.query(`UPDATE bill_order SET lease_until = now() - interval '1 second', created_at = created_at - interval '1 hour' WHERE request_id = $1`, [order.requestId]);
      await workOnce(flow);
      expect((await flow.orders.get(order.requestId))!.status).toBe("PULLING");
      // The operator key used the nonce on a transfer of nothing to itself, priced above the replacement.
      await expect.poll(() => celo.publicClient.getTransactionCount({ address: operatorKey.address, blockTag: "latest" }), { timeout: 10_000 }).toBeGreaterThan(request.nonce);
      const head = await celo.publicClient.getBlockNumber();
      const blocks = await Promise.all([0n, 1n, 2n, 3n, 4n].filter((back) => back <= head).map((back) => celo.publicClient.getBlock({ blockNumber: head - back, includeTransactions: true })));
      const voided = blocks.flatMap((b) => b.transactions).find((t) => t.from.toLowerCase() === operatorKey.address.toLowerCase() && t.nonce === request.nonce)!;
      expect(voided).toMatchObject({ to: operatorKey.address.toLowerCase(), value: 0n });
      expect(voided.maxFeePerGas!).toBeGreaterThan(request.maxFeePerGas * 2n);
      expect(voided.maxPriorityFeePerGas!).toBeGreaterThan(request.maxPriorityFeePerGas * 2n);
      // Written off once the nonce is used as deep as a payment must be.
      await expect.poll(async () => (await workOnce(flow), (await flow.orders.get(order.requestId))?.status), { timeout: 20_000 }).toBe("PAYMENT_FAILED");
      // The lost pull, sent now by whoever kept it: refused by the chain, nothing moved.
      for (const lost of [serialized, raised]) await expect(wallet.sendRawTransaction({ serializedTransaction: lost })).rejects.toThrow(/nonce/i);
      expect(await usdc(account)).toBe(before);
      const onChain = await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "orderOf", args: [onChainOrderId(order.requestId)] });
      expect(onChain.paid).toBe(0n);
    });

    it("holds for an operator, never writes off, a lost pull signed under an operator key this instance does not hold: nothing here can use its nonce", async () => {
      const account = accounts(18);
      const { flow } = service;
      const order = await pullOrder(account);
      const elsewhere = { signer: privateKeyToAccount(generatePrivateKey()).address, nonce: 0, maxFeePerGas: 1n, maxPriorityFeePerGas: 1n }; // another instance's key, nonce unused
      expect(await flow.orders.setTxHash([order.requestId], `0x${"cd".repeat(32)}`, undefined, undefined, elsewhere)).toBe(true);
      await service.db.query(`UPDATE bill_order SET lease_until = now() - interval '1 second', created_at = created_at - interval '1 hour' WHERE request_id = $1`, [order.requestId]);
      await workOnce(flow);
      expect(await flow.orders.get(order.requestId)).toMatchObject({ status: "NEEDS_REVIEW", failureReason: expect.stringContaining("not this instance's") });
    });

    it("refunds a failed bill whose refund a crash interrupted, and a pull that landed after its order was written off", async () => {
      const account = accounts(18);
      const { flow } = service;
      const before = await usdc(account);
      // Vending failed and the order went REFUNDING, then the process died before the refund.
      const failed = await pullOrder(account, "08099999999");
      await pullFor(failed, account);
      await flow.orders.transition(failed.requestId, ["PULLING"], "PAID");
      await flow.orders.transition(failed.requestId, ["PAID"], "REFUNDING", { failureReason: "biller: failed" });
      // Written off when its pull had not landed within the lease, and then the pull landed after all.
      const late = await pullOrder(account);
      await flow.orders.transition(late.requestId, ["PULLING"], "PAYMENT_FAILED", { failureReason: "the pull did not land" });
      await flow.operator.pull("CELO", { requestId: late.requestId, payer: account.address, token: celo.tokenAddress("USDC"), amount: 1_001_000n });
      expect(await usdc(account)).toBe(before - 2_002_000n);

      // A refund is sent only once the ledger shows the payment it returns: once the ledger's
      // readable block is the head, the pull is there.
      await ledgerAtHead();
      expect((await flow.ledger.order(failed.onchainOrderId)).payments).toHaveLength(1);
      await workOnce(flow);
      // While the ledger pass sends the late pull's refund, the order is leased: a worker of
      // another instance, finding it REFUNDING, does not send the same refund beside it.
      const refund = flow.operator.refund;
      const claimedMeanwhile: Array<string | undefined> = [];
      flow.operator.refund = async (args) => {
        if (args.orderId === late.onchainOrderId) claimedMeanwhile.push((await flow.orders.claimUnfinished(["REFUNDING"], 0, 30))?.requestId);
        return refund.call(flow.operator, args);
      };
      try {
        await reconcileOrphanPulls(flow);
      } finally {
        flow.operator.refund = refund;
      }
      expect(claimedMeanwhile).toEqual([undefined]);
      expect(await flow.orders.get(failed.requestId)).toMatchObject({ status: "REFUNDED", refundTxHash: expect.stringMatching(/^0x/) });
      expect(await flow.orders.get(late.requestId)).toMatchObject({ status: "REFUNDED", failureReason: "the pull landed after the order was written off" });
      expect(await usdc(account)).toBe(before);
      // Nothing is refunded twice.
      await workOnce(flow);
      await reconcileOrphanPulls(flow);
      expect(await usdc(account)).toBe(before);
    });

    it("holds for an operator, never refunds, a pull that landed after its order was written off when its bill had been vended", async () => {
      const account = accounts(18);
      const { flow } = service;
      const before = await usdc(account);
      // Served, then a reorganisation took its pull and an operator closed it as not charged.
      const vended = await pullOrder(account);
      await flow.orders.transition(vended.requestId, ["PULLING"], "PAYMENT_FAILED", { failureReason: "closed by an operator: no payment at the head", purchasedCode: "1234-5678" });
      // Then the pull lands after all.
      await flow.operator.pull("CELO", { requestId: vended.requestId, payer: account.address, token: celo.tokenAddress("USDC"), amount: 1_001_000n });
      await ledgerAtHead();
      await reconcileOrphanPulls(flow);
      expect(await flow.orders.get(vended.requestId)).toMatchObject({ status: "NEEDS_REVIEW", failureReason: expect.stringMatching(/after the order was written off, and its bill had been vended/) });
      await reconcileOrphanPulls(flow);
      expect(await usdc(account)).toBe(before - 1_001_000n);
    });

    it("refunds, once, a pull the server has no order for", async () => {
      const account = accounts(19);
      await celo.approveAndAllow(account, "USDC", 10n * USD);
      const before = await usdc(account);
      const orderId = keccak256(toBytes(`stray-${Date.now()}`));
      await celo.pull(orderId, account.address, "USDC", 2n * USD);
      expect(await usdc(account)).toBe(before - 2n * USD);
      await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());
      expect(await reconcileOrphanPulls(service.flow)).toBe(1);
      expect(await usdc(account)).toBe(before);
      expect(await reconcileOrphanPulls(service.flow)).toBe(0);
      await expect.poll(async () => ((await (await fetch(`${ledger.url}/ledger/orders/${orderId}`)).json()) as { refunds: unknown[] }).refunds, { timeout: 10_000 }).toHaveLength(1);
    });
  });
});
