/** Assertions on contract reverts: the custom error's name, decoded from the ABI by viem. */
import { BaseError, ContractFunctionRevertedError } from "viem";
import { expect } from "vitest";

function revertName(err: unknown): string | undefined {
  if (!(err instanceof BaseError)) return undefined;
  const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError);
  if (reverted instanceof ContractFunctionRevertedError) return reverted.reason ?? reverted.data?.errorName;
  return undefined;
}

/** Awaits `action` and asserts it reverted with the custom error (or reason) `name`. */
export async function expectRevert(action: Promise<unknown>, name: string): Promise<void> {
  let error: unknown;
  try {
    await action;
  } catch (err) {
    error = err;
  }
  expect(error, `expected a revert with ${name}, but the call succeeded`).toBeDefined();
  const got = revertName(error) ?? (error as Error).message;
  expect(got).toContain(name);
}
