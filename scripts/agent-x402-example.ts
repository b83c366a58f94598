/**
 * `npm run agent:x402-example`: an agent that holds a wallet pays bills over MCP with x402,
 * with no link, api_key, PIN or on-chain set-up, as Hardhat account #5 on the running local
 * stack: the official MCP client calls pay_bill, reads the PaymentRequired the call answers,
 * signs it with the official x402 client, and calls again with the payment in `_meta`.
 * Arguments: [phone] [nairaAmount]; a phone the biller fails (08099999999) is refunded on chain.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { localUrl } from "../lib/local-ports.ts";
import { callToolPaid } from "../lib/mcp-x402-client.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";

const [phone = "08011111111", naira = "1550"] = process.argv.slice(2);
const serviceUrl = process.env.SERVICE_URL ?? localUrl("service");
const wallet = hardhatAccount(5);
const payer = x402ClientFor(wallet, await readDeployments(deploymentsPath()));
const mcp = new Client({ name: "billpay-x402-agent", version: "1.0.0" });
await mcp.connect(new StreamableHTTPClientTransport(new URL(`${serviceUrl}/api/mcp`)));
const show = (title: string, value: unknown) => console.log(`\n== ${title}\n${JSON.stringify(value, null, 2)}`);

try {
  const bill = { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: phone, nairaAmount: Number(naira) };
  const { result, required, settlement } = await callToolPaid(mcp, payer, "pay_bill", bill);
  show("pay_bill, unpaid: the PaymentRequired (one option per chain and token)", required?.accepts.map((a) => ({ network: a.network, asset: a.asset, amount: a.amount })));
  show("pay_bill, paid: the result", result.structuredContent ?? result.content);
  show('_meta["x402/payment-response"]', settlement ?? null);
  if (result.isError) process.exitCode = 1;
} finally {
  await mcp.close();
}
