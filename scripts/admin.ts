/**
 * `npm run admin -- <command> [options]`: BillPay's admin actions on one chain of the
 * deployments file (DEPLOYMENTS_FILE). By default a command only shows the call it would
 * make (contract, function, arguments, calldata, sender), what it would change (read from
 * the chain now), and whether the chain would accept it (simulated from the sender). It
 * sends only with --send, then shows the transaction and the state after.
 *
 *   pause | unpause                                   (the pauser)
 *   withdraw --token USDC --to 0x… --amount 12.5      (the admin; amount in tokens)
 *   accept-token --token 0x…|USDC | drop-token --token 0x…|USDC
 *   grant-role --role OPERATOR|REFUNDER|PAUSER|ADMIN --account 0x… | revoke-role …
 *   set-refund-budget --token USDC --limit 500 --period 86400   (what the refunder may refund)
 *   set-pull-budget --token USDC --limit 50000 --period 86400   (what the operator may pull, all payers together)
 * A budget's dry run shows it as it is now (limit, period, available).
 * Common: --chain CELO|BASE (default CELO), --send.
 * Keys: ADMIN_PRIVATE_KEY (admin actions) and PAUSER_PRIVATE_KEY (pause, unpause); on a
 * local network profile they default to the local deployer, which holds both roles. A chain that is not
 * local needs them set: the public test keys are refused there.
 */
import { createWalletClient, encodeFunctionData, formatUnits, getAddress, http, isAddress, keccak256, parseUnits, toBytes, type Account, type Address, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { billPayAbi, eip3009TokenAbi } from "../lib/generated/abis.ts";
import { publicClientFor, RPC_TIMEOUT_MS } from "../lib/chain-client.ts";
import { activeNetwork } from "../lib/networks.ts";
import { CHAIN_KEYS, viemChain, type ChainKey } from "../lib/chains.ts";
import { deploymentsPath, readDeployments, requireChain, rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import { deployerAccount } from "../lib/local-accounts.ts";

export const ROLES = {
  ADMIN: `0x${"0".repeat(64)}` as Hex,
  OPERATOR: keccak256(toBytes("OPERATOR_ROLE")),
  REFUNDER: keccak256(toBytes("REFUNDER_ROLE")),
  PAUSER: keccak256(toBytes("PAUSER_ROLE")),
} as const;
type Role = keyof typeof ROLES;

export const COMMANDS = ["pause", "unpause", "withdraw", "accept-token", "drop-token", "grant-role", "revoke-role", "set-refund-budget", "set-pull-budget"] as const;
type Command = (typeof COMMANDS)[number];

export class UsageError extends Error {}

function parseArgs(argv: string[]): { command: Command; options: Record<string, string>; send: boolean } {
  const [command, ...rest] = argv;
  if (!COMMANDS.includes(command as Command)) throw new UsageError(`unknown command "${command ?? ""}"; commands: ${COMMANDS.join(", ")}`);
  const options: Record<string, string> = {};
  let send = false;
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i]!;
    if (flag === "--send") send = true;
    else if (flag.startsWith("--") && rest[i + 1] !== undefined) options[flag.slice(2)] = rest[++i]!;
    else throw new UsageError(`unexpected argument "${flag}"`);
  }
  return { command: command as Command, options, send };
}

function keyFrom(env: string, local: boolean): Account {
  const key = process.env[env];
  if (key) {
    if (!/^0x[0-9a-fA-F]{64}$/.test(key)) throw new UsageError(`${env} must be a 0x-prefixed 32-byte hex private key`);
    return privateKeyToAccount(key as Hex);
  }
  if (!local) throw new UsageError(`${env} is not set: a chain that is not local needs its own key (the local test keys are public)`);
  return deployerAccount();
}

export interface AdminResult {
  /** What was (or would be) done, line by line. */
  lines: string[];
  sent: boolean;
  txHash?: Hex;
}

