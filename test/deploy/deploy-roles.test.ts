/**
 * `npm run deploy` refuses roles that share an account where sharing defeats them: the admin
 * as any hot key (the deployer's, the operator's, the refunder's), and one key as both operator
 * and refunder. The run through the script itself is in celo-sepolia.test.ts.
 */
import { getAddress, type Address } from "viem";
import { privateKeyToAccount, generatePrivateKey } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { pullBudgetFromEnv } from "../../lib/deployments.ts";
import { refuseOverlappingRoles, UsageError, type DeployRoles } from "../../scripts/deploy.ts";

const fresh = (): Address => privateKeyToAccount(generatePrivateKey()).address;

describe("deploy role overlap", () => {
  const roles: DeployRoles = { admin: fresh(), pauser: fresh(), operator: fresh(), refunder: fresh() };
  const deployer = fresh();

  it("accepts four distinct roles and a deployer of its own (the pauser may be any of them)", () => {
    expect(() => refuseOverlappingRoles(roles, deployer)).not.toThrow();
    expect(() => refuseOverlappingRoles({ ...roles, pauser: roles.admin }, deployer)).not.toThrow();
  });

  it("refuses each overlap, naming the two roles, whatever the address's case", () => {
    const cases: Array<[DeployRoles, Address | undefined, string]> = [
      [{ ...roles, admin: roles.operator }, deployer, "ADMIN_ADDRESS and OPERATOR_ADDRESS are the same account"],
      [{ ...roles, admin: roles.refunder }, deployer, "ADMIN_ADDRESS and REFUNDER_ADDRESS are the same account"],
      [{ ...roles, refunder: roles.operator }, deployer, "OPERATOR_ADDRESS and REFUNDER_ADDRESS are the same account"],
      [roles, roles.admin, "ADMIN_ADDRESS and the deployer (DEPLOYER_PRIVATE_KEY) are the same account"],
      [{ ...roles, admin: roles.operator.toLowerCase() as Address }, undefined, "ADMIN_ADDRESS and OPERATOR_ADDRESS"],
      [roles, getAddress(roles.admin).toLowerCase() as Address, "ADMIN_ADDRESS and the deployer"],
    ];
    for (const [r, d, message] of cases) {
      expect(() => refuseOverlappingRoles(r, d), message).toThrow(UsageError);
      expect(() => refuseOverlappingRoles(r, d)).toThrow(message);
    }
  });

  it("checks the roles alone before the deployer is known", () => {
    expect(() => refuseOverlappingRoles(roles)).not.toThrow();
    expect(() => refuseOverlappingRoles({ ...roles, refunder: roles.operator })).toThrow(/OPERATOR_ADDRESS and REFUNDER_ADDRESS/);
  });
});

describe("pull budget from the environment", () => {
  it("defaults to 50,000 USDC (6 decimals) a day", () => {
    expect(pullBudgetFromEnv({})).toEqual({ limit: "50000000000", periodSeconds: 86_400 });
  });

  it("reads PULL_BUDGET raw units per PULL_BUDGET_PERIOD_SECONDS, refusing what BillPay would", () => {
    expect(pullBudgetFromEnv({ PULL_BUDGET: "1000000", PULL_BUDGET_PERIOD_SECONDS: "3600" })).toEqual({ limit: "1000000", periodSeconds: 3600 });
    expect(() => pullBudgetFromEnv({ PULL_BUDGET: "1.5" })).toThrow("PULL_BUDGET must be a whole number of raw token units");
    expect(() => pullBudgetFromEnv({ PULL_BUDGET: (2n ** 96n).toString() })).toThrow("PULL_BUDGET must be at most");
    for (const period of ["0", "-1", "1.5", "day"]) {
      expect(() => pullBudgetFromEnv({ PULL_BUDGET_PERIOD_SECONDS: period })).toThrow("PULL_BUDGET_PERIOD_SECONDS must be a positive whole number");
    }
    expect(() => pullBudgetFromEnv({ PULL_BUDGET_PERIOD_SECONDS: String(2 ** 32) })).toThrow("PULL_BUDGET_PERIOD_SECONDS must be at most");
  });
});
