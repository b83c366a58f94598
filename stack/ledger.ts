/** `npm run ledger`: only the ledger (Ponder), in the foreground, against chains already running. */
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { localPort } from "../lib/local-ports.ts";
import { isLoopbackAddress, LEDGER_OPEN_QUERY_API, ledgerQueryApiOpen } from "../lib/ledger-config.ts";
import { ledgerDatabaseFor, startLedger } from "./ledger-process.ts";

const host = process.env.LEDGER_HOST ?? "127.0.0.1";
const queryApiOpen = ledgerQueryApiOpen();
const ledger = await startLedger({
  deploymentsFile: deploymentsPath(),
  port: localPort("ledger"),
  databaseUrl: process.env.DATABASE_URL
    ? await ledgerDatabaseFor(process.env.DATABASE_URL, await readDeployments(deploymentsPath()))
    : undefined,
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
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => void ledger.stop().then(() => process.exit(0)));
ledger.process.on("exit", (code) => process.exit(code ?? 1));
