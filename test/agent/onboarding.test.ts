/**
 * Onboarding an agent developer, against one local stack: describe_capabilities answers in a
 * few KB and gives the long forms on request (each tool's arguments exactly as tools/list
 * has them, the whole error catalogue), over MCP and A2A alike; `npm run agent:link` run as
 * a process sets the allowance on chain, links, and prints a key and MCP set-ups that work,
 * from a private key or from Hardhat's keystore; bad input is refused before anything moves.
 */
import { spawn } from "node:child_process";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billPayAbi, eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { mcpAgent } from "../../lib/agent-client.ts";
import { readInputs, UsageError } from "../../scripts/agent-link.ts";
import { ERRORS } from "../../server/errors.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { runScript } from "../support/processes.ts";
import { auditOnSharedChains, freshAccounts, startPayingStackOnSharedChains, tempDir, type SharedPayingStack } from "../support/stack.ts";

const API_KEY = /^bpk_[A-Za-z0-9_-]{43}$/;

/** A Hardhat test account with its private key (the script takes a key, not an account). */
/** The script's output by its `== title` sections: the title's first words to the body. */
function sections(out: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const part of out.split("\n== ").slice(1)) {
    const [title, ...body] = part.split("\n");
    found.set(title!.split(/[:(]/)[0]!.trim(), body.join("\n").trim());
  }
  return found;
}

