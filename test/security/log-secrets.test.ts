/**
 * The log against secrets: the whole stack runs with its log captured while an agent links
 * and pays (api key, PIN), an x402 payer buys an electricity token (payment signature,
 * purchased code, an order whose request_id shows the code with its proof), a bill fails
 * and is refunded (an error line). No captured line may hold any of those; every line is
 * JSON with a level, and lines written while serving a request carry its id.
 */
import { PassThrough } from "node:stream";
import { x402HTTPClient } from "@x402/core/http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { createLog, log, orderRef, setLog, type Log } from "../../server/log.ts";
import { SANDBOX_NUMBERS } from "../../services/biller-sandbox/catalog.ts";
import { chainActors } from "../support/actors.ts";
import { airtimeBill } from "../support/bills.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

describe("the log holds no secret", () => {
  const accounts = freshAccounts();
  const lines: Array<Record<string, unknown>> = [];
  const raw: string[] = [];
  let paying: SharedPayingStack;
  let before: Log | undefined;
  const secrets: Record<string, string> = {};

  beforeAll(async () => {
    const sink = new PassThrough();
    sink.on("data", (chunk: Buffer) => {
      for (const line of chunk.toString("utf8").split("\n").filter(Boolean)) {
        raw.push(line);
        lines.push(JSON.parse(line) as Record<string, unknown>);
      }
    });
    before = log();
    setLog(createLog({ level: "debug", destination: sink }));
    paying = await startPayingStackOnSharedChains(accounts, { LOG_REQUESTS: "1" });
    const url = paying.service.urls.service;
    const { deployments } = paying.chains;

    // An agent links and pays; then a bill that fails and is refunded.
    const agent = accounts(7);
    await chainActors(deployments, "CELO").approveAndAllow(agent, "USDC", 50_000_000n);
    const pin = "739251";
    const apiKey = await linkAgent(url, agent, { pin });
    const mcp = await mcpAgent(url);
    const paid = await mcp.call("pay_bill", { api_key: apiKey, pin, ...airtimeBill() });
    expect(paid.data).toMatchObject({ status: "SUCCESS" });
    const failed = await mcp.call("pay_bill", { api_key: apiKey, pin, ...airtimeBill({ billersCode: "08099999999" }) });
    expect(failed.data).toMatchObject({ status: "FAILED_VENDING" });
    expect((await mcp.call("pay_bill", { api_key: apiKey, pin: "000000", ...airtimeBill() })).isError).toBe(true);
    await mcp.close();

    // An x402 payer buys an electricity token.
    const payer = accounts(8);
    const bill = {
      serviceID: "ikeja-electric",
      serviceCategory: "ELECTRICITY",
      network: "IKEJA",
      billersCode: SANDBOX_NUMBERS.prepaidMeter,
      variation_code: "prepaid",
      nairaAmount: 3100,
      token: "USDC",
      blockchain: "CELO",
      wallet_address: payer.address,
    };
    const post = (headers: Record<string, string> = {}) =>
      fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(bill) });
    const challenged = await post();
    const client = new x402HTTPClient(x402ClientFor(payer, deployments));
    const payload = await client.createPaymentPayload(client.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    const headers = client.encodePaymentSignatureHeader(payload);
    const result = (await (await post(headers)).json()) as { status: string; purchased_code: string; request_id: string; order_secret: string };
    expect(result.status).toBe("SUCCESS");

    Object.assign(secrets, {
      apiKey,
      pin,
      paymentHeader: Object.values(headers)[0]!,
      signature: (payload.payload as { signature: string }).signature,
      purchasedCode: result.purchased_code,
      codeOrderRequestId: result.request_id,
      orderSecret: result.order_secret,
      agentRequestId: String(paid.data.request_id),
    });
  });

  afterAll(async () => {
    await paying?.close();
    if (before) setLog(before); // the worker's next test file logs as it did before this one
  });

  it("logs the run as JSON with real levels, request ids and order references", () => {
    expect(lines.length).toBeGreaterThan(10);
    for (const line of lines) expect(["debug", "info", "warn", "error"]).toContain(line.level);
    const requests = lines.filter((l) => l.msg === "request");
    expect(requests.length).toBeGreaterThan(3);
    for (const r of requests) expect(r.req_id).toEqual(expect.any(String));
    // The failed bill's refund is logged, under the order's reference.
    expect(lines).toContainEqual(expect.objectContaining({ msg: "refunded on chain", level: "info", order: expect.stringMatching(/^ord_[0-9a-f]{16}$/) }));
    expect(lines).toContainEqual(expect.objectContaining({ msg: "bill delivered", order: orderRef(secrets.codeOrderRequestId!) }));
  });

  it("writes no api key, PIN, payment signature, purchased code, order secret or order request_id", () => {
    const all = raw.join("\n");
    for (const [name, value] of Object.entries(secrets)) {
      expect(value, name).toBeTruthy();
      expect(all.includes(value), `${name} appears in the log`).toBe(false);
    }
    expect(all).not.toMatch(/req_\d{12}[0-9a-f]{20}/);
    expect(all).not.toMatch(/bpk_[A-Za-z0-9_-]{43}/);
  });

  it("keeps an RPC URL's credentials out of an error line", () => {
    const sink = new PassThrough();
    let out = "";
    sink.on("data", (d: Buffer) => (out += d.toString()));
    const log = createLog({ destination: sink });
    log.error("chain unreachable", { error: "fetch failed: https://user:s3cret@rpc.example.org/v2/KEY123?apikey=Q9 timed out", url: "wss://rpc.example.org/ws/KEY456" });
    expect(out).toContain("https://rpc.example.org/…");
    for (const secret of ["s3cret", "KEY123", "Q9", "KEY456", "user:"]) expect(out).not.toContain(secret);
    expect(JSON.parse(out)).toMatchObject({ level: "error", msg: "chain unreachable" });
  });
});
