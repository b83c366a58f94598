/** `npm run facilitator`: the local x402 facilitator for both local chains (FACILITATOR_PORT, default 8402). */
import { serve } from "@hono/node-server";
import { deployedChains, deploymentsPath, readDeployments, requireChain, rpcUrlFor } from "../../lib/deployments.ts";
import { facilitatorAccount } from "../../lib/local-accounts.ts";
import { createFacilitator, facilitatorApp } from "./app.ts";

const port = Number(process.env.FACILITATOR_PORT ?? 8402);
const deployments = await readDeployments(deploymentsPath());
const chains = deployedChains(deployments).map((chain) => ({ chain, rpcUrl: rpcUrlFor(chain, requireChain(deployments, chain)) }));
const server = serve({ fetch: facilitatorApp(createFacilitator(facilitatorAccount(), chains)).fetch, port, hostname: "127.0.0.1" });
console.log(`facilitator listening on http://127.0.0.1:${port}`);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => server.close(() => process.exit(0)));
