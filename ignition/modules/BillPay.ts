/**
 * The Ignition module that deploys BillPay: the contract with its operator, refunder and
 * pauser, the accept-list, a refund budget and a pull budget per accepted token (a token
 * without a pull budget can be pulled from no one), and then the admin role
 * handed to the configured admin (a Safe, typically) and renounced by the deployer.
 *
 * One module for every deployment: `npm run deploy -- --network <profile>` deploys it with
 * the deployer's key through @nomicfoundation/hardhat-ignition-viem, and the local stack
 * (stack/local-deploy.ts, which the tests start) deploys the same module to its own chains.
 *
 * The token list is known when the module is built (it comes from the network profile or the
 * local deployment), so each refund and pull budget is a future of its own.
 */
import { buildModule } from "@nomicfoundation/ignition-core";
import type { Address } from "viem";

export interface BillPaySpec {
  /** The account that sends the deployment; it holds the admin role only until the hand-over. */
  deployer: Address;
  admin: Address;
  operator: Address;
  refunder: Address;
  pauser: Address;
  /** Tokens BillPay accepts for pulls. */
  tokens: readonly Address[];
  refundBudget: { limit: bigint; periodSeconds: bigint };
  /** What the operator may pull of each accepted token, from all payers together: `limit` raw units per `periodSeconds`, refilling. */
  pullBudget: { limit: bigint; periodSeconds: bigint };
}

const DEFAULT_ADMIN_ROLE = `0x${"00".repeat(32)}` as const;

export function billPayModule(spec: BillPaySpec) {
  return buildModule("BillPay", (m) => {
    // The deployer administers until the budgets are set: the admin may be a Safe that signs later.
    const billPay = m.contract("BillPay", [spec.deployer, spec.operator, spec.refunder, spec.pauser, [...spec.tokens]], { from: spec.deployer });
    const budgets = spec.tokens.flatMap((token, i) => [
      m.call(billPay, "setRefundBudget", [token, spec.refundBudget.limit, spec.refundBudget.periodSeconds], { id: `refundBudget_${i}`, from: spec.deployer }),
      m.call(billPay, "setPullBudget", [token, spec.pullBudget.limit, spec.pullBudget.periodSeconds], { id: `pullBudget_${i}`, from: spec.deployer }),
    ]);
    if (spec.admin.toLowerCase() !== spec.deployer.toLowerCase()) {
      const grant = m.call(billPay, "grantRole", [DEFAULT_ADMIN_ROLE, spec.admin], { id: "grantAdmin", from: spec.deployer, after: budgets });
      m.call(billPay, "renounceRole", [DEFAULT_ADMIN_ROLE, spec.deployer], { id: "renounceDeployerAdmin", from: spec.deployer, after: [grant] });
    }
    return { billPay };
  });
}
