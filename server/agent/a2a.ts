/**
 * POST /api/a2a and the Agent Card: the agent tools as A2A skills (@a2a-js/sdk), over
 * JSON-RPC in protocol 1.0 (`SendMessage`, header `A2A-Version: 1.0`) and 0.3
 * (`message/send`, no header). A call is a message with a data part
 * `{"skill": "<tool>", "arguments": {...}}` (or the same JSON as text); the answer is a
 * message with a data part holding the tool's result, or `{"error": {...}}` with the
 * service's error code. Each answer is a direct message, except pay_bill paid per call with
 * x402 (agent/a2a-x402.ts), which is a task kept in the database (agent/a2a-tasks.ts).
 */
import { type Log } from "../log.ts";
import { randomUUID } from "node:crypto";
import { A2A_PROTOCOL_VERSION, A2A_VERSION_HEADER, formatSSEEvent, Role, type AgentCard, type Message, type Part } from "@a2a-js/sdk";
import { A2A_LEGACY_PROTOCOL_VERSION, duplicateInterfacesForLegacy } from "@a2a-js/sdk/compat/v0_3";
import { LegacyJsonRpcTransportHandler } from "@a2a-js/sdk/compat/v0_3/server";
import {
  AgentEvent,
  DefaultRequestHandler,
  defaultServerCallContextBuilder,
  JsonRpcTransportHandler,
  UnauthenticatedUser,
  validateVersion,
  type AgentExecutor,
  type ExecutionEventBus,
  type RequestContext,
  type TaskStore,
} from "@a2a-js/sdk/server";
import type { Context, Hono } from "hono";
import { z } from "zod";
import { problemBody, type ServiceError, validationFailed } from "../errors.ts";
import { clientAddress } from "../limits.ts";
import { A2A_X402_EXTENSION, pricedCallOf, x402StatusOf, type A2aX402 } from "./a2a-x402.ts";
import { X402_PAYABLE_TOOLS, type CallerContext } from "./x402-tools.ts";
import { callTool } from "./mcp.ts";
import { toolArguments, type ToolContext, type ToolDefinition } from "./tool-definition.ts";
import { bearerApiKey, missingCredential, withBearer } from "./tools.ts";

const callSchema = z.object({
  skill: z.string().optional(),
  tool: z.string().optional(),
  name: z.string().optional(),
  arguments: z.record(z.string(), z.unknown()).default({}),
});

/** The tool call a message carries: its first data part, else its text parsed as JSON. */
function readCall(message: Message): z.infer<typeof callSchema> | null {
  for (const part of message.parts) {
    const content = part.content;
    let candidate: unknown;
    if (content?.$case === "data") candidate = content.value;
    else if (content?.$case === "text") {
      try {
        candidate = JSON.parse(content.value);
      } catch {
        continue;
      }
    }
    const parsed = callSchema.safeParse(candidate);
    if (parsed.success) return parsed.data;
  }
  return null;
}

const dataPart = (value: unknown): Part => ({ content: { $case: "data", value }, metadata: undefined, filename: "", mediaType: "application/json" });
const textPart = (value: string): Part => ({ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "text/plain" });

class ToolExecutor implements AgentExecutor {
  constructor(
    private readonly tools: ToolDefinition[],
    private readonly ctx: ToolContext,
    private readonly log: Log,
    /** pay_bill paid per call with x402 (agent/a2a-x402.ts); without it every paying skill needs an api_key. */
    private readonly x402?: A2aX402,
  ) {}

  /** What the payment rules need of the caller: its address (for budgets) and its headers (for a replay's proof). */
  private callContext(request: RequestContext): CallerContext {
    const headers = (request.context.state.get("headers") as Record<string, string> | undefined) ?? {};
    return { client: String(request.context.state.get("client") ?? "unknown"), header: (name) => headers[name.toLowerCase()] };
  }

