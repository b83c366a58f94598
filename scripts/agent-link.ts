/**
 * `npm run agent:link -- --allowance <tokens> [options]`: links a wallet to the agent hub in
 * one command, and prints what an MCP client needs to use it.
 *
 *   1. From the wallet, on chain: approve BillPay on the token for the allowance, set the
 *      spending allowance and, with --limit and --period, a periodic limit.
 *   2. Links the wallet (POST /api/agent/link, signed by the wallet) with the PIN.
 *   3. Prints the api_key (or writes it to --key-file, mode 0600), an MCP client set-up for
 *      Claude Desktop and for Cursor, and a snippet with the official MCP SDK client.
 *
 * Everything about the service (its name, chains, BillPay and token addresses) comes from its
 * describe_capabilities; the chain is reached at --rpc-url, else <CHAIN>_RPC_URL, else the
 * deployments file when it describes the same BillPay (the local stack), else the network
 * profile's public RPC. Secrets never come from the command line (see USAGE) and are never printed.
 */
import { randomBytes } from "node:crypto";
import { readFile, rename, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { createWalletClient, formatUnits, http, parseUnits, type Address, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { billPayAbi, eip3009TokenAbi } from "../lib/generated/abis.ts";
import { linkAgent, mcpAgent } from "../lib/agent-client.ts";
import { isLocalRpcUrl, publicClientFor, RPC_TIMEOUT_MS } from "../lib/chain-client.ts";
import { chainByKey, resolveTokenSymbol, viemChain, type ChainKey } from "../lib/chains.ts";
import { deploymentsPath, readDeployments, rpcUrlsFromEnv } from "../lib/deployments.ts";
import { isWellKnownAddress } from "../lib/local-accounts.ts";
import { localUrl } from "../lib/local-ports.ts";
import { PIN_PATTERN } from "../server/credentials.ts";

const USAGE = `Usage: npm run agent:link -- --allowance <tokens> [options]

Approves BillPay and sets the spending allowance on chain, links the wallet, and prints the
api_key and the MCP client set-ups (Claude Desktop, Cursor, the MCP SDK).

The wallet's key, one of:
  AGENT_PRIVATE_KEY=0x...        in the environment
  --private-key-file <path>      a file holding the 0x-prefixed 32-byte hex key
  --keystore <name>              an entry of Hardhat's keystore (npx hardhat keystore set <name>).
                                 Interactive: Hardhat's production keystore asks for its password,
                                 typed here at a hidden prompt (a terminal is needed); the development
                                 keystore (keystore set --dev) needs none. Hardhat skips its keystore
                                 when CI (or another CI variable) is set.
The PIN (4 to 6 digits): AGENT_PIN in the environment, else typed twice at a hidden prompt.
  Never --pin: a PIN in the arguments is readable by every user of this machine (ps,
  /proc/<pid>/cmdline) and stays in the shell history and in npm's echo of the command.

Options:
  --allowance <tokens>           the most BillPay may pull, in tokens (e.g. 25 or 12.5); required
  --limit <tokens> --period <s>  also cap what it may pull per period of <s> seconds
  --service-url <url>            the service (default ${localUrl("service")})
  --chain <chain>                CELO or BASE (default CELO, else the service's first chain)
  --token <symbol>               USDC, USDT (USD₮) or USA₮ (default USDC)
  --rpc-url <url>                the chain's RPC (default <CHAIN>_RPC_URL, the deployments file, the public RPC)
  --key-file <path>              write the api_key to this file (mode 0600) instead of printing it
  -h, --help                     this text

The token approval is the allowance itself, never unlimited: whatever BillPay did, the wallet
can lose no more than it allowed. Running again sets the new figures and retires the old key.`;

/** How long a transaction may take to be mined before the command gives up on it. */
const RECEIPT_TIMEOUT_MS = 120_000;

export class UsageError extends Error {}

interface Capabilities {
  service: string;
  chains: Array<{ chain: string; chain_id: number; billpay_contract: Address; tokens: Array<{ token: string; address: Address | null; decimals: number; agent_hub: boolean }> }>;
}

type Env = Record<string, string | undefined>;

function options(argv: string[], env: Env) {
  const { values, positionals } = (() => {
    try {
      return parseArgs({
        args: argv,
        allowPositionals: true,
        options: {
          allowance: { type: "string" },
          limit: { type: "string" },
          period: { type: "string" },
          "service-url": { type: "string" },
          chain: { type: "string" },
          token: { type: "string" },
          "rpc-url": { type: "string" },
          "key-file": { type: "string" },
          "private-key-file": { type: "string" },
          keystore: { type: "string" },
          // Named only to be refused with the reason (see USAGE).
          pin: { type: "string" },
          "private-key": { type: "string" },
          help: { type: "boolean", short: "h" },
        },
      });
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
  })();
  if (values.help) return null;
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.pin !== undefined) {
    throw new UsageError(
      "--pin is refused: a PIN in the arguments is readable by every user of this machine (ps, /proc/<pid>/cmdline) " +
        "and stays in the shell history; set AGENT_PIN or type it at the prompt",
    );
  }
  if (values["private-key"] !== undefined) throw new UsageError("--private-key is refused, for the same reason as --pin: set AGENT_PRIVATE_KEY, or use --private-key-file or --keystore");
  if (values.allowance === undefined) throw new UsageError("--allowance is required: the most BillPay may pull from the wallet, in tokens (e.g. --allowance 25)");
  for (const flag of ["allowance", "limit"] as const) {
    const v = values[flag];
    if (v !== undefined && !/^\d+(\.\d+)?$/.test(v)) throw new UsageError(`--${flag} must be a plain decimal number of tokens, not ${JSON.stringify(v)}`);
    if (v !== undefined && /^[0.]+$/.test(v)) throw new UsageError(`--${flag} must be above 0`);
  }
  if ((values.limit === undefined) !== (values.period === undefined)) throw new UsageError("--limit and --period go together: tokens per period of seconds");
  if (values.period !== undefined && !/^[1-9]\d{0,9}$/.test(values.period)) throw new UsageError("--period must be a whole number of seconds above 0");
  const serviceUrl = (values["service-url"] ?? localUrl("service")).replace(/\/+$/, "");
  if (!/^https?:\/\/[^/]+/.test(serviceUrl)) throw new UsageError(`--service-url must be an http(s) URL, not ${JSON.stringify(serviceUrl)}`);
  if (values["rpc-url"] !== undefined && !/^https?:\/\/[^/]+/.test(values["rpc-url"])) throw new UsageError("--rpc-url must be an http(s) URL");
  const keySources = [env.AGENT_PRIVATE_KEY ? "AGENT_PRIVATE_KEY" : null, values["private-key-file"] ? "--private-key-file" : null, values.keystore ? "--keystore" : null].filter(Boolean);
  if (keySources.length === 0) throw new UsageError("no wallet key: set AGENT_PRIVATE_KEY, or give --private-key-file <path> or --keystore <name> (--help for more)");
  if (keySources.length > 1) throw new UsageError(`give the wallet key one way only, not ${keySources.join(" and ")}`);
  return { ...values, serviceUrl };
}

/** A token amount given in tokens ("12.5") as raw units: a plain decimal, never through a float. */
function tokens(flag: string, value: string, decimals: number): bigint {
  if (!new RegExp(`^\\d+(\\.\\d{1,${decimals}})?$`).test(value)) throw new UsageError(`--${flag} must be a plain decimal number of tokens with at most ${decimals} decimals, not ${JSON.stringify(value)}`);
  const units = parseUnits(value, decimals);
  if (units === 0n) throw new UsageError(`--${flag} must be above 0`);
  return units;
}

function asPrivateKey(raw: string, from: string): Hex {
  const key = raw.trim();
  const hex = key.startsWith("0x") ? key : `0x${key}`;
  if (!/^0x[0-9a-fA-F]{64}$/.test(hex)) throw new UsageError(`${from} does not hold a 32-byte hex private key`);
  return hex as Hex;
}

/** Reads a line from the terminal without echoing it. */
async function askHidden(question: string): Promise<string> {
  const stdin = process.stdin;
  if (!stdin.isTTY) throw new UsageError(`${question.replace(/:\s*$/, "")}: no terminal to ask on`);
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.resume();
  try {
    return await new Promise<string>((done, fail) => {
      let typed = "";
      const onData = (chunk: Buffer) => {
        for (const ch of chunk.toString("utf8")) {
          if (ch === "\u0003") return fail(new UsageError("interrupted"));
          if (ch === "\r" || ch === "\n") return done(typed);
          if (ch === "\u007f" || ch === "\b") typed = typed.slice(0, -1);
          else typed += ch;
        }
      };
      stdin.on("data", onData);
    });
  } finally {
    stdin.removeAllListeners("data");
    stdin.setRawMode(false);
    stdin.pause();
    process.stderr.write("\n");
  }
}

/**
 * A key from Hardhat's keystore, read in this process through Hardhat's own configuration
 * variables (as `npx hardhat keystore get` reads it), so it never passes through another
 * process's output; the password prompt is answered at our hidden prompt, on stderr.
 */
async function keystoreValue(name: string): Promise<string> {
  const { hooks } = await import("hardhat");
  const { configVariable } = await import("hardhat/config");
  hooks.registerHandlers("userInterruptions", {
    requestSecretInput: async (_context, interruptor, description) => askHidden(`[${interruptor}] ${description}: `),
  });
  const inCi = ["CI", "GITHUB_ACTIONS", "CONTINUOUS_INTEGRATION", "BUILD_NUMBER", "RUN_ID"].some((v) => process.env[v] !== undefined);
  return hooks.runHandlerChain("configurationVariables", "fetchValue", [configVariable(name)], async (_context, variable) => {
    // Hardhat's rule: a variable set in the environment wins over the keystore.
    const fromEnv = process.env[variable.name];
    if (fromEnv !== undefined) return fromEnv;
    throw new UsageError(`${name} is not in Hardhat's keystore (npx hardhat keystore list)${inCi ? "; Hardhat does not read its keystore when CI is set" : ""}`);
  });
}

async function walletKey(o: NonNullable<ReturnType<typeof options>>, env: Env): Promise<Hex> {
  if (env.AGENT_PRIVATE_KEY) return asPrivateKey(env.AGENT_PRIVATE_KEY, "AGENT_PRIVATE_KEY");
  if (o["private-key-file"]) {
    const file = o["private-key-file"];
    const raw = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(`--private-key-file ${file}: ${err.code === "ENOENT" ? "no such file" : err.message}`);
    });
    return asPrivateKey(raw, `--private-key-file ${file}`);
  }
  return asPrivateKey(await keystoreValue(o.keystore!), `keystore entry ${o.keystore}`);
}

