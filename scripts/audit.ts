/**
 * `npm run audit`: the audit (server/audit/ledger.ts) from the command line. Prints a table
 * in token amounts (or, with --json, the same report as JSON in raw units) and exits
 * non-zero on any discrepancy. Reads the ledger by SQL over HTTP (LEDGER_URL, or LEDGER_PORT)
 * and the service's orders from its /ops routes (SERVICE_URL, default the local service;
 * OPS_TOKEN when it has one); --ledger-only skips the orders.
 */
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { ledgerUrl } from "../lib/ledger-config.ts";
import { localUrl } from "../lib/local-ports.ts";
import { auditJson, formatAudit, runAudit } from "../server/audit/ledger.ts";

const args = process.argv.slice(2);
const service = args.includes("--ledger-only") ? undefined : { url: process.env.SERVICE_URL ?? localUrl("service"), token: process.env.OPS_TOKEN };
const report = await runAudit({ ledgerUrl: ledgerUrl(), deployments: await readDeployments(deploymentsPath()), service });
console.log(args.includes("--json") ? auditJson(report) : formatAudit(report));
process.exitCode = report.discrepancies.length === 0 ? 0 : 1;
