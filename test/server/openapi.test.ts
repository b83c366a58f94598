import { readFile } from "node:fs/promises";
import { Validator } from "@seriousme/openapi-schema-validator";
import type { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { openDb, type Db } from "../../server/db.ts";
import { DOCS_ROUTES } from "../../server/docs.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { buildFlow } from "../../server/services.ts";
import { listen } from "../support/http-server.ts";
import { leaseSharedChains, type SharedChains } from "../support/stack.ts";

/** Hono's `/a/:b` as OpenAPI's `/a/{b}`. */
const openApiPath = (path: string) => path.replace(/:([A-Za-z_]+)/g, "{$1}");
/** Served, but not operations of the API: the reference itself and static assets. */
const notAnOperation = (path: string) => (DOCS_ROUTES as readonly string[]).includes(path) || path.startsWith("/docs") || path.includes("/assets/");
const HTTP_METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);

interface Doc {
  paths: Record<string, Record<string, unknown>>;
  servers?: Array<{ url: string; description?: string }>;
  tags?: Array<{ name: string; description?: string }>;
  [k: string]: unknown;
}

describe("the OpenAPI document", () => {
  let stack: SharedChains;
  let db: Db;
  let app: Hono;
  let publicApp: Hono;
  let doc: Doc;

  const appWith = (env: Record<string, string>) => {
    const config = loadConfig({ LOG_REQUESTS: "0", ...env });
    return createApp({ config, db, deployments: stack.deployments, rates: new ConfiguredRate(1_550_000n), flow: buildFlow(config, stack.deployments, db) });
  };
  const fetchDoc = async (target: Hono, headers: Record<string, string> = {}) => (await (await target.request("/openapi.json", { headers })).json()) as Doc;

  beforeAll(async () => {
    stack = await leaseSharedChains();
    db = await openDb({ pgliteDir: undefined });
    app = appWith({});
    publicApp = appWith({ PUBLIC_URL: "https://pay.example.com" });
    doc = await fetchDoc(app);
  });
  afterAll(async () => {
    await db?.close();
    await stack?.close();
  });

  it("is valid OpenAPI 3.1 and names the x402 payment options", async () => {
    const validator = new Validator();
    const result = await validator.validate(doc as never);
    expect(result.errors ?? [], JSON.stringify(result.errors)).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");
    expect(doc["x-x402"]).toMatchObject({ versions: [1, 2], scheme: "exact", options: expect.arrayContaining([expect.objectContaining({ network: "eip155:42220", token: "USDC" })]) });
    const pay = doc.paths["/api/pay/x402"]!.post as { responses: Record<string, { content: Record<string, unknown> }> };
    expect(Object.keys(pay.responses["200"]!.content)).toEqual(["application/json"]);
    expect(Object.keys(pay.responses["402"]!.content)).toContain("application/json"); // the challenge, not only the problem
  });

  it("covers every route the service serves, and the ledger's", async () => {
    const served = app.routes
      .filter((r) => r.method !== "ALL" && r.method !== "OPTIONS" && !r.path.includes("*") && !notAnOperation(r.path))
      .map((r) => `${r.method.toLowerCase()} ${openApiPath(r.path)}`);
    const documented = new Set(Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`)));
    expect([...new Set(served)].filter((r) => !documented.has(r))).toEqual([]);
    const ledgerSource = await readFile("ponder/src/api/index.ts", "utf8");
    const ledgerRoutes = [...ledgerSource.matchAll(/app\.get\("([^"]+)"/g)].map((m) => `get ${openApiPath(m[1]!)}`);
    expect(ledgerRoutes.length).toBeGreaterThan(3);
    expect(ledgerRoutes.filter((r) => !documented.has(r))).toEqual([]);
  });

  it("leaves out the reference's own routes and static assets: they are served, not operations", () => {
    for (const path of DOCS_ROUTES) expect(app.routes.some((r) => r.path === path && r.method === "GET"), path).toBe(true);
    expect(Object.keys(doc.paths).filter(notAnOperation)).toEqual([]);
  });

  it("groups every operation under a tag the document declares, with a description", () => {
    const declared = (doc.tags ?? []).map((t) => t.name);
    expect(declared).toEqual(expect.arrayContaining(["x402", "Orders", "Biller", "Agent hub", "Operators", "Health", "Ledger"]));
    expect(new Set(declared).size).toBe(declared.length);
    for (const tag of doc.tags ?? []) expect(tag.description?.length ?? 0, tag.name).toBeGreaterThan(20);
    const used = new Set<string>();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        if (!HTTP_METHODS.has(method)) continue;
        const tags = (operation as { tags?: string[] }).tags ?? [];
        expect(tags.length, `${method} ${path}`).toBeGreaterThan(0);
        for (const tag of tags) {
          expect(declared, `${method} ${path}`).toContain(tag);
          used.add(tag);
        }
      }
    }
    expect([...used].sort()).toEqual([...declared].sort()); // no empty group either
    expect((doc.paths["/api/pay/x402"]!.post as { tags: string[] }).tags).toEqual(["x402"]);
    expect((doc.paths["/api/mcp"]!.post as { tags: string[] }).tags).toEqual(["Agent hub"]);
    expect((doc.paths["/metrics"]!.get as { tags: string[] }).tags).toEqual(["Operators"]);
  });

  it("names its server: PUBLIC_URL when set, whatever Host the request names", async () => {
    for (const host of [undefined, "localhost:8080", "evil.example"]) {
      const served = await fetchDoc(publicApp, host ? { host } : {});
      expect(served.servers, host).toEqual([expect.objectContaining({ url: "https://pay.example.com" })]);
    }
    // The ledger's routes keep their own server (the ledger process's).
    const ledger = (await fetchDoc(publicApp)).paths["/status"] as { servers: Array<{ url: string }> };
    expect(ledger.servers).toEqual([expect.objectContaining({ url: loadConfig({}).LEDGER_URL })]);
  });

  it("without PUBLIC_URL names the origin the request used, only for an allowed host; else a relative server", async () => {
    expect(doc.servers).toEqual([expect.objectContaining({ url: "http://localhost" })]);
    expect((await fetchDoc(app, { host: "127.0.0.1:8080" })).servers).toEqual([expect.objectContaining({ url: "http://127.0.0.1:8080" })]);
    expect((await fetchDoc(app, { host: "[::1]:8080" })).servers).toEqual([expect.objectContaining({ url: "http://[::1]:8080" })]);
    // A forged Host is never written into the document.
    for (const host of ["evil.example", "evil.example:8080", "localhost@evil.example", "localhost.evil.example", "localhost/evil"]) {
      expect((await fetchDoc(app, { host })).servers, host).toEqual([expect.objectContaining({ url: "/" })]);
    }
    // Over a real socket, as a browser on the same machine fetches it.
    const server = await listen(app.fetch);
    try {
      const res = await fetch(`${server.url}/openapi.json`);
      expect(res.headers.get("vary")).toContain("Host");
      expect(((await res.json()) as Doc).servers).toEqual([expect.objectContaining({ url: server.url })]);
    } finally {
      await server.close();
    }
  });

  it("answers GET / with where to go: links a person can follow (HTML) or a program can read (JSON), each one served", async () => {
    const page = await app.request("/", { headers: { accept: "text/html,application/xhtml+xml" } });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toContain("text/html");
    const html = await page.text();
    for (const path of ["/docs", "/console", "/.well-known/x402", "/.well-known/agent-card.json"]) expect(html).toContain(`href="${path}"`);
    for (const route of ["POST /api/pay/x402", "POST /api/mcp"]) expect(html).toContain(`<code>${route}</code>`);
    type Link = { href: string; method: string; what: string };
    const links = (await (await app.request("/", { headers: { accept: "application/json" } })).json()) as { service: string; links: Record<string, Link> };
    expect(links.links.api_reference).toEqual({ href: "/docs", method: "GET", what: expect.stringContaining("reference") });
    const hrefs = [...html.matchAll(/href="([^"]+)"/g)].map((m) => m[1]!);
    const gets = Object.values(links.links).filter((l) => l.method === "GET");
    expect(hrefs.sort()).toEqual(gets.map((l) => l.href).sort());
    // Every link leads somewhere, by the method it names: never a 404 (a paid route answers a bare POST
    // with a 4xx that says what it wants; the console asks for credentials), never a 5xx.
    for (const link of Object.values(links.links)) {
      const res = await app.request(link.href, { method: link.method, ...(link.method === "POST" ? { headers: { "content-type": "application/json", accept: "application/json, text/event-stream" }, body: "{}" } : {}) });
      expect(res.status, link.href).not.toBe(404);
      // /readyz may say 503 here: this test runs no ledger, and saying so is its job.
      if (link.href !== "/readyz") expect(res.status, link.href).toBeLessThan(500);
    }
    // Followed with the wrong method, a route says which methods serve it.
    const wrong = await app.request("/api/quote");
    expect(wrong.status).toBe(404);
    expect(wrong.headers.get("allow")).toBe("POST");
    expect(((await wrong.json()) as { detail: string }).detail).toContain("served by POST");
    expect((await app.request("/no/such/thing")).headers.get("allow")).toBeNull();
  });

  it("serves its reference UI at /docs from the service itself, with Scalar's online features switched off", async () => {
    const page = await app.request("/docs");
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('src="/docs/scalar.js"');
    expect(html).not.toMatch(/https?:\/\//); // nothing fetched from elsewhere
    const configuration = JSON.parse(/Scalar\.createApiReference\("#app", (\{.*\})\);/.exec(html)![1]!) as Record<string, unknown>;
    expect(configuration).toEqual({
      url: "/openapi.json",
      withDefaultFonts: false,
      hideClientButton: true, // "Open API Client" (client.scalar.com)
      showDeveloperTools: "never", // Configure, Share, Deploy
      agent: { disabled: true }, // Ask AI
      mcp: { disabled: true }, // Generate MCP, Connect MCP (VS Code, Cursor)
      telemetry: false,
    });
    const script = await app.request("/docs/scalar.js");
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toContain("javascript");
    const bundle = await script.text();
    expect(bundle.length).toBeGreaterThan(1_000_000);
    // The options set are ones this bundle knows (a renamed option would be silently ignored).
    for (const option of ["hideClientButton", "showDeveloperTools", "withDefaultFonts", "telemetry"]) expect(bundle, option).toContain(`${option}:`);
    expect(bundle).toContain("mcp?.disabled");
    expect(bundle).toContain("agent?.disabled");
  });
});
