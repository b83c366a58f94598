/**
 * `npm run deploy -- --network <profile>`: deploys BillPay to a real network (celo,
 * celo-sepolia, base, base-sepolia) with Hardhat Ignition and writes deployments/<profile>.json.
 * A file that holds other chains keeps them: both chains of `NETWORK=celo,base` are deployed
 * one after the other into deployments/celo+base.json (--out), the file that profile reads.
 *
 *   Options: --deployment-id <id> (Ignition's journal under ignition/deployments/, default the
 *            profile; run again with the same id to resume), --out <file>, --confirmations <n>.
 *   Keys:    DEPLOYER_PRIVATE_KEY from Hardhat's keystore (`npx hardhat keystore set
 *            DEPLOYER_PRIVATE_KEY`) or the environment. Hardhat's public test keys are refused.
 *   Roles:   ADMIN_ADDRESS (may be a Safe: it receives the admin role once the budgets are set,
 *            and the deployer renounces it), PAUSER_ADDRESS, OPERATOR_ADDRESS, REFUNDER_ADDRESS.
 *            Refused: an admin that is the deployer's key, the operator or the refunder (a hot
 *            key would hold the admin role), and one account as both operator and refunder.
 *   Chain:   <CHAIN>_RPC_URL replaces the profile's public RPC; <CHAIN>_<SYMBOL>_ADDRESS a token.
 *   Budget:  REFUND_BUDGET (raw units, default 5,000 USDC) per REFUND_BUDGET_PERIOD_SECONDS (default
 *            86400), and PULL_BUDGET (raw units, default 50,000 USDC) per PULL_BUDGET_PERIOD_SECONDS
 *            (default 86400), for every accepted token. The pull budget is the most the operator
 *            key can pull from all payers together per period: what a leaked operator key could take.
 *   Verify:  with ETHERSCAN_API_KEY set and an explorer in the profile, the source is verified
 *            (`hardhat ignition verify`); otherwise the command says it skipped verification.
 *
 * The deploy sends only standard JSON-RPC: no hardhat_* method, so any node or provider serves.
 */
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { network } from "hardhat";
import { createPublicClient, getAddress, http, isAddress, type Address } from "viem";
import { billPayModule } from "../ignition/modules/BillPay.ts";
import { MULTICALL3_ADDRESS } from "../lib/chains.ts";
import { pullBudgetFromEnv, readDeployments, refundBudgetFromEnv, rpcUrlsFromEnv, writeDeployments, type ChainDeployment } from "../lib/deployments.ts";
import { isWellKnownAddress } from "../lib/local-accounts.ts";
import { NETWORK_NAMES, resolveNetwork, type ChainInfo, type ChainKey } from "../lib/networks.ts";

const RPC_TIMEOUT_MS = 30_000;
const VERIFY_TIMEOUT_MS = 180_000;

export class UsageError extends Error {}

/** What `read` throws (an unknown option, a network that is no profile) is the caller's usage error. */
function asUsage<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

function roleAddress(name: string): Address {
  const value = process.env[name];
  if (!value) throw new UsageError(`${name} is not set: name the address that takes this role`);
  if (!isAddress(value)) throw new UsageError(`${name} (${value}) is not an address`);
  if (isWellKnownAddress(value)) throw new UsageError(`${name} (${value}) is one of Hardhat's public test accounts`);
  return getAddress(value);
}

export interface DeployRoles {
  admin: Address;
  pauser: Address;
  operator: Address;
  refunder: Address;
}

/**
 * Refuses roles that share an account where sharing defeats them: the admin (roles, budgets,
 * withdrawals) must be none of the hot keys (the deployer's, the operator's, the refunder's),
 * and the operator (pulls) and the refunder (refunds) must be two keys, so that one leaked key
 * cannot both pull and refund. Without `deployer`, checks the roles alone.
 */
