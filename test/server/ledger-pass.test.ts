/**
 * The ledger pass (server/orders/ledger-pass.ts) against a ledger that answers as the real
 * one does, the service's own database, and a node speaking JSON-RPC:
 *   - where it starts: a database that comes to a ledger already holding payments that are
 *     not its orders (a test's service on chains other suites paid on) starts where it is
 *     told (Orphans.startAt) and takes none of the payments before it for orphans; without a
 *     start, it reads from the beginning, as a service on a ledger of its own does;
 *   - its position never passes a payment the ledger may still drop;
 *   - orphan pulls: one the chain dropped before its refund is not tried for ever, and
 *     their refunds are watched for reorganisations as deep as the ledger follows them.
 * test/ledger/reorg.test.ts holds the position against a real chain's reorganisation.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { encodeAbiParameters, encodeEventTopics, type Hex } from "viem";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { openDb, type Db } from "../../server/db.ts";
import type { LedgerPayment } from "../../server/ledger-client.ts";
import { Orphans, reconcileAuthorizationPayments, reconcileOrphanPulls, type LedgerPassDeps } from "../../server/orders/ledger-pass.ts";
import { RefusedPayments } from "../../server/orders/refused-payments.ts";
import { newOrderIds, OrderStore } from "../../server/orders/store.ts";
import { ContractRefused } from "../../server/chain/operator.ts";
import { freshDatabase } from "../support/stack.ts";

const CELO = 42220;

/**
 * A ledger holding one payment of each rail at `timestamp` in `block`, indexed to `indexed`,
 * answering `from` as the real one does (inclusive). `nonce` tells one set of payments from
 * another (a fork's); `empty` holds none; `refundedIn` shows the pull's refund in that block.
 */
function ledgerWith(timestamp: bigint, { block = 10n, indexed = 100n, nonce = 0, empty = false, refundedIn = 0n } = {}) {
  const asked: Array<{ rail: string; from: bigint }> = [];
  const payment = (rail: LedgerPayment["rail"], n: number): LedgerPayment => {
    const i = n + nonce;
    return {
      id: `p${i}`,
      rail,
      chainId: CELO,
      orderId: rail === "pull" ? `0x${String(i).repeat(64)}` : null,
      token: "0x00000000000000000000000000000000000000aa",
      payer: "0x00000000000000000000000000000000000000bb",
      amount: "1000",
      authorizationNonce: rail === "pull" ? null : `0x${String(i).repeat(64)}`,
      txHash: `0x${String(i).repeat(64)}`,
      blockNumber: block.toString(),
      timestamp: timestamp.toString(),
    } as unknown as LedgerPayment;
  };
  const all = empty ? [] : [payment("pull", 1), payment("authorization", 2), payment("permit2", 3)];
  return {
    asked,
    async indexedBlock(chainId: number) {
      return chainId === CELO ? indexed : null;
    },
    async payments(q: { chainId: number; rail: LedgerPayment["rail"]; from?: bigint }) {
      asked.push({ rail: q.rail, from: q.from ?? 0n });
      return { payments: all.filter((p) => p.rail === q.rail && BigInt(p.timestamp) >= (q.from ?? 0n)), nextCursor: null };
    },
    async order(id: string) {
      const payments = all.filter((p) => p.orderId === id.toLowerCase());
      const refunds = refundedIn ? payments.map((p) => ({ chainId: CELO, orderId: p.orderId, amount: p.amount, txHash: `0x${"f".repeat(64)}`, blockNumber: refundedIn.toString() })) : [];
      return { payments, refunds };
    },
  };
}

/** BillPay's `Refunded` log of a pull's refund, as a node's eth_getLogs answers it. */
function refundLog(orderId: string, block: bigint, txHash: string) {
  const payer = "0x00000000000000000000000000000000000000bb";
  const token = "0x00000000000000000000000000000000000000aa";
  return {
    address: `0x${"c0".repeat(20)}`,
    topics: encodeEventTopics({ abi: billPayAbi, eventName: "Refunded", args: { orderId: orderId as Hex, payer, token } }),
    data: encodeAbiParameters([{ type: "uint256" }, { type: "bytes32" }], [1000n, `0x${"0".repeat(64)}`]),
    blockNumber: `0x${block.toString(16)}`,
    blockHash: `0x${"b".repeat(64)}`,
    transactionHash: txHash,
    transactionIndex: "0x0",
    logIndex: "0x0",
    removed: false,
  };
}

