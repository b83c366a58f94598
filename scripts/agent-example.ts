/**
 * `npm run agent:example`: an agent on the running local stack doing what
 * describe_capabilities tells it, as Hardhat account #4: read the capabilities, approve
 * BillPay and set a spending allowance on chain, link the wallet, then over MCP check the
 * balance, pay a bill, pay a batch and schedule a bill, and over A2A pay one more.
 * The api_key is printed whole, or with --key-file <path> written there (mode 0600) instead.
 */
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { Role } from "@a2a-js/sdk";
import { ClientFactory } from "@a2a-js/sdk/client";
import { createWalletClient, http, parseUnits, type Hex } from "viem";
import { billPayAbi, eip3009TokenAbi } from "../lib/generated/abis.ts";
import { linkAgent, mcpAgent } from "../lib/agent-client.ts";
import { publicClientFor } from "../lib/chain-client.ts";
import { viemChain } from "../lib/chains.ts";
import { deploymentsPath, readDeployments, requireChain, rpcUrlFor } from "../lib/deployments.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { localUrl } from "../lib/local-ports.ts";
import { writeKeyFile } from "./agent-link.ts";

const { values: flags } = parseArgs({ options: { "key-file": { type: "string" } } });
const serviceUrl = process.env.SERVICE_URL ?? localUrl("service");
const wallet = hardhatAccount(4);
const mcp = await mcpAgent(serviceUrl);
const show = (title: string, value: unknown) => console.log(`\n== ${title}\n${JSON.stringify(value, null, 2)}`);

// 1. What the service offers, and where its contract is.
const caps = (await mcp.call("describe_capabilities", {})).data as { chains: Array<{ chain: string; chain_id: number; billpay_contract: Hex; tokens: Array<{ token: string; address: Hex }> }> };
const celo = caps.chains.find((c) => c.chain === "CELO")!;
const usdc = celo.tokens.find((t) => t.token === "USDC")!.address;
show("describe_capabilities (CELO)", celo);

// 2. On chain, from the wallet: approve BillPay on the token, then set the spending allowance,
// on the chain the stack deployed to (the deployments file; CELO_RPC_URL overrides).
const rpcUrl = rpcUrlFor("CELO", requireChain(await readDeployments(deploymentsPath()), "CELO"));
const client = createWalletClient({ account: wallet, chain: viemChain("CELO", rpcUrl), transport: http(rpcUrl) });
const chain = publicClientFor("CELO", rpcUrl);
const allowance = parseUnits("25", 6);
await chain.waitForTransactionReceipt({ hash: await client.writeContract({ address: usdc, abi: eip3009TokenAbi, functionName: "approve", args: [celo.billpay_contract, allowance] }) });
await chain.waitForTransactionReceipt({
  hash: await client.writeContract({ address: celo.billpay_contract, abi: billPayAbi, functionName: "setSpendingAllowance", args: [usdc, allowance] }),
});

// 3. Link once: a personal_sign over the link message; the api_key comes back once.
const apiKey = await linkAgent(serviceUrl, wallet, { pin: "2468", chain: "CELO", token: "USDC" });
const keyFile = flags["key-file"] ? await writeKeyFile(flags["key-file"], apiKey) : null;
console.log(`\nlinked ${wallet.address}; api_key ${keyFile ? `written to ${keyFile}` : apiKey}`);

// 4. Tools over MCP.
const bill = { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 500 };
show("check_balance", (await mcp.call("check_balance", { api_key: apiKey, chain: "CELO" })).data);
show("pay_bill", (await mcp.call("pay_bill", { api_key: apiKey, pin: "2468", ...bill })).data);
show("pay_bill_batch", (await mcp.call("pay_bill_batch", { api_key: apiKey, pin: "2468", bills: [bill, { ...bill, billersCode: "08099999999" }] })).data);
show("schedule_bill", (await mcp.call("schedule_bill", { api_key: apiKey, pin: "2468", ...bill, run_at: new Date(Date.now() + 5_000).toISOString() })).data);

// 5. The same tools as A2A skills.
const a2a = await new ClientFactory().createFromUrl(serviceUrl);
const answer = await a2a.sendMessage({
  tenant: "",
  message: {
    messageId: randomUUID(),
    contextId: "",
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "data", value: { skill: "pay_bill", arguments: { api_key: apiKey, pin: "2468", ...bill, nairaAmount: 250 } } }, metadata: undefined, filename: "", mediaType: "application/json" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: undefined,
  metadata: undefined,
});
show("A2A pay_bill", "parts" in answer ? answer.parts.map((p) => p.content?.value) : answer);
await new Promise((r) => setTimeout(r, 8_000));
show("list_schedules (after the run)", (await mcp.call("list_schedules", { api_key: apiKey })).data);
await mcp.close();