export function refuseOverlappingRoles(roles: DeployRoles, deployer?: Address): void {
  const same = (a: Address, b: Address) => a.toLowerCase() === b.toLowerCase();
  const refuse = (a: string, b: string, account: Address, why: string): never => {
    throw new UsageError(`${a} and ${b} are the same account (${account}): ${why}; give each role its own address`);
  };
  const hotAdmin = "the admin must not be a hot key";
  if (deployer && same(roles.admin, deployer)) refuse("ADMIN_ADDRESS", "the deployer (DEPLOYER_PRIVATE_KEY)", deployer, `${hotAdmin}: the deployer's key would keep the admin role`);
  if (same(roles.admin, roles.operator)) refuse("ADMIN_ADDRESS", "OPERATOR_ADDRESS", roles.admin, hotAdmin);
  if (same(roles.admin, roles.refunder)) refuse("ADMIN_ADDRESS", "REFUNDER_ADDRESS", roles.admin, hotAdmin);
  if (same(roles.operator, roles.refunder)) refuse("OPERATOR_ADDRESS", "REFUNDER_ADDRESS", roles.operator, "one leaked key could then both pull and refund");
}

/** The block that mined BillPay's creation, from Ignition's journal. */
async function creationBlock(journalDir: string, rpc: ReturnType<typeof createPublicClient>): Promise<number> {
  const lines = (await readFile(join(journalDir, "journal.jsonl"), "utf8")).split("\n").filter(Boolean);
  for (const line of lines.reverse()) {
    const entry = JSON.parse(line) as { type?: string; futureId?: string; hash?: string; receipt?: { blockNumber?: number } };
    if (entry.futureId === "BillPay#BillPay" && entry.type === "TRANSACTION_CONFIRM" && entry.hash) {
      const receipt = await rpc.getTransactionReceipt({ hash: entry.hash as `0x${string}` });
      return Number(receipt.blockNumber);
    }
  }
  throw new Error(`BillPay's creation is not in the journal ${journalDir}`);
}

function verify(deploymentId: string, hardhatNetwork: string): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["node_modules/hardhat/dist/src/cli.js", "ignition", "verify", deploymentId, "--network", hardhatNetwork], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => child.kill("SIGTERM"), VERIFY_TIMEOUT_MS);
    child.on("exit", (code) => {
      clearTimeout(timer);
      const last = out.trim().split("\n").slice(-3).join(" ");
      resolve(code === 0 ? `source verified on the explorer (${last})` : `source verification failed, the deployment stands; retry with \`npx hardhat ignition verify ${deploymentId} --network ${hardhatNetwork}\` (${last || `exit ${code}`})`);
    });
  });
}

