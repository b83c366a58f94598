/** Starting the project's real processes for a test file: local chains, then the ledger. */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { inject } from "vitest";
import { concat, keccak256, toHex, type Hex } from "viem";
import { privateKeyToAccount, type Account } from "viem/accounts";
import { deployedChains, readDeployments, requireChain, rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { FIRST_PAYER_INDEX, LAST_PAYER_INDEX } from "../../lib/local-accounts.ts";
import type { ChainKey, TokenSymbol } from "../../lib/chains.ts";
import { fundPayers } from "../../stack/local-deploy.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { openDb } from "../../server/db.ts";
import { Orphans } from "../../server/orders/ledger-pass.ts";
import { runAudit, type AuditReport } from "../../server/audit/ledger.ts";
import { waitForLedgerBlock } from "../../server/ledger-client.ts";
import * as ledgerSchema from "../../ponder/ponder.schema.ts";
import { createClient } from "@ponder/client";
import { IN_MEMORY } from "../../lib/ledger-config.ts";
import { freePort, startLedger } from "../../stack/ledger-process.ts";
import { startLocalChains, type LocalChains } from "../../stack/local-chains.ts";
import { startServiceStack } from "../../stack/service-stack.ts";
import { startChainsProcess as startChainsScript } from "../../stack/chains-process.ts";
import { TEST_TMP_ENV } from "./temp-root.ts";
import { chainActors } from "./actors.ts";

import pg from "pg";

export const POSTGRES_URL = process.env.TEST_DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/test";
/** STACK_DB=pglite runs the paying stacks on in-memory PGlite instead of PostgreSQL (startPayingStack; its `db` option decides for one stack). */
export const STACK_ON_PGLITE = process.env.STACK_DB === "pglite";

/**
 * A database of its own on the PostgreSQL server, dropped by `drop()`. Ponder keeps its
 * raw chain data in one `ponder_sync` schema per database, keyed by chain id; local chains
 * reuse the real chain ids, so two runs' chains must never share a database.
 */
export async function freshDatabase(prefix: string, serverUrl = POSTGRES_URL): Promise<{ url: string; drop(): Promise<void> }> {
  const name = uniqueSchema(prefix);
  const admin = new pg.Client({ connectionString: serverUrl, connectionTimeoutMillis: 5_000 });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => dropDatabase(name, serverUrl) };
}

/** Drops database `name` on the server, whoever is still connected to it. */
export async function dropDatabase(name: string, serverUrl = POSTGRES_URL): Promise<void> {
  const c = new pg.Client({ connectionString: serverUrl, connectionTimeoutMillis: 5_000 });
  await c.connect();
  try {
    await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await c.end();
  }
}

/** A new directory under the run's temporary root (removed when the run ends), or the system's outside a test run. */
export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(process.env[TEST_TMP_ENV] ?? tmpdir(), `billpay-${prefix}-`));
}

/** Both chains on free ports with a fresh deployment in a temporary deployments file. */
export async function startTestChains(): Promise<LocalChains & { deploymentsFile: string; dir: string }> {
  const dir = await tempDir("stack");
  const deploymentsFile = join(dir, "deployments.json");
  const chains = await startLocalChains({ ports: { CELO: 0, BASE: 0 }, deploymentsFile });
  return Object.assign(chains, { deploymentsFile, dir });
}

/**
 * Both chains in a process of their own (`npm run chains` on free ports), as a real node is
 * not in the service's process: for benchmarks, where a node sharing the service's event loop
 * would be measured as the service's cost.
 */
export async function startChainsProcess(): Promise<{ deployments: Deployments; deploymentsFile: string; dir: string; pid?: number; close(): Promise<void> }> {
  const dir = await tempDir("chains");
  const deploymentsFile = join(dir, "deployments.json");
  const [celoPort, basePort] = [await freePort(), await freePort()];
  const quiet = () => {};
  const chains = await startChainsScript({ env: { CELO_PORT: String(celoPort), BASE_PORT: String(basePort), DEPLOYMENTS_FILE: deploymentsFile }, log: quiet, logError: quiet });
  return { deployments: await readDeployments(deploymentsFile), deploymentsFile, dir, pid: chains.process?.pid, close: chains.close };
}

