/**
 * GET /docs: the API reference (Scalar) over /openapi.json, served entirely from this
 * service: the page, and Scalar's standalone bundle from its npm package, so it works
 * with no internet (no CDN, no web fonts).
 */
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { Hono } from "hono";

const require = createRequire(import.meta.url);

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
      Scalar.createApiReference("#app", { url: "/openapi.json", withDefaultFonts: false, hideClientButton: true });
    </script>
  </body>
</html>
`;

export function mountDocs(app: Hono): void {
  let bundle: Promise<Buffer> | undefined;
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
