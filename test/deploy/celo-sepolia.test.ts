/**
 * The production path on a chain that is not the local profile: a plain Hardhat node on Celo
 * Sepolia's chain id (11142220) with its USDC and Multicall3 put there by the test, then
 * `npm run deploy -- --network celo-sepolia` (Ignition, keys from the environment, nothing
 * from the test mnemonic), then the ledger, the facilitator and the service started on that
 * profile as separate processes, then an x402 payment and agent payments through it.
 *
 * Every JSON-RPC call of the deploy and of the running service goes through a proxy that
 * answers hardhat_* and evm_* methods as a real node does (method not found) and records what
 * was asked: beyond the probes Hardhat and Ignition make to recognise a development node,
 * none may be asked, so the same path serves a real node.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { wrapFetchWithPayment } from "@x402/fetch";
import { network } from "hardhat";
import { createPublicClient, createWalletClient, defineChain, http, keccak256, parseEther, toBytes, type Address, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount, type Account } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { billPayAbi, eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { loadArtifact } from "../../lib/artifacts.ts";
import { MULTICALL3_ADDRESS } from "../../lib/chains.ts";
import { readDeployments, writeDeployments, type Deployments } from "../../lib/deployments.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { resolveNetwork } from "../../lib/networks.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { runDeploy, UsageError } from "../../scripts/deploy.ts";
import { billerSandboxApp } from "../../services/biller-sandbox/app.ts";
import { freePort, startLedger, waitForLedgerBlock, type Ledger } from "../../stack/ledger-process.ts";
import { listen } from "../../stack/service-stack.ts";
import { airtimeBill, x402Bill } from "../support/bills.ts";
import { runScript, startScript } from "../support/processes.ts";
import { freshDatabase, tempDir } from "../support/stack.ts";

const SEPOLIA = resolveNetwork("celo-sepolia", {}).chains.CELO!;
const chain = defineChain({ id: SEPOLIA.chainId, name: "Celo Sepolia stand-in", nativeCurrency: { name: "CELO", symbol: "CELO", decimals: 18 }, rpcUrls: { default: { http: [] } } });
const ROLE = (name: string) => keccak256(toBytes(name));
const DEFAULT_ADMIN_ROLE = `0x${"00".repeat(32)}` as Hex;

/** Development-node methods: a real node answers them "method not found". */
const DEV_METHOD = /^(hardhat|evm|anvil)_/;
/**
 * Hardhat's provider and Ignition ask these to tell a development node from a real one, and
 * carry on when the answer is "method not found": probes, not dependencies.
 */
const DEV_NODE_PROBES = ["hardhat_getAutomine", "hardhat_metadata", "anvil_nodeInfo"];

/**
 * A JSON-RPC pass-through that remembers every method called through it and answers
 * development-node methods as a real node does, so nothing behind it can lean on them.
 */
async function recordingProxy(target: string): Promise<{ url: string; methods: Set<string>; close(): Promise<void> }> {
  const methods = new Set<string>();
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    let parsed: { id?: unknown; method?: string } | Array<{ id?: unknown; method?: string }> | undefined;
    try {
      parsed = JSON.parse(body) as typeof parsed;
      for (const call of Array.isArray(parsed) ? parsed! : [parsed!]) if (call.method) methods.add(call.method);
    } catch {
      /* forwarded as is; the node answers the parse error */
    }
    if (parsed && !Array.isArray(parsed) && parsed.method && DEV_METHOD.test(parsed.method)) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: parsed.id ?? null, error: { code: -32601, message: `the method ${parsed.method} does not exist/is not available` } }));
      return;
    }
    const upstream = await fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body });
    res.writeHead(upstream.status, { "content-type": "application/json" });
    res.end(await upstream.text());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, methods, close: () => new Promise<void>((r) => server.close(() => r())) };
}

