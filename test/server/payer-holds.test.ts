/**
 * A payer's pulls held across instances (server/chain/payer-holds.ts): two instances, each
 * with its own operator key, on one PostgreSQL. A payer who reaches both at once cannot make
 * the second instance's pull be estimated while the first's is unmined, and so cannot make
 * it revert at BillPay's gas; a hold whose instance died, or that outlived its end, holds
 * nobody; and nothing is left held once the pulls are mined.
 */
import { randomBytes } from "node:crypto";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";
import { KeyLeases } from "../../server/chain/key-lease.ts";
import { ChainOperator, ContractRefused, onChainOrderId, type PullItem } from "../../server/chain/operator.ts";
import { DbPayerHolds, type PayerHolds } from "../../server/chain/payer-holds.ts";
import { openDb, type Db } from "../../server/db.ts";
import { silentLog } from "../../server/log.ts";
import { purgeExpired } from "../../server/storage-purge.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshAccounts, freshDatabase, leaseSharedChains, type SharedChains } from "../support/stack.ts";

const requestId = () => `req_20261129${randomBytes(12).toString("hex")}`;

describe("a payer's pulls held across instances", () => {
  const accounts = freshAccounts();
  let stack: SharedChains;
  let celo: ChainActors;
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let db: Db;
  const leases: KeyLeases[] = [];
  let operatorRole: Hex;
  const keyA = operatorAccount();
  const keyB = accounts(12); // a second operator key, as a second instance has
  const [tight, other, third] = [accounts(13), accounts(14), accounts(15)];
  /** What each take of instance B's holds answered, so the test knows B found the payer held. */
  const takenByB: Array<Set<string>> = [];
  let a: ChainOperator;
  let b: ChainOperator;

  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
    celo = chainActors(stack.deployments, "CELO");
    operatorRole = await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "OPERATOR_ROLE" });
    await celo.grantOrRevokeRole(true, operatorRole, keyB.address);
    for (const p of [tight, other, third]) await celo.approveAndAllow(p, "USDC", 100_000_000n);
    database = await freshDatabase("payer_holds");
    db = await openDb({ url: database.url, poolSize: 4 });
    for (const key of [keyA, keyB]) {
      const lease = new KeyLeases(db, silentLog);
      await lease.claim([{ role: "operator", address: key.address }]);
      leases.push(lease);
    }
    a = new ChainOperator(stack.deployments, { operator: keyA, refunder: refunderAccount() }, undefined, undefined, undefined, new DbPayerHolds(db, keyA.address));
    const holdsB = new DbPayerHolds(db, keyB.address);
    const watched: PayerHolds = {
      seconds: holdsB.seconds,
      take: async (...args) => {
        const held = await holdsB.take(...args);
        takenByB.push(held);
        return held;
      },
      renew: (...args) => holdsB.renew(...args),
      release: (...args) => holdsB.release(...args),
    };
    b = new ChainOperator(stack.deployments, { operator: keyB, refunder: refunderAccount() }, undefined, undefined, undefined, watched);
  });
  afterAll(async () => {
    for (const lease of leases) await lease.release().catch(() => {});
    await celo?.grantOrRevokeRole(false, operatorRole, keyB.address).catch(() => {});
    await db?.close();
    await database?.drop();
    await stack?.close();
  });

  const item = (payer: Address, amount = 1_000_000n): PullItem => ({ requestId: requestId(), payer: payer as Hex, token: celo.tokenAddress("USDC"), amount });
  const paidOnChain = async (i: PullItem) =>
    (await celo.publicClient.readContract({ address: celo.billPay, abi: billPayAbi, functionName: "orderOf", args: [onChainOrderId(i.requestId)] })).paid;
  const sentBy = (address: Address) => celo.publicClient.getTransactionCount({ address, blockTag: "pending" });
  const holdsLeft = async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM payer_pull_hold`))[0]!.n;

  it("a payer's pull on a second instance waits for the first instance's to be mined, then is refused by name, never sent to revert", async () => {
    await celo.setSpendingAllowance(tight, "USDC", 1_500_000n);
    try {
      await celo.miningPaused(async (mine) => {
        const [sentA, sentB] = [await sentBy(keyA.address), await sentBy(keyB.address)];
        const [first, second, elsewhere] = [item(tight.address), item(tight.address), item(other.address)];
        const pullA = a.pull("CELO", first);
        await expect.poll(() => sentBy(keyA.address), { timeout: 20_000 }).toBe(sentA + 1);
        takenByB.length = 0;
        const pullB = b.pull("CELO", second);
        // B asked for the payer's hold and found it taken by A, whose pull is still unmined.
        await expect.poll(() => takenByB.some((held) => !held.has(tight.address.toLowerCase())), { timeout: 20_000 }).toBe(true);
        // Another payer's pull on B does not wait for A's transaction.
        const otherB = b.pull("CELO", elsewhere);
        await expect.poll(() => sentBy(keyB.address), { timeout: 20_000 }).toBe(sentB + 1);
        const results = Promise.allSettled([pullA, pullB, otherB]);
        let settled: PromiseSettledResult<Hex>[] | undefined;
        void results.then((r) => (settled = r));
        await expect.poll(async () => settled !== undefined || (await mine(), false), { timeout: 20_000, interval: 100 }).toBe(true);
        expect(settled!.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
        const refusal = (settled![1] as PromiseRejectedResult).reason;
        expect(refusal).toBeInstanceOf(ContractRefused);
        expect((refusal as ContractRefused).errorName).toBe("SpendingAllowanceExceeded");
        // B sent one transaction (the other payer's): none to revert at BillPay's gas.
        expect(await sentBy(keyB.address)).toBe(sentB + 1);
        expect([await paidOnChain(first), await paidOnChain(second), await paidOnChain(elsewhere)]).toEqual([1_000_000n, 0n, 1_000_000n]);
      });
      // Every hold was given back once its transaction was mined (its caller may hear before the release).
      await expect.poll(holdsLeft, { timeout: 10_000 }).toBe(0);
    } finally {
      await celo.setSpendingAllowance(tight, "USDC", 100_000_000n);
    }
  });

  it("a batch on a second instance waits the same way for the payer's pull on the first", async () => {
    await celo.setSpendingAllowance(tight, "USDC", 2_500_000n);
    try {
      await celo.miningPaused(async (mine) => {
        const [sentA, sentB] = [await sentBy(keyA.address), await sentBy(keyB.address)];
        const lone = item(tight.address);
        const batch = [item(tight.address), item(tight.address)];
        const pullA = a.pull("CELO", lone);
        await expect.poll(() => sentBy(keyA.address), { timeout: 20_000 }).toBe(sentA + 1);
        takenByB.length = 0;
        const batchB = b.pullBatch("CELO", batch);
        await expect.poll(() => takenByB.some((held) => !held.has(tight.address.toLowerCase())), { timeout: 20_000 }).toBe(true);
        const results = Promise.allSettled([pullA, batchB]);
        let settled: PromiseSettledResult<Hex>[] | undefined;
        void results.then((r) => (settled = r));
        await expect.poll(async () => settled !== undefined || (await mine(), false), { timeout: 20_000, interval: 100 }).toBe(true);
        expect(settled!.map((r) => r.status)).toEqual(["fulfilled", "rejected"]);
        expect(((settled![1] as PromiseRejectedResult).reason as ContractRefused).errorName).toBe("SpendingAllowanceExceeded");
        expect(await sentBy(keyB.address)).toBe(sentB);
      });
      await expect.poll(holdsLeft, { timeout: 10_000 }).toBe(0);
    } finally {
      await celo.setSpendingAllowance(tight, "USDC", 100_000_000n);
    }
  });

  it("a batch of two payers, one held by another instance, keeps no hold on the other while it waits", async () => {
    await celo.miningPaused(async (mine) => {
      const sentA = await sentBy(keyA.address);
      const pullA = a.pull("CELO", item(tight.address));
      await expect.poll(() => sentBy(keyA.address), { timeout: 20_000 }).toBe(sentA + 1);
      takenByB.length = 0;
      const batch = [item(tight.address), item(third.address)];
      const batchB = b.pullBatch("CELO", batch);
      await expect.poll(() => takenByB.some((held) => held.has(third.address.toLowerCase()) && !held.has(tight.address.toLowerCase())), { timeout: 20_000 }).toBe(true);
      // The first instance pulls the other payer meanwhile: B does not keep his hold while its batch waits.
      const thirdA = a.pull("CELO", item(third.address));
      await expect.poll(() => sentBy(keyA.address), { timeout: 20_000 }).toBe(sentA + 2);
      const results = Promise.allSettled([pullA, thirdA, batchB]);
      let settled: PromiseSettledResult<Hex>[] | undefined;
      void results.then((r) => (settled = r));
      await expect.poll(async () => settled !== undefined || (await mine(), false), { timeout: 20_000, interval: 100 }).toBe(true);
      expect(settled!.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"]);
      for (const i of batch) expect(await paidOnChain(i)).toBe(1_000_000n);
    });
    await expect.poll(holdsLeft, { timeout: 10_000 }).toBe(0);
  });

  it("two instances taking the same payers in crossed order never deadlock, and never both hold one", async () => {
    const holdsA = new DbPayerHolds(db, keyA.address);
    const holdsB = new DbPayerHolds(db, keyB.address);
    const payers = Array.from({ length: 8 }, (_, i) => `0x${(i + 1).toString(16).padStart(40, "0")}`);
    for (let round = 0; round < 20; round++) {
      const [byA, byB] = await Promise.all([holdsA.take("BASE", payers), holdsB.take("BASE", [...payers].reverse())]);
      for (const p of payers) expect(Number(byA.has(p)) + Number(byB.has(p))).toBe(1);
      await Promise.all([holdsA.release("BASE", [...byA]), holdsB.release("BASE", [...byB].reverse())]);
    }
    await expect.poll(holdsLeft, { timeout: 10_000 }).toBe(0);
  });

  it("a hold whose instance died, or that outlived its end, holds nobody, and the purge removes a lapsed one", async () => {
    // An instance that died mid-send: its hold stands, its key lease beats no more.
    const dead = "0x00000000000000000000000000000000000000de";
    await db.query(`INSERT INTO key_lease (address, role, instance_id, host, pid, heartbeat_at) VALUES ($1, 'operator', 'gone:1:dead', 'gone', 1, now() - interval '1 minute')`, [dead]);
    await db.query(`INSERT INTO payer_pull_hold (chain, payer, holder, until) VALUES ('CELO', $1, $2, now() + interval '1 hour')`, [tight.address.toLowerCase(), dead]);
    const first = item(tight.address);
    await b.pull("CELO", first);
    expect(await paidOnChain(first)).toBe(1_000_000n);
    await expect.poll(holdsLeft, { timeout: 10_000 }).toBe(0);
    // A live instance's hold past its end (a release lost).
    await db.query(`INSERT INTO payer_pull_hold (chain, payer, holder, until) VALUES ('CELO', $1, $2, now() - interval '1 second')`, [tight.address.toLowerCase(), keyA.address.toLowerCase()]);
    const second = item(tight.address);
    await b.pull("CELO", second);
    expect(await paidOnChain(second)).toBe(1_000_000n);
    await expect.poll(holdsLeft, { timeout: 10_000 }).toBe(0);
    await db.query(`INSERT INTO payer_pull_hold (chain, payer, holder, until) VALUES ('CELO', $1, $2, now() - interval '1 second')`, [other.address.toLowerCase(), keyA.address.toLowerCase()]);
    expect(await purgeExpired(db, 300)).toMatchObject({ pullHolds: 1 });
    expect(await holdsLeft()).toBe(0);
  });
});