for (const kind of ["pglite", "postgresql"] as const) describe(`the ledger pass on ${kind}`, () => {
  let db: Db;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    if (kind === "postgresql") {
      const fresh = await freshDatabase("ledger_pass");
      drop = fresh.drop;
      db = await openDb({ url: fresh.url });
    } else db = await openDb({ pgliteDir: undefined });
  });
  afterAll(async () => {
    await db?.close();
    await drop?.();
  });
  // Each case starts from a database that has read nothing and recorded nothing.
  beforeEach(async () => {
    for (const table of ["reconciler_cursor", "orphan_pull", "orphan_payment"]) await db.query(`DELETE FROM ${table}`);
  });

  /** BillPay's refund of a pull, as the operator sends it: by default the order id is one BillPay does not hold. */
  const refunds: string[] = [];
  let lost = 0;
  let orphanPulls = 0;
  let budgetAvailable = 10_000n;
  let budgetLimit = 10_000n;
  let waited = 0;
  let waitedToken = "";
  const errors: string[] = [];
  const budgetReads: string[] = [];
  const budgetForgets: string[] = [];
  let refund = async (a: { orderId: string }): Promise<object> => {
    refunds.push(a.orderId);
    throw new ContractRefused("UnknownOrder", [a.orderId], "BillPay refused: UnknownOrder");
  };
  beforeEach(() => {
    refunds.length = 0;
    budgetAvailable = 10_000n;
    budgetLimit = 10_000n;
    waited = 0;
    errors.length = 0;
    budgetReads.length = 0;
    budgetForgets.length = 0;
  });

  /**
   * The service's own node, as JSON-RPC over HTTP: what it holds of each refund transaction
   * (mined in a block, pending in its pool, or nothing), and the order ids BillPay holds a
   * pull under (its `orderOf`).
   */
  const node = new Map<string, { mined?: bigint; pending?: boolean }>();
  const billPayHolds = new Set<string>();
  /** BillPay's refund logs the node holds, as eth_getLogs answers them, and the ranges it was asked for. */
  const nodeLogs: object[] = [];
  /** The node's head block. */
  let nodeHead = 100n;
  /** eth_getLogs: the logs in the range asked, which is noted. */
  const logsIn = (range: { fromBlock: string; toBlock: string }) => {
    logsAsked.push(range);
    return nodeLogs.filter((l) => BigInt((l as { blockNumber: string }).blockNumber) >= BigInt(range.fromBlock) && BigInt((l as { blockNumber: string }).blockNumber) <= BigInt(range.toBlock));
  };
  const logsAsked: Array<{ fromBlock: string; toBlock: string }> = [];
  let rpc: Server;
  let rpcUrl = "";
  beforeAll(async () => {
    rpc = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        const asked = JSON.parse(body) as { id: number; method: string; params: [string] } | Array<{ id: number; method: string; params: [string] }>;
        const answer = (r: { id: number; method: string; params: [string] }) => {
          const held = typeof r.params?.[0] === "string" ? node.get(r.params[0].toLowerCase()) : undefined;
          const hex = (n: bigint) => `0x${n.toString(16)}`;
          const tx = { hash: r.params?.[0], blockHash: null, blockNumber: null, from: `0x${"0".repeat(40)}`, to: `0x${"0".repeat(40)}`, nonce: "0x0", gas: "0x0", gasPrice: "0x0", value: "0x0", input: "0x", type: "0x0", v: "0x1b", r: "0x1", s: "0x1", transactionIndex: null };
          const receipt = held?.mined !== undefined && {
            transactionHash: r.params[0], blockHash: `0x${"b".repeat(64)}`, blockNumber: hex(held.mined), status: "0x1", logs: [], gasUsed: "0x0", cumulativeGasUsed: "0x0",
            effectiveGasPrice: "0x0", transactionIndex: "0x0", from: tx.from, to: tx.to, contractAddress: null, logsBloom: `0x${"0".repeat(512)}`, type: "0x0",
          };
          // orderOf(orderId): (payer, paid, token, refunded, pulledAt), a payer of zero for none.
          const orderOf = (call: { data?: string; input?: string }) => {
            const data = (call.data ?? call.input ?? "").toLowerCase();
            const holds = [...billPayHolds].some((id) => data.includes(id.slice(2).toLowerCase()));
            return `0x${(holds ? "bb" : "00").padStart(64, "0")}${"0".repeat(64 * 4)}`;
          };
          const result =
            r.method === "eth_getTransactionReceipt" ? receipt || null
            : r.method === "eth_getTransactionByHash" ? (held?.pending ? tx : null)
            : r.method === "eth_call" ? orderOf(r.params[0] as unknown as { data?: string })
            : r.method === "eth_getLogs" ? logsIn(r.params[0] as unknown as { fromBlock: string; toBlock: string })
            : r.method === "eth_blockNumber" ? hex(nodeHead)
            : null;
          return { jsonrpc: "2.0", id: r.id, result };
        };
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(Array.isArray(asked) ? asked.map(answer) : answer(asked)));
      });
    });
    await new Promise<void>((r) => rpc.listen(0, "127.0.0.1", r));
    rpcUrl = `http://127.0.0.1:${(rpc.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => rpc.close(() => r())));
  beforeEach(() => {
    node.clear();
    billPayHolds.clear();
    nodeLogs.length = 0;
    logsAsked.length = 0;
    nodeHead = 100n;
  });

  const pass = async (ledger: ReturnType<typeof ledgerWith>) => {
    const orphans = new Orphans(db);
    const log = { debug() {}, info() {}, warn() {}, error: (msg: string) => void errors.push(msg) };
    const metrics = { orphanPulls: { inc: () => orphanPulls++ }, refundsLost: { inc: () => lost++ }, refundsWaiting: { inc: (l: { token: string }) => ((waitedToken = l.token), waited++) } };
    const operator = { refund: (a: { orderId: string }) => refund(a) };
    const refundBudgets = {
      read: async (chain: string, token: string) => (budgetReads.push(`${chain}:${token}`), { limit: budgetLimit, period: 86_400n, available: budgetAvailable }),
      forget: (chain: string, token: string) => void budgetForgets.push(`${chain}:${token}`),
    };
    const deployments = { chains: { CELO: { rpcUrl, billPay: { address: `0x${"c0".repeat(20)}` }, tokens: [{ symbol: "USDC", address: "0x00000000000000000000000000000000000000AA" }] } } };
    const deps = { deployments, ledger, orders: new OrderStore(db), orphans, refused: new RefusedPayments(db), log, metrics, operator, refundBudgets } as unknown as LedgerPassDeps;
    await reconcileOrphanPulls(deps);
    await reconcileAuthorizationPayments(deps);
    return orphans.all();
  };

  it("started past the ledger's payments: reads every rail from there and records none of them", async () => {
    await new Orphans(db).startAt(CELO, 1_001n);
    const ledger = ledgerWith(1_000n);
    const recorded = await pass(ledger);
    expect(ledger.asked).toEqual([
      { rail: "pull", from: 1_001n },
      { rail: "authorization", from: 1_001n },
      { rail: "permit2", from: 1_001n },
    ]);
    expect(recorded).toEqual({ pulls: [], payments: [] });
  });

  it("never moves a pass back: a start before where it has read leaves it there", async () => {
    const orphans = new Orphans(db);
    await orphans.startAt(CELO, 2_000n);
    await orphans.startAt(CELO, 5n);
    const ledger = ledgerWith(1_000n);
    await pass(ledger);
    expect(ledger.asked.map((a) => a.from)).toEqual([2_000n, 2_000n, 2_000n]);
  });

  it("not started: reads from the beginning and records every payment it has no order for", async () => {
    const ledger = ledgerWith(1_000n);
    const recorded = await pass(ledger);
    expect(ledger.asked.map((a) => a.from)).toEqual([0n, 0n, 0n]);
    expect(recorded.payments.map((p) => p.rail).sort()).toEqual(["authorization", "permit2"]);
    expect(recorded.pulls).toHaveLength(1);
  });

  it("never passes a payment the ledger may still drop: one landing again in a reorganised block, with an earlier second, is still read", async () => {
    // The dropped fork: each rail's payment in block 10, at a second far ahead, read while
    // the ledger is 2 blocks past it.
    const dropped = ledgerWith(5_000n, { block: 10n, indexed: 12n, nonce: 0 });
    await pass(dropped);
    // The chain is reorganised from block 10: other payments land in block 10, at an earlier
    // second. Still within reach of a reorganisation, they are read, and hold the pass too.
    const kept = ledgerWith(1_500n, { block: 10n, indexed: 20n, nonce: 3 });
    const recorded = await pass(kept);
    expect(kept.asked.map((a) => a.from)).toEqual([0n, 0n, 0n]);
    expect(recorded.pulls.map((p) => p.order_id)).toContain(`0x${"4".repeat(64)}`);
    expect(recorded.payments.map((p) => p.auth_nonce)).toEqual(expect.arrayContaining([`0x${"5".repeat(64)}`, `0x${"6".repeat(64)}`]));
    // Once the ledger is as deep past them as it follows a reorganisation, the pass moves on to their second.
    await pass(ledgerWith(1_500n, { block: 10n, indexed: 40n, nonce: 3 }));
    const later = ledgerWith(1_500n, { block: 10n, indexed: 40n, nonce: 3 });
    await pass(later);
    expect(later.asked.map((a) => a.from)).toEqual([1_500n, 1_500n, 1_500n]);
  });

  it("a pull under the id of a pull order on another chain is an orphan pull: an order id carries no chain", async () => {
    const orders = new OrderStore(db);
    const pullId = `0x${"1".repeat(64)}`;
    const { orders: made } = await orders.createPullOrders(
      [
        {
          ...newOrderIds(),
          bodyHash: "bill",
          bill: {},
          vend: null,
          chain: "BASE",
          token: "USDC",
          tokenAddress: "0x00000000000000000000000000000000000000aa",
          payer: "0x00000000000000000000000000000000000000bb",
          amount: 1000n,
          batchId: null,
          scheduleId: null,
          idempotencyKey: null,
        },
      ],
      60,
    );
    // Served on Base under the id the ledger shows a pull under on Celo.
    await db.query(`UPDATE bill_order SET onchain_order_id = $2, status = 'SUCCESS' WHERE request_id = $1`, [made[0]!.requestId, pullId]);
    try {
      const counted = orphanPulls;
      const recorded = await pass(ledgerWith(1_000n));
      expect(recorded.pulls.map((p) => [p.chain, p.order_id])).toEqual([["CELO", pullId]]);
      expect(orphanPulls).toBe(counted + 1);
    } finally {
      await db.query(`DELETE FROM bill_order WHERE request_id = $1`, [made[0]!.requestId]);
    }
  });

  it("an orphan pull the chain dropped before its refund is not retried for ever; landing again, it is refunded", async () => {
    const pullId = `0x${"1".repeat(64)}`;
    const status = async () => (await db.query<{ status: string }>(`SELECT status FROM orphan_pull WHERE order_id = $1`, [pullId]))[0]?.status;
    // Recorded while BillPay refuses its refund (the node already on another fork) and the
    // ledger still shows it: tried again on the next pass.
    const landed = ledgerWith(1_000n, { block: 10n, indexed: 12n });
    await pass(landed);
    expect(refunds).toEqual([pullId]);
    expect(await status()).toBe("REFUNDING");
    // Reorganised away: BillPay holds nothing under the order id, and the ledger no longer
    // shows it. One more refusal, then no more tries.
    const reorganised = ledgerWith(1_000n, { indexed: 13n, empty: true });
    await pass(reorganised);
    expect(await status()).toBe("DROPPED");
    await pass(reorganised);
    expect(refunds).toEqual([pullId, pullId]);

    // Landed again by whoever holds the key: recorded afresh, and refunded.
    const saved = refund;
    refund = async (a) => (refunds.push(a.orderId), { txHash: `0x${"e".repeat(64)}`, block: 15n });
    try {
      await pass(ledgerWith(2_000n, { block: 14n, indexed: 15n }));
    } finally {
      refund = saved;
    }
    expect(await status()).toBe("REFUNDED");
    expect(refunds).toHaveLength(3);
  });

  it("an orphan pull's refund reorganised away while the pull stands is sent again, once the ledger is past its block and the node holds it nowhere; watched no deeper than the ledger follows", async () => {
    const pullId = `0x${"1".repeat(64)}`;
    const refundTx = `0x${"e".repeat(64)}`;
    const row = async () => (await db.query<{ status: string; refund_block: string | null }>(`SELECT status, refund_block::text AS refund_block FROM orphan_pull WHERE order_id = $1`, [pullId]))[0];
    const saved = refund;
    let block = 11n;
    refund = async (a) => (refunds.push(a.orderId), { txHash: refundTx, block });
    lost = 0;
    try {
      // Refunded in block 11; the ledger, indexed to 10 only, cannot tell yet.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n }));
      expect(refunds).toEqual([pullId]);
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n }));
      // Shown refunded past its block: nothing more.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 12n, refundedIn: 11n }));
      expect(refunds).toEqual([pullId]);
      // Not shown, but the node has it mined again in block 14: watched there, nothing sent.
      node.set(refundTx, { mined: 14n });
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 13n }));
      expect(await row()).toEqual({ status: "REFUNDED", refund_block: "14" });
      // Back in the node's pool: waited for.
      node.set(refundTx, { pending: true });
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 15n }));
      expect(refunds).toEqual([pullId]);
      // Indexed past it, the ledger shows the pull and no refund, and the node has it nowhere:
      // lost, sent again, once.
      node.clear();
      block = 16n;
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 15n }));
      expect(refunds).toEqual([pullId, pullId]);
      expect(lost).toBe(1);
      expect(await row()).toEqual({ status: "REFUNDED", refund_block: "16" });
      // Past the depth, a refund the ledger no longer shows is no longer looked for.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 16n + 30n }));
      expect(refunds).toHaveLength(2);
      expect(lost).toBe(1);
    } finally {
      refund = saved;
    }
  });

  it("an orphan pull gone from the chain with its refund owes nothing; landing again, however late, it is refunded again", async () => {
    const pullId = `0x${"1".repeat(64)}`;
    const saved = refund;
    refund = async (a) => (refunds.push(a.orderId), { txHash: `0x${"e".repeat(64)}`, block: 11n });
    lost = 0;
    try {
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n }));
      expect(refunds).toEqual([pullId]);
      const status = async () => (await db.query<{ status: string }>(`SELECT status FROM orphan_pull WHERE order_id = $1`, [pullId]))[0]!.status;
      // The ledger, mid-way through a reorganisation, shows neither; the node has the refund
      // mined again: nothing is decided, the refund is watched there.
      node.set(`0x${"e".repeat(64)}`, { mined: 13n });
      await pass(ledgerWith(1_000n, { indexed: 14n, empty: true }));
      expect(await status()).toBe("REFUNDED");
      expect((await db.query<{ block: string }>(`SELECT refund_block::text AS block FROM orphan_pull WHERE order_id = $1`, [pullId]))[0]!.block).toBe("13");
      node.clear();
      // The ledger shows neither, but BillPay on the node still holds the pull: its refund is lost, sent again.
      billPayHolds.add(pullId);
      await pass(ledgerWith(1_000n, { indexed: 14n, empty: true }));
      expect(refunds).toHaveLength(2);
      expect(lost).toBe(1);
      billPayHolds.clear();
      // Both reorganised away, on the ledger and on the node: nothing sent, the pull marked dropped.
      await pass(ledgerWith(1_000n, { indexed: 15n, empty: true }));
      expect(refunds).toHaveLength(2);
      expect(lost).toBe(1);
      expect(await status()).toBe("DROPPED");
      // The pull lands again long after (whoever holds the operator key kept it): refunded
      // again, and not counted as another orphan pull (the key's alert has rung for it).
      const counted = orphanPulls;
      await pass(ledgerWith(2_000n, { block: 60n, indexed: 61n }));
      expect(refunds).toEqual([pullId, pullId, pullId]);
      expect(orphanPulls).toBe(counted);
    } finally {
      refund = saved;
    }
  });

  it("an orphan pull BillPay had refunded already is recorded with that refund, as the ledger or else the service's node shows it, and watched; shown nowhere, it is tried again", async () => {
    const pullId = `0x${"1".repeat(64)}`;
    const refundTx = `0x${"d".repeat(64)}`;
    const row = async (id = pullId) =>
      (await db.query(`SELECT status, refund_tx_hash, refund_block::text AS refund_block FROM orphan_pull WHERE order_id = $1`, [id]))[0];
    const saved = refund;
    refund = async (a) => (refunds.push(a.orderId), { alreadyRefunded: true, errorName: "AlreadyRefunded" });
    lost = 0;
    try {
      // Neither the ledger, indexed to 40, nor the node shows where: nothing is recorded, and
      // it is tried again. The node is asked from the ledger's reorganisation depth under its head.
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 40n }));
      expect(await row()).toEqual({ status: "REFUNDING", refund_tx_hash: null, refund_block: null });
      expect(errors).toContain("could not refund an orphan pull; will retry");
      expect(logsAsked.map((a) => BigInt(a.fromBlock))).toEqual([10n]);
      // The node holds it in block 41, a block ahead of the ledger, beside another order's
      // refund: this pull's is recorded, and watched there.
      // The node is far ahead: it is asked newest first, 2,000 blocks a request.
      nodeHead = 5_000n;
      logsAsked.length = 0;
      nodeLogs.push(refundLog(`0x${"9".repeat(64)}`, 41n, `0x${"c".repeat(64)}`), refundLog(pullId, 41n, refundTx));
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 40n }));
      expect(await row()).toEqual({ status: "REFUNDED", refund_tx_hash: refundTx, refund_block: "41" });
      expect(logsAsked.map((a) => [BigInt(a.fromBlock), BigInt(a.toBlock)])).toEqual([
        [3_001n, 5_000n],
        [1_001n, 3_000n],
        [10n, 1_000n],
      ]);
      // Reorganised away before the ledger ever showed it, the pull standing: lost, sent again.
      nodeLogs.length = 0;
      refund = async (a) => (refunds.push(a.orderId), { txHash: `0x${"e".repeat(64)}`, block: 43n });
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 42n }));
      expect(lost).toBe(1);
      expect(await row()).toEqual({ status: "REFUNDED", refund_tx_hash: `0x${"e".repeat(64)}`, refund_block: "43" });

      // Shown by the ledger already: that refund is recorded, and the node is not asked.
      refund = async (a) => (refunds.push(a.orderId), { alreadyRefunded: true, errorName: "AlreadyRefunded" });
      logsAsked.length = 0;
      await pass(ledgerWith(1_000n, { block: 50n, indexed: 60n, nonce: 7, refundedIn: 52n }));
      expect(await row(`0x${"8".repeat(64)}`)).toEqual({ status: "REFUNDED", refund_tx_hash: `0x${"f".repeat(64)}`, refund_block: "52" });
      expect(logsAsked).toEqual([]);
    } finally {
      refund = saved;
    }
  });

  it("an orphan pull's refund waits for BillPay's refund budget instead of being tried each pass", async () => {
    // Said once per process: each database's run uses a pull of its own.
    const nonce = kind === "pglite" ? 0 : 5;
    const pullId = `0x${String(1 + nonce).repeat(64)}`;
    const saved = refund;
    refund = async (a) => (refunds.push(a.orderId), { txHash: `0x${"e".repeat(64)}`, block: 11n });
    try {
      budgetAvailable = 999n; // the pull is 1000
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n, nonce }));
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n, nonce }));
      expect(refunds).toEqual([]);
      // The budget of the pull's own chain and token is asked; its wait is said and counted once.
      expect(new Set(budgetReads)).toEqual(new Set([`CELO:${"0x00000000000000000000000000000000000000aa"}`]));
      expect(errors.filter((e) => e.includes("waits for the refund budget"))).toHaveLength(1);
      expect(waited).toBe(1);
      expect(waitedToken).toBe("USDC");
      budgetAvailable = 1_000n;
      await pass(ledgerWith(1_000n, { block: 10n, indexed: 10n, nonce }));
      expect(refunds).toEqual([pullId]);
      // The figure it spent from is read afresh next time.
      expect(budgetForgets).toEqual([`CELO:${"0x00000000000000000000000000000000000000aa"}`]);
      // A pull the budget can never hold waits for the admin, said once as such.
      budgetLimit = 999n;
      budgetAvailable = 999n;
      await pass(ledgerWith(1_500n, { block: 12n, indexed: 12n, nonce: nonce + 1 }));
      await pass(ledgerWith(1_500n, { block: 12n, indexed: 12n, nonce: nonce + 1 }));
      expect(refunds).toEqual([pullId]);
      expect(errors.filter((e) => e.includes("can ever hold"))).toHaveLength(1);
    } finally {
      refund = saved;
    }
  });
});