async function linkPin(env: Env): Promise<string> {
  const fromEnv = env.AGENT_PIN;
  if (fromEnv !== undefined) {
    if (!PIN_PATTERN.test(fromEnv)) throw new UsageError("AGENT_PIN must be 4 to 6 digits");
    return fromEnv;
  }
  const pin = await askHidden("PIN for paying (4 to 6 digits): ");
  if (!PIN_PATTERN.test(pin)) throw new UsageError("the PIN must be 4 to 6 digits");
  if ((await askHidden("The PIN again: ")) !== pin) throw new UsageError("the two PINs differ");
  return pin;
}

/** The chain's RPC: the flag, the environment, the local deployments file when it describes this BillPay, the public RPC. */
async function rpcUrlOf(chain: ChainKey, billPay: Address, flag: string | undefined): Promise<string> {
  if (flag) return flag;
  const fromEnv = rpcUrlsFromEnv(chain)?.[0];
  if (fromEnv) return fromEnv;
  const local = await readDeployments(deploymentsPath()).catch(() => null);
  const deployed = local?.chains[chain];
  if (deployed && deployed.billPay.address.toLowerCase() === billPay.toLowerCase()) return deployed.rpcUrl;
  const publicRpc = chainByKey(chain)?.rpcUrls[0];
  if (!publicRpc) throw new UsageError(`no RPC known for ${chain}: give --rpc-url or ${chain}_RPC_URL`);
  return publicRpc;
}