/** A schema name no other run uses (PostgreSQL is shared between runs). */
export function uniqueSchema(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
}

/** The service as the paying suites run it: a short vend deadline, no worker grace, quiet logs. */
const TEST_SERVICE_ENV = {
  BILLER_TIMEOUT_MS: "500",
  VEND_DEADLINE_MS: "300", // one requery at most: the sandbox answers pending to the first
  REQUERY_INTERVAL_MS: "200",
  WORKER_GRACE_SECONDS: "0",
  LOG_REQUESTS: "0",
};

type PayingStackOptions = Pick<Parameters<typeof startServiceStack>[0], "sandbox" | "facilitator"> & { db?: "pglite" | "postgresql" };

/**
 * Everything an end-to-end suite pays against: local chains, a real Ponder ledger on them,
 * and the service with its facilitator and biller sandbox, tuned for tests (a short vend
 * deadline, no worker grace, quiet logs). `env` adds or overrides service settings; `options`
 * the sandbox's and the facilitator's behaviour.
 */
export async function startPayingStack(
  env: Record<string, string> = {},
  { db = STACK_ON_PGLITE ? "pglite" : "postgresql", ...options }: PayingStackOptions = {},
) {
  const chains = await startTestChains();
  // The ledger and the service on the PostgreSQL server, in a database of this stack's own:
  // PostgreSQL is what production runs, and it costs a fraction of the CPU an in-memory PGlite
  // does (measured: a paying suite's ledger spent half its CPU in PGlite's WASM). The embedded
  // PGlite default is exercised by the suites that start `npm start` and the ledger on it.
  const database = db === "pglite" ? undefined : await freshDatabase("stack");
  let ledger: Awaited<ReturnType<typeof startLedger>> | undefined;
  try {
    ledger = await startLedger({
      deploymentsFile: chains.deploymentsFile,
      ...(database ? { databaseUrl: database.url } : { pgliteDir: IN_MEMORY }),
      logTo: join(chains.dir, "ledger.log"),
    });
    const service = await startServiceStack({
      deployments: chains.deployments,
      ...options,
      env: { ...TEST_SERVICE_ENV, LEDGER_URL: ledger.url, ...(database ? { SERVER_DATABASE_URL: database.url } : {}), ...env },
    });
    const started = ledger;
    return {
      chains,
      ledger: started,
      service,
      async close() {
        await service.close();
        await started.stop();
        await chains.close();
        await database?.drop();
      },
    };
  } catch (err) {
    await ledger?.stop();
    await chains.close();
    await database?.drop();
    throw err;
  }
}

/** Payer wallets of one suite's own: index 3 to 19, as Hardhat's funded payers, each a new random key. */
export interface FreshAccounts {
  (index: number): Account;
  /** The private key of `index`'s account, for what signs outside this process (a script's AGENT_PRIVATE_KEY, say). */
  key(index: number): Hex;
  /** Gives every one of them gas and 10,000 of every token on each chain, as the local deployment funds its payers; the blocks the mints landed in, per chain. */
  fund(deployments: Deployments): Promise<Partial<Record<ChainKey, bigint[]>>>;
}

/**
 * A suite on shared chains pays from these instead of Hardhat's well-known payers, so that
 * no balance, allowance, spending limit or link an earlier suite left is its starting point.
 */
export function freshAccounts(): FreshAccounts {
  const seed = toHex(randomBytes(32));
  const made = new Map<number, Account>();
  const key = (index: number): Hex => {
    if (!Number.isInteger(index) || index < FIRST_PAYER_INDEX || index > LAST_PAYER_INDEX) throw new Error(`payer index ${index} is outside ${FIRST_PAYER_INDEX} to ${LAST_PAYER_INDEX}`);
    return keccak256(concat([seed, toHex(index, { size: 32 })]));
  };
  const account = (index: number): Account => {
    let a = made.get(index);
    if (!a) made.set(index, (a = privateKeyToAccount(key(index))));
    return a;
  };
  const indexes = Array.from({ length: LAST_PAYER_INDEX - FIRST_PAYER_INDEX + 1 }, (_, i) => FIRST_PAYER_INDEX + i);
  return Object.assign(account, {
    key,
    async fund(deployments: Deployments) {
      const payers = indexes.map((i) => account(i).address);
      const funded = await Promise.all(
        deployedChains(deployments).map(async (chain) => {
          const d = requireChain(deployments, chain);
          return [chain, (await fundPayers(chain, rpcUrlFor(chain, d), d.tokens, payers, { gas: true })).blocks] as const;
        }),
      );
      return Object.fromEntries(funded);
    },
  });
}