export async function runAdmin(argv: string[], deployments: Deployments): Promise<AdminResult> {
  const { command, options, send } = parseArgs(argv);
  const chain = (options.chain ?? "CELO").toUpperCase() as ChainKey;
  if (!CHAIN_KEYS.includes(chain)) throw new UsageError(`--chain must be one of ${CHAIN_KEYS.join(", ")}`);
  const d = requireChain(deployments, chain);
  const rpcUrl = rpcUrlFor(chain, d);
  const client = publicClientFor(chain, rpcUrl);
  const billPay = getAddress(d.billPay.address);
  const read = <T>(functionName: string, args: unknown[] = []) => client.readContract({ address: billPay, abi: billPayAbi, functionName: functionName as never, args: args as never }) as Promise<T>;

  const need = (name: string) => {
    const v = options[name];
    if (v === undefined) throw new UsageError(`${command} needs --${name}`);
    return v;
  };
  const token = () => {
    const given = need("token");
    const t = d.tokens.find((x) => x.symbol.toUpperCase() === given.toUpperCase() || x.address.toLowerCase() === given.toLowerCase());
    if (t) return { address: getAddress(t.address), symbol: t.symbol, decimals: t.decimals };
    if (isAddress(given)) return { address: getAddress(given), symbol: given, decimals: 6 };
    throw new UsageError(`--token ${given} is neither a token of ${chain} (${d.tokens.map((x) => x.symbol).join(", ")}) nor an address`);
  };
  const account = (name: string) => {
    const v = need(name);
    if (!isAddress(v)) throw new UsageError(`--${name} must be an 0x-prefixed address`);
    return getAddress(v);
  };
  const amount = (name: string, decimals: number) => {
    const v = need(name);
    if (!/^\d+(\.\d+)?$/.test(v)) throw new UsageError(`--${name} must be a plain decimal number of tokens`);
    return parseUnits(v, decimals);
  };

  // The local profile alone may sign with the public test keys; a real network, even one reached on loopback, may not.
  const local = activeNetwork().local;
  let functionName: string;
  let args: unknown[];
  let change: () => Promise<string>;
  let signer: Account;
  switch (command) {
    case "pause":
    case "unpause": {
      functionName = command;
      args = [];
      signer = keyFrom("PAUSER_PRIVATE_KEY", local);
      change = async () => `paused: ${await read<boolean>("paused")}`;
      break;
    }
    case "withdraw": {
      const t = token();
      const to = account("to");
      const value = amount("amount", t.decimals);
      functionName = "withdraw";
      args = [t.address, to, value];
      signer = keyFrom("ADMIN_PRIVATE_KEY", local);
      change = async () => {
        const balance = await client.readContract({ address: t.address, abi: eip3009TokenAbi, functionName: "balanceOf", args: [billPay] });
        return `treasury ${t.symbol}: ${formatUnits(balance, t.decimals)}`;
      };
      break;
    }
    case "accept-token":
    case "drop-token": {
      const t = token();
      functionName = "setTokenAccepted";
      args = [t.address, command === "accept-token"];
      signer = keyFrom("ADMIN_PRIVATE_KEY", local);
      change = async () => `${t.symbol} accepted: ${await read<boolean>("isAcceptedToken", [t.address])}`;
      break;
    }
    case "grant-role":
    case "revoke-role": {
      const roleName = need("role").toUpperCase() as Role;
      if (!(roleName in ROLES)) throw new UsageError(`--role must be one of ${Object.keys(ROLES).join(", ")}`);
      const who = account("account");
      functionName = command === "grant-role" ? "grantRole" : "revokeRole";
      args = [ROLES[roleName], who];
      signer = keyFrom("ADMIN_PRIVATE_KEY", local);
      change = async () => `${who} holds ${roleName}: ${await read<boolean>("hasRole", [ROLES[roleName], who])}`;
      break;
    }
    case "set-refund-budget":
    case "set-pull-budget": {
      const kind = command === "set-refund-budget" ? "refund" : "pull";
      const t = token();
      const limit = amount("limit", t.decimals);
      const period = need("period");
      if (!/^\d+$/.test(period) || BigInt(period) === 0n) throw new UsageError("--period must be a whole number of seconds above 0");
      functionName = kind === "refund" ? "setRefundBudget" : "setPullBudget";
      args = [t.address, limit, BigInt(period)];
      signer = keyFrom("ADMIN_PRIVATE_KEY", local);
      change = async () => {
        const [l, p, available] = await read<readonly [bigint, bigint, bigint]>(`${kind}Budget`, [t.address]);
        return `${t.symbol} ${kind} budget: ${formatUnits(l, t.decimals)} per ${p} s, ${formatUnits(available, t.decimals)} available`;
      };
      break;
    }
  }

  const data = encodeFunctionData({ abi: billPayAbi, functionName: functionName as never, args: args as never });
  const shown = args.map((a) => (typeof a === "bigint" ? a.toString() : String(a))).join(", ");
  const lines = [
    `${chain} (chain ${d.chainId}) BillPay ${billPay}`,
    `call: ${functionName}(${shown})`,
    `from: ${signer.address}`,
    `calldata: ${data}`,
    `now: ${await change()}`,
  ];
  try {
    await client.call({ account: signer.address, to: billPay, data });
    lines.push("simulation: the chain accepts it");
  } catch (err) {
    const reason = (err as { shortMessage?: string }).shortMessage ?? (err as Error).message;
    lines.push(`simulation: the chain refuses it: ${reason.split("\n")[0]}`);
    if (send) throw new UsageError(`${lines.join("\n")}\nnot sent`);
    return { lines, sent: false };
  }
  if (!send) {
    lines.push("not sent (add --send to send it)");
    return { lines, sent: false };
  }
  const wallet = createWalletClient({ account: signer, chain: viemChain(chain, rpcUrl), transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS }) });
  const txHash = await wallet.sendTransaction({ to: billPay, data });
  const receipt = await client.waitForTransactionReceipt({ hash: txHash });
  if (receipt.status !== "success") throw new Error(`transaction ${txHash} reverted`);
  lines.push(`sent: ${txHash} (block ${receipt.blockNumber})`, `after: ${await change()}`);
  return { lines, sent: true, txHash };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const result = await runAdmin(process.argv.slice(2), await readDeployments(deploymentsPath()));
    console.log(result.lines.join("\n"));
  } catch (err) {
    console.error(err instanceof UsageError ? err.message : (err as Error).stack);
    process.exitCode = 2;
  }
}
