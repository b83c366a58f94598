/**
 * A local agent of the agent hub, as the README describes one: link a wallet (personal_sign
 * over the link message), set its on-chain allowance, and call tools over MCP with the
 * official SDK client. Used by the tests, the benchmark and the example.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Account } from "viem";
import { LINK_PATH, linkMessage } from "./agent-link.ts";

/** The three wallet headers for a link, signed now (or at `timestamp`). */
export async function linkHeaders(account: Account, serviceName: string, timestamp = Date.now().toString()): Promise<Record<string, string>> {
  const signature = await account.signMessage!({ message: linkMessage(serviceName, timestamp) });
  return { "x-wallet-address": account.address, "x-wallet-signature": signature, "x-wallet-timestamp": timestamp };
}

export async function linkAgent(
  serviceUrl: string,
  account: Account,
  options: { serviceName?: string; pin?: string; chain?: string; token?: string; channel?: string } = {},
): Promise<string> {
  const res = await fetch(`${serviceUrl}${LINK_PATH}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(await linkHeaders(account, options.serviceName ?? "BillPay")) },
    body: JSON.stringify({
      wallet_address: account.address,
      channel: options.channel ?? "MCP",
      pin: options.pin ?? "1234",
      approved_chain: options.chain ?? "CELO",
      approved_token: options.token ?? "USDC",
    }),
    signal: AbortSignal.timeout(10_000),
  });
  const body = (await res.json()) as { api_key?: string; detail?: string };
  if (!res.ok || !body.api_key) throw new Error(`link failed (${res.status}): ${body.detail ?? JSON.stringify(body)}`);
  return body.api_key;
}

export type ToolAnswer = { isError: boolean; data: Record<string, unknown> };

/** An MCP client of the service; `call` returns the tool's JSON (from content[0].text) and whether it is an error. */
export async function mcpAgent(serviceUrl: string): Promise<{ client: Client; call(name: string, args: Record<string, unknown>): Promise<ToolAnswer>; close(): Promise<void> }> {
  const client = new Client({ name: "billpay-agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${serviceUrl}/api/mcp`)));
  return {
    client,
    async call(name, args) {
      const result = await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 });
      // The structured content is the answer; the text is its JSON, or a summary for a long answer.
      if (result.structuredContent) return { isError: result.isError === true, data: result.structuredContent as Record<string, unknown> };
      const content = result.content as Array<{ type: string; text?: string }>;
      const text = content[0]?.text ?? "{}";
      let data: Record<string, unknown>;
      try {
        data = JSON.parse(text) as Record<string, unknown>;
      } catch {
        data = { text };
      }
      return { isError: result.isError === true, data };
    },
    close: () => client.close(),
  };
}
