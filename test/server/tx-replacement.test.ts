/**
 * A hot key's transaction that sits unmined is replaced at a higher fee under the same
 * nonce, and whichever is mined is the one reported: the pull happens once. The chain is
 * made to hold the first transaction by switching its automine and interval mining off
 * (test-only RPC methods).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Hex } from "viem";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { hardhatAccount, operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";
import { ChainOperator, onChainOrderId, ReplacementRefused, type RefundSigned } from "../../server/chain/operator.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { startTestChains } from "../support/stack.ts";

describe("a stuck transaction", () => {
  let stack: Awaited<ReturnType<typeof startTestChains>>;
  let celo: ChainActors;
  const rpc = (method: string, params: unknown[] = []) => celo.publicClient.request({ method: method as never, params: params as never });

  /** What BillPay holds pulled under a request's order id. */
  const paidOnChain = async (requestId: string) =>
    (await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "orderOf", args: [onChainOrderId(requestId)] })).paid;

  beforeAll(async () => {
    stack = await startTestChains();
    celo = chainActors(stack.deployments, "CELO");
  });
  afterAll(async () => {
    await rpc("evm_setAutomine", [true]).catch(() => {});
    await rpc("evm_setIntervalMining", [1000]).catch(() => {});
    await stack?.close();
  });

  it("is replaced at a quarter more fee, same nonce, and only one of them pulls", async () => {
    const payer = hardhatAccount(13);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const before = await celo.balanceOf("USDC", payer.address);
    // One replacement at most, so the mined one is that replacement however slowly this machine mines.
    const operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 500, maxReplacements: 1 });

    const signed: Hex[] = [];
    const replaced: Array<[Hex, Hex]> = [];
    await celo.miningPaused(async (mine) => {
      const requestId = "req_202611230000bbbbbbbbbbbbbbbbbbbb";
      const pulling = operator.pull(
        "CELO",
        { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n },
        async (hash) => void signed.push(hash),
        async (previous, next) => void replaced.push([previous, next]),
      );
      // The first transaction waits in the pool; note its fee.
      await expect.poll(() => signed.length, { timeout: 5_000 }).toBe(1);
      const pending = () => celo.publicClient.getTransaction({ hash: signed[0]! }).then(() => true, () => false);
      await expect.poll(pending, { timeout: 5_000 }).toBe(true);
      const original = await celo.publicClient.getTransaction({ hash: signed[0]! });
      await expect.poll(() => replaced.length, { timeout: 5_000 }).toBe(1);
      expect(replaced[0]![0]).toBe(signed[0]);
      await mine();
      const mined = await pulling;

      expect(mined).toBe(replaced[0]![1]);
      const tx = await celo.publicClient.getTransaction({ hash: mined });
      expect(tx.nonce).toBe(original.nonce);
      expect(tx.maxFeePerGas! * 100n).toBeGreaterThanOrEqual(original.maxFeePerGas! * 125n);
      expect(tx.maxPriorityFeePerGas! * 100n).toBeGreaterThanOrEqual(original.maxPriorityFeePerGas! * 125n);
      await expect(celo.publicClient.getTransactionReceipt({ hash: signed[0]! })).rejects.toThrow();
      // Pulled once.
      expect(await celo.balanceOf("USDC", payer.address)).toBe(before - 1_000_000n);
      expect(await paidOnChain(requestId)).toBe(1_000_000n);
    });
  });

  it("a replacement its caller refuses (the order was written off meanwhile) is not sent: the fee stays, and the transaction already sent is waited for", async () => {
    const payer = hardhatAccount(12);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 300, maxReplacements: 3 });
    const signed: Hex[] = [];
    let refusals = 0;
    await celo.miningPaused(async (mine) => {
      const requestId = "req_202611230000cccccccccccccccccccc";
      const pulling = operator.pull(
        "CELO",
        { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n },
        async (hash) => void signed.push(hash),
        async (_previous, _next, how) => {
          if (how === undefined) {
            refusals++;
            throw new ReplacementRefused();
          }
        },
      );
      await expect.poll(() => refusals, { timeout: 5_000 }).toBe(1);
      const original = await celo.publicClient.getTransaction({ hash: signed[0]! });
      // Past the next replacement's time: no other is even asked for.
      await new Promise((r) => setTimeout(r, 800));
      expect(refusals).toBe(1);
      await mine();
      // The transaction first sent is the one mined, at its first fee.
      expect(await pulling).toBe(signed[0]);
      const mined = await celo.publicClient.getTransaction({ hash: signed[0]! });
      expect(mined.blockNumber).not.toBeNull();
      expect(mined.maxFeePerGas).toBe(original.maxFeePerGas);
      expect(await paidOnChain(requestId)).toBe(1_000_000n);
    });
  });

  it("a replacement its caller cannot record (its database failing) is not sent, and the send fails so the caller learns of it", async () => {
    const payer = hardhatAccount(11);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 300, maxReplacements: 3 });
    const broken = new Error("the database is unreachable");
    await celo.miningPaused(async (mine) => {
      try {
        const pulling = operator.pull(
          "CELO",
          { requestId: "req_202611230000dddddddddddddddddddd", payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n },
          async () => {},
          async () => {
            throw broken;
          },
        );
        await expect(pulling).rejects.toBe(broken);
      } finally {
        await mine(); // the pull left in the pool
      }
    });
  });

  it("a refund not mined in time is waited for when the refund is tried again, its fee not raised past the market's: no second refund is signed behind it", async () => {
    const payer = hardhatAccount(10);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const requestId = "req_202611230000eeeeeeeeeeeeeeeeeeee";
    const operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 300, maxReplacements: 1, lastWaitMs: 3_000 });
    await operator.pull("CELO", { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n });
    const before = await celo.balanceOf("USDC", payer.address);
    const refunder = refunderAccount().address;
    const nonces = async () => [await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" }), await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" })];
    const [mined] = await nonces();
    const fees = await celo.publicClient.estimateFeesPerGas();
    await celo.miningPaused(async (mine) => {
      // Fees rose past what the refund's one replacement offers: not mined in time.
      // Each transaction is told before it is sent (the order records it for the payment watch).
      const told: Array<{ hash: Hex; signer: Hex; nonce: number; maxFeePerGas: bigint; known: boolean }> = [];
      const onSigned: RefundSigned = async (hash, { signer, nonce, maxFeePerGas }) =>
        void told.push({ hash, signer, nonce, maxFeePerGas, known: await celo.publicClient.getTransaction({ hash }).then(() => true, () => false) });
      await expect(operator.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n, onSigned })).rejects.toThrow(/not mined in time/);
      expect(told).toHaveLength(2); // the first and its one replacement
      expect(told.every((t) => !t.known)).toBe(true);
      // Each told with the nonce it is signed under, the replacement under the first's.
      expect(told.map((t) => [t.signer, t.nonce])).toEqual([[refunder, mined], [refunder, mined]]);
      // And with its fee as signed: the replacement's a quarter above the first's (a void must outbid both).
      expect(told[1]!.maxFeePerGas).toBe((told[0]!.maxFeePerGas * 125n + 99n) / 100n);
      expect(await nonces()).toEqual([mined, mined! + 1]);
      // Tried again (the worker's next pass): the same nonce is waited for, and mined.
      const again = operator.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n });
      // Past its replacement time (300 ms), well within its last wait (3 s): a fee raised again would show.
      await new Promise((r) => setTimeout(r, 450));
      expect(await nonces()).toEqual([mined, mined! + 1]);
      await mine();
      const outcome = await again;
      expect(outcome).toMatchObject({ txHash: expect.stringMatching(/^0x/) });
      const tx = await celo.publicClient.getTransaction({ hash: (outcome as { txHash: Hex }).txHash });
      expect(tx.nonce).toBe(mined);
      // Its fee is the first try's (one replacement, a quarter up), not raised again: the market stood still.
      expect(tx.maxFeePerGas! * 100n).toBeLessThanOrEqual(fees.maxFeePerGas * 125n + 100n);
    });
    // One refund transaction in all, and the payer refunded once.
    expect(await nonces()).toEqual([mined! + 1, mined! + 1]);
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before + 1_000_000n);
  });

  it("a refund a run that died left unmined is waited for by the next, from the order's record: never signed again under another nonce", async () => {
    const payer = hardhatAccount(10);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const requestId = "req_202611300000eeeeeeeeeeeeeeeeeeee";
    const keys = { operator: operatorAccount(), refunder: refunderAccount() };
    const died = new ChainOperator(stack.deployments, keys, { replaceAfterMs: 300, maxReplacements: 0, lastWaitMs: 300 });
    await died.pull("CELO", { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n });
    const before = await celo.balanceOf("USDC", payer.address);
    const refunder = refunderAccount().address;
    const mined = await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" });
    await celo.miningPaused(async (mine) => {
      const recorded: Hex[] = [];
      await expect(died.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n, onSigned: async (hash) => void recorded.push(hash) })).rejects.toThrow(/not mined in time/);
      expect(recorded).toHaveLength(1);
      // The next run (no memory of it), handed the order's record: it waits for that refund, signing nothing under the next nonce.
      const next = new ChainOperator(stack.deployments, keys, { replaceAfterMs: 300, maxReplacements: 1, lastWaitMs: 3_000 });
      const again = next.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n, signedBefore: recorded });
      await new Promise((r) => setTimeout(r, 450));
      expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" })).toBe(mined + 1);
      await mine();
      const outcome = (await again) as { txHash: Hex };
      expect((await celo.publicClient.getTransaction({ hash: outcome.txHash })).nonce).toBe(mined);
    });
    expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" })).toBe(mined + 1);
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before + 1_000_000n);
  });

  it("a refund another instance's refunder key left unmined is waited for: this instance signs none of its own beside it", async () => {
    const payer = hardhatAccount(10);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const requestId = "req_202611300000dddddddddddddddddddd";
    const died = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 300, maxReplacements: 0, lastWaitMs: 300 });
    await died.pull("CELO", { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n });
    // Another instance: its own refunder key (each instance has its own).
    const otherRefunder = hardhatAccount(15);
    const other = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: otherRefunder }, { replaceAfterMs: 300, maxReplacements: 1, lastWaitMs: 3_000 });
    const othersNonce = await celo.publicClient.getTransactionCount({ address: otherRefunder.address, blockTag: "pending" });
    await celo.miningPaused(async (mine) => {
      const recorded: Hex[] = [];
      await expect(died.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n, onSigned: async (hash) => void recorded.push(hash) })).rejects.toThrow(/not mined in time/);
      await expect(other.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n, signedBefore: recorded })).rejects.toThrow(
        `the same refund, transaction ${recorded[0]} from another instance's refunder key`,
      );
      expect(await celo.publicClient.getTransactionCount({ address: otherRefunder.address, blockTag: "pending" })).toBe(othersNonce);
      await mine();
    });
  });

  it("a void of a dropped refund's nonce outbids the refund's fee, is raised as the market passes it, and uses the nonce once", async () => {
    const refunder = refunderAccount().address;
    const operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() });
    const nonce = await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" });
    const market = await celo.publicClient.estimateFeesPerGas();
    // A refund recorded at twice the market's fees, then dropped (never sent here).
    const recorded = { signer: refunder, nonce, maxFeePerGas: market.maxFeePerGas * 2n, maxPriorityFeePerGas: market.maxPriorityFeePerGas * 2n };
    const voidUnder = async () => {
      const block = await celo.publicClient.getBlock({ blockTag: "pending", includeTransactions: true });
      return block.transactions.find((t) => t.from.toLowerCase() === refunder.toLowerCase() && t.nonce === nonce);
    };
    await celo.miningPaused(async (mine) => {
      expect(await operator.voidNonce("CELO", { ...recorded, signer: hardhatAccount(15).address })).toBe("not ours");
      expect(await operator.voidNonce("CELO", recorded)).toBe("sent");
      const first = (await voidUnder())!;
      expect(first).toMatchObject({ to: refunder.toLowerCase(), value: 0n });
      expect(first.maxFeePerGas!).toBeGreaterThanOrEqual((recorded.maxFeePerGas * 125n) / 100n);
      expect(first.maxPriorityFeePerGas!).toBeGreaterThanOrEqual((recorded.maxPriorityFeePerGas * 125n) / 100n);
      // Sent again while the market stands: the same transaction, which the node holds already.
      expect(await operator.voidNonce("CELO", recorded)).toBe("sent");
      expect((await voidUnder())!.hash).toBe(first.hash);
      // The base fee jumps past the void's cap: a block goes by without it, and the market is above it.
      await rpc("hardhat_setNextBlockBaseFeePerGas", [`0x${(first.maxFeePerGas! * 4n).toString(16)}`]);
      await mine();
      expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" })).toBe(nonce);
      expect(await operator.voidNonce("CELO", recorded)).toBe("sent");
      const raised = (await voidUnder())!;
      expect(raised.hash).not.toBe(first.hash);
      expect(raised.maxFeePerGas!).toBeGreaterThan(first.maxFeePerGas!);
      expect(raised.maxPriorityFeePerGas!).toBeGreaterThan(first.maxPriorityFeePerGas!);
      await mine();
    });
    // Mined: the nonce is used, once; nothing more is sent.
    await expect.poll(() => celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" }), { timeout: 10_000 }).toBe(nonce + 1);
    expect(await operator.voidNonce("CELO", recorded)).toBe("used");
    expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" })).toBe(nonce + 1);
  });

  it("a refund the pool dropped while it waited is sent again when the refund is tried again, under the same nonce", async () => {
    const payer = hardhatAccount(9);
    await celo.approveAndAllow(payer, "USDC", 5_000_000n);
    const requestId = "req_202611230000ffffffffffffffffffff";
    const operator = new ChainOperator(stack.deployments, { operator: operatorAccount(), refunder: refunderAccount() }, { replaceAfterMs: 300, maxReplacements: 1, lastWaitMs: 3_000 });
    await operator.pull("CELO", { requestId, payer: payer.address, token: celo.tokenAddress("USDC"), amount: 1_000_000n });
    const before = await celo.balanceOf("USDC", payer.address);
    const refunder = refunderAccount().address;
    const mined = await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" });
    await celo.miningPaused(async (mine) => {
      await expect(operator.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n })).rejects.toThrow(/not mined in time/);
      // The node forgets it (a restart, an eviction): nothing of the refund is pending any more.
      const pending = await celo.publicClient.getBlock({ blockTag: "pending", includeTransactions: true });
      const ours = pending.transactions.filter((t) => t.from.toLowerCase() === refunder.toLowerCase());
      expect(ours.length).toBeGreaterThan(0);
      for (const t of ours) await rpc("hardhat_dropTransaction", [t.hash]);
      expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" })).toBe(mined);
      // Tried again: sent again as it was, and mined once.
      const again = operator.refund({ chain: "CELO", orderId: onChainOrderId(requestId), amount: 1_000_000n });
      await expect.poll(() => celo.publicClient.getTransactionCount({ address: refunder, blockTag: "pending" }), { timeout: 5_000 }).toBe(mined + 1);
      await mine();
      const outcome = (await again) as { txHash: Hex };
      expect((await celo.publicClient.getTransaction({ hash: outcome.txHash })).nonce).toBe(mined);
    });
    expect(await celo.publicClient.getTransactionCount({ address: refunder, blockTag: "latest" })).toBe(mined + 1);
    expect(await celo.balanceOf("USDC", payer.address)).toBe(before + 1_000_000n);
  });
});
