/**
 * `npm run facilitator`: the local x402 facilitator for both local chains (FACILITATOR_PORT,
 * default 8402). With FACILITATOR_REQUIRE_API_KEY set, /settle is metered as Celo's hosted
 * facilitator meters it: that key in X-API-Key, FACILITATOR_CREDITS settlements (unlimited
 * when unset) and FACILITATOR_SETTLES_PER_MINUTE (unlimited when unset).
 */
import { localPort } from "../../lib/local-ports.ts";
import { serve } from "@hono/node-server";
import { deployedChains, deploymentsPath, readDeployments, requireChain, rpcUrlFor } from "../../lib/deployments.ts";
import { facilitatorAccount } from "../../lib/local-accounts.ts";
import { createFacilitator, facilitatorApp } from "./app.ts";
import { ChainHeads } from "../../lib/chain-heads.ts";

const port = localPort("facilitator");
const deployments = await readDeployments(deploymentsPath());
const chains = deployedChains(deployments).map((chain) => ({ chain, rpcUrl: rpcUrlFor(chain, requireChain(deployments, chain)) }));
const optionalCount = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
const requiredKey = process.env.FACILITATOR_REQUIRE_API_KEY;
const metering = requiredKey
  ? { apiKey: requiredKey, credits: optionalCount("FACILITATOR_CREDITS"), settlesPerMinute: optionalCount("FACILITATOR_SETTLES_PER_MINUTE") }
  : undefined;
// New blocks by the local nodes' WebSocket: the process's exit closes it.
const rpcUrls = new Map(chains.map((c) => [c.chain, c.rpcUrl]));
const heads = new ChainHeads((chain) => rpcUrls.get(chain));
const server = serve({ fetch: facilitatorApp(createFacilitator(facilitatorAccount(), chains, { heads }), metering).fetch, port, hostname: "127.0.0.1" });
console.log(`facilitator listening on http://127.0.0.1:${port}`);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => server.close(() => process.exit(0)));
