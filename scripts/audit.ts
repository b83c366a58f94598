/**
 * `npm run audit`: the audit (server/audit/ledger.ts) from the command line. Prints a table
 * in token amounts (or, with --json, the same report as JSON in raw units) and exits 1 on any
 * discrepancy, 0 when there is none. Reads the ledger by SQL over HTTP (LEDGER_URL, or
 * LEDGER_PORT) and the service's orders from its /ops routes (SERVICE_URL, default the local
 * service; OPS_TOKEN when it has one); --ledger-only skips the orders.
 *
 * The audit judges from a ledger that has caught up with each chain's head. A ledger that
 * does not get there within --wait seconds (30 by default: it is behind, stalled or away)
 * gets one line saying what was waited for, and exit code 2: cannot judge yet.
 */
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { ledgerUrl } from "../lib/ledger-config.ts";
import { localUrl } from "../lib/local-ports.ts";
import { auditJson, formatAudit, runAudit } from "../server/audit/ledger.ts";
import { LedgerNotCaughtUp } from "../server/ledger-client.ts";

/** The exit code of an audit that could not judge: the ledger has not caught up with the chain. */
export const CANNOT_JUDGE_YET = 2;

const args = process.argv.slice(2);
const waitAt = args.indexOf("--wait");
const waitSeconds = waitAt >= 0 ? Number(args[waitAt + 1]) : 30;
if (!Number.isFinite(waitSeconds) || waitSeconds < 0) {
  console.error("--wait takes a number of seconds (how long to wait for the ledger to reach each chain's head)");
  process.exit(64);
}
const service = args.includes("--ledger-only") ? undefined : { url: process.env.SERVICE_URL ?? localUrl("service"), token: process.env.OPS_TOKEN };
try {
  const report = await runAudit({ ledgerUrl: ledgerUrl(), deployments: await readDeployments(deploymentsPath()), service, waitMs: waitSeconds * 1000 });
  console.log(args.includes("--json") ? auditJson(report) : formatAudit(report));
  process.exitCode = report.discrepancies.length === 0 ? 0 : 1;
} catch (err) {
  if (!(err instanceof LedgerNotCaughtUp)) throw err;
  console.error(`audit: cannot judge yet: ${err.message} (the console's Chains panel and the ledger's log say why; run again once it has caught up)`);
  process.exitCode = CANNOT_JUDGE_YET;
}