/** Writes the api_key readable by its owner only: a new file renamed over the old, so no moment leaves it open. */
export async function writeKeyFile(path: string, apiKey: string): Promise<string> {
  const target = resolve(path);
  const temp = join(dirname(target), `.${randomBytes(6).toString("hex")}.tmp`);
  await writeFile(temp, `${apiKey}\n`, { mode: 0o600, flag: "wx" });
  await rename(temp, target);
  return target;
}

/** The MCP client set-ups: Claude Desktop through the mcp-remote stdio bridge, Cursor by URL and headers. */
function mcpConfigs(serverName: string, mcpUrl: string, authorization: string) {
  const url = new URL(mcpUrl);
  const loopback = url.hostname === "localhost" || url.hostname === "127.0.0.1";
  return {
    claudeDesktop: {
      mcpServers: {
        [serverName]: {
          command: "npx",
          // The header's value comes from env, without spaces in args (some clients split them).
          args: ["-y", "mcp-remote", mcpUrl, "--transport", "http-only", "--header", "Authorization:${BILLPAY_AUTH}", ...(url.protocol === "http:" && !loopback ? ["--allow-http"] : [])],
          env: { BILLPAY_AUTH: authorization },
        },
      },
    },
    cursor: { mcpServers: { [serverName]: { url: mcpUrl, headers: { Authorization: authorization } } } },
  };
}