  async execute(request: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const reply = (parts: Part[]) => {
      bus.publish(
        AgentEvent.message({
          messageId: randomUUID(),
          contextId: request.contextId,
          taskId: "",
          role: Role.ROLE_AGENT,
          parts,
          metadata: undefined,
          extensions: [],
          referenceTaskIds: [],
        }),
      );
      bus.finished();
    };
    // A payment submitted (or declined) on a task this service priced: no skill call needed (a2a-x402).
    const status = x402StatusOf(request.userMessage);
    if (this.x402 && pricedCallOf(request) && (status === "payment-submitted" || status === "payment-rejected")) return this.x402.submit(request, bus, this.callContext(request));
    const call = readCall(request.userMessage);
    const name = call?.skill ?? call?.tool ?? call?.name;
    const tool = this.tools.find((t) => t.name === name);
    if (!call || !tool) {
      const error = problemBody(
        "VALIDATION_FAILED",
        `${name ? `unknown skill "${name}"` : "no skill call found"}; send a data part {"skill": one of ${this.tools.map((t) => t.name).join(", ")}, "arguments": {...}}`,
      );
      return reply([textPart(error.detail), dataPart({ error })]);
    }
    // The api_key may come as Authorization: Bearer (kept in the call's context by the route).
    const bearer = request.context.state.get("bearer") as string | undefined;
    const args = withBearer((call.arguments ?? {}) as Record<string, unknown>, bearer);
    if (this.x402 && X402_PAYABLE_TOOLS.has(tool.name) && args.api_key === undefined) {
      // No api_key: paid per call with x402, the call priced as an input-required task.
      return this.x402.request(request, bus, tool.name, args, this.callContext(request), (err) => {
        const e = err as ServiceError;
        const error = problemBody(e.code, e.detail, e.extra);
        reply([textPart(error.detail), dataPart({ error })]);
      });
    }
    const missing = missingCredential(tool, args, request.context.state.get("authorization") as string | undefined);
    if (missing) {
      const error = problemBody(missing.code, missing.detail);
      return reply([textPart(error.detail), dataPart({ error })]);
    }
    const parsed = toolArguments(tool).safeParse(args);
    if (!parsed.success) {
      const refusal = validationFailed(parsed.error, "(arguments)");
      const error = problemBody(refusal.code, refusal.detail, refusal.extra);
      return reply([textPart(error.detail), dataPart({ error })]);
    }
    const baseUrl = request.context.state.get("baseUrl") as string | undefined;
    const result = await callTool(tool, parsed.data, { ...this.ctx, baseUrl, client: this.callContext(request).client }, this.log);
    reply([textPart(`${tool.name}: ${result.isError ? "refused" : "done"}`), dataPart(result.structuredContent)]);
  }

  async cancelTask(): Promise<void> {
    // Every answer is immediate; there is never a running task to cancel.
  }
}

export function agentCard(options: { name: string; version: string; baseUrl: string; tools: ToolDefinition[]; payPerCall?: boolean }): AgentCard {
  const url = `${options.baseUrl}/api/a2a`;
  return {
    name: options.name,
    description:
      "Pays real-world bills (airtime, data, electricity, cable TV, bank transfer, exam PINs) in stablecoins from a wallet's " +
      "pre-approved on-chain allowance. Call a skill with a data part {\"skill\": \"<id>\", \"arguments\": {...}}; start with describe_capabilities.",
    supportedInterfaces: duplicateInterfacesForLegacy([{ url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: A2A_PROTOCOL_VERSION }], ["JSONRPC"]),
    provider: { organization: options.name, url: options.baseUrl },
    version: options.version,
    documentationUrl: `${options.baseUrl}/openapi.json`,
    capabilities: {
      streaming: false,
      pushNotifications: false,
      // Declared, not required: pay_bill with an api_key and PIN needs no x402 (agent/a2a-x402.ts).
      extensions: options.payPerCall
        ? [{ uri: A2A_X402_EXTENSION, description: `${[...X402_PAYABLE_TOOLS].join(", ")} without an api_key is paid per call with x402 (an input-required task, then payment-submitted).`, required: false, params: undefined }]
        : [],
      extendedAgentCard: false,
    },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["application/json", "text/plain"],
    defaultOutputModes: ["application/json", "text/plain"],
    skills: options.tools.map((t) => ({
      id: t.name,
      name: t.title,
      description: `${t.description}${t.authenticated ? " Arguments include api_key." : ""}${t.paying ? " Arguments include pin." : ""}`,
      tags: [t.paying ? "payment" : t.changes ? "write" : "read", "bill-payment"],
      examples: t.examples,
      inputModes: ["application/json"],
      outputModes: ["application/json"],
      securityRequirements: [],
    })),
    signatures: [],
  };
}

