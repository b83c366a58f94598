/** Serving a Hono app on a free loopback port for a test. */
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";

export async function listen(fetch: (req: Request, env?: unknown) => Response | Promise<Response>) {
  const server = serve({ fetch, port: 0, hostname: "127.0.0.1" });
  await new Promise((r) => server.once("listening", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, close: () => new Promise<void>((r) => server.close(() => r())) };
}
