/**
 * The fast tier, `npm run test:unit`: tests that start no chain, ledger or service process
 * (units, the contracts on Hardhat's in-process chain, the biller's wire client against its
 * fixtures, the database's own rules). A minute or less; `npm test` runs them with the rest.
 * Left to `npm test`: tests that start no process but wait on real time (the chain heads'
 * subscription timeouts, the key lease's expiry), about 11 s each.
 */
import { defineConfig } from "vitest/config";
import base from "./vitest.config.ts";

export const UNIT_TESTS = [
  "test/contracts/**/*.test.ts",
  "test/biller/**/*.test.ts",
  "test/chains/until-deadline.test.ts",
  "test/docs/**/*.test.ts",
  "test/agent/a2a-tasks.test.ts",
  "test/agent/credentials.test.ts",
  "test/deploy/deploy-roles.test.ts",
  "test/facilitator/facilitator-auth.test.ts",
  "test/ledger/ledger-database.test.ts",
  "test/ledger/ledger-dir.test.ts",
  "test/server/audit-orders.test.ts",
  "test/server/callback-address.test.ts",
  "test/server/client-address.test.ts",
  "test/server/fault-logs.test.ts",
  "test/server/head-age.test.ts",
  "test/server/ledger-match.test.ts",
  "test/server/ledger-watch.test.ts",
  "test/server/contract-signature.test.ts",
  "test/server/ledger-pass.test.ts",
  "test/server/pglite-image.test.ts",
  "test/server/lifecycle.test.ts",
  "test/server/payment-checks.test.ts",
  "test/server/rates.test.ts",
  "test/server/refused-payments.test.ts",
  "test/server/logs-in-block.test.ts",
  "test/server/refund-logs.test.ts",
  "test/stack/shared-chains.test.ts",
];

// Spread, not mergeConfig: mergeConfig would add these to the base include (every test) instead of replacing it.
export default defineConfig({ ...base, test: { ...base.test, include: UNIT_TESTS } });
