/**
 * Local chains for development and tests: one Hardhat node per chain, served in this
 * process over JSON-RPC on 127.0.0.1, then the idempotent deployment, written to the
 * deployments file. A chain already answering on its URL is reused, not restarted.
 */
import { LOCAL_PORTS, localPort } from "../lib/local-ports.ts";
import { network } from "hardhat";
import { chainInfo, CHAIN_KEYS, type ChainKey } from "../lib/chains.ts";
import { activeNetwork } from "../lib/networks.ts";
import { readDeployments, writeDeployments, type Deployments } from "../lib/deployments.ts";
import { ensureLocalDeployment, holdsDeployment } from "./local-deploy.ts";
import { keepSubscriptionsAlive } from "./subscription-keeper.ts";

const PROBE_TIMEOUT_MS = 1_000;

export interface LocalChainsOptions {
  /** Port per chain; 0 picks a free one. Defaults: CELO 8545, BASE 8546 (env CELO_PORT, BASE_PORT). */
  ports?: Partial<Record<ChainKey, number>>;
  host?: string;
  deploymentsFile: string;
  log?: (line: string) => void;
}

export interface LocalChains {
  deployments: Deployments;
  rpcUrls: Record<ChainKey, string>;
  /** Chains whose node this process started and serves. */
  started: ChainKey[];
  /** Stops the nodes this process started (nodes it found running are left alone). */
  close(): Promise<void>;
}

/** The chain id served at `url`, or undefined when nothing answers there. */
async function probeChainId(url: string): Promise<number | undefined> {
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] }),
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
    });
    const body = (await res.json()) as { result?: string };
    return body.result ? Number(body.result) : undefined;
  } catch {
    return undefined;
  }
}

export function defaultPort(chain: ChainKey): number {
  return localPort(chain);
}

export async function startLocalChains(options: LocalChainsOptions): Promise<LocalChains> {
  const host = options.host ?? "127.0.0.1";
  const log = options.log ?? (() => {});
  const closers: Array<() => Promise<void>> = [];
  const rpcUrls = {} as Record<ChainKey, string>;
  const started: ChainKey[] = [];
  if (!activeNetwork().local) throw new Error(`the local chains are the local profile's; NETWORK is "${activeNetwork().name}"`);
  const deployments = await readDeployments(options.deploymentsFile);

  try {
    for (const key of CHAIN_KEYS) {
      const chain = chainInfo(key);
      const port = options.ports?.[key] ?? defaultPort(key);
      let url = `http://${host}:${port}`;
      const running = port === 0 ? undefined : await probeChainId(url);
      if (running !== undefined) {
        if (running !== chain.chainId) {
          throw new Error(`${url} already serves chain id ${running}, not ${chain.chainId} (${key}): free the port or set ${key}_PORT`);
        }
        // Only our own chain is reused: deploying onto another stack's would pay into a BillPay
        // its ledger does not index, beside the one its service uses.
        if (!(await holdsDeployment(key, url, deployments.chains[key]))) {
          throw new Error(
            `${url} already serves a ${key} chain (id ${running}) that does not hold this stack's deployment (${options.deploymentsFile}): ` +
              `it is another stack's; stop it, or move this stack's ${key} chain with ${LOCAL_PORTS[key].variable}`,
          );
        }
        log(`${key}: reusing the node already running at ${url}, with this stack's deployment`);
      } else {
        // Hardhat expires a WebSocket subscription after five minutes; a real node does not.
        keepSubscriptionsAlive();
        // The chain's clock starts now: without initialDate, Hardhat dates every chain a process
        // makes from the moment it read its configuration, so a chain made later in a long-lived
        // process (a test worker) would mine blocks minutes behind the wall clock.
        const server = await network.createServer({ network: chain.hardhatNetwork, override: { initialDate: new Date() } }, host, port);
        const bound = await server.listen();
        url = `http://${host}:${bound.port}`;
        closers.push(() => server.close());
        started.push(key);
        log(`${key}: started chain id ${chain.chainId} at ${url}`);
      }
      rpcUrls[key] = url;

      const { deployment, reused } = await ensureLocalDeployment(key, url, deployments.chains[key]);
      deployments.chains[key] = deployment;
      log(`${key}: BillPay ${deployment.billPay.address} ${reused ? "(already deployed)" : `deployed at block ${deployment.billPay.block}`}`);
    }
    await writeDeployments(deployments, options.deploymentsFile);
  } catch (err) {
    await Promise.allSettled(closers.map((c) => c()));
    throw err;
  }

  return {
    deployments,
    rpcUrls,
    started,
    async close() {
      await Promise.allSettled(closers.map((c) => c()));
    },
  };
}