const LEASE_TIMEOUT_MS = 180_000;

/** What a suite needs of a set of shared chains leased to it (test/support/shared-chains.ts serves them). */
export interface SharedChainsLease {
  id: number;
  deploymentsFile: string;
  dir: string;
  ledgerUrl: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    /** Where test/support/shared-chains.ts leases chains and a ledger. */
    sharedChainsUrl: string;
  }
}

/**
 * A service on shared chains was "deployed" now: the ledger's payments so far are earlier
 * suites' orders, not this service's orphans. Its pass over the ledger (ledger-pass.ts) starts
 * past each chain's head block, as a service that had read them all would (a service on a
 * ledger of its own reads from the start and reports every payment it has no order for).
 */
async function startReadingAtHeads(deployments: Deployments, where: { url?: string; pgliteDir?: string }): Promise<void> {
  const db = await openDb(where);
  try {
    const orphans = new Orphans(db);
    for (const chain of deployedChains(deployments)) {
      const d = requireChain(deployments, chain);
      // Retried, as the tests' own reads are: a keep-alive socket the node closed a moment before resets.
      const head = await publicClientFor(chain, rpcUrlFor(chain, d), 2).getBlock();
      await orphans.startAt(d.chainId, head.timestamp + 1n);
    }
  } finally {
    await db.close();
  }
}

/**
 * What a suite on shared chains must leave as it found it, as one comparable string: each
 * chain's mining mode and pause, and each token's acceptance and refund and pull budgets
 * (their limits and periods; what is available moves with every refund and pull).
 */
export async function chainWideState(deployments: Deployments): Promise<string> {
  const budgets = await budgetsOf(deployments);
  const budget = (chain: ChainKey, symbol: string, kind: "refund" | "pull") => {
    const b = budgets.find((x) => x.chain === chain && x.symbol === symbol && x.kind === kind)!;
    return `${b.limit}/${b.period}`;
  };
  const state: unknown[] = [];
  for (const chain of deployedChains(deployments)) {
    const d = requireChain(deployments, chain);
    const client = publicClientFor(chain, rpcUrlFor(chain, d), 2);
    const billPay = { address: d.billPay.address as Hex, abi: billPayAbi } as const;
    const tokens = await Promise.all(
      d.tokens.map(async (t) => ({
        symbol: t.symbol,
        accepted: await client.readContract({ ...billPay, functionName: "isAcceptedToken", args: [t.address as Hex] }),
        refund: budget(chain, t.symbol, "refund"),
        pull: budget(chain, t.symbol, "pull"),
      })),
    );
    const [automine, paused] = await Promise.all([client.request({ method: "hardhat_getAutomine" as never }), client.readContract({ ...billPay, functionName: "paused" })]);
    state.push({ chain, automine, paused, tokens });
  }
  return JSON.stringify(state);
}

/** Each token's refund and pull budget on each chain: its limit, period and what it holds now. */
export type Budgets = Array<{ chain: ChainKey; symbol: TokenSymbol; kind: "refund" | "pull"; limit: bigint; period: bigint; available: bigint }>;

export async function budgetsOf(deployments: Deployments): Promise<Budgets> {
  const reads = deployedChains(deployments).flatMap((chain) => {
    const actors = chainActors(deployments, chain);
    return requireChain(deployments, chain).tokens.flatMap((t) =>
      (["refund", "pull"] as const).map(async (kind) => {
        const [limit, period, available] = await actors.publicClient.readContract({ address: actors.billPay, abi: billPayAbi, functionName: kind === "refund" ? "refundBudget" : "pullBudget", args: [t.address as Hex] });
        return { chain, symbol: t.symbol as TokenSymbol, kind, limit, period, available };
      }),
    );
  });
  return Promise.all(reads);
}