export function mountA2a(
  app: Hono,
  options: {
    card: (baseUrl: string) => AgentCard;
    tools: ToolDefinition[];
    ctx: ToolContext;
    log: Log;
    baseUrl?: string;
    x402?: A2aX402;
    tasks: TaskStore;
    /**
     * MCP's handler, for a call in MCP's shape (`tools/call`, `tools/list`) sent here: the
     * interface names no A2A method and shows its structured calls in that shape.
     */
    mcp?: (request: Request, c: Context) => Promise<Response>;
  },
): void {
  const executor = new ToolExecutor(options.tools, options.ctx, options.log, options.x402);
  // One store for every base URL's handler and every instance (agent/a2a-tasks.ts): a task priced under one is paid under another.
  const { tasks } = options;
  // The card names the public URL; built on first use when it comes from the request.
  const handlers = new Map<string, { v1: JsonRpcTransportHandler; legacy: LegacyJsonRpcTransportHandler; card: AgentCard }>();
  const forBase = (baseUrl: string) => {
    let h = handlers.get(baseUrl);
    if (!h) {
      const card = options.card(baseUrl);
      // No event bus is kept past a call: the task, in the store, is all a follow-up needs, on
      // whichever instance it lands (the SDK's default keeps an input-required task's bus in
      // this instance's memory, one per unpaid task, never freed).
      const requestHandler = new DefaultRequestHandler(card, tasks, executor, undefined, undefined, undefined, undefined, undefined, { keepBusAliveStates: [] });
      h = { v1: new JsonRpcTransportHandler(requestHandler), legacy: new LegacyJsonRpcTransportHandler(requestHandler), card };
      if (handlers.size < 8) handlers.set(baseUrl, h);
    }
    return h;
  };
  const baseOf = (url: string) => options.baseUrl ?? new URL(url).origin;

  app.get("/.well-known/agent-card.json", (c) => {
    const { card } = forBase(baseOf(c.req.url));
    // 0.3 peers read `url`, `protocolVersion` and `preferredTransport`; 1.0 peers read supportedInterfaces.
    const legacy = { url: `${baseOf(c.req.url)}/api/a2a`, protocolVersion: "0.3.0", preferredTransport: "JSONRPC" };
    return c.json({ ...card, ...legacy }, 200, { "cache-control": "public, max-age=300" });
  });

  app.post("/api/a2a", async (c) => {
    const h = forBase(baseOf(c.req.url));
    const requested = c.req.header(A2A_VERSION_HEADER);
    const legacy = (requested || A2A_LEGACY_PROTOCOL_VERSION) === A2A_LEGACY_PROTOCOL_VERSION;
    let body: unknown;
    try {
      body = await c.req.json();
    } catch {
      return c.json({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "the body is not valid JSON" } });
    }
    const id = (body as { id?: string | number })?.id ?? null;
    const method = (body as { method?: unknown })?.method;
    if (options.mcp && (method === "tools/call" || method === "tools/list")) {
      return options.mcp(new Request(c.req.raw.url, { method: "POST", headers: c.req.raw.headers, body: JSON.stringify(body) }), c);
    }
    const mapError = legacy ? LegacyJsonRpcTransportHandler.mapToLegacyJSONRPCError : JsonRpcTransportHandler.mapToJSONRPCError;
    try {
      const context = defaultServerCallContextBuilder({
        extensions: undefined,
        user: new UnauthenticatedUser(),
        headers: Object.fromEntries(c.req.raw.headers),
        requestedVersion: requested,
      });
      context.state.set("bearer", bearerApiKey(c.req.header("authorization")));
      context.state.set("authorization", c.req.header("authorization"));
      context.state.set("baseUrl", baseOf(c.req.url));
      context.state.set("client", clientAddress(c));
      context.state.set("headers", Object.fromEntries(c.req.raw.headers));
      validateVersion(context.requestedVersion ?? A2A_LEGACY_PROTOCOL_VERSION, h.card, "JSONRPC");
      const out = await (legacy ? h.legacy : h.v1).handle(body as Record<string, unknown>, context);
      if (out && typeof (out as AsyncGenerator)[Symbol.asyncIterator] === "function") {
        // Streaming methods: every answer is one message, sent as a one-event stream.
        const events: string[] = [];
        for await (const event of out as AsyncGenerator) events.push(formatSSEEvent(event));
        return new Response(events.join(""), { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
      }
      return c.json(out as object);
    } catch (err) {
      return c.json({ jsonrpc: "2.0", id, error: mapError(err) });
    }
  });
}
