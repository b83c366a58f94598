/**
 * The treasury comparison the console and `billpay_treasury_mismatch` show
 * (server/operator/state.ts): the ledger's balance is compared with BillPay's on chain at the
 * block the ledger has indexed through, so money in a block the ledger has not indexed yet is
 * lag, not a mismatch (which, under steady traffic, would hold the critical alert up); a
 * balance that differs at that block is a mismatch.
 *
 * The lagging ledger is the real one's answers, taken before a transfer into BillPay and
 * served unchanged after it, as a ledger a few blocks behind answers.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";
import { waitForLedgerBlock } from "../../stack/ledger-process.ts";
import { OperatorState, type OperatorStateDeps } from "../../server/operator/state.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshAccounts, leaseSharedChains, type SharedChains } from "../support/stack.ts";

type Treasury = { treasury: Array<{ chainId: number; token: string; balance: string; indexedBlock: number | null }> };

describe("the treasury's match between the chain and the ledger", () => {
  const accounts = freshAccounts();
  let stack: SharedChains;
  let celo: ChainActors;
  let frozen: Server;
  let frozenUrl: string;
  /** What the frozen ledger answers, by path. */
  const answers = new Map<string, unknown>();

  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
    celo = chainActors(stack.deployments, "CELO");
    frozen = createServer((req, res) => {
      const body = answers.get(req.url ?? "");
      res.writeHead(body === undefined ? 404 : 200, { "content-type": "application/json" }).end(JSON.stringify(body ?? { error: "not found" }));
    });
    await new Promise<void>((r) => frozen.listen(0, "127.0.0.1", r));
    frozenUrl = `http://127.0.0.1:${(frozen.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => frozen?.close(r));
    await stack?.close();
  });

  const stateOf = (ledgerUrl: string) =>
    new OperatorState({ deployments: stack.deployments, ledgerUrl, keys: { operator: operatorAccount().address, refunder: refunderAccount().address }, ledgerHealth: { latest: () => [] } } as unknown as OperatorStateDeps);
  const usdcOf = async (state: OperatorState) => (await state.chains()).find((c) => c.chain === "CELO")!.tokens.find((t) => t.symbol === "USDC")!;
  const ledgerGet = async (path: string) => (await fetch(`${stack.ledgerUrl}${path}`)).json();

  it("compares at the ledger's block: a transfer the ledger has not indexed yet is no mismatch; a balance off at that block is one", async () => {
    // BillPay holds some USDC on the ledger's books (a fresh set of chains may hold none).
    await celo.transfer(accounts(3), "USDC", celo.billPay, 1_000n);
    await waitForLedgerBlock(stack.ledgerUrl, 42220, await celo.publicClient.getBlockNumber());
    const treasury = (await ledgerGet("/ledger/treasury")) as Treasury;
    answers.set("/status", await ledgerGet("/status"));
    answers.set("/ledger/treasury", treasury);
    const row = treasury.treasury.find((r) => r.chainId === 42220 && r.token === celo.tokenAddress("USDC").toLowerCase())!;
    expect(row.indexedBlock).toEqual(expect.any(Number));

    // Money into BillPay in a block the frozen ledger never indexes.
    await celo.transfer(accounts(3), "USDC", celo.billPay, 1_234_567n);
    const lagging = await usdcOf(stateOf(frozenUrl));
    expect(lagging.onChain).toBe(BigInt(row.balance) + 1_234_567n);
    expect(lagging.ledger).toBe(BigInt(row.balance));
    expect(lagging.ledgerBlock).toBe(BigInt(row.indexedBlock!));
    expect(lagging.matches).toBe(true);

    // The same ledger a unit short at its own block: that is money it cannot explain.
    answers.set("/ledger/treasury", { treasury: treasury.treasury.map((r) => (r === row ? { ...r, balance: (BigInt(r.balance) - 1n).toString() } : r)) });
    expect((await usdcOf(stateOf(frozenUrl))).matches).toBe(false);

    // A ledger ahead of this node, or a block the node cannot answer for: no verdict, and said.
    for (const indexedBlock of [row.indexedBlock! + 1_000, 0]) {
      answers.set("/ledger/treasury", { treasury: treasury.treasury.map((r) => (r === row ? { ...r, indexedBlock } : r)) });
      const [celoNow] = (await stateOf(frozenUrl).chains()).filter((c) => c.chain === "CELO");
      expect(celoNow!.tokens.find((t) => t.symbol === "USDC")!.matches).toBeNull();
      expect(celoNow!.errors).toContainEqual(expect.stringMatching(/^CELO: the treasury cannot be compared with the ledger at its block/));
    }

    // The real ledger, caught up: the transfer is in it, at the head.
    const head = await celo.publicClient.getBlockNumber();
    await waitForLedgerBlock(stack.ledgerUrl, 42220, head);
    const caughtUp = await usdcOf(stateOf(stack.ledgerUrl));
    expect(caughtUp).toMatchObject({ ledger: caughtUp.onChain, matches: true });
    expect(caughtUp.ledgerBlock).toBeGreaterThanOrEqual(head);
  });
});
