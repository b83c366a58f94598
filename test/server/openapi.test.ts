import { readFile } from "node:fs/promises";
import { Validator } from "@seriousme/openapi-schema-validator";
import type { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../server/app.ts";
import { loadConfig } from "../../server/config.ts";
import { openDb, type Db } from "../../server/db.ts";
import { ConfiguredRate } from "../../server/pricing/rates.ts";
import { buildFlow } from "../../server/services.ts";
import { startTestChains } from "../support/stack.ts";

/** Hono's `/a/:b` as OpenAPI's `/a/{b}`. */
const openApiPath = (path: string) => path.replace(/:([A-Za-z_]+)/g, "{$1}");

describe("the OpenAPI document", () => {
  let stack: Awaited<ReturnType<typeof startTestChains>>;
  let db: Db;
  let app: Hono;
  let doc: { paths: Record<string, Record<string, unknown>>; [k: string]: unknown };

  beforeAll(async () => {
    stack = await startTestChains();
    db = await openDb({ pgliteDir: undefined });
    const config = loadConfig({ LOG_REQUESTS: "0" });
    app = createApp({ config, db, deployments: stack.deployments, rates: new ConfiguredRate(1_550_000n), flow: buildFlow(config, stack.deployments, db) });
    doc = (await (await app.request("/openapi.json")).json()) as typeof doc;
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
      .filter((r) => r.method !== "ALL" && r.method !== "OPTIONS" && !r.path.includes("*"))
      .map((r) => `${r.method.toLowerCase()} ${openApiPath(r.path)}`);
    const documented = new Set(Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`)));
    expect([...new Set(served)].filter((r) => !documented.has(r))).toEqual([]);
    const ledgerSource = await readFile("ponder/src/api/index.ts", "utf8");
    const ledgerRoutes = [...ledgerSource.matchAll(/app\.get\("([^"]+)"/g)].map((m) => `get ${openApiPath(m[1]!)}`);
    expect(ledgerRoutes.length).toBeGreaterThan(3);
    expect(ledgerRoutes.filter((r) => !documented.has(r))).toEqual([]);
  });

  it("serves its reference UI at /docs from the service itself", async () => {
    const page = await app.request("/docs");
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('src="/docs/scalar.js"');
    expect(html).toContain('url: "/openapi.json"');
    expect(html).not.toMatch(/https?:\/\//); // nothing fetched from elsewhere
    const script = await app.request("/docs/scalar.js");
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toContain("javascript");
    expect((await script.text()).length).toBeGreaterThan(1_000_000);
  });
});
