/**
 * Pulls that arrive while the operator key is sending go out together as one pullBatch
 * (server/chain/operator.ts). Each caller still gets its own answer: a payer whose allowance
 * cannot cover its pull fails alone, a caller that withdraws at signing is left out, a
 * payer's next pull waits until his last is mined (none is sent to revert), and no order is
 * ever pulled twice (BillPay keys every pull by its order id).
 */
import { randomBytes } from "node:crypto";
import { createWalletClient, decodeFunctionData, http, type Address, type Hex } from "viem";
import { viemChain } from "../../lib/chains.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { loadArtifact } from "../../lib/artifacts.ts";
import { deployerAccount, operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";
import { ChainOperator, ContractRefused, onChainOrderId, ReplacementRefused, REVERTED_BY_PAYER, REVERTED_ON_CHAIN, type PullItem } from "../../server/chain/operator.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshAccounts, leaseSharedChains, type SharedChains } from "../support/stack.ts";

const requestId = () => `req_20261123${randomBytes(12).toString("hex")}`;

describe("gathered pulls", () => {
  const accounts = freshAccounts();
  let stack: SharedChains;
  let celo: ChainActors;
  let operator: ChainOperator;
  const payers = [13, 14, 15, 16, 18].map((i) => accounts(i));

  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
    celo = chainActors(stack.deployments, "CELO");
    operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() });
    for (const p of payers) await celo.approveAndAllow(p, "USDC", 100_000_000n);
  });
  afterAll(() => stack?.close());

  const item = (payer: Address, amount = 1_000_000n): PullItem => ({ requestId: requestId(), payer: payer as Hex, token: celo.tokenAddress("USDC"), amount });
  const paidOnChain = async (i: PullItem) =>
    (await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "orderOf", args: [onChainOrderId(i.requestId)] })).paid;

  /** The operator key's transactions sent so far, mined or not. */
  const sentByOperator = () => celo.publicClient.getTransactionCount({ address: operatorAccount().address, blockTag: "pending" });


  /** BillPay's function a transaction called, and how many pulls it carried. */
  const called = async (hash: Hex) => {
    const { functionName, args } = decodeFunctionData({ abi: billPayAbi, data: (await celo.publicClient.getTransaction({ hash })).input });
    return { functionName, pulls: functionName === "pullBatch" ? (args[0] as unknown[]).length : 1 };
  };
  /** `results` once settled, mining a block at each look (whatever was sent meanwhile is mined too). */
  async function settledMining<T>(results: Promise<T>, mine: () => Promise<unknown>): Promise<T> {
    let settled: T | undefined;
    void results.then((r) => (settled = r));
    await expect.poll(async () => settled !== undefined || (await mine(), false), { timeout: 20_000, interval: 100 }).toBe(true);
    return settled!;
  }

  it("sends a lone pull at once by itself, and pulls arriving during a send together in one pullBatch", async () => {
    const first = item(payers[0]!.address);
    const sending = operator.pull("CELO", first);
    await new Promise((r) => setImmediate(r)); // the first is now being sent
    const rest = payers.slice(1).map((p) => item(p.address));
    const hashes = await Promise.all([sending, ...rest.map((i) => operator.pull("CELO", i))]);
    expect(new Set(hashes.slice(1)).size).toBe(1);
    expect(hashes[1]).not.toBe(hashes[0]);
    expect(await called(hashes[0]!)).toEqual({ functionName: "pull", pulls: 1 });
    expect(await called(hashes[1]!)).toEqual({ functionName: "pullBatch", pulls: rest.length });
    for (const i of [first, ...rest]) expect(await paidOnChain(i)).toBe(1_000_000n);
  });

  it("fails only the pull whose payer cannot cover it; the others in its group are pulled", async () => {
    const poor = accounts(17); // never set an allowance
    const blocker = operator.pull("CELO", item(payers[0]!.address));
    await new Promise((r) => setImmediate(r));
    const good = [item(payers[1]!.address), item(payers[2]!.address)];
    const bad = item(poor.address);
    const results = await Promise.allSettled([blocker, operator.pull("CELO", good[0]!), operator.pull("CELO", bad), operator.pull("CELO", good[1]!)]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
    const refusal = (results[2] as PromiseRejectedResult).reason;
    expect(refusal).toBeInstanceOf(ContractRefused);
    expect((refusal as ContractRefused).errorName).toMatch(/SpendingAllowanceExceeded|ERC20InsufficientAllowance/);
    for (const i of good) expect(await paidOnChain(i)).toBe(1_000_000n);
    expect(await paidOnChain(bad)).toBe(0n);
  });

  it("after a batch one payer's refusal stopped, sends the others' pulls one after another, none waiting for the last to be mined", async () => {
    // Mining paused: were each pull to wait for the one before it to be mined, the second would never go out.
    await celo.miningPaused(async (mine) => {
      const mined = await sentByOperator();
      const blocker = operator.pull("CELO", item(payers[0]!.address));
      await new Promise((r) => setImmediate(r));
      const good = [item(payers[1]!.address), item(payers[2]!.address), item(payers[3]!.address)];
      const bad = item(accounts(17).address); // never set an allowance
      const results = Promise.allSettled([blocker, operator.pull("CELO", good[0]!), operator.pull("CELO", bad), operator.pull("CELO", good[1]!), operator.pull("CELO", good[2]!)]);
      // The blocker and each good pull are sent before any of them is mined.
      await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(mined + 1 + good.length);
      await mine();
      expect((await results).map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled", "fulfilled"]);
      for (const i of good) expect(await paidOnChain(i)).toBe(1_000_000n);
      expect(await paidOnChain(bad)).toBe(0n);
    });
  });

  /** An operator of its own: the payers of a gathered batch that reverted stay apart on it for an hour. */
  const ownOperator = () => new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() });

  it("a batch one payer made revert on chain (his allowance lowered after the estimate) pulls the others alone, and tells his pull it reverted", async () => {
    const operator = ownOperator();
    const cheat = accounts(19);
    await celo.approveAndAllow(cheat, "USDC", 100_000_000n);
    const wallet = createWalletClient({ account: cheat, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    await celo.miningPaused(async (mine) => {
      const mined = await sentByOperator();
      const blocker = operator.pull("CELO", item(payers[0]!.address));
      await new Promise((r) => setImmediate(r));
      const [good, his] = [item(payers[1]!.address), item(cheat.address)];
      const results = Promise.allSettled([blocker, operator.pull("CELO", good), operator.pull("CELO", his)]);
      await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(mined + 2); // the blocker, then the two together
      // His own transaction, paying more to go first in the block: his allowance to nothing.
      await wallet.writeContract({ address: celo.billPay, abi: billPayAbi, functionName: "setSpendingAllowance", args: [celo.tokenAddress("USDC"), 0n], maxPriorityFeePerGas: 50_000_000_000n, maxFeePerGas: 500_000_000_000n });
      const settled = await settledMining(results, mine);
      expect(settled.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected"]);
      const refusal = (settled[2] as PromiseRejectedResult).reason as ContractRefused;
      expect(refusal).toBeInstanceOf(ContractRefused);
      expect(refusal.errorName).toBe(REVERTED_BY_PAYER);
      expect(refusal.message).toMatch(/reverted on chain; its payer's doing: (SpendingAllowanceExceeded|ERC20InsufficientAllowance)/);
      expect(await paidOnChain(good)).toBe(1_000_000n);
      expect(await paidOnChain(his)).toBe(0n);
    });
  });

  it("a payer who lowers his allowance ahead of a gathered batch and restores it behind it, in the same block, goes apart: the next time, his own pull reverts, and is named", async () => {
    const operator = ownOperator();
    const [blocker, cheat, inFirst, ...inSecond] = [8, 12, 9, 10, 11].map((i) => accounts(i));
    for (const p of [blocker, cheat, inFirst, ...inSecond]) await celo.approveAndAllow(p!, "USDC", 100_000_000n);
    const wallet = createWalletClient({ account: cheat!, chain: viemChain("CELO", celo.deployment.rpcUrl), transport: http(celo.deployment.rpcUrl) });
    const setAllowance = async (amount: bigint, priorityFee: bigint) =>
      wallet.writeContract({
        address: celo.billPay,
        abi: billPayAbi,
        functionName: "setSpendingAllowance",
        args: [celo.tokenAddress("USDC"), amount],
        nonce: await celo.publicClient.getTransactionCount({ address: cheat!.address, blockTag: "pending" }),
        maxPriorityFeePerGas: priorityFee,
        maxFeePerGas: 500_000_000_000n,
      });
    // His allowance to nothing, paying more to go ahead of the operator's transactions; back
    // again, paying nothing extra to go behind them: the block that mines them holds both.
    const dodge = async () => {
      await setAllowance(0n, 50_000_000_000n);
      await setAllowance(100_000_000n, 0n);
    };
    // A lone pull, then the others while it is being sent: they go out together.
    const round = async (others: PullItem[], mine: () => Promise<unknown>, sent: number) => {
      const mined = await sentByOperator();
      const first = operator.pull("CELO", item(blocker!.address));
      await new Promise((r) => setImmediate(r));
      const results = Promise.allSettled([first, ...others.map((i) => operator.pull("CELO", i))]);
      await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(mined + sent);
      await dodge();
      return settledMining(results, mine);
    };

    await celo.miningPaused(async (mine) => {
      // The first time the batch reverts, and every pull goes again alone and passes: which
      // payer made it revert cannot be told, so nobody is named.
      const first = [item(inFirst!.address), item(cheat!.address)];
      const settled = await round(first, mine, 2);
      expect(settled.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"]);
      for (const i of first) expect(await paidOnChain(i)).toBe(1_000_000n);

      // The second time his pulls go apart from the others', which still go together: his two
      // in a transaction of their own, which reverts, and each is told so.
      const [a, b, his, alsoHis] = [item(inSecond[0]!.address), item(inSecond[1]!.address), item(cheat!.address), item(cheat!.address)];
      const again = await round([a, b, his, alsoHis], mine, 3);
      expect(again.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled", "rejected", "rejected"]);
      const together = (again[1] as PromiseFulfilledResult<Hex>).value;
      expect((again[2] as PromiseFulfilledResult<Hex>).value).toBe(together);
      expect(await called(together)).toEqual({ functionName: "pullBatch", pulls: 2 });
      for (const r of again.slice(3)) {
        const refusal = (r as PromiseRejectedResult).reason as ContractRefused;
        expect(refusal).toBeInstanceOf(ContractRefused);
        expect(refusal.errorName).toBe(REVERTED_BY_PAYER);
        expect(refusal.message).toMatch(/would pass now/);
      }
      for (const i of [a, b]) expect(await paidOnChain(i)).toBe(1_000_000n);
      for (const i of [his, alsoHis]) expect(await paidOnChain(i)).toBe(0n);
    });
  });

  /**
   * A test token (contracts/test) deployed and accepted by BillPay, with a pull budget; `payer`
   * holds 5 of it and lets BillPay pull it. `wallet` is the payer's, `admin` BillPay's.
   */
  async function acceptedTestToken(contract: "TextRevertToken" | "GasHeavyToken", payer: ReturnType<typeof accounts>) {
    const rpcUrl = celo.deployment.rpcUrl;
    const chain = viemChain("CELO", rpcUrl);
    const admin = createWalletClient({ account: deployerAccount(), chain, transport: http(rpcUrl) });
    const artifact = loadArtifact(`test/${contract}.sol`, contract);
    const deployed = await celo.publicClient.waitForTransactionReceipt({ hash: await admin.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode }) });
    const token = deployed.contractAddress!;
    const adminDoes = async (functionName: "setTokenAccepted" | "setPullBudget", args: readonly unknown[]) =>
      celo.publicClient.waitForTransactionReceipt({ hash: await admin.writeContract({ address: celo.billPay, abi: billPayAbi, functionName, args } as never) });
    await adminDoes("setTokenAccepted", [token, true]);
    await adminDoes("setPullBudget", [token, 1_000_000_000n, 86_400n]);
    const wallet = createWalletClient({ account: payer, chain, transport: http(rpcUrl) });
    const does = async (address: Hex, abi: readonly unknown[], functionName: string, args: readonly unknown[], fees = {}) =>
      celo.publicClient.waitForTransactionReceipt({ hash: await wallet.writeContract({ address, abi, functionName, args, ...fees } as never) });
    await does(token, artifact.abi, "mint", [payer.address, 5_000_000n]);
    await does(token, artifact.abi, "approve", [celo.billPay, 100_000_000n]);
    await does(celo.billPay, billPayAbi, "setSpendingAllowance", [token, 100_000_000n]);
    const pullOf = (amount: bigint): PullItem => ({ requestId: requestId(), payer: payer.address as Hex, token, amount });
    return { token, abi: artifact.abi, admin, wallet, pullOf };
  }

  it("a pull the token refuses in words, not by name (as Circle's FiatToken does), is named from the chain: a short balance at the estimate, and a revert its payer brought about by moving his funds after it, his doing", async () => {
    const operator = ownOperator();
    const [payer, elsewhere] = [accounts(3), accounts(4)];
    const { token, abi, wallet, pullOf } = await acceptedTestToken("TextRevertToken", payer);

    // More than he holds: the token says so in words; named as OpenZeppelin's tokens name it, so the agent is told BALANCE_INSUFFICIENT.
    const short = await operator.pull("CELO", pullOf(9_000_000n)).then(() => undefined, (e: unknown) => e as ContractRefused);
    expect(short).toBeInstanceOf(ContractRefused);
    expect(short!.errorName).toBe("ERC20InsufficientBalance"); // on the code before: "Error"
    expect(short!.message).toContain("ERC20: transfer amount exceeds balance");

    // Covered at the estimate; his funds moved away ahead of it in the block: reverted at BillPay's gas, his doing.
    const his = pullOf(1_000_000n);
    await celo.miningPaused(async (mine) => {
      const mined = await sentByOperator();
      const pulling = operator.pull("CELO", his).then(() => undefined, (e: unknown) => e as ContractRefused);
      await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(mined + 1);
      const moving = wallet.writeContract({ address: token, abi, functionName: "transfer", args: [elsewhere.address, 5_000_000n], gas: 100_000n, maxPriorityFeePerGas: 50_000_000_000n, maxFeePerGas: 500_000_000_000n } as never);
      await moving;
      const refusal = await settledMining(pulling, mine);
      expect(refusal).toBeInstanceOf(ContractRefused);
      expect(refusal!.errorName).toBe(REVERTED_BY_PAYER); // on the code before: the token's own refusal ("Error"), never counted against him
      expect(refusal!.message).toMatch(/its payer's doing: ERC20InsufficientBalance/);
    });
    expect(await paidOnChain(his)).toBe(0n);
  });

  it("a pull that ran out of gas (its token's transfer grown dearer after the estimate) is the service's estimate falling short, never blamed on its payer", async () => {
    const operator = ownOperator();
    const payer = accounts(6);
    const { token, abi, admin, pullOf } = await acceptedTestToken("GasHeavyToken", payer);
    const his = pullOf(1_000_000n);
    await celo.miningPaused(async (mine) => {
      const mined = await sentByOperator();
      const pulling = operator.pull("CELO", his).then(() => undefined, (e: unknown) => e as ContractRefused);
      await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(mined + 1);
      // Ahead of it in the block (a higher tip), the token's transfers grow dearer by five fresh storage writes.
      await admin.writeContract({ address: token, abi, functionName: "setExtraWrites", args: [5n], gas: 100_000n, maxPriorityFeePerGas: 50_000_000_000n, maxFeePerGas: 500_000_000_000n } as never);
      const refusal = await settledMining(pulling, mine);
      expect(refusal).toBeInstanceOf(ContractRefused);
      // On the code before: it would pass now (estimated again with the dearer transfer), so RevertedByPayer, counted against him.
      expect(refusal!.errorName).toBe(REVERTED_ON_CHAIN);
      expect(refusal!.message).toMatch(/ran out of gas/);
    });
    expect(await paidOnChain(his)).toBe(0n);
  });

  it("a pull mined in the next period of its payer's spending limit (more to write than its estimate ran) still lands: the payer is not blamed for the service's own gas", async () => {
    const operator = ownOperator();
    const payer = accounts(5);
    await celo.approveAndAllow(payer, "USDC", 100_000_000n);
    // A short period, so the chain's own clock moves the pull into the next one: these chains
    // are shared, and a clock set ahead would expire other suites' authorizations.
    const PERIOD_SECONDS = 6;
    await celo.setSpendingLimit(payer, "USDC", 50_000_000n, BigInt(PERIOD_SECONDS));
    const his = item(payer.address);
    await celo.miningPaused(async (mine) => {
      const mined = await sentByOperator();
      // Estimated in the limit's first period; mined in its second, where BillPay writes the new period too.
      const pulling = operator.pull("CELO", his).then(() => "landed", (e: unknown) => (e as Error).message);
      await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(mined + 1);
      await new Promise((r) => setTimeout(r, (PERIOD_SECONDS + 2) * 1000));
      // On the code before: out of gas, "would pass now", and blamed on the payer (RevertedByPayer).
      expect(await settledMining(pulling, mine)).toBe("landed");
    });
    expect(await paidOnChain(his)).toBe(1_000_000n);
  });

  it("leaves out callers that withdraw at signing, and signs the rest again, each told the hash it ends with", async () => {
    const blocker = operator.pull("CELO", item(payers[0]!.address));
    await new Promise((r) => setImmediate(r));
    const staying = [item(payers[1]!.address), item(payers[2]!.address)];
    const leaving = item(payers[3]!.address);
    const recorded = new Map<string, Hex>();
    const record = (i: PullItem) => async (hash: Hex) => void recorded.set(i.requestId, hash);
    const replace = (i: PullItem) => async (previous: Hex, next: Hex) => {
      expect(recorded.get(i.requestId)).toBe(previous);
      recorded.set(i.requestId, next);
    };
    const withdrawn = new Error("the schedule was cancelled");
    // A callback that throws before returning its promise is left out the same way.
    const leavingAtOnce = item(payers[4]!.address);
    const refused = new Error("the api_key was retired");
    const results = await Promise.allSettled([
      blocker,
      operator.pull("CELO", staying[0]!, record(staying[0]!), replace(staying[0]!)),
      operator.pull("CELO", leaving, async () => {
        throw withdrawn;
      }),
      operator.pull("CELO", staying[1]!, record(staying[1]!), replace(staying[1]!)),
      operator.pull("CELO", leavingAtOnce, () => {
        throw refused;
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled", "rejected"]);
    expect((results[2] as PromiseRejectedResult).reason).toBe(withdrawn);
    expect((results[4] as PromiseRejectedResult).reason).toBe(refused);
    const mined = (results[1] as PromiseFulfilledResult<Hex>).value;
    expect((results[3] as PromiseFulfilledResult<Hex>).value).toBe(mined);
    // What each caller recorded last is the transaction that was mined.
    expect(recorded.get(staying[0]!.requestId)).toBe(mined);
    expect(recorded.get(staying[1]!.requestId)).toBe(mined);
    for (const i of staying) expect(await paidOnChain(i)).toBe(1_000_000n);
    expect(await paidOnChain(leaving)).toBe(0n);
    expect(await paidOnChain(leavingAtOnce)).toBe(0n);
  });

  it("signs a pull again in another transaction only under its caller's guard again: one whose guard fails meanwhile is left out", async () => {
    const blocker = operator.pull("CELO", item(payers[0]!.address));
    await new Promise((r) => setImmediate(r));
    const [staying, leaving, revoked] = [item(payers[1]!.address), item(payers[2]!.address), item(payers[3]!.address)];
    const signedAs: Array<[Hex, Hex | undefined]> = [];
    const retired = new Error("the api_key was retired after the first signing");
    const results = await Promise.allSettled([
      blocker,
      operator.pull("CELO", staying, async (hash, previous) => void signedAs.push([hash, previous])),
      operator.pull("CELO", leaving, async () => {
        throw new Error("the schedule was cancelled");
      }),
      // Its guard held at the first signing, and fails at the next.
      operator.pull("CELO", revoked, async (_hash, previous) => {
        if (previous) throw retired;
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected", "rejected"]);
    expect((results[3] as PromiseRejectedResult).reason).toBe(retired);
    // Each signing after the first named the one it took the place of.
    expect(signedAs[0]![1]).toBeUndefined();
    for (let i = 1; i < signedAs.length; i++) expect(signedAs[i]![1]).toBe(signedAs[i - 1]![0]);
    expect(signedAs.at(-1)![0]).toBe((results[1] as PromiseFulfilledResult<Hex>).value);
    expect(await paidOnChain(staying)).toBe(1_000_000n);
    expect(await paidOnChain(leaving)).toBe(0n);
    expect(await paidOnChain(revoked)).toBe(0n);
  });

  it("raises a gathered batch's fee for all of its members or none: one that refuses (its order written off) leaves every member on the transaction already sent", async () => {
    const bumping = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 300, maxReplacements: 2 });
    await celo.miningPaused(async (mine) => {
      const blocker = bumping.pull("CELO", item(payers[0]!.address));
      await new Promise((r) => setImmediate(r));
      const [kept, writtenOff] = [item(payers[1]!.address), item(payers[2]!.address)];
      const recorded = new Map<string, Hex>();
      const record = (i: PullItem) => async (hash: Hex) => void recorded.set(i.requestId, hash);
      // Each change the kept member was told of: what it held, what it holds now, and why.
      const keptLearnt: Array<[held: Hex | undefined, previous: Hex, next: Hex, how: string | undefined]> = [];
      let refused = 0;
      const pulls = Promise.all([
        blocker,
        bumping.pull("CELO", kept, record(kept), async (previous, next, how) => {
          keptLearnt.push([recorded.get(kept.requestId), previous, next, how]);
          recorded.set(kept.requestId, next);
        }),
        bumping.pull("CELO", writtenOff, record(writtenOff), async (_previous, next, how) => {
          if (how === undefined) {
            refused++;
            throw new ReplacementRefused();
          }
          recorded.set(writtenOff.requestId, next);
        }),
      ]);
      await expect.poll(() => refused, { timeout: 10_000 }).toBeGreaterThan(0);
      const sent = recorded.get(writtenOff.requestId)!;
      // The member that took the replacement is put back on the batch already sent.
      expect(recorded.get(kept.requestId)).toBe(sent);
      expect(keptLearnt).toEqual([
        [sent, sent, expect.any(String), undefined],
        [keptLearnt[0]![2], keptLearnt[0]![2], sent, "restored"],
      ]);
      await mine();
      const [, keptHash, writtenOffHash] = await pulls;
      expect(keptHash).toBe(sent);
      expect(writtenOffHash).toBe(sent);
      expect(refused).toBe(1);
      for (const i of [kept, writtenOff]) expect(await paidOnChain(i)).toBe(1_000_000n);
    });
  });

  it("a payer's next pull waits until his last is mined: one his allowance no longer covers is refused by name before it is sent, nothing reverts, and other payers' pulls do not wait", async () => {
    const tight = payers[4]!;
    await celo.setSpendingAllowance(tight, "USDC", 1_500_000n);
    try {
      // A pull sent is not yet mined when the next is estimated, at the latest block.
      await celo.miningPaused(async (mine) => {
        const sentBefore = await sentByOperator();
        const [first, second, other] = [item(tight.address), item(tight.address), item(payers[1]!.address)];
        const pulls = [operator.pull("CELO", first)];
        await new Promise((r) => setImmediate(r)); // the first is now being sent
        pulls.push(operator.pull("CELO", second), operator.pull("CELO", other));
        const results = Promise.allSettled(pulls);
        // The first and the other payer's go out before either is mined; the second waits.
        await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(sentBefore + 2);
        const settled = await settledMining(results, mine);
        expect(settled.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
        const refusal = (settled[1] as PromiseRejectedResult).reason;
        expect(refusal).toBeInstanceOf(ContractRefused);
        expect((refusal as ContractRefused).errorName).toBe("SpendingAllowanceExceeded");
        expect(await paidOnChain(first)).toBe(1_000_000n);
        expect(await paidOnChain(second)).toBe(0n);
        expect(await paidOnChain(other)).toBe(1_000_000n);
        // Two transactions: none sent to revert at BillPay's gas.
        expect(await sentByOperator()).toBe(sentBefore + 2);
      });
    } finally {
      await celo.setSpendingAllowance(tight, "USDC", 100_000_000n);
    }
  });

  it("a payer's pulls that arrive together still go in one transaction, whose estimate covers them all", async () => {
    const blocker = operator.pull("CELO", item(payers[0]!.address));
    await new Promise((r) => setImmediate(r));
    const together = [item(payers[3]!.address), item(payers[3]!.address), item(payers[2]!.address)];
    const hashes = await Promise.all([blocker, ...together.map((i) => operator.pull("CELO", i))]);
    expect(new Set(hashes.slice(1)).size).toBe(1);
    expect(hashes[1]).not.toBe(hashes[0]);
    for (const i of together) expect(await paidOnChain(i)).toBe(1_000_000n);
  });

  it("a batch of one payer's bills and a pull of his are never in flight together: whichever goes second is estimated once the first is mined, and refused by name", async () => {
    const tight = payers[4]!;
    await celo.setSpendingAllowance(tight, "USDC", 2_500_000n);
    try {
      await celo.miningPaused(async (mine) => {
        const sentBefore = await sentByOperator();
        const lone = item(tight.address, 1_000_000n);
        const batch = [item(tight.address), item(tight.address)];
        const results = Promise.allSettled([operator.pull("CELO", lone), operator.pullBatch("CELO", batch)]);
        await expect.poll(sentByOperator, { timeout: 20_000 }).toBe(sentBefore + 1);
        const settled = await settledMining(results, mine);
        // 1 + 2 USDC against an allowance of 2.5: one goes, the other is refused before it is sent.
        expect(settled.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
        const refused = settled.find((r): r is PromiseRejectedResult => r.status === "rejected")!;
        expect((refused.reason as ContractRefused).errorName).toBe("SpendingAllowanceExceeded");
        expect(await sentByOperator()).toBe(sentBefore + 1);
        const pulled = [await paidOnChain(lone), ...(await Promise.all(batch.map(paidOnChain)))];
        expect(pulled).toEqual(settled[0]!.status === "fulfilled" ? [1_000_000n, 0n, 0n] : [0n, 1_000_000n, 1_000_000n]);
      });
    } finally {
      await celo.setSpendingAllowance(tight, "USDC", 100_000_000n);
    }
  });

  it("never pulls an order twice, however its pulls are gathered", async () => {
    const once = item(payers[0]!.address);
    const blocker = operator.pull("CELO", item(payers[1]!.address));
    await new Promise((r) => setImmediate(r));
    const results = await Promise.allSettled([blocker, operator.pull("CELO", once), operator.pull("CELO", { ...once })]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(2);
    const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
    expect((refused.reason as ContractRefused).errorName).toBe("OrderExists");
    expect(await paidOnChain(once)).toBe(1_000_000n);
  });
});
