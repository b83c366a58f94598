/**
 * Every refusal to start (server/startup-checks.ts), each shown on a real local chain or a
 * configuration made to fail it, and the service process itself refusing with its message.
 */
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWalletClient, http, keccak256, toBytes, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { viemChain } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { activeNetwork, resolveNetwork } from "../../lib/networks.ts";
import { deployerAccount, hardhatAccount, operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";
import { loadConfig } from "../../server/config.ts";
import { chainFailures, deploymentFailures, policyFailures } from "../../server/startup-checks.ts";
import { pinPepper } from "../../server/agent/pin-pepper.ts";
import { runScript } from "../support/processes.ts";
import { freshDatabase, startTestChains } from "../support/stack.ts";
import { startServiceStack } from "../../stack/service-stack.ts";
import { chainActors } from "../support/actors.ts";
import { PERMIT2, X402_EXACT_PROXY } from "../../lib/permit2.ts";
import { placePermit2Contracts } from "../../lib/permit2-code.ts";

describe("start-up checks", () => {
  let stack: Awaited<ReturnType<typeof startTestChains>>;
  const keys = { operator: operatorAccount().address, refunder: refunderAccount().address };
  const minGas = 10n ** 15n;
  /** The deployments with one chain's entry changed. */
  const changed = (change: (d: NonNullable<Deployments["chains"]["CELO"]>) => void): Deployments => {
    const copy = structuredClone(stack.deployments);
    change(copy.chains.CELO!);
    delete copy.chains.BASE;
    return copy;
  };

  beforeAll(async () => {
    stack = await startTestChains();
  });
  afterAll(() => stack?.close());

  it("pass on the local deployment as deployed", async () => {
    expect(await chainFailures(stack.deployments, keys, minGas)).toEqual([]);
    expect(activeNetwork().local).toBe(true);
    expect(deploymentFailures(activeNetwork(), stack.deployments)).toEqual([]);
    expect(policyFailures(loadConfig({}), activeNetwork(), keys)).toEqual([]);
  });

  it("refuse a token whose EIP-712 name or version is not what the 402 advertises", async () => {
    const wrongVersion = changed((d) => (d.tokens.find((t) => t.symbol === "USDC")!.eip712Version = "1"));
    const failures = await chainFailures(wrongVersion, keys, minGas);
    expect(failures).toEqual([
      'CELO USDC: the token\'s EIP-712 version is "2", the 402 advertises "1"',
      expect.stringContaining("CELO USDC: the token's DOMAIN_SEPARATOR is not the one"),
    ]);
    const wrongName = changed((d) => (d.tokens.find((t) => t.symbol === "USDC")!.name = "USD Coin"));
    expect((await chainFailures(wrongName, keys, minGas))[0]).toMatch(/the token's name is "USDC", the 402 advertises "USD Coin"/);
  });

  it("refuse a BillPay address with no code, and an RPC on another chain", async () => {
    const noCode = changed((d) => (d.billPay.address = hardhatAccount(16).address));
    expect(await chainFailures(noCode, keys, minGas)).toEqual([`CELO: no contract at BillPay's address ${hardhatAccount(16).address}`]);
    const otherChain = changed((d) => (d.rpcUrl = stack.deployments.chains.BASE!.rpcUrl));
    expect(await chainFailures(otherChain, keys, minGas)).toEqual(["CELO: the RPC serves chain 8453, the deployment is on 42220"]);
  });

  it("refuse a chain paying a token through Permit2 without Permit2 or x402's exact proxy in place", async () => {
    const base = stack.deployments.chains.BASE!;
    const onlyBase = { ...structuredClone(stack.deployments), chains: { BASE: base } } as Deployments;
    const client = chainActors(stack.deployments, "BASE").publicClient;
    for (const address of [PERMIT2, X402_EXACT_PROXY]) await client.request({ method: "hardhat_setCode" as never, params: [address, "0x"] as never });
    try {
      expect(await chainFailures(onlyBase, keys, minGas)).toEqual([
        `BASE: no Permit2 at ${PERMIT2}: a token without EIP-3009 cannot be paid over x402`,
        `BASE: no x402 exact proxy at ${X402_EXACT_PROXY}: a token without EIP-3009 cannot be paid over x402`,
      ]);
    } finally {
      await placePermit2Contracts(client);
    }
    expect(await chainFailures(onlyBase, keys, minGas)).toEqual([]);
  });

  it("refuse hot keys without their role or without gas", async () => {
    const fresh = privateKeyToAccount(generatePrivateKey()).address;
    const failures = await chainFailures(changed(() => {}), { operator: hardhatAccount(15).address, refunder: fresh }, minGas);
    expect(failures).toEqual([
      `CELO: the operator key ${hardhatAccount(15).address} does not hold OPERATOR_ROLE on BillPay (npm run admin -- grant-role)`,
      `CELO: the refunder key ${fresh} does not hold REFUNDER_ROLE on BillPay (npm run admin -- grant-role)`,
      `CELO: the refunder key ${fresh} has 0 wei of gas, under the ${minGas} it needs (MIN_GAS_WEI)`,
    ]);
  });

  it("refuse a hot key that is also BillPay's admin, or holds the other hot role", async () => {
    const admin = createWalletClient({ account: deployerAccount(), chain: viemChain("CELO", stack.deployments.chains.CELO!.rpcUrl), transport: http(stack.deployments.chains.CELO!.rpcUrl) });
    const celo = chainActors(stack.deployments, "CELO");
    const grant = async (role: Hex, account: Hex, grant = true) =>
      celo.mined(await admin.writeContract({ address: celo.billPay, abi: billPayAbi, functionName: grant ? "grantRole" : "revokeRole", args: [role, account] }));
    const adminRole = `0x${"00".repeat(32)}` as Hex;
    const refunderRole = keccak256(toBytes("REFUNDER_ROLE"));
    await grant(adminRole, keys.refunder);
    await grant(refunderRole, keys.operator);
    try {
      expect(await chainFailures(changed(() => {}), keys, minGas)).toEqual([
        `CELO: the operator key ${keys.operator} also holds REFUNDER_ROLE: give each role its own key, so a leaked key can only pull or only refund`,
        `CELO: the refunder key ${keys.refunder} is also BillPay's admin: a hot key must not manage roles, budgets or withdrawals (npm run admin -- revoke-role)`,
      ]);
    } finally {
      await grant(adminRole, keys.refunder, false);
      await grant(refunderRole, keys.operator, false);
    }
    expect(await chainFailures(changed(() => {}), keys, minGas)).toEqual([]);
  });

  it("refuse a deployment that is not the network profile's: wrong chain id, a chain missing or extra, other tokens", () => {
    const sepolia = resolveNetwork("celo-sepolia");
    expect(deploymentFailures(sepolia, stack.deployments)).toEqual([
      'CELO: the deployment is on chain 42220, the network profile "celo-sepolia" is on 11142220',
      expect.stringContaining("CELO USDC: the deployment accepts"),
      'BASE: deployed, but the network profile "celo-sepolia" does not serve it (set NETWORK)',
    ]);
    const onSepolia = changed((d) => (d.chainId = 11142220));
    expect(deploymentFailures(sepolia, onSepolia)).toEqual([
      `CELO USDC: the deployment accepts ${onSepolia.chains.CELO!.tokens[0]!.address}, the network profile names 0x01C5C0122039549AD1493B8220cABEdD739BC44E`,
    ]);
    const overridden = resolveNetwork("celo-sepolia", { CELO_USDC_ADDRESS: onSepolia.chains.CELO!.tokens[0]!.address });
    expect(deploymentFailures(overridden, onSepolia)).toEqual([]);
    expect(deploymentFailures(resolveNetwork("celo,base"), onSepolia)).toEqual([
      'CELO: the deployment is on chain 11142220, the network profile "celo,base" is on 42220',
      expect.stringContaining("CELO USDC: the deployment accepts"),
      expect.stringContaining("CELO USD₮: the deployment accepts"),
      expect.stringContaining("CELO USA₮: the deployment accepts"),
      expect.stringContaining('BASE: the network profile "celo,base" serves it, but the deployments file has no deployment for it'),
    ]);
    expect(() => resolveNetwork("celo,base-sepolia")).toThrow("mixes mainnets and testnets");
    expect(() => resolveNetwork("local,celo")).toThrow("stands alone");
    expect(() => resolveNetwork("celo,celo")).toThrow("names two profiles for CELO");
    expect(() => resolveNetwork("polygon")).toThrow('NETWORK "polygon" is not a profile');
  });

  it("on a real network, refuse Hardhat's keys, the sandbox biller's keys, a facilitator on loopback, a rate that never moves, no OPS_TOKEN or webhook token, and one key for two roles", () => {
    const remote = resolveNetwork("celo-sepolia");
    const failures = policyFailures(loadConfig({}), remote, keys);
    expect(failures).toEqual([
      expect.stringContaining(`the operator key ${keys.operator} is one of Hardhat's public test keys: set OPERATOR_PRIVATE_KEY`),
      expect.stringContaining(`the refunder key ${keys.refunder} is one of Hardhat's public test keys: set REFUNDER_PRIVATE_KEY`),
      "BILLER_API_KEY is the sandbox biller's key: set the biller's real credentials",
      "BILLER_SECRET_KEY is the sandbox biller's key: set the biller's real credentials",
      "BILLER_PUBLIC_KEY is the sandbox biller's key: set the biller's real credentials",
      expect.stringContaining("FACILITATOR_URL_CELO (http://127.0.0.1:8402) is on this machine"),
      "RATE_SOURCE_URL is not set: every bill would be priced at NGN_PER_USD (1550) for ever, whatever the naira does; name a rate source, or set RATE_FIXED=1 to price at NGN_PER_USD on purpose",
      expect.stringContaining("PIN_PEPPER is not set"),
      expect.stringContaining("OPS_TOKEN is not set"),
      expect.stringContaining("BILLER_WEBHOOK_TOKEN is not set"),
    ]);
    // One key for both hot roles is refused too.
    const shared = privateKeyToAccount(generatePrivateKey()).address;
    expect(policyFailures(loadConfig({}), remote, { operator: shared, refunder: shared })).toContainEqual(expect.stringContaining("the operator and refunder are one key"));
    const own = { operator: privateKeyToAccount(generatePrivateKey()).address, refunder: privateKeyToAccount(generatePrivateKey()).address };
    const configured = loadConfig({
      BILLER_API_KEY: "k1",
      BILLER_SECRET_KEY: "k2",
      BILLER_PUBLIC_KEY: "k3",
      FACILITATOR_URL_CELO: "https://facilitator.example.org",
      RATE_SOURCE_URL: "https://rates.example.org/ngn",
      PIN_PEPPER: "a".repeat(64),
      OPS_TOKEN: "o".repeat(32),
      BILLER_WEBHOOK_TOKEN: "w".repeat(32),
    });
    expect(policyFailures(configured, remote, own)).toEqual([]);
    const selfHosted = loadConfig({ BILLER_API_KEY: "k1", BILLER_SECRET_KEY: "k2", BILLER_PUBLIC_KEY: "k3", FACILITATOR_SELF_HOSTED: "1", RATE_FIXED: "1", PIN_PEPPER: "a".repeat(64), OPS_TOKEN: "o".repeat(32), BILLER_WEBHOOK_TOKEN: "w".repeat(32) });
    expect(policyFailures(selfHosted, remote, own)).toEqual([]);
  });

  it("need a PIN pepper on a real network; on the local one it is generated and kept", () => {
    const remote = resolveNetwork("celo-sepolia");
    expect(() => pinPepper(loadConfig({}), remote)).toThrow(/PIN_PEPPER is required on the network profile "celo-sepolia"/);
    expect(pinPepper(loadConfig({ PIN_PEPPER: "b".repeat(40) }), remote).toString()).toBe("b".repeat(40));
    expect(() => loadConfig({ PIN_PEPPER: "short" })).toThrow(/PIN_PEPPER must be at least 32 characters/);
    const file = join(stack.dir, "pin-pepper");
    const local = pinPepper(loadConfig({ PIN_PEPPER_FILE: file }), activeNetwork());
    expect(local.length).toBeGreaterThanOrEqual(32);
    expect(pinPepper(loadConfig({ PIN_PEPPER_FILE: file }), activeNetwork()).equals(local)).toBe(true);
  });

  it("keep the service process from starting, naming each failure, before it creates its database", async () => {
    const file = join(stack.dir, "wrong-version.json");
    await writeFile(file, JSON.stringify(changed((d) => (d.tokens.find((t) => t.symbol === "USDC")!.eip712Version = "1"))));
    const { code, out } = await runScript("server/main.ts", [], { DEPLOYMENTS_FILE: file, PORT: "0", SERVER_PGLITE_DIR: join(stack.dir, "refused-db"), LOG_FORMAT: "json" });
    expect(code).toBe(1);
    expect(out).toContain("refusing to start");
    expect(out).toContain('CELO USDC: the token\'s EIP-712 version is "2", the 402 advertises "1"');
    expect(out).not.toContain("listening");
    expect(existsSync(join(stack.dir, "refused-db"))).toBe(false);
  });

  it("keep a second service process off the keys a live instance signs with, naming the key", async () => {
    const database = await freshDatabase("key_lease");
    const env = { SERVER_DATABASE_URL: database.url, SERVER_DB_POOL_SIZE: "2", LOG_REQUESTS: "0" };
    const live = await startServiceStack({ deployments: stack.deployments, env });
    try {
      const { code, out } = await runScript("server/main.ts", [], { ...env, DEPLOYMENTS_FILE: stack.deploymentsFile, PORT: "0", LOG_FORMAT: "json" });
      expect(code).toBe(1);
      expect(out).toContain("refusing to start");
      expect(out).toContain(`the operator key ${keys.operator.toLowerCase()} is held by another live instance (${live.flow.keyLeases.instance}`);
      expect(out).not.toContain("listening");
    } finally {
      await live.close();
      await database.drop();
    }
  });
});
