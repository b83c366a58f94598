import type { HardhatPlugin } from "hardhat/types/plugins";

/**
 * Drops one compiler warning, and only where it says nothing we can act on: solc's
 * warning 2394 ("Transient storage ... can break composability") raised inside
 * OpenZeppelin's TransientSlot, which ReentrancyGuardTransient uses. The warning itself
 * says a reentrancy guard cleared at the end of the call is safe, and that is the only use
 * here. Any other file's tstore/tload still warns. Hardhat has no setting for this
 * (Foundry ignores 2394 by default); the `invokeSolc` hook is its documented way to see
 * and change the compiler's output.
 */
/** Hardhat names npm sources with their version: npm/@openzeppelin/contracts@5.7.0/utils/TransientSlot.sol. */
const OPENZEPPELIN_TRANSIENT_SLOT = /^npm\/@openzeppelin\/contracts@[^/]+\/utils\/TransientSlot\.sol$/;

/** solc's standard JSON names the file of each diagnostic; Hardhat's type leaves it out. */
type Diagnostic = { severity: string; errorCode?: string; sourceLocation?: { file: string } };
export const isGuardWarning = (e: Diagnostic) =>
  e.severity === "warning" && e.errorCode === "2394" && OPENZEPPELIN_TRANSIENT_SLOT.test(e.sourceLocation?.file ?? "");

const plugin: HardhatPlugin = {
  id: "billpay-transient-warning",
  hookHandlers: {
    // Hardhat loads a category's handlers as a module whose default export makes them.
    solidity: async () => ({
      default: async () => ({
        invokeSolc: async (context, compiler, input, config, next) => {
          const output = await next(context, compiler, input, config);
          output.errors = output.errors?.filter((e) => !isGuardWarning(e));
          return output;
        },
      }),
    }),
  },
};

export default plugin;