export async function runDeploy(argv: string[], log: (line: string) => void = console.log): Promise<ChainDeployment> {
  const { values } = asUsage(() =>
    parseArgs({
      args: argv,
      options: {
        network: { type: "string" },
        "deployment-id": { type: "string" },
        out: { type: "string" },
        confirmations: { type: "string", default: "2" },
      },
    }),
  );
  const profileName = values.network;
  if (!profileName) throw new UsageError(`--network is required: one of ${NETWORK_NAMES.filter((n) => n !== "local").join(", ")}`);
  if (profileName === "local") throw new UsageError("the local profile is deployed by `npm run chains` (or `npm start`)");
  const profile = asUsage(() => resolveNetwork(profileName));
  const chains = Object.values(profile.chains);
  if (chains.length !== 1) throw new UsageError("deploy one network profile at a time");
  const chain: ChainInfo = chains[0]!;
  const confirmations = Number(values.confirmations);
  if (!Number.isInteger(confirmations) || confirmations < 1) throw new UsageError("--confirmations must be a whole number of at least 1");
  const deploymentId = values["deployment-id"] ?? profile.name;
  if (!/^[A-Za-z0-9_-]+$/.test(deploymentId)) throw new UsageError("--deployment-id may hold letters, digits, - and _ only");
  const out = values.out ?? `deployments/${profile.name}.json`;
  // Read before anything is deployed: a file that cannot be kept stops the deploy here. It
  // holds one network's chains, as a profile serves them: mainnets and testnets do not mix.
  const others = (await readDeployments(out)).chains;
  for (const [key, kept] of Object.entries(others) as Array<[ChainKey, ChainDeployment]>) {
    if (key === chain.key) continue;
    const itsProfile = NETWORK_NAMES.map((n) => resolveNetwork(n)).find((p) => !p.local && p.chains[key]?.chainId === kept.chainId);
    if (itsProfile?.testnet !== profile.testnet) {
      throw new UsageError(`${out} holds ${key} on chain ${kept.chainId}, not a ${profile.testnet ? "testnet" : "mainnet"} as ${profile.name} is: deploy into another file`);
    }
  }

  const rpcUrl = (rpcUrlsFromEnv(chain.key) ?? chain.rpcUrls)[0]!;
  const roles: DeployRoles = { admin: roleAddress("ADMIN_ADDRESS"), pauser: roleAddress("PAUSER_ADDRESS"), operator: roleAddress("OPERATOR_ADDRESS"), refunder: roleAddress("REFUNDER_ADDRESS") };
  refuseOverlappingRoles(roles);
  const budget = asUsage(() => refundBudgetFromEnv());
  const pullBudget = asUsage(() => pullBudgetFromEnv());
  const rpc = createPublicClient({ transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS }) });

  const chainId = await rpc.getChainId();
  if (chainId !== chain.chainId) throw new UsageError(`${rpcUrl} serves chain ${chainId}, not ${profile.name}'s ${chain.chainId}`);
  const tokens = chain.tokens.map((t) => {
    if (!t.address) throw new Error(`${profile.name} names no address for ${t.symbol}`);
    return { ...t, address: t.address };
  });
  for (const address of [...tokens.map((t) => t.address), MULTICALL3_ADDRESS]) {
    const code = await rpc.getCode({ address });
    if (!code || code === "0x") throw new UsageError(`no contract at ${address} on ${profile.name}: a token or Multicall3 the service needs is missing`);
  }

  const connection = await network.connect({ network: chain.hardhatNetwork, override: { url: rpcUrl } });
  const [deployerRaw] = (await connection.provider.request({ method: "eth_accounts" })) as string[];
  if (!deployerRaw) throw new UsageError("no deployer key: set DEPLOYER_PRIVATE_KEY in Hardhat's keystore or the environment");
  const deployer = getAddress(deployerRaw);
  if (isWellKnownAddress(deployer)) throw new UsageError(`the deployer ${deployer} is one of Hardhat's public test accounts: use your own key`);
  refuseOverlappingRoles(roles, deployer);
  log(`deploying BillPay to ${profile.name} (chain ${chain.chainId}) from ${deployer}; Ignition journal ignition/deployments/${deploymentId}`);

  const { billPay } = await connection.ignition.deploy(
    billPayModule({
      deployer,
      ...roles,
      tokens: tokens.filter((t) => t.acceptedForPulls).map((t) => t.address),
      refundBudget: { limit: BigInt(budget.limit), periodSeconds: BigInt(budget.periodSeconds) },
      pullBudget: { limit: BigInt(pullBudget.limit), periodSeconds: BigInt(pullBudget.periodSeconds) },
    }),
    { deploymentId, defaultSender: deployer, config: { requiredConfirmations: confirmations } },
  );
  const block = await creationBlock(join("ignition", "deployments", deploymentId), rpc);
  const genesis = await rpc.getBlock({ blockNumber: 0n });
  const deployment: ChainDeployment = {
    chainId,
    // The profile's public RPC, never the one given in the environment: that URL may carry a provider's key.
    rpcUrl: chain.rpcUrls[0]!,
    genesisHash: genesis.hash,
    billPay: { address: getAddress(billPay.address), block },
    multicall3: MULTICALL3_ADDRESS,
    roles,
    refundBudget: budget,
    pullBudget,
    tokens: tokens.map((t) => ({ symbol: t.symbol, name: t.name, decimals: t.decimals, eip712Version: t.eip712Version, address: t.address, block })),
  };
  await writeDeployments({ chains: { ...others, [chain.key]: deployment } }, out);
  log(`BillPay ${deployment.billPay.address} at block ${block}; written to ${out}`);

  if (!chain.explorer) log("source verification skipped: the profile has no block explorer");
  else if (!process.env.ETHERSCAN_API_KEY) {
    log(`source verification skipped: ETHERSCAN_API_KEY is not set (then run \`npx hardhat ignition verify ${deploymentId} --network ${chain.hardhatNetwork}\`)`);
  } else log(await verify(deploymentId, chain.hardhatNetwork));
  await connection.close();
  return deployment;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  runDeploy(process.argv.slice(2)).then(
    () => process.exit(0),
    (err: Error) => {
      console.error(err instanceof UsageError ? `deploy: ${err.message}` : err);
      process.exit(err instanceof UsageError ? 2 : 1);
    },
  );
}
