/** `npm run ledger`: only the ledger (Ponder), in the foreground, against chains already running. */
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { DEFAULT_LEDGER_PORT } from "../lib/ledger-config.ts";
import { ledgerDatabaseFor, startLedger } from "./ledger-process.ts";

const ledger = await startLedger({
  deploymentsFile: deploymentsPath(),
  port: Number(process.env.LEDGER_PORT ?? DEFAULT_LEDGER_PORT),
  databaseUrl: process.env.DATABASE_URL
    ? await ledgerDatabaseFor(process.env.DATABASE_URL, await readDeployments(deploymentsPath()))
    : undefined,
  logTo: "inherit",
});
console.log(`ledger ready at ${ledger.url} (schema ${ledger.schema})`);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => void ledger.stop().then(() => process.exit(0)));
ledger.process.on("exit", (code) => process.exit(code ?? 1));
