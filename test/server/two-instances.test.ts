/**
 * Two instances of the service on one PostgreSQL and one ledger, each with its own operator
 * and refunder keys (granted by `npm run admin`), sharing the facilitator and the biller.
 * Payers pay over both rails through both instances at once, one x402 payment is sent to
 * both instances together, and both workers then run at once: every bill is served or
 * refunded exactly once, and the audit of ledger and orders finds nothing. An A2A task priced
 * on one instance is paid on the other.
 */
import { Role, TaskState, type Message, type Task } from "@a2a-js/sdk";
import { ClientFactory, type Client } from "@a2a-js/sdk/client";
import { x402HTTPClient } from "@x402/core/http";
import { PaymentRequiredV2Schema } from "@x402/core/schemas";
import type { PaymentRequired } from "@x402/core/types";
import { join } from "node:path";
import { createWalletClient, http, parseEther, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { A2A_X402_EXTENSION } from "../../server/agent/a2a-x402.ts";
import { viemChain, type ChainKey } from "../../lib/chains.ts";
import { deployerAccount, hardhatAccount } from "../../lib/local-accounts.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { runAdmin } from "../../scripts/admin.ts";
import { runAudit } from "../../server/audit/ledger.ts";
import { startLedger, waitForLedgerBlock, type Ledger } from "../../stack/ledger-process.ts";
import { startServiceStack, type ServiceStack } from "../../stack/service-stack.ts";
import { workOnce } from "../../server/orders/worker.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { airtimeBill, x402Bill } from "../support/bills.ts";
import { freshDatabase, startTestChains } from "../support/stack.ts";
import { lockAsCrashedRequest } from "../support/orders.ts";

type Result = { status: string; request_id: string; refund?: { status: string } };

describe("two service instances on one PostgreSQL and one ledger", () => {
  let chains: Awaited<ReturnType<typeof startTestChains>>;
  let ledger: Ledger;
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let a: ServiceStack;
  let b: ServiceStack;
  let celo: ChainActors;
  const keysB = { operator: privateKeyToAccount(generatePrivateKey()), refunder: privateKeyToAccount(generatePrivateKey()) };

  beforeAll(async () => {
    chains = await startTestChains();
    database = await freshDatabase("two_instances");
    // The ledger on the same PostgreSQL, in a schema of its own, as instances that share a database are deployed.
    ledger = await startLedger({ deploymentsFile: chains.deploymentsFile, databaseUrl: database.url, logTo: join(chains.dir, "ledger.log") });
    celo = chainActors(chains.deployments, "CELO");

    // Instance B signs with its own keys: the admin grants their roles, the deployer funds their gas.
    for (const chain of ["CELO", "BASE"] as ChainKey[]) {
      const d = chains.deployments.chains[chain]!;
      const deployer = createWalletClient({ account: deployerAccount(), chain: viemChain(chain, d.rpcUrl), transport: http(d.rpcUrl) });
      for (const key of Object.values(keysB)) {
        await chainActors(chains.deployments, chain).mined(await deployer.sendTransaction({ to: key.address, value: parseEther("10") }));
      }
      await runAdmin(["grant-role", "--chain", chain, "--role", "OPERATOR", "--account", keysB.operator.address, "--send"], chains.deployments);
      await runAdmin(["grant-role", "--chain", chain, "--role", "REFUNDER", "--account", keysB.refunder.address, "--send"], chains.deployments);
    }

    const env = {
      SERVER_DATABASE_URL: database.url,
      SERVER_DB_POOL_SIZE: "5",
      LEDGER_URL: ledger.url,
      BILLER_TIMEOUT_MS: "500",
      VEND_DEADLINE_MS: "300",
      REQUERY_INTERVAL_MS: "200",
      WORKER_GRACE_SECONDS: "0",
      LOG_REQUESTS: "0",
    };
    // Both start at once: the migrations take turns.
    a = await startServiceStack({ deployments: chains.deployments, env });
    b = await startServiceStack({ deployments: chains.deployments, env, shared: { facilitator: a.urls.facilitator, biller: a.urls.biller }, keys: keysB });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
    await ledger?.stop();
    await chains?.close();
    await database?.drop();
  });

  it("serves or refunds every bill exactly once, whichever instance took it", async () => {
    const instances = [a, b];
    const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    /** An x402 payer's signed payment for a bill, made from instance `via`'s challenge. */
    const signed = async (payerIndex: number, billersCode: string, via: ServiceStack) => {
      const payer = hardhatAccount(payerIndex);
      const body = x402Bill(payer.address, { billersCode });
      const challenge = await post(via.urls.service, body);
      const client = new x402HTTPClient(x402ClientFor(payer, chains.deployments));
      const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenge.headers.get(n), await challenge.json()));
      return { payer, body, headers: client.encodePaymentSignatureHeader(payload) };
    };

    // x402: four payers, two through each instance; one bill fails at the biller.
    const x402 = await Promise.all([
      signed(3, "08011111111", a),
      signed(4, "08099999999", a),
      signed(5, "08011111111", b),
      signed(6, "08011111111", b),
    ]);
    const before = new Map(await Promise.all(x402.map(async (p) => [p.payer.address, await celo.balanceOf("USDC", p.payer.address)] as const)));

    // The agent hub: one wallet linked through A, paying through both.
    const agent = hardhatAccount(7);
    await celo.approveAndAllow(agent, "USDC", 20_000_000n);
    const apiKey = await linkAgent(a.urls.service, agent);
    const agentBefore = await celo.balanceOf("USDC", agent.address);
    const mcps = await Promise.all(instances.map((i) => mcpAgent(i.urls.service)));
    const agentBills = [
      { via: 0, bill: airtimeBill({ nairaAmount: 1600 }) },
      { via: 1, bill: airtimeBill({ nairaAmount: 1700 }) },
      { via: 1, bill: airtimeBill({ nairaAmount: 1800, billersCode: "08099999999" }) },
      { via: 0, bill: airtimeBill({ nairaAmount: 1900 }) },
    ];

    const [x402Results, agentResults, [twiceA, twiceB]] = await Promise.all([
      Promise.all(x402.map((p, i) => post(instances[i < 2 ? 0 : 1]!.urls.service, p.body, p.headers).then((r) => r.json() as Promise<Result>))),
      Promise.all(agentBills.map((x, i) => mcps[x.via]!.call("pay_bill", { api_key: apiKey, pin: "1234", ...x.bill, idempotency_key: `two-${i}` }).then((r) => r.data as unknown as Result))),
      // The same x402 payment sent to both instances at once: one order, one settlement.
      signed(8, "08011111111", b).then((p) => Promise.all(instances.map((i) => post(i.urls.service, p.body, p.headers).then((r) => r.json() as Promise<Result>)))),
    ]);
    await Promise.all(mcps.map((m) => m.close()));

    expect(x402Results.map((r) => r.status), JSON.stringify(x402Results)).toEqual(["SUCCESS", "FAILED_VENDING", "SUCCESS", "SUCCESS"]);
    expect(x402Results[1]!.refund).toMatchObject({ status: "REFUNDED" });
    expect(agentResults.map((r) => r.status), JSON.stringify(agentResults)).toEqual(["SUCCESS", "SUCCESS", "FAILED_VENDING", "SUCCESS"]);
    expect(agentResults[2]!.refund).toMatchObject({ status: "REFUNDED" });
    expect(twiceA!.request_id, JSON.stringify([twiceA, twiceB])).toBe(twiceB!.request_id);

    // Both workers at once find nothing left to do twice.
    await Promise.all([workOnce(a.flow), workOnce(b.flow)]);
    await Promise.all([workOnce(a.flow), workOnce(b.flow)]);

    // Every order is final, once; money moved exactly as served and refunded.
    const orders = await a.db.query<{ request_id: string; status: string; rail: string; amount: string; tx_hash: string | null }>(
      `SELECT request_id, status, rail, amount::text AS amount, tx_hash FROM bill_order ORDER BY created_at`,
    );
    expect(orders).toHaveLength(9);
    expect(orders.filter((o) => o.status === "SUCCESS")).toHaveLength(7);
    expect(orders.filter((o) => o.status === "REFUNDED")).toHaveLength(2);
    for (const [i, p] of x402.entries()) {
      const after = await celo.balanceOf("USDC", p.payer.address);
      expect(before.get(p.payer.address)! - after, `x402 payer ${i}`).toBe(i === 1 ? 0n : 1_001_000n);
    }
    const agentPaid = orders.filter((o) => o.rail === "pull" && o.status === "SUCCESS").reduce((s, o) => s + BigInt(o.amount), 0n);
    expect(agentBefore - (await celo.balanceOf("USDC", agent.address))).toBe(agentPaid);

    // Each instance pulled with its own key.
    const pullSenders = new Set<string>();
    for (const o of orders.filter((x) => x.rail === "pull")) {
      const tx = await celo.publicClient.getTransaction({ hash: o.tx_hash as Hex });
      pullSenders.add(tx.from.toLowerCase());
    }
    expect(pullSenders).toEqual(new Set([hardhatAccount(1).address.toLowerCase(), keysB.operator.address.toLowerCase()]));

    // The ledger agrees: one payment per order, a refund only for the refunded ones, nothing else.
    // (Waiting on the ledger's readable block: every event through it can be read.)
    await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber());
    const report = await runAudit({ ledgerUrl: ledger.url, deployments: chains.deployments, service: { url: b.urls.service } });
    expect(report.discrepancies).toEqual([]);
    expect(report.orders).toMatchObject({ ordersChecked: 9, review: [], stuck: [] });
  });

  it("an A2A pay-per-call task started on one instance is paid on the other: completed once, charged once, and finished for both", async () => {
    const payer = hardhatAccount(8);
    const before = await celo.balanceOf("USDC", payer.address);
    const [viaA, viaB] = await Promise.all([a, b].map((i) => new ClientFactory().createFromUrl(i.urls.service)));
    const send = (client: Client, message: Partial<Message>) =>
      client.sendMessage({
        tenant: "",
        message: { messageId: crypto.randomUUID(), contextId: "", taskId: "", role: Role.ROLE_USER, parts: [], metadata: undefined, extensions: [A2A_X402_EXTENSION], referenceTaskIds: [], ...message },
        configuration: undefined,
        metadata: undefined,
      }) as Promise<Task>;
    const data = (value: unknown) => ({ content: { $case: "data" as const, value }, metadata: undefined, filename: "", mediaType: "application/json" });

    // Priced on A: an input-required task holding the PaymentRequired.
    const task = await send(viaA!, { parts: [data({ skill: "pay_bill", arguments: airtimeBill({ nairaAmount: 1500 }) })] });
    expect(task.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const required = PaymentRequiredV2Schema.parse(task.status!.message!.metadata!["x402.payment.required"]) as unknown as PaymentRequired;
    const onCeloUsdc = required.accepts.filter((o) => o.network === "eip155:42220" && o.asset.toLowerCase() === celo.tokenAddress("USDC").toLowerCase());
    const payment = await x402ClientFor(payer, chains.deployments).createPaymentPayload({ ...required, accepts: onCeloUsdc });

    // Paid on B, which never saw the call.
    const submit = (client: Client) =>
      send(client, { taskId: task.id, contextId: task.contextId, parts: [data({})], metadata: { "x402.payment.status": "payment-submitted", "x402.payment.payload": payment } });
    const done = await submit(viaB!);
    expect(done.id).toBe(task.id);
    expect(done.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    const result = done.artifacts[0]!.parts[0]!.content!.value as { status: string; request_id: string };
    expect(result.status).toBe("SUCCESS");
    const order = (await a.flow.orders.get(result.request_id))!;
    expect(before - (await celo.balanceOf("USDC", payer.address))).toBe(order.amount);

    // Finished for both instances: the same payment again, on either, takes nothing more.
    for (const client of [viaA!, viaB!]) await expect(submit(client)).rejects.toThrow();
    expect(before - (await celo.balanceOf("USDC", payer.address))).toBe(order.amount);
    const [stored] = await a.db.query<{ state: number }>(`SELECT state FROM a2a_task WHERE id = $1`, [task.id]);
    expect(stored!.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it("one key, one instance: a second instance on A's keys refuses to start and names the key; after A dies holding an order, its restart resumes it at once", async () => {
    const env = { SERVER_DATABASE_URL: database.url, SERVER_DB_POOL_SIZE: "3", LEDGER_URL: ledger.url, WORKER_GRACE_SECONDS: "0", LOG_REQUESTS: "0" };
    const shared = { facilitator: a.urls.facilitator, biller: a.urls.biller };
    const operator = a.flow.operator.addresses.operator.toLowerCase();
    // Same configuration as A (the local keys): refused while A lives, naming the key and its holder.
    await expect(startServiceStack({ deployments: chains.deployments, env, shared })).rejects.toThrow(
      new RegExp(`the operator key ${operator} is held by another live instance \\(${a.flow.keyLeases.instance}`),
    );
    // B, on its own keys, is not disturbed.
    const [held] = await a.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM key_lease`);
    expect(held!.n).toBe(4);

    // A takes an x402 payment and dies holding its order (lease for ORDER_LEASE_SECONDS, heartbeat stopped).
    const payer = hardhatAccount(9);
    const body = x402Bill(payer.address, { billersCode: "08011111111" });
    const challenge = await fetch(`${a.urls.service}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const client = new x402HTTPClient(x402ClientFor(payer, chains.deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenge.headers.get(n), await challenge.json()));
    const crashed = await lockAsCrashedRequest(a.flow, { body, payload, payer: payer.address, tokenAddress: celo.tokenAddress("USDC"), tag: "crash" });
    expect(await a.flow.orders.claim(crashed.requestId, 300)).toBeDefined();
    a.flow.keyLeases.stopHeartbeat();
    // Nobody else may take it while its lease runs: B's worker passes it by.
    await workOnce(b.flow);
    expect((await b.flow.orders.get(crashed.requestId))!.status).toBe("SETTLING");

    // A restarts with the same configuration: it takes its keys once their heartbeat is silent, and its order at once.
    const restarted = await startServiceStack({ deployments: chains.deployments, env, shared });
    try {
      await workOnce(restarted.flow);
      expect((await restarted.flow.orders.get(crashed.requestId))!.status).toBe("SUCCESS");
      const [lease] = await a.db.query<{ instance_id: string }>(`SELECT instance_id FROM key_lease WHERE address = $1`, [operator]);
      expect(lease!.instance_id).toBe(restarted.flow.keyLeases.instance);
    } finally {
      await restarted.close();
    }
    // A clean stop gives the keys back.
    expect(await a.db.query(`SELECT 1 FROM key_lease WHERE address = $1`, [operator])).toEqual([]);
  });
});
