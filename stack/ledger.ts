/**
 * `npm run ledger`: only the ledger (Ponder), in the foreground, against chains already
 * running. Once backfilled it is held against each chain's head (lib/ledger-watch.ts): a
 * ledger that stands still behind a moving chain for longer than LEDGER_STALL_SECONDS is
 * stopped and this process exits with LEDGER_STALLED_EXIT (75, "try again"), for its
 * supervisor (systemd's Restart=on-failure, docs/production.md) to start it again; Ponder
 * resumes from its checkpoint. Exits with Ponder's own code when Ponder exits by itself, and
 * with LEDGER_STALLED_EXIT when it exits with 0 unasked.
 */
import { deployedChains, deploymentsPath, readDeployments, requireChain, rpcUrlFor } from "../lib/deployments.ts";
import { localPort } from "../lib/local-ports.ts";
import { isLoopbackAddress, LEDGER_OPEN_QUERY_API, ledgerQueryApiOpen } from "../lib/ledger-config.ts";
import { LedgerWatch, ledgerBoundsFromEnv, stateChangeLines } from "../lib/ledger-watch.ts";
import { ledgerDatabaseFor, startLedger } from "./ledger-process.ts";

/** EX_TEMPFAIL: the ledger stalled; starting it again is the remedy. */
export const LEDGER_STALLED_EXIT = 75;

const host = process.env.LEDGER_HOST ?? "127.0.0.1";
const queryApiOpen = ledgerQueryApiOpen();
const bounds = ledgerBoundsFromEnv(); // a bad value is refused before Ponder starts
const deployments = await readDeployments(deploymentsPath());
const ledger = await startLedger({
  deploymentsFile: deploymentsPath(),
  port: localPort("ledger"),
  databaseUrl: process.env.DATABASE_URL ? await ledgerDatabaseFor(process.env.DATABASE_URL, deployments) : undefined,
  logTo: "inherit",
  host,
  // A real chain's backfill may take hours: print where each chain is, and never cut it short while it advances.
  onProgress: (chains) => console.log(`backfill: ${chains.map((c) => `${c.chain} block ${c.block ?? "none yet"}`).join(", ")}`),
  progressEveryMs: 10_000,
  stallTimeoutMs: Number(process.env.LEDGER_STALL_TIMEOUT_MS ?? 600_000),
});
console.log(`ledger ready at ${ledger.url} (schema ${ledger.schema})`);
if (!isLoopbackAddress(host) && host !== "localhost") {
  console.log(
    queryApiOpen
      ? `SQL over HTTP (/sql/*) and GraphQL (/graphql) answer every caller (${LEDGER_OPEN_QUERY_API}=1): let only the service's machines reach this port`
      : `other machines get /ledger/* only; SQL over HTTP (/sql/*: the service's push and operator console, npm run audit) and GraphQL answer this machine (${LEDGER_OPEN_QUERY_API}=1 opens them)`,
  );
}
let stopping = false;
const stopWith = (code: number) => {
  stopping = true;
  watch.stop();
  void ledger.stop().then(() => process.exit(code));
};
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => stopWith(0));
// Ponder exits 0 on a signal of its own (someone stopped its process, not this one): the
// ledger is down all the same, and systemd's Restart=on-failure restarts only a failure.
ledger.process.on("exit", (code) => {
  if (!stopping) process.exit(code ? code : LEDGER_STALLED_EXIT);
});

const watch = new LedgerWatch({
  ledgerUrl: ledger.url,
  bounds,
  chains: deployedChains(deployments).map((chain) => {
    const d = requireChain(deployments, chain);
    return { chain, chainId: d.chainId, rpcUrl: rpcUrlFor(chain, d) };
  }),
});
const logChanges = stateChangeLines((line) => console.error(line));
watch.start(1_000, (progress) => {
  logChanges(progress);
  const stalled = progress.find((p) => p.state === "stalled");
  if (stalled && !stopping) {
    console.error(`ledger: stopping to be restarted by its supervisor (exit ${LEDGER_STALLED_EXIT}): ${stalled.problem}`);
    stopWith(LEDGER_STALLED_EXIT);
  }
});
