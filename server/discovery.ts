/**
 * Finding the paid resources without paying for one: GET /.well-known/x402 (and
 * /.well-known/x402.json) lists the REST route POST /api/pay/x402 and the MCP tool pay_bill
 * at /api/mcp, each with how to call it and what it accepts, as x402's per-origin manifest
 * draft has it (x402-foundation/x402 specs/extensions/well-known-discovery.md: `x402Version`,
 * `lastUpdated`, `items` of `resource`, `type`, `accepts`, `input`, `output`). Each item's
 * input and output are lifted from the very `bazaar` declaration its 402 carries (the REST
 * route's full one from challenge.ts, the tool's from mcpToolDiscovery below), so the list
 * and the challenges cannot disagree. `accepts` is the probe's, at the minimum price: the
 * draft calls it advisory, and a bill's own 402 is what a payment must match.
 */
import { BAZAAR, type DiscoveryExtension } from "@x402/extensions/bazaar";
import type { Hono } from "hono";
import { cors } from "hono/cors";
import { agentTools } from "./agent/tools.ts";
import { payableToolDiscovery, x402PayableDescription } from "./agent/x402-tools.ts";
import type { Config } from "./config.ts";
import { problemResponse } from "./errors.ts";
import { BILL_DISCOVERY, PROBE_DESCRIPTION, probeChallenge, type ChallengeContext } from "./x402/challenge.ts";
import { paymentTerms } from "./x402/terms.ts";

export const WELL_KNOWN_PATHS = ["/.well-known/x402", "/.well-known/x402.json"] as const;
/** The paid MCP tool, and where MCP is served (server/app.ts). */
const PAID_TOOL = "pay_bill";
const MCP_PATH = "/api/mcp";
/** The list changes only with a deployment; a short public cache spares the service repeats. */
const CACHE_CONTROL = "public, max-age=300";

/**
 * A `bazaar` declaration as a manifest item's `type`, `input` and `output`, as the draft
 * lifts them: the call with its JSON Schemas, without the declaration's meta-schema.
 */
function lifted(declaration: Record<string, DiscoveryExtension>) {
  const { info, schema } = declaration[BAZAAR.key]!;
  const outputSchema = schema.properties.output?.properties?.example as Record<string, unknown> | undefined;
  const output = info.output && { mimeType: "application/json", example: info.output.example, ...(outputSchema ? { schema: outputSchema } : {}) };
  if (info.input.type === "mcp") {
    const { toolName, inputSchema, transport } = info.input;
    return { type: "mcp", input: { toolName, inputSchema, transport }, output };
  }
  const input = info.input as { method?: string; bodyType?: string };
  const body = (schema.properties.input.properties as { body?: Record<string, unknown> }).body;
  return { type: "http", input: { method: input.method, bodyType: input.bodyType, body }, output };
}

export interface DiscoveryDeps {
  config: Config;
  /** The x402 rail's challenge context for a resource (x402/pay.ts x402Payments). */
  payments: { context(resourceUrl: string): ChallengeContext };
}

export function mountDiscovery(app: Hono, deps: DiscoveryDeps): void {
  const { config } = deps;
  // Resolved once (the options change only with a deployment; v2 requirements name no
  // resource, so the context's is left empty); only the origin is per request.
  const accepts = probeChallenge(deps.payments.context("")).v2.accepts;
  const tool = agentTools(config.BATCH_MAX_BILLS).find((t) => t.name === PAID_TOOL)!;
  const resources = [
    { path: "/api/pay/x402", description: PROBE_DESCRIPTION, ...lifted(BILL_DISCOVERY.full) },
    { path: MCP_PATH, description: x402PayableDescription(tool), ...lifted(payableToolDiscovery(tool)) },
  ];
  const lastUpdated = Math.floor(Date.now() / 1000);

  const manifest = (base: string) => ({
    x402Version: 2,
    // discovery.md, x402's other draft for this path, names what the host is; unknown fields are ignored by either.
    kind: "resource-server",
    lastUpdated,
    items: resources.map(({ path, description, type, input, output }) => ({
      resource: { url: `${base}${path}`, description, mimeType: "application/json" },
      type,
      accepts,
      input,
      ...(output ? { output } : {}),
      // What the payer is promised: how soon it is answered, and the refund when a bill fails.
      terms: paymentTerms(config, base),
    })),
  });

  for (const path of WELL_KNOWN_PATHS) {
    app.use(path, cors({ origin: "*", allowMethods: ["GET", "HEAD", "OPTIONS"], maxAge: 600 }));
    app.get(path, (c) => c.json(manifest(config.PUBLIC_URL ?? new URL(c.req.url).origin), 200, { "cache-control": CACHE_CONTROL }));
    // No METHOD_NOT_ALLOWED among the service's problem codes: the catch-all's 404, saying what is served.
    app.all(path, (c) => {
      const res = problemResponse("NOT_FOUND", `no route ${c.req.method} ${path}: the list of paid resources is read with GET`);
      res.headers.set("allow", "GET, HEAD, OPTIONS");
      return res;
    });
  }
}