function sdkSnippet(mcpUrl: string): string {
  return `import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const client = new Client({ name: "my-agent", version: "1.0.0" });
await client.connect(
  new StreamableHTTPClientTransport(new URL("${mcpUrl}"), {
    requestInit: { headers: { Authorization: \`Bearer \${process.env.BILLPAY_API_KEY}\` } },
  }),
);
const balance = await client.callTool({ name: "check_balance", arguments: {} });
console.log(balance.structuredContent);
// Paying adds the PIN: client.callTool({ name: "pay_bill", arguments: { pin: process.env.BILLPAY_PIN, ...bill } })
await client.close();`;
}

/**
 * What the command is given, checked before anything is sent: its options, the wallet's key
 * and the PIN (null for --help). Throws UsageError, naming what is wrong, never a secret.
 */
export async function readInputs(argv: string[], env: Env = process.env) {
  const o = options(argv, env);
  if (!o) return null;
  return { options: o, privateKey: await walletKey(o, env), pin: await linkPin(env) };
}

async function main(argv: string[]): Promise<void> {
  const inputs = await readInputs(argv);
  if (!inputs) return console.log(USAGE);
  const { options: o, pin } = inputs;
  const account = privateKeyToAccount(inputs.privateKey);
  const log = (line: string) => console.error(line);

  const mcp = await mcpAgent(o.serviceUrl).catch((err: Error) => {
    throw new Error(`the service at ${o.serviceUrl} did not answer over MCP: ${err.message}`);
  });
  try {
    const described = await mcp.call("describe_capabilities", {});
    if (described.isError) throw new Error(`describe_capabilities failed: ${JSON.stringify(described.data)}`);
    const caps = described.data as unknown as Capabilities;
    const chainKey = (o.chain ?? (caps.chains.some((c) => c.chain === "CELO") ? "CELO" : caps.chains[0]?.chain ?? "")).toUpperCase();
    const chain = caps.chains.find((c) => c.chain === chainKey);
    if (!chain) throw new UsageError(`--chain ${chainKey}: the service pays on ${caps.chains.map((c) => c.chain).join(", ")}`);
    const symbol = resolveTokenSymbol(o.token ?? "USDC");
    const token = chain.tokens.find((t) => t.token === symbol);
    if (!token?.address || !token.agent_hub) {
      throw new UsageError(`--token ${o.token ?? "USDC"}: the agent hub pulls ${chain.tokens.filter((t) => t.agent_hub).map((t) => t.token).join(", ")} on ${chain.chain}`);
    }
    const allowance = tokens("allowance", o.allowance!, token.decimals);
    const limit = o.limit === undefined ? null : { amount: tokens("limit", o.limit, token.decimals), period: BigInt(o.period!) };
    const fmt = (units: bigint) => `${formatUnits(units, token.decimals)} ${token.token}`;

    const rpcUrl = await rpcUrlOf(chain.chain as ChainKey, chain.billpay_contract, o["rpc-url"]);
    // Hardhat's test keys are public: on a chain that is not on this machine, anyone can empty them.
    if (isWellKnownAddress(account.address) && !isLocalRpcUrl(rpcUrl)) throw new UsageError(`${account.address} is one of Hardhat's public test accounts: use your own key off the local chains`);
    const client = publicClientFor(chain.chain as ChainKey, rpcUrl);
    const chainId = await client.getChainId().catch((err: Error) => {
      throw new Error(`the RPC ${rpcUrl} did not answer: ${err.message.split("\n")[0]}`);
    });
    if (chainId !== chain.chain_id) throw new UsageError(`the RPC ${rpcUrl} serves chain ${chainId}, the service's ${chain.chain} is ${chain.chain_id}: give --rpc-url`);
    const code = await client.getCode({ address: chain.billpay_contract });
    if (!code || code === "0x") throw new UsageError(`no BillPay at ${chain.billpay_contract} through ${rpcUrl}: give the chain's --rpc-url`);
    if ((await client.getBalance({ address: account.address })) === 0n) throw new Error(`${account.address} has no ${chain.chain} for gas`);
    log(`wallet ${account.address}: ${chain.chain} (chain ${chainId}), ${token.token} ${token.address}, BillPay ${chain.billpay_contract}`);

    const wallet = createWalletClient({ account, chain: viemChain(chain.chain as ChainKey, rpcUrl), transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS }) });
    const send = async (what: string, tx: Promise<Hex>) => {
      const hash = await tx;
      const receipt = await client.waitForTransactionReceipt({ hash, timeout: RECEIPT_TIMEOUT_MS });
      if (receipt.status !== "success") throw new Error(`${what}: transaction ${hash} reverted`);
      log(`${what}: ${hash}`);
    };
    const approved = await client.readContract({ address: token.address, abi: eip3009TokenAbi, functionName: "allowance", args: [account.address, chain.billpay_contract] });
    if (approved < allowance) {
      // Some tokens (Tether's among them) refuse to change one non-zero approval into another.
      if (approved > 0n) await send("token.approve(BillPay, 0)", wallet.writeContract({ address: token.address, abi: eip3009TokenAbi, functionName: "approve", args: [chain.billpay_contract, 0n] }));
      await send(`token.approve(BillPay, ${fmt(allowance)})`, wallet.writeContract({ address: token.address, abi: eip3009TokenAbi, functionName: "approve", args: [chain.billpay_contract, allowance] }));
    }
    await send(
      `BillPay.setSpendingAllowance(${token.token}, ${fmt(allowance)})`,
      wallet.writeContract({ address: chain.billpay_contract, abi: billPayAbi, functionName: "setSpendingAllowance", args: [token.address, allowance] }),
    );
    if (limit) {
      await send(
        `BillPay.setSpendingLimit(${token.token}, ${fmt(limit.amount)} per ${limit.period} s)`,
        wallet.writeContract({ address: chain.billpay_contract, abi: billPayAbi, functionName: "setSpendingLimit", args: [token.address, limit.amount, limit.period] }),
      );
    }

    const apiKey = await linkAgent(o.serviceUrl, account, { serviceName: caps.service, pin, chain: chain.chain, token: token.token, channel: "MCP" });
    const balance = await mcp.call("check_balance", { api_key: apiKey, chain: chain.chain });
    const row = (balance.data.balances as Array<{ token: string; spendable_now?: { units: string } }> | undefined)?.find((b) => b.token === token.token);
    log(`linked: ${row?.spendable_now ? `spendable now ${fmt(BigInt(row.spendable_now.units))}` : "check_balance did not answer the balance"}`);

    const mcpUrl = `${o.serviceUrl}/api/mcp`;
    const keyFile = o["key-file"] ? await writeKeyFile(o["key-file"], apiKey) : null;
    // With --key-file the key stays off the output: the set-ups name where it is instead.
    const authorization = keyFile ? `Bearer <the api_key in ${keyFile}>` : `Bearer ${apiKey}`;
    const configs = mcpConfigs(caps.service.toLowerCase().replace(/[^a-z0-9-]/g, "") || "billpay", mcpUrl, authorization);
    const section = (title: string, body: string) => console.log(`\n== ${title}\n${body}`);
    section("api_key (shown once; linking again retires it)", keyFile ? `written to ${keyFile} (mode 0600)` : apiKey);
    section("Claude Desktop: add to claude_desktop_config.json (through the mcp-remote stdio bridge)", JSON.stringify(configs.claudeDesktop, null, 2));
    section("Cursor: add to ~/.cursor/mcp.json (or .cursor/mcp.json in a project)", JSON.stringify(configs.cursor, null, 2));
    section("The MCP SDK (@modelcontextprotocol/sdk), with BILLPAY_API_KEY set to the api_key", sdkSnippet(mcpUrl));
  } finally {
    await mcp.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    await main(process.argv.slice(2));
  } catch (err) {
    // viem's errors carry a short form; the long one repeats the request (never a key, but noise).
    console.error(`agent:link: ${(err as { shortMessage?: string }).shortMessage ?? (err as Error).message}`);
    process.exitCode = err instanceof UsageError ? 2 : 1;
  }
}
