/**
 * `npm run biller-sandbox`: the local biller sandbox (BILLER_SANDBOX_PORT, default 8403), with
 * the biller keys (BILLER_API_KEY, BILLER_SECRET_KEY, BILLER_PUBLIC_KEY), the webhook URL it
 * calls (BILLER_SANDBOX_WEBHOOK_URL, as a merchant registers one on VTpass's dashboard) and
 * VTpass's 019 duplicate window (BILLER_SANDBOX_DUPLICATE_WINDOW_MS, e.g. 30000; off by default).
 */
import { localPort } from "../../lib/local-ports.ts";
import { serve } from "@hono/node-server";
import { billerSandboxApp } from "./app.ts";

const port = localPort("biller");
const window = process.env.BILLER_SANDBOX_DUPLICATE_WINDOW_MS;
const app = billerSandboxApp({
  apiKey: process.env.BILLER_API_KEY ?? "sandbox-api-key",
  secretKey: process.env.BILLER_SECRET_KEY ?? "sandbox-secret-key",
  publicKey: process.env.BILLER_PUBLIC_KEY ?? "sandbox-public-key",
  webhookUrl: process.env.BILLER_SANDBOX_WEBHOOK_URL,
  ...(window !== undefined ? { duplicateWindowMs: Number(window) } : {}),
});
const server = serve({ fetch: app.fetch, port, hostname: "127.0.0.1" });
console.log(`biller sandbox listening on http://127.0.0.1:${port}`);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => server.close(() => process.exit(0)));