/** How long restoreBudgets waits for the block that refills the buckets. */
const REFILL_TIMEOUT_MS = 15_000;

/**
 * Puts every refund and pull budget on a leased set back to `as` (budgetsOf when the suite
 * began), full, for a suite that changed or drew one down on purpose. A limit set again keeps
 * only what was available and refills at limit per period, so setting it back is not enough:
 * the next suite would start up to a day's refill short. Set with a one-second period, the
 * bucket is full a second later; set to its own period then, it stays full (BillPay._setBudget).
 */
export async function restoreBudgets(deployments: Deployments, as: Budgets): Promise<void> {
  const now = await budgetsOf(deployments);
  const changed = as.filter((b) => {
    const n = now.find((x) => x.chain === b.chain && x.symbol === b.symbol && x.kind === b.kind)!;
    return b.limit > 0n && (n.limit !== b.limit || n.period !== b.period || n.available < b.limit);
  });
  for (const chain of new Set(changed.map((b) => b.chain))) {
    const actors = chainActors(deployments, chain);
    const here = changed.filter((b) => b.chain === chain);
    const set = (b: (typeof here)[number], period: bigint) => (b.kind === "refund" ? actors.setRefundBudget(b.symbol, b.limit, period) : actors.setPullBudget(b.symbol, b.limit, period));
    let last = 0n;
    for (const b of here) last = (await actors.publicClient.getBlock({ blockNumber: (await set(b, 1n)).blockNumber })).timestamp;
    // A second of chain time at the one-second period refills each bucket (the local chains mine one a second).
    const deadline = Date.now() + REFILL_TIMEOUT_MS;
    while ((await actors.publicClient.getBlock()).timestamp <= last) {
      if (Date.now() > deadline) throw new Error(`${chain} mined no block for ${REFILL_TIMEOUT_MS} ms: its interval mining is off, and the budgets cannot refill`);
      await new Promise((r) => setTimeout(r, 200));
    }
    for (const b of here) await set(b, b.period);
  }
}

/**
 * Chains and a ledger leased for this suite alone (test/support/shared-chains.ts); `close`
 * gives them back. For suites that leave nothing changed chain-wide: a budget or the mining
 * mode only if they put it back (restoreBudgets for budgets), and no role, pause, clock or
 * reorganisation, and no wallet of Hardhat's that another suite pays from.
 */
