/**
 * The service and its local stand-ins on loopback: the x402 facilitator, the biller
 * sandbox and the service itself (with its database and order flow), for chains already
 * deployed. Used by `npm start`, the end-to-end tests and the x402 benchmark.
 */
import { ChainHeads } from "../lib/chain-heads.ts";
import { readNodesOverWebSocket } from "../lib/chain-client.ts";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { deployedChains, requireChain, rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import { facilitatorAccount } from "../lib/local-accounts.ts";
import { createApp } from "../server/app.ts";
import { loadConfig, type Config } from "../server/config.ts";
import { openDb, type Db } from "../server/db.ts";
import type { WorkerDeps } from "../server/orders/worker.ts";
import { rateSourceFor } from "../server/pricing/rates.ts";
import { buildFlow, buildHub, claimKeys } from "../server/services.ts";
import { log } from "../server/log.ts";
import type { AgentHub } from "../server/agent/hub.ts";
import type { HotKeys } from "../server/chain/operator.ts";
import { billerSandboxApp, type SandboxOptions } from "../services/biller-sandbox/app.ts";
import { createFacilitator, facilitatorApp, type SettleMetering } from "../services/facilitator/app.ts";
import { BILLER_WEBHOOK_PATH } from "../server/orders/biller-webhook.ts";

/** Serves `fetch` on 127.0.0.1:`port` (0: a free port). */
export async function listen(fetch: (req: Request, env?: unknown) => Response | Promise<Response>, port = 0) {
  const server = serve({ fetch, port, hostname: "127.0.0.1" });
  await new Promise((r) => server.once("listening", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, close: () => new Promise<void>((r) => server.close(() => r())) };
}

export interface ServiceStack {
  config: Config;
  db: Db;
  flow: WorkerDeps;
  hub: AgentHub;
  urls: { facilitator: string; biller: string; service: string };
  close(): Promise<void>;
}

/**
 * @param env   service settings as environment strings (server/config.ts); the stand-ins'
 *              URLs and the biller keys are filled in from what is started here
 * @param ports 0 (a free port) unless given
 */
export async function startServiceStack(options: {
  deployments: Deployments;
  env?: Record<string, string>;
  ports?: { facilitator?: number; biller?: number; service?: number };
  /** The service's PGlite directory; in memory when absent (ignored with SERVER_DATABASE_URL). */
  pgliteDir?: string;
  /** Another stack's facilitator and biller: a second instance of the same service uses them instead of its own. */
  shared?: { facilitator: string; biller: string };
  /** The instance's own operator and refunder keys (one key per instance); the local ones when absent. */
  keys?: HotKeys;
  /** The biller sandbox's behaviour (its keys come from the service's settings; its webhook calls this service). */
  sandbox?: Partial<Omit<SandboxOptions, "apiKey" | "secretKey" | "publicKey">>;
  /** The local facilitator: its metering of /settle (as Celo's hosted one meters it) and its receipt wait. */
  facilitator?: { metering?: SettleMetering; confirmationTimeoutMs?: number };
}): Promise<ServiceStack> {
  const { deployments } = options;
  const closers: Array<() => Promise<unknown>> = [];
  let serviceUrl: string | undefined;
  try {
    const chains = deployedChains(deployments).map((chain) => ({ chain, rpcUrl: rpcUrlFor(chain, requireChain(deployments, chain)) }));
    const base = loadConfig(options.env ?? {});
    let facilitator: { url: string };
    let biller: { url: string };
    if (options.shared) {
      facilitator = { url: options.shared.facilitator };
      biller = { url: options.shared.biller };
    } else {
      const rpcUrls = new Map(chains.map((c) => [c.chain, c.rpcUrl]));
      const facilitatorHeads = new ChainHeads((chain) => rpcUrls.get(chain));
      closers.push(async () => facilitatorHeads.close());
      const ownFacilitator = await listen(facilitatorApp(createFacilitator(facilitatorAccount(), chains, { ...options.facilitator, heads: facilitatorHeads }), options.facilitator?.metering).fetch, options.ports?.facilitator);
      closers.push(ownFacilitator.close);
      const keys = { apiKey: base.BILLER_API_KEY, secretKey: base.BILLER_SECRET_KEY, publicKey: base.BILLER_PUBLIC_KEY };
      // The sandbox calls this service's webhook, as VTpass calls the URL a merchant registers.
      const webhookUrl = () => (serviceUrl ? `${serviceUrl}${BILLER_WEBHOOK_PATH}${base.BILLER_WEBHOOK_TOKEN ? `?token=${base.BILLER_WEBHOOK_TOKEN}` : ""}` : undefined);
      const ownBiller = await listen(billerSandboxApp({ webhookUrl, ...options.sandbox, ...keys }).fetch, options.ports?.biller);
      closers.push(ownBiller.close);
      facilitator = ownFacilitator;
      biller = ownBiller;
    }

    const config = loadConfig({
      ...options.env,
      FACILITATOR_URL_CELO: facilitator.url,
      FACILITATOR_URL_BASE: facilitator.url,
      BILLER_BASE_URL: biller.url,
    });
    const db = await openDb({ url: config.SERVER_DATABASE_URL, pgliteDir: options.pgliteDir, poolSize: config.SERVER_DB_POOL_SIZE });
    closers.push(() => db.close());
    const rates = rateSourceFor(config, db, log());
    const flow = buildFlow(config, deployments, db, options.keys);
    closers.push(async () => flow.ledger.close());
    closers.push(async () => flow.heads.close());
    const closeSockets = readNodesOverWebSocket(chains, log());
    closers.push(async () => closeSockets());
    flow.ledgerHealth.start(config.LEDGER_WATCH_INTERVAL_MS);
    closers.push(async () => flow.ledgerHealth.stop());
    await claimKeys(flow); // another live instance on these keys: refused, naming the key
    closers.push(() => flow.keyLeases.release());
    const hub = buildHub(config, deployments, db, flow, rates);
    const service = await listen(createApp({ config, db, deployments, rates, flow, hub }).fetch, options.ports?.service);
    closers.push(service.close);
    serviceUrl = service.url;

    return {
      config,
      db,
      flow,
      hub,
      urls: { facilitator: facilitator.url, biller: biller.url, service: service.url },
      close: async () => {
        for (const close of closers.reverse()) await close().catch(() => {});
      },
    };
  } catch (err) {
    for (const close of closers.reverse()) await close().catch(() => {});
    throw err;
  }
}
