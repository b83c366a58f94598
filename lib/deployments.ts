/**
 * The deployments file: where each chain's contracts live and from which block, written by
 * `npm run chains` and read by Ponder, the server and the scripts. One file for all chains.
 */
import { readFileSync } from "node:fs";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { parseUnits } from "viem";
import { z } from "zod";
import { activeNetwork, ALL_CHAIN_KEYS, type ChainKey } from "./networks.ts";

const address = z.string().regex(/^0x[0-9a-fA-F]{40}$/, "an 0x-prefixed 20-byte hex address");
const hash = z.string().regex(/^0x[0-9a-fA-F]{64}$/, "an 0x-prefixed 32-byte hex hash");
const deployed = z.object({ address, block: z.number().int().nonnegative() });
/** A budget bucket: `limit` raw token units at once, refilled at `limit` per `periodSeconds`. */
const budget = z.object({ limit: z.string().regex(/^\d+$/), periodSeconds: z.number().int().positive() });

const tokenDeployment = deployed.extend({
  symbol: z.string(),
  name: z.string(),
  decimals: z.number().int(),
  /** EIP-712 domain version for EIP-3009, null for a token without it. */
  eip712Version: z.string().nullable(),
});

const chainDeployment = z.object({
  chainId: z.number().int().positive(),
  rpcUrl: z.string().url(),
  /** Hash of block 0: tells a restarted (reset) local chain from the one deployed to. */
  genesisHash: hash,
  billPay: deployed,
  multicall3: address,
  roles: z.object({ admin: address, operator: address, refunder: address, pauser: address }),
  /** Each accepted token's refund budget as deployed: at most `limit` raw units refunded per `periodSeconds`, refilling. */
  refundBudget: budget,
  /**
   * Each accepted token's pull budget as deployed: at most `limit` raw units pulled per `periodSeconds`, from all
   * payers together, refilling. Absent only in a file written before BillPay had pull budgets (that contract has none).
   */
  pullBudget: budget.optional(),
  tokens: z.array(tokenDeployment).min(1),
});

export const deploymentsSchema = z.object({
  chains: z.partialRecord(z.enum(ALL_CHAIN_KEYS as [ChainKey, ...ChainKey[]]), chainDeployment),
});

export type Deployments = z.infer<typeof deploymentsSchema>;
export type ChainDeployment = z.infer<typeof chainDeployment>;
export type TokenDeployment = z.infer<typeof tokenDeployment>;

/** `deployments/<profile>.json`: what `npm run deploy -- --network <profile>` (or, for local, `npm run chains`) wrote. */
export function defaultDeploymentsFile(network = activeNetwork().name): string {
  return `deployments/${network.replace(/,/g, "+")}.json`;
}

export function deploymentsPath(file = process.env.DEPLOYMENTS_FILE ?? defaultDeploymentsFile()): string {
  return resolve(file);
}

