/** `npm run biller-sandbox`: the local biller sandbox (BILLER_SANDBOX_PORT, default 8403). */
import { serve } from "@hono/node-server";
import { billerSandboxApp } from "./app.ts";

const port = Number(process.env.BILLER_SANDBOX_PORT ?? 8403);
const app = billerSandboxApp({
  apiKey: process.env.BILLER_API_KEY ?? "sandbox-api-key",
  secretKey: process.env.BILLER_SECRET_KEY ?? "sandbox-secret-key",
  publicKey: process.env.BILLER_PUBLIC_KEY ?? "sandbox-public-key",
});
const server = serve({ fetch: app.fetch, port, hostname: "127.0.0.1" });
console.log(`biller sandbox listening on http://127.0.0.1:${port}`);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => server.close(() => process.exit(0)));