describe("onboarding an agent developer", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  /** A payer of this suite's own, with the key a script is given. */
  const wallet = (index: number): { address: Address; privateKey: Hex } => ({ address: accounts(index).address, privateKey: accounts.key(index) });
  let celo: ChainActors;
  let url: string;
  let mcp: Awaited<ReturnType<typeof mcpAgent>>;
  const read = <T>(address: Address, abi: typeof billPayAbi | typeof eip3009TokenAbi, functionName: string, args: unknown[]) =>
    celo.publicClient.readContract({ address, abi, functionName: functionName as never, args: args as never }) as Promise<T>;
  const linkScript = (args: string[], env: Record<string, string | undefined>) =>
    runScript("scripts/agent-link.ts", ["--service-url", url, ...args], { DEPLOYMENTS_FILE: paying.chains.deploymentsFile, ...env } as Record<string, string>);

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts, { RATE_LIMIT_LINK_ADDRESS: "1000/60", RATE_LIMIT_LINK_WALLET: "1000/60" });
    celo = chainActors(paying.chains.deployments, "CELO");
    url = paying.service.urls.service;
    mcp = await mcpAgent(url);
  });
  afterAll(async () => {
    await mcp?.close();
    await paying?.close();
  });

  describe("describe_capabilities", () => {
    it("answers in a few KB: the link-free way to pay first, tools by name and what they need, errors by pointer", async () => {
      const { isError, data } = await mcp.call("describe_capabilities", {});
      expect(isError).toBe(false);
      expect(Buffer.byteLength(JSON.stringify(data))).toBeLessThan(8 * 1024);
      for (const section of ["ways_to_pay", "products", "chains", "pricing", "limits", "setup", "urls", "transports", "tools", "errors", "detail"]) expect(data, section).toHaveProperty(section);

      const ways = data.ways_to_pay as Record<string, { how: string; rest?: string }>;
      expect(Object.keys(ways)[0]).toBe("pay_per_call");
      expect(ways.pay_per_call!.how).toContain('params._meta["x402/payment"]');
      expect(ways.pay_per_call!.how).toContain("x402Version 2");
      expect(ways.pay_per_call!.rest).toBe(`POST ${url}/api/pay/x402`);

      const tools = data.tools as Array<{ name: string; does: string; needs: string[]; arguments?: unknown }>;
      expect(tools).toHaveLength(12);
      for (const t of tools) {
        expect(t.arguments, t.name).toBeUndefined();
        expect(t.does.length, t.name).toBeLessThanOrEqual(73);
      }
      expect(tools.find((t) => t.name === "pay_bill")).toMatchObject({ needs: ["api_key", "pin"], or: expect.stringContaining("x402") });
      expect(tools.find((t) => t.name === "check_balance")!.needs).toEqual(["api_key"]);
      expect(tools.find((t) => t.name === "list_plans")!.needs).toEqual([]);

      const errors = data.errors as { common: string[]; all: string };
      for (const code of errors.common) expect(ERRORS, code).toHaveProperty(code);
      expect(errors.all).toContain(`${Object.keys(ERRORS).length} codes`);
      expect(data.products).toMatchObject({ AIRTIME: expect.arrayContaining(["mtn"]) });
      expect(data.detail).toMatchObject({ shown: [] });

      // The answer's JSON at content[0].text, as the interface reads every tool's; a short summary after it.
      const raw = await mcp.client.callTool({ name: "describe_capabilities", arguments: {} });
      const content = raw.content as Array<{ type: string; text: string }>;
      expect(JSON.parse(content[0]!.text)).toEqual(raw.structuredContent);
      const text = content[1]!.text;
      expect(Buffer.byteLength(text)).toBeLessThan(1024);
      expect(text).toContain("structuredContent");
      expect(text).toContain(`POST ${url}/api/pay/x402`);
      for (const t of tools) expect(text, t.name).toContain(t.name);
      expect(raw.structuredContent).toEqual(data);
      // Other tools keep their JSON as text, as the interface reads content[0].text.
      const plans = await mcp.client.callTool({ name: "list_plans", arguments: { serviceID: "mtn-data" } });
      expect(JSON.parse((plans.content as Array<{ text: string }>)[0]!.text)).toEqual(plans.structuredContent);
    });

    it("detail gives each tool's arguments exactly as tools/list shows them, and the whole error catalogue", async () => {
      const { tools: listed } = await mcp.client.listTools();
      const { isError, data } = await mcp.call("describe_capabilities", { detail: ["tools", "errors"] });
      expect(isError).toBe(false);
      const described = new Map((data.tools as Array<{ name: string; description: string; arguments: { properties: Record<string, unknown> } }>).map((t) => [t.name, t]));
      expect([...described.keys()].sort()).toEqual(listed.map((t) => t.name).sort());
      // The same schemas as tools/list, pay_bill's included (its api_key and PIN optional: x402 pays it per call).
      for (const tool of listed) expect(described.get(tool.name)!.arguments, tool.name).toEqual(tool.inputSchema);
      expect(data.errors).toEqual(Object.fromEntries(Object.entries(ERRORS).map(([code, e]) => [code, { status: e.status, title: e.title }])));
      expect(data.detail).toMatchObject({ shown: ["tools", "errors"] });
      // What was not asked for stays compact.
      expect((data.products as Record<string, unknown[]>).AIRTIME).toContain("mtn");

      const full = (await mcp.call("describe_capabilities", { detail: "full" })).data;
      expect(full.detail).toMatchObject({ shown: ["tools", "errors", "products", "setup"] });
      expect((full.products as Record<string, unknown[]>).AIRTIME).toContainEqual({ serviceID: "mtn", name: expect.any(String), min_naira: 50, max_naira: 50000 });
      expect(JSON.stringify(full.setup)).toContain("BillPay.spendingLimit(address payer, address token)");
    });

    it("refuses a bad detail with VALIDATION_FAILED, and answers the same over A2A", async () => {
      for (const detail of ["everything", [], ["tools", "secrets"], 3]) {
        const answer = await mcp.call("describe_capabilities", { detail });
        expect(answer.isError, JSON.stringify(detail)).toBe(true);
        expect(answer.data.error, JSON.stringify(detail)).toMatchObject({ code: "VALIDATION_FAILED", issues: [expect.objectContaining({ field: "detail" })] });
      }
      const a2a = async (args: Record<string, unknown>) => {
        const res = await fetch(`${url}/api/a2a`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            jsonrpc: "2.0",
            id: 1,
            method: "message/send",
            params: { message: { kind: "message", role: "user", messageId: crypto.randomUUID(), parts: [{ kind: "data", data: { skill: "describe_capabilities", arguments: args } }] } },
          }),
          signal: AbortSignal.timeout(30_000),
        });
        const rpc = (await res.json()) as { result: { parts: Array<{ kind: string; data?: Record<string, unknown> }> } };
        return rpc.result.parts.find((p) => p.kind === "data")!.data!;
      };
      expect(await a2a({ detail: "everything" })).toMatchObject({ error: { code: "VALIDATION_FAILED" } });
      const compact = await a2a({});
      expect(Buffer.byteLength(JSON.stringify(compact))).toBeLessThan(8 * 1024);
      expect(Object.keys(await a2a({ detail: ["errors"] }).then((d) => d.errors as object))).toEqual(Object.keys(ERRORS));
    });
  });

  describe("npm run agent:link", () => {
    it("sets the allowance and a periodic limit on chain, links, and prints an api_key and MCP set-ups that work", async () => {
      const me = wallet(11);
      const run = await linkScript(["--allowance", "12.5", "--limit", "5", "--period", "3600"], { AGENT_PRIVATE_KEY: me.privateKey, AGENT_PIN: "918273" });
      expect(run.code, run.out).toBe(0);
      // Neither secret the command was given is ever printed.
      expect(run.out).not.toContain(me.privateKey.slice(2));
      expect(run.out).not.toContain("918273");

      const usdc = celo.tokenAddress("USDC");
      expect(await read<bigint>(usdc, eip3009TokenAbi, "allowance", [me.address, celo.billPay])).toBe(12_500_000n);
      expect(await read<bigint>(celo.billPay, billPayAbi, "spendingAllowance", [me.address, usdc])).toBe(12_500_000n);
      const [perPeriod, period] = await read<readonly bigint[]>(celo.billPay, billPayAbi, "spendingLimit", [me.address, usdc]);
      expect([perPeriod, period]).toEqual([5_000_000n, 3600n]);

      const printed = sections(run.out);
      const apiKey = printed.get("api_key")!;
      expect(apiKey).toMatch(API_KEY);
      const claude = JSON.parse(printed.get("Claude Desktop")!) as { mcpServers: Record<string, { command: string; args: string[]; env: Record<string, string> }> };
      expect(claude.mcpServers.billpay).toMatchObject({ command: "npx", env: { BILLPAY_AUTH: `Bearer ${apiKey}` } });
      expect(claude.mcpServers.billpay!.args).toEqual(expect.arrayContaining(["mcp-remote", `${url}/api/mcp`, "--header", "Authorization:${BILLPAY_AUTH}"]));
      const cursor = JSON.parse(printed.get("Cursor")!) as { mcpServers: Record<string, { url: string; headers: Record<string, string> }> };
      expect(cursor.mcpServers.billpay).toEqual({ url: `${url}/api/mcp`, headers: { Authorization: `Bearer ${apiKey}` } });
      expect(printed.get("The MCP SDK")).toContain(`new StreamableHTTPClientTransport(new URL("${url}/api/mcp")`);

      // The Cursor set-up, as the official SDK client takes it: the key in the header, no api_key argument.
      const client = new Client({ name: "onboarding-test", version: "1.0.0" });
      await client.connect(new StreamableHTTPClientTransport(new URL(cursor.mcpServers.billpay!.url), { requestInit: { headers: cursor.mcpServers.billpay!.headers } }));
      try {
        const balance = await client.callTool({ name: "check_balance", arguments: { chain: "CELO" } }, undefined, { timeout: 30_000 });
        expect(balance.isError, JSON.stringify(balance.structuredContent)).toBeFalsy();
        const row = (balance.structuredContent as { balances: Array<{ token: string; spendable_now: { units: string } }> }).balances.find((b) => b.token === "USDC")!;
        expect(row.spendable_now.units).toBe("5000000"); // the period's 5 USDC, under the 12.5 allowance
      } finally {
        await client.close();
      }
    });

    it("takes the key from Hardhat's keystore and writes the api_key to a file only its owner can read", async () => {
      const dir = await tempDir("agent-link");
      const me = wallet(12);
      // A keystore of this test's own (Hardhat keeps it under XDG_CONFIG_HOME); the development one needs no password.
      const env = { XDG_CONFIG_HOME: join(dir, "config") };
      const stored = spawn(process.execPath, ["node_modules/hardhat/dist/src/cli.js", "keystore", "set", "--dev", "AGENT_ONBOARDING_KEY"], { env: { ...process.env, ...env }, stdio: ["pipe", "ignore", "inherit"] });
      stored.stdin!.end(`${me.privateKey}\n`);
      expect(await new Promise((done) => stored.once("exit", done))).toBe(0);

      const keyFile = join(dir, "api-key");
      // Hardhat reads no keystore when it believes it runs in CI.
      const noCi = { CI: undefined, GITHUB_ACTIONS: undefined, CONTINUOUS_INTEGRATION: undefined, BUILD_NUMBER: undefined, RUN_ID: undefined };
      const run = await linkScript(["--keystore", "AGENT_ONBOARDING_KEY", "--key-file", keyFile, "--allowance", "3"], { ...env, ...noCi, AGENT_PIN: "4455" });
      expect(run.code, run.out).toBe(0);
      expect(run.out).toContain(`wallet ${me.address}`);
      expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
      const apiKey = (await readFile(keyFile, "utf8")).trim();
      expect(apiKey).toMatch(API_KEY);
      expect(run.out).not.toContain(apiKey);
      expect(sections(run.out).get("api_key")).toBe(`written to ${keyFile} (mode 0600)`);
      expect(JSON.parse(sections(run.out).get("Cursor")!).mcpServers.billpay.headers.Authorization).toBe(`Bearer <the api_key in ${keyFile}>`);
      expect(await read<bigint>(celo.billPay, billPayAbi, "spendingAllowance", [me.address, celo.tokenAddress("USDC")])).toBe(3_000_000n);
      expect((await mcp.call("check_balance", { api_key: apiKey })).isError).toBe(false);
    });

    it("links a wallet for USD₮ on BASE, which has no transferWithAuthorization: the hub pulls it with transferFrom, and refunds it", async () => {
      const me = wallet(14);
      const base = chainActors(paying.chains.deployments, "BASE");
      const usdt = base.tokenAddress("USD₮");
      const run = await linkScript(["--allowance", "10", "--chain", "BASE", "--token", "USDT"], { AGENT_PRIVATE_KEY: me.privateKey, AGENT_PIN: "2468" });
      expect(run.code, run.out).toBe(0);
      const apiKey = sections(run.out).get("api_key")!;
      const before = await base.balanceOf("USD₮", me.address);

      const paid = await mcp.call("pay_bill", { api_key: apiKey, pin: "2468", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 1550 });
      expect(paid.data, JSON.stringify(paid.data)).toMatchObject({ status: "SUCCESS", chain: "BASE", token: "USD₮" });
      const order = (await paying.service.flow.orders.get(paid.data.request_id as string))!;
      expect(order.tokenAddress.toLowerCase()).toBe(usdt.toLowerCase());
      expect(await base.balanceOf("USD₮", me.address)).toBe(before - order.amount);

      const failed = await mcp.call("pay_bill", { api_key: apiKey, pin: "2468", serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08099999999", nairaAmount: 1550 });
      expect(failed.data).toMatchObject({ status: "FAILED_VENDING", refund: { status: "REFUNDED" } });
      expect(await base.balanceOf("USD₮", me.address)).toBe(before - order.amount);
      // The ledger books both pulls and the refund in USD₮ on BASE, and agrees with the chain.
      const audit = await auditOnSharedChains(paying, { url });
      expect(audit.discrepancies).toEqual([]);
    });

    it("refuses bad input with a clear message and a non-zero exit, and sends nothing", async () => {
      const me = wallet(13);
      const key = { AGENT_PRIVATE_KEY: me.privateKey, AGENT_PIN: "1357" };
      // As processes: what the command line shows, including refusals that need the service's answer.
      const cases: Array<[string[], Record<string, string | undefined>, RegExp]> = [
        [["--allowance", "5"], { AGENT_PRIVATE_KEY: undefined, AGENT_PIN: "1357" }, /no wallet key: set AGENT_PRIVATE_KEY, or give --private-key-file <path> or --keystore <name>/],
        [["--allowance", "5", "--pin", "1357"], key, /--pin is refused: a PIN in the arguments is readable by every user of this machine/],
        [["--allowance", "5", "--chain", "SOLANA"], key, /--chain SOLANA: the service pays on CELO, BASE/],
        [["--allowance", "5", "--chain", "BASE", "--token", "USA₮"], key, /--token USA₮: the agent hub pulls USDC, USD₮ on BASE/],
      ];
      const runs = await Promise.all(cases.map(([args, env]) => linkScript(args, env)));
      runs.forEach((run, i) => {
        expect(run.out, cases[i]![0].join(" ")).toMatch(cases[i]![2]);
        expect(run.code, run.out).toBe(2);
        expect(run.out).not.toContain(me.privateKey.slice(2));
      });
      expect(await read<bigint>(celo.billPay, billPayAbi, "spendingAllowance", [me.address, celo.tokenAddress("USDC")])).toBe(0n);

      // The rest of what is checked before anything is sent, in this process.
      const refusals: Array<[string[], Record<string, string | undefined>, RegExp]> = [
        [["--allowance", "5"], { ...key, AGENT_PIN: "12" }, /AGENT_PIN must be 4 to 6 digits/],
        [["--allowance", "5"], { ...key, AGENT_PRIVATE_KEY: "0x1234" }, /AGENT_PRIVATE_KEY does not hold a 32-byte hex private key/],
        [["--allowance", "5", "--private-key-file", "/nonexistent/key"], { ...key, AGENT_PRIVATE_KEY: undefined }, /--private-key-file \/nonexistent\/key: no such file/],
        [["--allowance", "5", "--keystore", "K"], key, /give the wallet key one way only, not AGENT_PRIVATE_KEY and --keystore/],
        [["--allowance", "5", "--private-key", me.privateKey], key, /--private-key is refused/],
        [["--allowance", "1e3"], key, /--allowance must be a plain decimal number of tokens/],
        [["--allowance", "5", "--limit", "1"], key, /--limit and --period go together/],
        [["--allowance", "5", "--limit", "1", "--period", "0"], key, /--period must be a whole number of seconds above 0/],
        [["--allowance", "5", "--service-url", "ftp://example"], key, /--service-url must be an http\(s\) URL/],
        [["--allowance", "5", "extra"], key, /unexpected argument "extra"/],
        [["--allowance", "5", "--colour"], key, /Unknown option '--colour'/],
        [[], key, /--allowance is required/],
      ];
      for (const [argv, env, message] of refusals) {
        const refused = readInputs(argv, env);
        await expect(refused, argv.join(" ")).rejects.toThrow(message);
        await expect(refused).rejects.toBeInstanceOf(UsageError);
      }
      // The allowance is checked against the token's decimals once the service has named the token.
      await expect(readInputs(["--allowance", "0.5", "--limit", "0.25", "--period", "60"], key)).resolves.toMatchObject({ privateKey: me.privateKey, pin: "1357" });
    });
  });
});
