import type { AddressInfo } from "node:net";
import { serve, type ServerType } from "@hono/node-server";
import { HTTPFacilitatorClient } from "@x402/core/server";
import type { PaymentRequired } from "@x402/core/types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseUnits, type Address } from "viem";
import { chainInfo, type ChainKey } from "../../lib/chains.ts";
import { facilitatorAccount, hardhatAccount } from "../../lib/local-accounts.ts";
import { createFacilitator, facilitatorApp } from "../../services/facilitator/app.ts";
import { chainActors } from "../support/actors.ts";
import { startTestChains } from "../support/stack.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";

describe("local x402 facilitator over the standard HTTP API", () => {
  let stack: Awaited<ReturnType<typeof startTestChains>>;
  let server: ServerType;
  let client: HTTPFacilitatorClient;
  let url: string;
  const payer = hardhatAccount(6);

  beforeAll(async () => {
    stack = await startTestChains();
    const chains = (["CELO", "BASE"] as ChainKey[]).map((chain) => ({ chain, rpcUrl: stack.rpcUrls[chain] }));
    const app = facilitatorApp(createFacilitator(facilitatorAccount(), chains));
    server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" });
    await new Promise((r) => server.once("listening", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    client = new HTTPFacilitatorClient({ url, timeoutMs: 30_000 });
  });
  afterAll(async () => {
    server?.close();
    await stack?.close();
  });

  function requirements(chain: ChainKey, symbol: "USDC" | "USD₮", amount: bigint, payTo?: Address) {
    const d = stack.deployments.chains[chain]!;
    const token = d.tokens.find((t) => t.symbol === symbol)!;
    return {
      scheme: "exact",
      network: chainInfo(chain).caip2,
      asset: token.address,
      amount: amount.toString(),
      payTo: payTo ?? d.billPay.address,
      maxTimeoutSeconds: 300,
      extra: { name: token.name, version: token.eip712Version! },
    };
  }

  async function pay(chain: ChainKey, symbol: "USDC" | "USD₮", amount: bigint, from = payer) {
    const accepts = requirements(chain, symbol, amount);
    const paymentRequired: PaymentRequired = {
      x402Version: 2,
      error: "payment required",
      resource: { url: "http://127.0.0.1/test", description: "test", mimeType: "application/json" },
      accepts: [accepts],
    };
    const payload = await x402ClientFor(from, stack.deployments).createPaymentPayload(paymentRequired);
    return { payload, accepts };
  }

  it("lists both local chains under the exact scheme, with its signer", async () => {
    const supported = await client.getSupported();
    expect(supported.kinds.map((k) => `${k.x402Version}:${k.scheme}:${k.network}`).sort()).toEqual([
      "2:exact:eip155:42220",
      "2:exact:eip155:8453",
    ]);
    expect(Object.values(supported.signers).flat()).toContain(facilitatorAccount().address);
  });

  it("verifies and settles an EIP-3009 payment into BillPay, once", async () => {
    const celo = chainActors(stack.deployments, "CELO");
    const before = await celo.balanceOf("USD₮", celo.billPay);
    const { payload, accepts } = await pay("CELO", "USD₮", parseUnits("1.25", 6));
    expect(await client.verify(payload, accepts)).toMatchObject({ isValid: true, payer: payer.address });
    const settled = await client.settle(payload, accepts);
    expect(settled).toMatchObject({ success: true, network: "eip155:42220", payer: payer.address });
    expect(settled.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await celo.balanceOf("USD₮", celo.billPay)).toBe(before + parseUnits("1.25", 6));

    const again = await client.verify(payload, accepts).catch((e: { response?: unknown }) => e.response);
    expect(again).toMatchObject({ isValid: false });
  });

  it("pipelines a burst at one block a second, as a hosted facilitator does: twelve payers settle within a couple of blocks, each once; the same authorization asked twice at once is one transaction", async () => {
    const celo = chainActors(stack.deployments, "CELO");
    const rpc = (method: string, params: unknown[] = []) => celo.publicClient.request({ method: method as never, params: params as never });
    const payers = Array.from({ length: 12 }, (_, i) => hardhatAccount(7 + i));
    const amount = parseUnits("1", 6);
    const payments = await Promise.all(payers.map((p) => pay("CELO", "USDC", amount, p)));
    const before = await celo.balanceOf("USDC", celo.billPay);
    await rpc("evm_setAutomine", [false]);
    await rpc("evm_setIntervalMining", [1000]);
    try {
      const first = await celo.publicClient.getBlockNumber();
      const results = await Promise.all([
        ...payments.map((p) => client.settle(p.payload, p.accepts)),
        client.settle(payments[0]!.payload, payments[0]!.accepts), // the same authorization, at the same time
      ]);
      for (const r of results) expect(r).toMatchObject({ success: true, network: "eip155:42220" });
      expect(results[12]!.transaction).toBe(results[0]!.transaction);
      const hashes = new Set(results.map((r) => r.transaction));
      expect(hashes.size).toBe(12);
      const blocks = await Promise.all([...hashes].map(async (hash) => (await celo.publicClient.getTransactionReceipt({ hash: hash as `0x${string}` })).blockNumber));
      // One at a time, twelve settlements would take twelve blocks.
      expect(Math.max(...blocks.map(Number)) - Number(first)).toBeLessThanOrEqual(3);
      expect(await celo.balanceOf("USDC", celo.billPay)).toBe(before + 12n * amount);
    } finally {
      await rpc("evm_setIntervalMining", [0]);
      await rpc("evm_setAutomine", [true]);
    }
  });

  it("settle alone verifies first: a payer without the amount (drained after the service read its balance) is refused, and nothing is broadcast", async () => {
    // The premise of settling in one call (docs/money.md, "One call to the facilitator"):
    // a payer who empties his wallet between the service's intake read and the settle costs
    // the facilitator no transaction (its signer's nonce does not move), and settles nothing.
    const celo = chainActors(stack.deployments, "CELO");
    const drained = hardhatAccount(17);
    // One unit more than the wallet holds: as short as a wallet emptied after the read.
    const amount = (await celo.balanceOf("USDC", drained.address)) + 1n;
    const { payload, accepts } = await pay("CELO", "USDC", amount, drained);
    const sent = await celo.publicClient.getTransactionCount({ address: facilitatorAccount().address });
    const settled = await client.settle(payload, accepts).catch((e: { response?: unknown }) => e.response);
    expect(settled).toMatchObject({ success: false });
    expect(await celo.publicClient.getTransactionCount({ address: facilitatorAccount().address })).toBe(sent);
  });

  it("refuses a payment whose requirements were tampered with: amount, payTo, asset", async () => {
    const { payload, accepts } = await pay("BASE", "USDC", parseUnits("2", 6));
    const tampered = [
      { ...accepts, amount: parseUnits("1", 6).toString() },
      { ...accepts, payTo: hardhatAccount(7).address },
      { ...accepts, asset: stack.deployments.chains.BASE!.tokens.find((t) => t.symbol === "USD₮")!.address },
    ];
    for (const req of tampered) {
      const result = await client.verify(payload, req).catch((e: { response?: unknown }) => e.response);
      expect(result).toMatchObject({ isValid: false });
    }
  });

  it("answers a malformed request with 400 and a reason", async () => {
    for (const body of ["not json", JSON.stringify({ paymentPayload: {}, paymentRequirements: {} })]) {
      const res = await fetch(`${url}/verify`, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toMatch(/JSON|paymentPayload/);
    }
  });
});
