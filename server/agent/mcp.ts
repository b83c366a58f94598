/**
 * POST /api/mcp: the agent tools over MCP (the official SDK), stateless: a fresh server and
 * transport per request, answers as plain JSON. The SDK insists on an Accept header naming
 * both JSON and SSE; a client that sends none (the interface's curl sample) gets one
 * supplied, since it will receive JSON either way. Tool failures come back as MCP tool
 * errors (`isError`) carrying the service's error code, never as transport errors.
 *
 * tools/list and tools/call are the service's own handlers on the SDK's protocol `Server`
 * (the SDK's "advanced use" class) rather than McpServer's: McpServer turns zod into
 * draft-07 JSON Schema, where MCP 2025-11-25 makes 2020-12 the tools' dialect (agent/tools.ts
 * `toolInputSchema`), and it advertises `tools.listChanged: true`, a notification this
 * stateless server, whose list never changes, never sends. It says `listChanged: false`.
 */
import { type Log } from "../log.ts";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv-provider.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type ListToolsResult } from "@modelcontextprotocol/sdk/types.js";
import { problemBody, ServiceError, validationFailed } from "../errors.ts";
import { X402_PAYABLE_TOOLS, X402_PAYMENT_META, toolResultOf, x402PayableDescription, x402PayableSchema, type CallerContext, type X402ToolPayments } from "./x402-tools.ts";
import { toolArguments, toolInputSchema, type ToolContext, type ToolDefinition } from "./tool-definition.ts";
import { bearerApiKey, missingCredential, runTool, withBearer } from "./tools.ts";

/**
 * The result of a tool call as MCP carries it: JSON text first (the interface reads every tool's
 * answer at content[0].text), structured beside it; a tool with a `summary` (describe_capabilities)
 * adds a few lines after it for a reader of text.
 */
export async function callTool(tool: ToolDefinition, args: Record<string, unknown>, ctx: ToolContext, log: Log): Promise<CallToolResult> {
  try {
    const result = (await runTool(tool, args, ctx)) as Record<string, unknown>;
    const summary = tool.summary ? [{ type: "text" as const, text: tool.summary(result) }] : [];
    return { content: [{ type: "text", text: JSON.stringify(result) }, ...summary], structuredContent: result };
  } catch (err) {
    const error =
      err instanceof ServiceError
        ? problemBody(err.code, err.detail, err.extra)
        : problemBody("INTERNAL", "the tool failed unexpectedly; for a payment, check transaction_history before retrying");
    if (!(err instanceof ServiceError)) log.error("tool failed", { tool: tool.name, error: (err as Error).message });
    return { isError: true, content: [{ type: "text", text: JSON.stringify({ error }) }], structuredContent: { error } };
  }
}

/** A tool's answer that is an error with the catalogue's code. */
function toolError(code: Parameters<typeof problemBody>[0], detail: string, extra?: Record<string, unknown>): CallToolResult {
  const error = problemBody(code, detail, extra);
  return { isError: true, content: [{ type: "text", text: JSON.stringify({ error }) }], structuredContent: { error } };
}

export function mcpHandler(options: {
  name: string;
  version: string;
  tools: ToolDefinition[];
  ctx: ToolContext;
  log: Log;
  /** The service's public base URL, else the request's origin. */
  baseUrl?: string;
  /** Pays the x402-payable tools per call (agent/x402-tools.ts); without it every tool needs an api_key. */
  x402?: X402ToolPayments;
}) {
  const payable = (tool: ToolDefinition) => options.x402 !== undefined && X402_PAYABLE_TOOLS.has(tool.name);
  // The list never changes while the service runs: built once, schemas and all.
  const listed: ListToolsResult = {
    tools: options.tools.map((tool) => ({
      name: tool.name,
      title: tool.title,
      description: payable(tool) ? x402PayableDescription(tool) : tool.description,
      inputSchema: payable(tool) ? x402PayableSchema(tool) : toolInputSchema(tool),
      annotations: { readOnlyHint: !tool.paying && !tool.changes, openWorldHint: true },
    })),
  };
  const byName = new Map(options.tools.map((t) => [t.name, t]));
  // Stateless MCP makes a Server per request, and the SDK's Server makes an Ajv of its own
  // unless given a validator (0.3 to 0.45 ms a request, measured). It validates elicitation
  // answers only, which this server never asks for; one validator serves every request.
  const jsonSchemaValidator = new AjvJsonSchemaValidator();
  return async (request: Request, call: CallerContext = { client: "unknown", header: (name) => request.headers.get(name) ?? undefined }): Promise<Response> => {
    // The api_key may come as Authorization: Bearer instead of in every call's arguments.
    const authorization = request.headers.get("authorization");
    const bearer = bearerApiKey(authorization);
    const ctx = { ...options.ctx, baseUrl: options.baseUrl ?? new URL(request.url).origin, client: call.client };
    const server = new Server({ name: options.name, version: options.version }, { capabilities: { tools: { listChanged: false } }, jsonSchemaValidator });
    server.setRequestHandler(ListToolsRequestSchema, () => listed);
    // Arguments are checked here, as A2A checks them, so a bad call is the catalogue's
    // VALIDATION_FAILED with its issues rather than the SDK's own untyped message.
    server.setRequestHandler(CallToolRequestSchema, async (request): Promise<CallToolResult> => {
      const tool = byName.get(request.params.name);
      if (!tool) return toolError("VALIDATION_FAILED", `unknown tool "${request.params.name}"; tools/list names them`);
      const args = withBearer(request.params.arguments ?? {}, bearer);
      // An x402 payment travels in _meta (x402's MCP transport); with no api_key, a payable tool is paid that way.
      const payment = (request.params._meta as Record<string, unknown> | undefined)?.[X402_PAYMENT_META];
      if (payable(tool) && args.api_key === undefined) return toolResultOf(await options.x402!.call(tool.name, args, payment, call));
      if (payment !== undefined) {
        return toolError(
          "VALIDATION_FAILED",
          payable(tool)
            ? "pay with an api_key and PIN, or with an x402 payment in _meta, not both: leave out the api_key (and the Authorization header) to pay with x402"
            : `${tool.name} is not paid with x402 over MCP; only ${[...X402_PAYABLE_TOOLS].join(", ")} is (one bill, one payment)`,
        );
      }
      const missing = missingCredential(tool, args, authorization);
      if (missing) return toolError(missing.code, missing.detail);
      const parsed = toolArguments(tool).safeParse(args);
      if (!parsed.success) {
        const refusal = validationFailed(parsed.error, "(arguments)");
        return toolError(refusal.code, refusal.detail, refusal.extra);
      }
      return callTool(tool, parsed.data, ctx, options.log);
    });
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    await server.connect(transport);
    try {
      return await transport.handleRequest(await withAccept(request));
    } finally {
      await server.close();
    }
  };
}

/** Adds what the SDK requires of Accept when the client did not say. */
async function withAccept(request: Request): Promise<Request> {
  const accept = request.headers.get("accept") ?? "";
  if (accept.includes("application/json") && accept.includes("text/event-stream")) return request;
  const headers = new Headers(request.headers);
  headers.set("accept", "application/json, text/event-stream");
  const body = request.method === "GET" || request.method === "HEAD" ? undefined : await request.text();
  return new Request(request.url, { method: request.method, headers, body });
}
