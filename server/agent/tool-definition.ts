/** What an agent tool is, defined once for MCP and A2A: its definition, the context it runs in, its arguments' schema. */
import { z } from "zod";
import type { AgentHub } from "./hub.ts";
import type { Link } from "./links.ts";

export interface ToolContext {
  hub: AgentHub;
  /** Every tool, for describe_capabilities. */
  tools: ToolDefinition[];
  /** Where the caller reached the service (PUBLIC_URL, or the request's origin locally), for absolute URLs. */
  baseUrl?: string;
  /** The caller's network address (server/limits.ts clientAddress), for budgets of callers with no key. */
  client?: string;
}

export interface ToolDefinition<S extends z.ZodRawShape = z.ZodRawShape> {
  name: string;
  title: string;
  description: string;
  input: S;
  /** Whether the tool moves money (needs the PIN; locked after too many wrong PINs). */
  paying: boolean;
  /** Whether a tool that moves no money still changes the wallet's state (cancel_schedule): not read-only. */
  changes?: boolean;
  /** Whether the tool needs a linked wallet's api_key. */
  authenticated: boolean;
  examples: string[];
  /** A few lines an MCP reader of text can act on, carried after the answer's JSON (content[0].text). */
  summary?(result: Record<string, unknown>): string;
  run(args: z.infer<z.ZodObject<S>>, link: Link | null, ctx: ToolContext): Promise<unknown>;
}

const argumentSchemas = new WeakMap<ToolDefinition, z.ZodObject>();

/**
 * A tool's arguments as one zod object, made once per tool: zod compiles an object's parser
 * the first time it parses, so an object made afresh for every call was compiled on every call.
 */
export function toolArguments<S extends z.ZodRawShape>(tool: ToolDefinition<S>): z.ZodObject<S> {
  const key = tool as unknown as ToolDefinition;
  let schema = argumentSchemas.get(key);
  if (!schema) argumentSchemas.set(key, (schema = z.object(tool.input)));
  return schema as unknown as z.ZodObject<S>;
}

/** The JSON Schema dialect of the tools' argument schemas: MCP's default since 2025-11-25 (SEP-1613). */
export const TOOL_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema";

/**
 * A tool's arguments as JSON Schema 2020-12, declared by `$schema`: what MCP's tools/list
 * (agent/mcp.ts) and describe_capabilities show. Explicit rather than left to the default, so
 * a client speaking an older protocol revision (which named no dialect) is not left to guess.
 */
export function toolInputSchema(tool: Pick<ToolDefinition, "input">): { $schema: string; type: "object"; [key: string]: unknown } {
  const schema = z.toJSONSchema(toolArguments(tool as ToolDefinition), { target: "draft-2020-12", io: "input", unrepresentable: "any" });
  return { ...schema, $schema: TOOL_SCHEMA_DIALECT, type: "object" };
}