function parseDeployments(text: string, file: string): Deployments {
  const parsed = deploymentsSchema.safeParse(JSON.parse(text));
  if (!parsed.success) {
    throw new Error(`deployments file ${file} is invalid: ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data;
}

const isMissing = (err: unknown) => (err as NodeJS.ErrnoException).code === "ENOENT";

/** Reads and validates the deployments file; an absent file is an empty deployment. */
export async function readDeployments(file = deploymentsPath()): Promise<Deployments> {
  try {
    return parseDeployments(await readFile(file, "utf8"), file);
  } catch (err) {
    if (isMissing(err)) return { chains: {} };
    throw err;
  }
}

/** The same, synchronously, for configuration files evaluated at load (ponder.config.ts). */
export function readDeploymentsSync(file = deploymentsPath()): Deployments {
  try {
    return parseDeployments(readFileSync(file, "utf8"), file);
  } catch (err) {
    if (isMissing(err)) return { chains: {} };
    throw err;
  }
}

/** Writes atomically (temp file, then rename) so a reader never sees half a file. */
export async function writeDeployments(deployments: Deployments, file = deploymentsPath()): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(deploymentsSchema.parse(deployments), null, 2)}\n`);
  await rename(tmp, file);
}

/**
 * The RPC URLs for a chain: `<CHAIN>_RPC_URL` when set (several, comma-separated, are tried
 * in turn and, in the ledger, share the load), else the deployment's. One rule for every reader.
 */
export function rpcUrlsFor(chain: ChainKey, deployment: ChainDeployment, env: Record<string, string | undefined> = process.env): string[] {
  return rpcUrlsFromEnv(chain, env) ?? [deployment.rpcUrl];
}

/** `<CHAIN>_RPC_URL`'s URLs, or undefined when it names none (before a deployment, the deploy reads it too). */
export function rpcUrlsFromEnv(chain: ChainKey, env: Record<string, string | undefined> = process.env): string[] | undefined {
  const urls = env[`${chain}_RPC_URL`]?.split(",").map((u) => u.trim()).filter(Boolean);
  return urls && urls.length > 0 ? urls : undefined;
}

/** The first of them, for a reader that needs one URL (`env`: another process's environment, as the ledger's). */
export function rpcUrlFor(chain: ChainKey, deployment: ChainDeployment, env: Record<string, string | undefined> = process.env): string {
  return rpcUrlsFor(chain, deployment, env)[0]!;
}

/** The chains this deployment serves. */
export function deployedChains(deployments: Deployments): ChainKey[] {
  return ALL_CHAIN_KEYS.filter((k) => deployments.chains[k] !== undefined);
}

/**
 * Which deployment of a chain this is: its genesis and BillPay's address. A local chain started
 * afresh is another one, and what was watched on the old one is never looked for on it.
 */
export function deploymentIdentity(deployments: Deployments, chain: string): string {
  const d = requireChain(deployments, chain as ChainKey);
  return `${d.genesisHash}:${d.billPay.address}`.toLowerCase();
}

export function requireChain(deployments: Deployments, chain: ChainKey): ChainDeployment {
  const d = deployments.chains[chain];
  if (!d) throw new Error(`no deployment for ${chain}: run \`npm run chains\` first`);
  return d;
}

/** The refund budget given to every accepted token: REFUND_BUDGET raw units per REFUND_BUDGET_PERIOD_SECONDS. */
export function refundBudgetFromEnv(env: NodeJS.ProcessEnv = process.env): { limit: string; periodSeconds: number } {
  return budgetFromEnv(env, "REFUND_BUDGET", parseUnits("5000", 6));
}

/**
 * The pull budget given to every accepted token: PULL_BUDGET raw units per PULL_BUDGET_PERIOD_SECONDS, what the
 * operator key may pull from all payers together (and so the most a leaked operator key can take per period).
 */
export function pullBudgetFromEnv(env: NodeJS.ProcessEnv = process.env): { limit: string; periodSeconds: number } {
  return budgetFromEnv(env, "PULL_BUDGET", parseUnits("50000", 6));
}

const MAX_BUDGET_LIMIT = 2n ** 96n - 1n; // BillPay keeps a budget's limit in a uint96
const MAX_BUDGET_PERIOD = 2 ** 32 - 1; // and its period in a uint32

/** `<name>` (raw units, default `defaultLimit`) per `<name>_PERIOD_SECONDS` (default a day), checked as BillPay will. */
function budgetFromEnv(env: NodeJS.ProcessEnv, name: string, defaultLimit: bigint): { limit: string; periodSeconds: number } {
  const limit = env[name] ?? defaultLimit.toString();
  const periodSeconds = Number(env[`${name}_PERIOD_SECONDS`] ?? 86_400);
  if (!/^\d+$/.test(limit)) throw new Error(`${name} must be a whole number of raw token units`);
  if (BigInt(limit) > MAX_BUDGET_LIMIT) throw new Error(`${name} must be at most ${MAX_BUDGET_LIMIT} raw token units`);
  if (!Number.isInteger(periodSeconds) || periodSeconds <= 0) throw new Error(`${name}_PERIOD_SECONDS must be a positive whole number`);
  if (periodSeconds > MAX_BUDGET_PERIOD) throw new Error(`${name}_PERIOD_SECONDS must be at most ${MAX_BUDGET_PERIOD}`);
  return { limit, periodSeconds };
}
