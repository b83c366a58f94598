/**
 * GET /docs: the API reference (Scalar) over /openapi.json, served entirely from this
 * service: the page, and Scalar's standalone bundle from its npm package, so it works
 * with no internet (no CDN, no web fonts, none of Scalar's online services).
 *
 * GET /openapi.json: the document (openapi.ts) with `servers` naming where its operations
 * are reached, so the reference's requests and code samples carry a full URL: PUBLIC_URL
 * when set; else the origin the request itself used, when its Host is one of ALLOWED_HOSTS
 * (as the agent routes check it in app.ts, so a forged Host is never written into the
 * document); else "/", the host the document was fetched from.
 */
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { Hono } from "hono";
import type { Config } from "./config.ts";
import type { openApiDocument } from "./openapi.ts";

const require = createRequire(import.meta.url);

/** The reference's own routes: served here, but not operations of the API, so not in the document. */
export const DOCS_ROUTES = ["/openapi.json", "/docs", "/docs/scalar.js"] as const;

/**
 * Scalar's configuration (@scalar/api-reference 1.72.1; the options are declared in
 * @scalar/schemas dist/api-reference/*-configuration.js). Its online features are switched
 * off: several show by default whenever the page is opened on localhost.
 */
export const SCALAR_CONFIGURATION = {
  url: "/openapi.json",
  // No web fonts fetched from fonts.scalar.com.
  withDefaultFonts: false,
  // The "Open API Client" button (sidebar and request modal): opens client.scalar.com with the document's URL.
  hideClientButton: true,
  // The Developer Tools bar (Configure, Share: uploads the document to Scalar's registry, Deploy on Scalar);
  // "localhost" by default, i.e. shown on a local service.
  showDeveloperTools: "never",
  // "Ask AI": Scalar's agent chat, which sends the document to Scalar's servers; on by default on localhost.
  agent: { disabled: true },
  // "Generate MCP" / "Connect MCP" and its VS Code and Cursor links (through dashboard.scalar.com); on by default on localhost.
  mcp: { disabled: true },
  // Scalar's telemetry switch (default on); this bundle reads it nowhere beyond its schema, off all the same.
  telemetry: false,
} as const;

const PAGE = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Bill payment service: API reference</title>
  </head>
  <body>
    <div id="app"></div>
    <script src="/docs/scalar.js"></script>
    <script>
      Scalar.createApiReference("#app", ${JSON.stringify(SCALAR_CONFIGURATION)});
    </script>
  </body>
</html>
`;

export interface DocsOptions {
  /** The document without `servers` (openapi.ts), built once. */
  document: ReturnType<typeof openApiDocument>;
  config: Pick<Config, "PUBLIC_URL" | "ALLOWED_HOSTS">;
}

/** The document's `servers` for a request that fetched it (see the top of this file). */
export function documentServers(request: Request, config: DocsOptions["config"]): Array<{ url: string; description: string }> {
  if (config.PUBLIC_URL) return [{ url: config.PUBLIC_URL.replace(/\/+$/, ""), description: "This service (PUBLIC_URL)" }];
  const origin = requestOrigin(request, config);
  if (origin) return [{ url: origin, description: "This service, as this request reached it" }];
  return [{ url: "/", description: "This service (where this document was fetched from)" }];
}

/**
 * Where this service is, for a document that names it: PUBLIC_URL's origin when set; else the
 * origin the request used when its Host is a bare, allowed host[:port] (so a forged Host is never
 * written into what the service says about itself); else undefined.
 */
export function trustedServiceOrigin(request: Request, config: DocsOptions["config"]): string | undefined {
  return config.PUBLIC_URL ? new URL(config.PUBLIC_URL).origin : requestOrigin(request, config);
}

function requestOrigin(request: Request, config: DocsOptions["config"]): string | undefined {
  const url = new URL(request.url);
  const host = request.headers.get("host") ?? url.host;
  let origin: URL | undefined;
  try {
    origin = new URL(`${url.protocol}//${host}`);
  } catch {
    origin = undefined;
  }
  // A bare host[:port] only (no user info, path, query or fragment smuggled in), and an allowed one.
  const bare = origin && !origin.username && !origin.password && origin.pathname === "/" && !origin.search && !origin.hash;
  const allowed = new Set(config.ALLOWED_HOSTS.map((h) => h.toLowerCase()));
  return origin && bare && allowed.has(origin.hostname.toLowerCase()) ? origin.origin : undefined;
}

/**
 * Mounts /docs and its script, and /openapi.json with its `servers`.
 */
export function mountDocs(app: Hono, options: DocsOptions): void {
  let bundle: Promise<Buffer> | undefined;
  const { openapi, info, ...rest } = options.document;
  app.get("/openapi.json", (c) =>
    c.json({ openapi, info, servers: documentServers(c.req.raw, options.config), ...rest }, 200, {
      "cache-control": "no-cache",
      ...(options.config.PUBLIC_URL ? {} : { vary: "Host" }),
    }),
  );
  app.get("/docs", (c) => c.html(PAGE, 200, { "cache-control": "no-cache" }));
  app.get("/docs/scalar.js", async (c) => {
    // The package exports only its module entry (dist/index.js); the standalone bundle sits beside it.
    bundle ??= readFile(join(dirname(require.resolve("@scalar/api-reference")), "browser", "standalone.js")).catch((err) => {
      bundle = undefined;
      throw err;
    });
    return c.body(new Uint8Array(await bundle), 200, { "content-type": "text/javascript; charset=utf-8", "cache-control": "public, max-age=86400" });
  });
}
