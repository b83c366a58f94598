/**
 * `npm run admin` against the local chains: every command shows its call and what it changes
 * and sends nothing by default; with --send it changes exactly that; a call the chain would
 * refuse, a bad argument and a missing key on a non-local chain are refused before sending.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { ROLES, runAdmin, UsageError } from "../../scripts/admin.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { runScript } from "../support/processes.ts";
import { startTestChains } from "../support/stack.ts";

describe("npm run admin", () => {
  let stack: Awaited<ReturnType<typeof startTestChains>>;
  let celo: ChainActors;
  const admin = (...argv: string[]) => runAdmin(argv, stack.deployments);
  const read = <T>(functionName: string, args: unknown[] = []) =>
    celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: functionName as never, args: args as never }) as Promise<T>;
  const stranger = hardhatAccount(15).address;

  beforeAll(async () => {
    stack = await startTestChains();
    celo = chainActors(stack.deployments, "CELO");
  });
  afterAll(() => stack?.close());

  it("pause and unpause: a dry run changes nothing, --send does", async () => {
    const dry = await admin("pause");
    expect(dry.sent).toBe(false);
    expect(dry.lines).toEqual(expect.arrayContaining(["call: pause()", "now: paused: false", "simulation: the chain accepts it", "not sent (add --send to send it)"]));
    expect(dry.lines.find((l) => l.startsWith("calldata: "))).toBe("calldata: 0x8456cb59");
    expect(await read<boolean>("paused")).toBe(false);
    const sent = await admin("pause", "--send");
    expect(sent.lines).toContain("after: paused: true");
    expect(await read<boolean>("paused")).toBe(true);
    // Pausing twice: the chain would refuse it, so it is not sent.
    expect((await admin("pause")).lines.join("\n")).toContain("the chain refuses it");
    await expect(admin("pause", "--send")).rejects.toThrow(/not sent/);
    await admin("unpause", "--send");
    expect(await read<boolean>("paused")).toBe(false);
  });

  it("withdraw moves exactly the amount to the address, only when sent", async () => {
    await celo.transfer(hardhatAccount(3), "USDC", celo.billPay, 5_000_000n);
    const dry = await admin("withdraw", "--token", "USDC", "--to", stranger, "--amount", "1.5");
    expect(dry.lines).toEqual(expect.arrayContaining([`call: withdraw(${celo.tokenAddress("USDC")}, ${stranger}, 1500000)`, "now: treasury USDC: 5"]));
    expect(await celo.balanceOf("USDC", celo.billPay)).toBe(5_000_000n);
    const before = await celo.balanceOf("USDC", stranger);
    const sent = await admin("withdraw", "--token", "USDC", "--to", stranger, "--amount", "1.5", "--send");
    expect(sent.lines).toContain("after: treasury USDC: 3.5");
    expect(await celo.balanceOf("USDC", stranger)).toBe(before + 1_500_000n);
    // More than the treasury holds: refused by the simulation.
    expect((await admin("withdraw", "--token", "USDC", "--to", stranger, "--amount", "100")).lines.join("\n")).toContain("the chain refuses it");
  });

  it("drops and accepts a token", async () => {
    const usat = celo.tokenAddress("USA₮");
    expect((await admin("drop-token", "--token", "USA₮")).lines).toContain("now: USA₮ accepted: true");
    expect(await read<boolean>("isAcceptedToken", [usat])).toBe(true);
    expect((await admin("drop-token", "--token", usat, "--send")).lines).toContain("after: USA₮ accepted: false");
    expect((await admin("accept-token", "--token", "USA₮", "--send")).lines).toContain("after: USA₮ accepted: true");
  });

  it("grants and revokes a role", async () => {
    const dry = await admin("grant-role", "--role", "refunder", "--account", stranger);
    expect(dry.lines).toContain(`now: ${stranger} holds REFUNDER: false`);
    expect(await read<boolean>("hasRole", [ROLES.REFUNDER, stranger])).toBe(false);
    await admin("grant-role", "--role", "REFUNDER", "--account", stranger, "--send");
    expect(await read<boolean>("hasRole", [ROLES.REFUNDER, stranger])).toBe(true);
    await admin("revoke-role", "--role", "REFUNDER", "--account", stranger, "--send");
    expect(await read<boolean>("hasRole", [ROLES.REFUNDER, stranger])).toBe(false);
  });

  it("sets a refund budget, on BASE too", async () => {
    const dry = await admin("set-refund-budget", "--chain", "BASE", "--token", "USDC", "--limit", "250", "--period", "3600");
    expect(dry.lines[0]).toMatch(/^BASE \(chain 8453\)/);
    expect(dry.lines).toContain("now: USDC refund budget: 5000 per 86400 s, 5000 available");
    const sent = await admin("set-refund-budget", "--chain", "BASE", "--token", "USDC", "--limit", "250", "--period", "3600", "--send");
    expect(sent.lines).toContain("after: USDC refund budget: 250 per 3600 s, 250 available");
  });

  it("sets the operator's pull budget: the dry run shows it as deployed, --send changes it", async () => {
    const usdc = celo.tokenAddress("USDC");
    const budget = celo.deployment.pullBudget!;
    const dry = await admin("set-pull-budget", "--token", "USDC", "--limit", "1200.5", "--period", "3600");
    expect(dry.lines).toEqual(
      expect.arrayContaining([
        `call: setPullBudget(${usdc}, 1200500000, 3600)`,
        `now: USDC pull budget: ${Number(budget.limit) / 1e6} per ${budget.periodSeconds} s, ${Number(budget.limit) / 1e6} available`,
        "simulation: the chain accepts it",
        "not sent (add --send to send it)",
      ]),
    );
    expect(await read<readonly bigint[]>("pullBudget", [usdc])).toEqual([BigInt(budget.limit), BigInt(budget.periodSeconds), BigInt(budget.limit)]);
    const sent = await admin("set-pull-budget", "--token", "USDC", "--limit", "1200.5", "--period", "3600", "--send");
    expect(sent.lines).toContain("after: USDC pull budget: 1200.5 per 3600 s, 1200.5 available");
    expect(await read<readonly bigint[]>("pullBudget", [usdc])).toEqual([1_200_500_000n, 3600n, 1_200_500_000n]);
    // The refund budget is another bucket: untouched.
    expect((await read<readonly bigint[]>("refundBudget", [usdc]))[0]).toBe(BigInt(celo.deployment.refundBudget.limit));
    // Put back as deployed, for the tests that follow.
    await admin("set-pull-budget", "--token", "USDC", "--limit", String(Number(budget.limit) / 1e6), "--period", String(budget.periodSeconds), "--send");
  });

  it("refuses bad arguments before anything is read or sent", async () => {
    const cases: Array<[string[], RegExp]> = [
      [["launch"], /unknown command/],
      [["withdraw", "--token", "USDC", "--to", stranger], /needs --amount/],
      [["withdraw", "--token", "USDC", "--to", "0x12", "--amount", "1"], /--to must be/],
      [["withdraw", "--token", "USDC", "--to", stranger, "--amount", "-1"], /plain decimal/],
      [["accept-token", "--token", "DOGE"], /neither a token/],
      [["grant-role", "--role", "KING", "--account", stranger], /--role must be/],
      [["set-refund-budget", "--token", "USDC", "--limit", "1", "--period", "0"], /--period/],
      [["set-pull-budget", "--token", "USDC", "--limit", "1", "--period", "0"], /--period/],
      [["set-pull-budget", "--token", "USDC", "--period", "60"], /needs --limit/],
      [["pause", "--chain", "SOLANA"], /--chain must be/],
      [["pause", "now"], /unexpected argument/],
    ];
    for (const [argv, message] of cases) await expect(admin(...argv), argv.join(" ")).rejects.toThrow(message);
    await expect(admin("launch")).rejects.toBeInstanceOf(UsageError);
  });

  it("runs as `npm run admin` from the command line, and needs its own key on a real network profile", async () => {
    const run = (argv: string[], env: Record<string, string> = {}) => runScript("scripts/admin.ts", argv, { DEPLOYMENTS_FILE: stack.deploymentsFile, ...env });
    const ok = await run(["pause"]);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain("not sent (add --send to send it)");
    // A real network profile, even reached on loopback, never signs with the public test keys.
    const remote = await run(["pause"], { NETWORK: "celo-sepolia" });
    expect(remote.code).toBe(2);
    expect(remote.out).toContain("PAUSER_PRIVATE_KEY is not set");
  });
});