export async function leaseSharedChains() {
  const coordinator = inject("sharedChainsUrl");
  const res = await fetch(`${coordinator}/lease`, { method: "POST", signal: AbortSignal.timeout(LEASE_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`no shared chains: ${await res.text()}`);
  const lease = (await res.json()) as SharedChainsLease;
  const deployments = await readDeployments(lease.deploymentsFile);
  const lent = await chainWideState(deployments);
  return {
    deployments,
    deploymentsFile: lease.deploymentsFile,
    dir: lease.dir,
    rpcUrls: Object.fromEntries(deployedChains(deployments).map((c) => [c, rpcUrlFor(c, requireChain(deployments, c))])) as Record<ChainKey, string>,
    ledgerUrl: lease.ledgerUrl,
    /** Gives the set back; a suite that changed it chain-wide fails here, and must start a stack of its own. */
    async close(): Promise<void> {
      // A set changed chain-wide is not given back: it stays out, and later suites get another.
      const returned = await chainWideState(deployments);
      if (returned !== lent) throw new Error(`this suite changed shared chains chain-wide (lent ${lent}, left ${returned}): it must start a stack of its own`);
      const released = await fetch(`${coordinator}/release/${lease.id}`, { method: "POST", signal: AbortSignal.timeout(10_000) });
      if (!released.ok) throw new Error(`shared chains ${lease.id} were not out on lease`);
    },
  };
}

/**
 * `startPayingStack` on leased chains and ledger (`leaseSharedChains`), with a service and a
 * database of its own. For suites that pay from `accounts`, which it funds.
 */
export async function startPayingStackOnSharedChains(
  accounts: FreshAccounts,
  env: Record<string, string> = {},
  {
    db = STACK_ON_PGLITE ? "pglite" : "postgresql",
    restoresBudgets = false,
    ...options
  }: PayingStackOptions & {
    /** For a suite that sets or draws down a refund or pull budget on purpose: `close` gives every budget back as lent, and full (`restoreBudgets`). */
    restoresBudgets?: boolean;
  } = {},
) {
  const chains = await leaseSharedChains();
  let database: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  try {
    const lentBudgets = restoresBudgets ? await budgetsOf(chains.deployments) : undefined;
    await accounts.fund(chains.deployments);
    database = db === "pglite" ? undefined : await freshDatabase("stack");
    const pgliteDir = database ? undefined : join(await tempDir("service"), "db");
    await startReadingAtHeads(chains.deployments, database ? { url: database.url } : { pgliteDir });
    const earlierPayments = await paymentsSoFar(chains.deployments, chains.ledgerUrl);
    const service = await startServiceStack({
      deployments: chains.deployments,
      ...options,
      pgliteDir,
      env: { ...TEST_SERVICE_ENV, LEDGER_URL: chains.ledgerUrl, ...(database ? { SERVER_DATABASE_URL: database.url } : {}), ...env },
    });
    const ownDatabase = database;
    return {
      chains,
      ledger: { url: chains.ledgerUrl },
      /** What the ledger held before this suite (auditOnSharedChains sets their "no order" lines aside). */
      earlierPayments,
      service,
      async close() {
        try {
          await service.close();
          if (lentBudgets) await restoreBudgets(chains.deployments, lentBudgets);
        } finally {
          await ownDatabase?.drop();
          await chains.close();
        }
      },
    };
  } catch (err) {
    // The error that stopped the start is the one to report; cleaning up after it must not hide it.
    await database?.drop().catch(() => undefined);
    await chains.close().catch(() => undefined);
    throw err;
  }
}

/**
 * The payments a leased ledger holds once it has indexed each chain up to its head now: the
 * earlier suites' (a suite leases the set alone, so nothing else pays meanwhile).
 */
async function paymentsSoFar(deployments: Deployments, ledgerUrl: string): Promise<Set<string>> {
  for (const chain of deployedChains(deployments)) {
    const d = requireChain(deployments, chain);
    await waitForLedgerBlock(ledgerUrl, d.chainId, await publicClientFor(chain, rpcUrlFor(chain, d), 2).getBlockNumber());
  }
  const ledger = createClient(`${ledgerUrl}/sql`, { schema: ledgerSchema });
  const rows = await ledger.db.select({ id: ledgerSchema.payment.id }).from(ledgerSchema.payment);
  return new Set(rows.map((r) => r.id));
}

// server/audit/orders.ts's words for a payment no order accounts for. Were they to change,
// nothing would be set aside and the suites' audits would fail, not pass.
const NO_ORDER = /^payment (\S+) \(.*\) has no order or orphan record$/;

/**
 * The audit (server/audit/ledger.ts) of a service on a leased set. Every check runs over the
 * whole ledger: treasury against chain, every refund and pull, this service's orders and
 * orphans. One kind of line is set aside: "payment X has no order" for a payment the ledger
 * held before the lease, an earlier suite's order this service never wrote. A payment made
 * during the lease with no order here stays a discrepancy, whoever paid it.
 */
export async function auditOnSharedChains(
  stack: { chains: { deployments: Deployments }; ledger: { url: string }; earlierPayments: ReadonlySet<string> },
  service: { url: string; token?: string },
): Promise<AuditReport> {
  const report = await runAudit({ ledgerUrl: stack.ledger.url, deployments: stack.chains.deployments, service });
  const earlier = (line: string) => stack.earlierPayments.has(NO_ORDER.exec(line)?.[1] ?? "");
  return { ...report, discrepancies: report.discrepancies.filter((line) => !earlier(line)) };
}

export type SharedPayingStack = Awaited<ReturnType<typeof startPayingStackOnSharedChains>>;
export type SharedChains = Awaited<ReturnType<typeof leaseSharedChains>>;