describe("deploy to a network that is not local, then serve on it (celo-sepolia profile)", () => {
  const deploymentId = `test-${Date.now().toString(36)}`;
  const keys = { deployer: generatePrivateKey(), operator: generatePrivateKey(), refunder: generatePrivateKey() };
  const admin = privateKeyToAccount(generatePrivateKey()).address; // a Safe, say: it never signs here
  const pauser = privateKeyToAccount(generatePrivateKey()).address;
  const closers: Array<() => Promise<unknown>> = [];
  let dir: string;
  let proxy: Awaited<ReturnType<typeof recordingProxy>>;
  let usdc: Address;
  let deployOut: string;
  let deployments: Deployments;
  let ledger: Ledger;
  let serviceUrl: string;
  let rpc: ReturnType<typeof createPublicClient>;
  let serviceEnv: Record<string, string>;

  beforeAll(async () => {
    dir = await tempDir("celo-sepolia");
    const node = await network.createServer({ network: "celoSepoliaStandIn", override: { initialDate: new Date() } }, "127.0.0.1", 0); // on the wall clock, as stack/local-chains.ts
    const { port } = await node.listen();
    closers.push(() => node.close());
    const nodeUrl = `http://127.0.0.1:${port}`;
    rpc = createPublicClient({ chain, transport: http(nodeUrl) });
    const funder = createWalletClient({ account: hardhatAccount(0), chain, transport: http(nodeUrl) });
    const mined = async (hash: Hex) => expect((await rpc.waitForTransactionReceipt({ hash })).status).toBe("success");

    // The chain as it is before our deploy: Celo Sepolia's USDC (EIP-3009, "USDC" version 2) and Multicall3.
    const token = loadArtifact("tokens/EIP3009Token.sol", "EIP3009Token");
    const tokenTx = await funder.deployContract({ abi: token.abi, bytecode: token.bytecode, args: ["USDC", "USDC", "2", hardhatAccount(0).address] });
    usdc = (await rpc.waitForTransactionReceipt({ hash: tokenTx })).contractAddress!;
    await rpc.request({ method: "hardhat_setCode" as never, params: [MULTICALL3_ADDRESS, loadArtifact("local/Multicall3.sol", "Multicall3").deployedBytecode] as never });
    for (const payer of [hardhatAccount(5), hardhatAccount(6)]) {
      await mined(await funder.writeContract({ address: usdc, abi: eip3009TokenAbi, functionName: "mint", args: [payer.address, 100_000_000n] }));
    }
    // Our own keys get gas the way a faucet gives it: a plain transfer.
    for (const key of Object.values(keys)) await mined(await funder.sendTransaction({ to: privateKeyToAccount(key).address, value: parseEther("10") }));

    proxy = await recordingProxy(nodeUrl);
    closers.push(() => proxy.close());
    deployOut = join(dir, "celo-sepolia.json");
    closers.push(() => rm(join("ignition", "deployments", deploymentId), { recursive: true, force: true }));
  }, 120_000);

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {});
  });

  const deployEnv = () => ({
    NETWORK: "",
    CELO_RPC_URL: proxy.url,
    CELO_USDC_ADDRESS: usdc,
    DEPLOYER_PRIVATE_KEY: keys.deployer,
    ADMIN_ADDRESS: admin,
    PAUSER_ADDRESS: pauser,
    OPERATOR_ADDRESS: privateKeyToAccount(keys.operator).address,
    REFUND_BUDGET: "50000000",
    PULL_BUDGET: "500000000",
    PULL_BUDGET_PERIOD_SECONDS: "3600",
    REFUNDER_ADDRESS: privateKeyToAccount(keys.refunder).address,
    ETHERSCAN_API_KEY: "",
  });

  /**
   * `runDeploy` in this process under `env`, for refusals made before any chain is asked: what
   * it refused with. The command line prints the same message after "deploy: " and exits 2 (the
   * two refusals below that need the deployer's key run as the command).
   */
  async function refusal(argv: string[], env: Record<string, string>): Promise<string> {
    for (const [name, value] of Object.entries(env)) vi.stubEnv(name, value);
    try {
      await runDeploy(argv, () => {});
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      return (err as Error).message;
    } finally {
      vi.unstubAllEnvs();
    }
    throw new Error(`deploy ${argv.join(" ")} was not refused`);
  }

  it("refuses a test-mnemonic deployer, a public test account in a role, a missing role, overlapping roles and a bad budget", async () => {
    const refusedOut = ["--out", join(dir, "refused.json")];
    // The deployer's key is Hardhat's configuration variable, read by the command's own Hardhat: these two run as the operator runs them.
    const testKey = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"; // Hardhat's account #0
    const withTestKey = await runScript("scripts/deploy.ts", ["--network", "celo-sepolia", "--deployment-id", `${deploymentId}-refused`, ...refusedOut], { ...deployEnv(), DEPLOYER_PRIVATE_KEY: testKey });
    expect(withTestKey.code).toBe(2);
    expect(withTestKey.out).toContain("is one of Hardhat's public test accounts: use your own key");
    const adminIsDeployer = await runScript("scripts/deploy.ts", ["--network", "celo-sepolia", "--deployment-id", `${deploymentId}-refused`, ...refusedOut], { ...deployEnv(), ADMIN_ADDRESS: privateKeyToAccount(keys.deployer).address });
    expect(adminIsDeployer.code).toBe(2);
    expect(adminIsDeployer.out).toContain(`deploy: ADMIN_ADDRESS and the deployer (DEPLOYER_PRIVATE_KEY) are the same account (${privateKeyToAccount(keys.deployer).address})`);

    const onSepolia = ["--network", "celo-sepolia", ...refusedOut];
    expect(await refusal(onSepolia, { ...deployEnv(), OPERATOR_ADDRESS: hardhatAccount(1).address })).toContain("OPERATOR_ADDRESS");
    expect(await refusal(onSepolia, { ...deployEnv(), ADMIN_ADDRESS: "" })).toContain("ADMIN_ADDRESS is not set");
    // Overlapping roles: the admin as a hot key (the operator here, the deployer's own key above), one key as operator and refunder.
    expect(await refusal(onSepolia, { ...deployEnv(), ADMIN_ADDRESS: privateKeyToAccount(keys.operator).address })).toContain("ADMIN_ADDRESS and OPERATOR_ADDRESS are the same account");
    expect(await refusal(onSepolia, { ...deployEnv(), REFUNDER_ADDRESS: privateKeyToAccount(keys.operator).address })).toContain("OPERATOR_ADDRESS and REFUNDER_ADDRESS are the same account");
    expect(await refusal(onSepolia, { ...deployEnv(), PULL_BUDGET: "50 USDC" })).toContain("PULL_BUDGET must be a whole number of raw token units");
    expect(await refusal(["--network", "local"], deployEnv())).toContain("deployed by `npm run chains`");
    expect(await refusal(["--network", "polygon"], deployEnv())).toContain('NETWORK "polygon" is not a profile');
    expect(await refusal(["--network", "celo-sepolia", "--verify-later"], deployEnv())).toContain("Unknown option '--verify-later'");
    // A file that holds a mainnet chain is not written with a testnet's.
    const mainnetPair = join(dirname(deployOut), "mainnet-pair.json");
    const somewhere = hardhatAccount(5).address;
    const onBase = {
      chainId: 8453,
      rpcUrl: "https://mainnet.base.org",
      genesisHash: keccak256(toBytes("base")),
      billPay: { address: somewhere, block: 1 },
      multicall3: MULTICALL3_ADDRESS,
      roles: { admin: somewhere, operator: somewhere, refunder: somewhere, pauser: somewhere },
      refundBudget: { limit: "1", periodSeconds: 1 },
      tokens: [{ symbol: "USDC", name: "USD Coin", decimals: 6, eip712Version: "2", address: somewhere, block: 1 }],
    };
    await writeDeployments({ chains: { BASE: onBase } }, mainnetPair);
    expect(await refusal(["--network", "celo-sepolia", "--out", mainnetPair], deployEnv())).toContain("holds BASE on chain 8453, not a testnet as celo-sepolia is");
    expect(proxy.methods.has("eth_sendTransaction") || proxy.methods.has("eth_sendRawTransaction")).toBe(false);
  }, 120_000);

  it("deploys BillPay with Ignition, hands the admin role over, and writes deployments/<profile>.json", async () => {
    const result = await runScript("scripts/deploy.ts", ["--network", "celo-sepolia", "--deployment-id", deploymentId, "--out", deployOut, "--confirmations", "1"], deployEnv());
    expect(result.code, result.out).toBe(0);
    expect(result.out).toContain("source verification skipped: ETHERSCAN_API_KEY is not set");
    deployments = await readDeployments(deployOut);
    const d = deployments.chains.CELO!;
    expect(Object.keys(deployments.chains)).toEqual(["CELO"]);
    expect(d.chainId).toBe(11142220);
    expect(d.rpcUrl).toBe(SEPOLIA.rpcUrls[0]); // the profile's public RPC, not the one from the environment
    expect(d.tokens.map((t) => [t.symbol, t.address])).toEqual([["USDC", usdc]]);
    const billPay = d.billPay.address as Address;
    const has = (role: Hex, who: Address) => rpc.readContract({ address: billPay, abi: billPayAbi, functionName: "hasRole", args: [role, who] });
    const deployer = privateKeyToAccount(keys.deployer).address;
    expect(await has(DEFAULT_ADMIN_ROLE, admin)).toBe(true);
    expect(await has(DEFAULT_ADMIN_ROLE, deployer)).toBe(false);
    expect(await has(ROLE("PAUSER_ROLE"), pauser)).toBe(true);
    expect(await has(ROLE("OPERATOR_ROLE"), privateKeyToAccount(keys.operator).address)).toBe(true);
    expect(await has(ROLE("REFUNDER_ROLE"), privateKeyToAccount(keys.refunder).address)).toBe(true);
    expect(await rpc.readContract({ address: billPay, abi: billPayAbi, functionName: "isAcceptedToken", args: [usdc] })).toBe(true);
    // The budgets as configured, on chain and in the deployments file.
    expect(d.pullBudget).toEqual({ limit: "500000000", periodSeconds: 3600 });
    expect(await rpc.readContract({ address: billPay, abi: billPayAbi, functionName: "pullBudget", args: [usdc] })).toEqual([500_000_000n, 3600n, 500_000_000n]);
    expect(d.refundBudget).toEqual({ limit: "50000000", periodSeconds: 86_400 });
    expect((await rpc.readContract({ address: billPay, abi: billPayAbi, functionName: "refundBudget", args: [usdc] }))[0]).toBe(50_000_000n);
    expect(d.billPay.block).toBeGreaterThan(0);
    // Run again, into a file that holds another chain (as both chains of a pair are deployed
    // in turn): Ignition's journal says it is done, nothing new is deployed, and the other chain is kept.
    const pairOut = join(dirname(deployOut), "pair.json");
    const other = { ...d, chainId: 84532 };
    await writeDeployments({ chains: { BASE: other } }, pairOut);
    const again = await runScript("scripts/deploy.ts", ["--network", "celo-sepolia", "--deployment-id", deploymentId, "--out", pairOut, "--confirmations", "1"], deployEnv());
    expect(again.code, again.out).toBe(0);
    const pair = await readDeployments(pairOut);
    expect(pair.chains.CELO!.billPay).toEqual(d.billPay);
    expect(pair.chains.BASE).toEqual(other);
    expect([...proxy.methods].filter((m) => DEV_METHOD.test(m) && !DEV_NODE_PROBES.includes(m))).toEqual([]);
  }, 180_000);

  it("starts the service on the profile and takes an x402 payment and agent payments, with no hardhat_* call", async () => {
    const env = { NETWORK: "celo-sepolia", CELO_RPC_URL: proxy.url, CELO_USDC_ADDRESS: usdc, DEPLOYMENTS_FILE: deployOut };
    // The ledger and the service on PostgreSQL, as they are deployed on a public network (the
    // embedded PGlite is the local profile's default, covered by npm start's suite; on PGlite
    // the service's own database took 7 s and 10 s of CPU to create here).
    const database = await freshDatabase("celo_sepolia");
    closers.push(() => database.drop());
    ledger = await startLedger({ deploymentsFile: deployOut, databaseUrl: database.url, env });
    closers.push(() => ledger.stop());
    const facilitatorPort = await freePort();
    const facilitator = await startScript("services/facilitator/main.ts", { ...env, FACILITATOR_PORT: String(facilitatorPort) }, "listening");
    closers.push(facilitator.stop);
    const billerKeys = { apiKey: "live-api-key-1", secretKey: "live-secret-key-1", publicKey: "live-public-key-1" };
    const biller = await listen(billerSandboxApp(billerKeys).fetch);
    closers.push(biller.close);
    const port = await freePort();
    serviceEnv = {
      ...env,
      PORT: String(port),
      OPERATOR_PRIVATE_KEY: keys.operator,
      REFUNDER_PRIVATE_KEY: keys.refunder,
      PIN_PEPPER: randomBytes(32).toString("hex"),
      OPS_TOKEN: randomBytes(24).toString("hex"),
      BILLER_WEBHOOK_TOKEN: randomBytes(24).toString("hex"),
      FACILITATOR_URL_CELO: `http://127.0.0.1:${facilitatorPort}`,
      FACILITATOR_SELF_HOSTED: "1",
      RATE_FIXED: "1",
      BILLER_BASE_URL: biller.url,
      BILLER_API_KEY: billerKeys.apiKey,
      BILLER_SECRET_KEY: billerKeys.secretKey,
      BILLER_PUBLIC_KEY: billerKeys.publicKey,
      LEDGER_URL: ledger.url,
      SERVER_DATABASE_URL: database.url,
      LOG_FORMAT: "json",
      LOG_LEVEL: "info",
      WORKER_INTERVAL_MS: "500",
    };
    const service = await startScript("server/main.ts", serviceEnv, '"msg":"listening"');
    closers.push(service.stop);
    serviceUrl = `http://127.0.0.1:${port}`;
    expect(service.output()).toContain('"network":"celo-sepolia"');
    expect(service.output()).toContain('"database":"postgresql"');

    // The 402 names Celo Sepolia, and only it.
    const challenge = await fetch(`${serviceUrl}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(x402Bill(hardhatAccount(5).address)) });
    expect(challenge.status).toBe(402);
    const accepts = ((await challenge.json()) as { accepts: Array<{ network: string; asset: string; maxAmountRequired: string }> }).accepts;
    expect(accepts.map((a) => [a.network, a.asset])).toEqual([["eip155:11142220", usdc]]);
    const x402Amount = BigInt(accepts[0]!.maxAmountRequired);
    const onBase = await fetch(`${serviceUrl}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(x402Bill(hardhatAccount(5).address, { blockchain: "BASE" })) });
    expect(onBase.status).toBe(422);
    expect(await onBase.json()).toMatchObject({ code: "UNSUPPORTED_CHAIN" });

    // x402, with the official client.
    const payer: Account = hardhatAccount(5);
    const paid = await wrapFetchWithPayment(fetch, x402ClientFor(payer, deployments))(`${serviceUrl}/api/pay/x402`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(x402Bill(payer.address)),
    });
    expect(paid.status).toBe(200);
    expect(await paid.json()).toMatchObject({ status: "SUCCESS" });

    // The agent hub: allowance on chain, then a served bill and a refunded one.
    const agent = hardhatAccount(6);
    const wallet = createWalletClient({ account: agent, chain, transport: http(proxy.url) });
    const billPay = deployments.chains.CELO!.billPay.address as Address;
    await rpc.waitForTransactionReceipt({ hash: await wallet.writeContract({ address: usdc, abi: eip3009TokenAbi, functionName: "approve", args: [billPay, 10n ** 12n] }) });
    await rpc.waitForTransactionReceipt({ hash: await wallet.writeContract({ address: billPay, abi: billPayAbi, functionName: "setSpendingAllowance", args: [usdc, 10_000_000n] }) });
    const apiKey = await linkAgent(serviceUrl, agent);
    const mcp = await mcpAgent(serviceUrl);
    const served = await mcp.call("pay_bill", { api_key: apiKey, pin: "1234", ...airtimeBill() });
    expect(served.data).toMatchObject({ status: "SUCCESS" });
    const refunded = await mcp.call("pay_bill", { api_key: apiKey, pin: "1234", ...airtimeBill({ billersCode: "08099999999" }) });
    expect(refunded.data).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
    await mcp.close();

    // The treasury holds exactly the x402 payment and the served pull; the refund went back.
    const balance = (who: Address) => rpc.readContract({ address: usdc, abi: eip3009TokenAbi, functionName: "balanceOf", args: [who] });
    const servedUnits = BigInt((served.data.amount as { units: string }).units);
    expect(servedUnits).toBe(BigInt((refunded.data.amount as { units: string }).units));
    expect(await balance(agent.address)).toBe(100_000_000n - servedUnits);
    expect(await balance(billPay)).toBe(x402Amount + servedUnits);
    expect(await balance(payer.address)).toBe(100_000_000n - x402Amount);
    await waitForLedgerBlock(ledger.url, SEPOLIA.chainId, await rpc.getBlockNumber());
    expect([...proxy.methods].filter((m) => DEV_METHOD.test(m) && !DEV_NODE_PROBES.includes(m))).toEqual([]);
  }, 240_000);
});
