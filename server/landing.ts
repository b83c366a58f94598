/**
 * GET /: where to go from the service's root, for a person (a page of links) or a program
 * (the same links as JSON, when it asks for JSON). Nothing here is secret: every link is a
 * public route, and the console asks for its own credentials.
 */
import type { Hono } from "hono";
import { LINK_PATH } from "../lib/agent-link.ts";

/** GET routes are links; a route served only by POST is named with its method, not linked. */
const ROUTES: Array<{ name: string; path: string; what: string; method?: "POST" }> = [
  { name: "api_reference", path: "/docs", what: "the API reference (OpenAPI, browsable)" },
  { name: "openapi", path: "/openapi.json", what: "the OpenAPI 3.1 document" },
  { name: "pay_x402", path: "/api/pay/x402", method: "POST", what: "POST a bill: a 402 to pay with x402, then the bill's result" },
  { name: "quote", path: "/api/quote", method: "POST", what: "POST a bill: its price, before any payment" },
  { name: "x402_discovery", path: "/.well-known/x402", what: "the paid resources, for x402 clients and catalogues" },
  { name: "mcp", path: "/api/mcp", method: "POST", what: "MCP (streamable HTTP): pay_bill and the agent tools" },
  { name: "agent_card", path: "/.well-known/agent-card.json", what: "the A2A Agent Card" },
  { name: "receipt_keys", path: "/.well-known/did.json", what: "the key paid bills' receipts are signed with (did:web), to check a receipt anywhere" },
  { name: "link", path: LINK_PATH, what: "link a wallet to the agent hub" },
  { name: "console", path: "/console", what: "the operators' console (operators only)" },
  { name: "health", path: "/healthz", what: "up" },
  { name: "ready", path: "/readyz", what: "ready: the database answers and the ledger keeps up with every chain" },
];

const escape = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

export function mountLanding(app: Hono, serviceName: string): void {
  app.get("/", (c) => {
    const wantsJson = (c.req.header("accept") ?? "").includes("application/json") && !(c.req.header("accept") ?? "").includes("text/html");
    if (wantsJson) {
      const links = ROUTES.map((r) => [r.name, { href: r.path, method: r.method ?? "GET", what: r.what }]);
      return c.json({ service: serviceName, links: Object.fromEntries(links) });
    }
    const rows = ROUTES.map((r) =>
      r.method
        ? `<li><code>${r.method} ${escape(r.path)}</code>: ${escape(r.what)}</li>`
        : `<li><a href="${r.path}"><code>${escape(r.path)}</code></a>: ${escape(r.what)}</li>`,
    ).join("\n");
    return c.html(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(serviceName)}</title></head>` +
        `<body><h1>${escape(serviceName)}</h1><p>Bills paid in stablecoins: x402 per call, or an agent hub allowance.</p><ul>\n${rows}\n</ul></body></html>`,
    );
  });
}
