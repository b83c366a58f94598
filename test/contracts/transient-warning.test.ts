import { describe, expect, it } from "vitest";
import { isGuardWarning } from "../../contracts/build/transient-warning.ts";

describe("the compiler's transient-storage warning", () => {
  const warning = (file: string, errorCode = "2394", severity = "warning") => ({ severity, errorCode, sourceLocation: { file } });

  it("is dropped only where OpenZeppelin's reentrancy guard raises it", () => {
    expect(isGuardWarning(warning("npm/@openzeppelin/contracts@5.7.0/utils/TransientSlot.sol"))).toBe(true);
  });

  it("still shows for the project's own tstore, for other warnings and for errors", () => {
    expect(isGuardWarning(warning("project/contracts/BillPay.sol"))).toBe(false);
    expect(isGuardWarning(warning("npm/@openzeppelin/contracts@5.7.0/utils/TransientSlot.sol", "2072"))).toBe(false);
    expect(isGuardWarning(warning("npm/@openzeppelin/contracts@5.7.0/utils/TransientSlot.sol", "2394", "error"))).toBe(false);
    expect(isGuardWarning(warning("npm/evil/@openzeppelin/contracts@5.7.0/utils/TransientSlot.sol"))).toBe(false);
  });
});
