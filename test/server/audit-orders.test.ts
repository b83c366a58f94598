/**
 * The audit and orders served or refunded on their own receipt: an order served or refunded
 * while the audit ran may not be in the ledger the audit read, and is listed as such; an order
 * already so before the audit caught the ledger up to the chain must be in it, or it is a
 * discrepancy (a payment or refund the chain no longer holds).
 */
import { describe, expect, it } from "vitest";
import { auditOrders, recordsBefore, type ServiceRecords } from "../../server/audit/orders.ts";
import type { OpsOrder } from "../../server/audit/order-record.ts";

const PAYER = "0x00000000000000000000000000000000000000aa";
const TOKEN = "0x00000000000000000000000000000000000000bb";

function served(requestId: string, nonce: string): OpsOrder {
  return {
    request_id: requestId,
    chain: "CELO",
    rail: "x402",
    status: "SUCCESS",
    payer: PAYER,
    token_address: TOKEN,
    amount: "1000000",
    refund_fee: "0",
    auth_nonce: nonce,
    onchain_order_id: `0x${"0".repeat(64)}`,
    created_at: new Date().toISOString(),
    flag: null,
    failure_reason: null,
    auth_valid_before: null,
  } as unknown as OpsOrder;
}

describe("the audit of orders served on their receipt", () => {
  const records: ServiceRecords = { orders: [served("ord_early", "0x01"), served("ord_late", "0x02")], orphans: { pulls: [], payments: [] } };

  it("lists an order served while the audit ran, and not yet in the ledger, as awaiting the ledger", () => {
    const audit = auditOrders(records, [], [], Date.now(), 3_600, new Map([["ord_early", "SUCCESS"]]));
    expect(audit.awaitingLedger).toEqual(["order ord_late (x402, SUCCESS, 1000000) was served on its receipt while the audit ran"]);
    // Served before the ledger was caught up: it must be there.
    expect(audit.discrepancies).toEqual(["order ord_early (x402, SUCCESS, 1000000) was served, but the ledger shows no payment"]);
  });

  it("holds an order paid before the snapshot and served since to the ledger: its payment was confirmed before the heads were read", () => {
    const audit = auditOrders(records, [], [], Date.now(), 3_600, new Map([["ord_early", "SUCCESS"], ["ord_late", "PENDING"]]));
    expect(audit.awaitingLedger).toEqual([]);
    expect(audit.discrepancies).toHaveLength(2);
  });

  it("holds every served order to the ledger when it is not told which were served before", () => {
    const audit = auditOrders(records, [], [], Date.now(), 3_600);
    expect(audit.awaitingLedger).toEqual([]);
    expect(audit.discrepancies).toHaveLength(2);
  });

  it("flags an orphan closed by an operator while a refund through BillPay also went back under its key", () => {
    const orphan = (status: string, nonce: string) => ({ chain: "CELO", token_address: TOKEN, payer: PAYER, auth_nonce: nonce, amount: "500000", tx_hash: `0x${"11".repeat(32)}`, status, rail: "authorization" });
    const withdraw = `0x${"aa".repeat(32)}`;
    const viaBillPay = `0x${"bb".repeat(32)}`;
    const decided = (nonce: string, tx: string | null) =>
      ({ id: nonce, request_id: null, orphan_key: `CELO:${TOKEN}:${PAYER}:${nonce}`, action: "close-orphan", operator: "bob", reason: "asked back", outcome: "DONE", tx_hash: tx, created_at: "2026-11-28", detail: null }) as never;
    const refund = (nonce: string) => ({ id: `42220-${viaBillPay}-3`, chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: nonce, payer: PAYER, token: TOKEN, amount: 500_000n });
    const payment = (nonce: string) => ({ id: `42220-0x${"11".repeat(32)}-1`, chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: nonce, payer: PAYER, token: TOKEN, amount: 500_000n });
    const audit = auditOrders(
      {
        orders: [],
        orphans: { pulls: [], payments: [orphan("REFUNDED", "0x0a"), orphan("REFUNDED", "0x0b"), orphan("RESOLVED", "0x0c"), orphan("REFUNDED", "0x0d")] },
        reviews: [decided("0x0a", withdraw), decided("0x0b", viaBillPay), decided("0x0c", null), decided("0x0d", withdraw)],
      },
      ["0x0a", "0x0b", "0x0c", "0x0d"].map(payment),
      // 0x0a: refunded by hand and again through BillPay; 0x0b: its hand refund was BillPay's,
      // of its own key; 0x0c: kept, yet refunded through BillPay; 0x0d: by hand only.
      ["0x0a", "0x0b", "0x0c"].map(refund),
      Date.now(),
      3_600,
    );
    expect(audit.discrepancies).toEqual([
      expect.stringContaining(`refunded by hand (${withdraw}), and the ledger also shows a refund through BillPay under its key (${viaBillPay}): paid back twice`),
      expect.stringContaining("closed as kept, but the ledger shows a refund through BillPay"),
    ]);
  });

  it("takes an orphan pull dropped from the chain as owing nothing, unless the ledger shows that pull", () => {
    const pull = (id: string, status: string) => ({ chain: "CELO", order_id: id, payer: PAYER, token_address: TOKEN, amount: "500000", pull_tx_hash: `0x${"22".repeat(32)}`, status, refund_tx_hash: null });
    const [gone, back] = [`0x${"0c".repeat(32)}`, `0x${"0d".repeat(32)}`];
    const shown = { id: `42220-0x${"22".repeat(32)}-1`, chainId: 42220, rail: "pull", orderId: back, authorizationNonce: null, payer: PAYER, token: TOKEN, amount: 500_000n };
    const audit = auditOrders({ orders: [], orphans: { pulls: [pull(gone, "DROPPED"), pull(back, "DROPPED")], payments: [] } }, [shown] as never, [], Date.now(), 3_600);
    expect(audit.stuck).toEqual([]);
    expect(audit.discrepancies).toEqual([`orphan pull ${back} on CELO is marked dropped from the chain, but the ledger shows it`]);
  });

  it("takes a Permit2 order held and closed as refunded by hand, with nothing booked under its key, as resolved; any other refunded order with no payment is a discrepancy", () => {
    const refund = `0x${"cc".repeat(32)}`;
    const refunded = (requestId: string, nonce: string, status = "REFUNDED") => ({ ...served(requestId, nonce), status, payment_rail: "permit2", refund_tx_hash: status === "REFUNDED" ? refund : null }) as unknown as OpsOrder;
    const decision = (id: string, requestId: string, action: string, inflow: string | null, tx: string | null) =>
      ({ id, request_id: requestId, orphan_key: null, action, operator: "bob", reason: "sent back", outcome: "DONE", tx_hash: tx, hand_refund_inflow: inflow, created_at: "2026-11-28", detail: null }) as never;
    const audit = auditOrders(
      {
        orders: [refunded("ord_by_hand", "0x03"), refunded("ord_other", "0x04"), refunded("ord_kept", "0x05", "PAYMENT_FAILED")],
        orphans: { pulls: [], payments: [] },
        // The other order's close names a transaction, but no hold took a transfer for it; the
        // kept one was held for a refund by hand, yet left review unrefunded.
        reviews: [
          decision("1", "ord_by_hand", "hold", `8453-0x${"dd".repeat(32)}-2`, null),
          decision("2", "ord_by_hand", "close", null, refund),
          decision("3", "ord_other", "close", null, refund),
          decision("4", "ord_kept", "hold", `8453-0x${"ee".repeat(32)}-2`, null),
        ],
      },
      [],
      [],
      Date.now(),
      3_600,
    );
    expect(audit.discrepancies).toEqual([
      "order ord_other (x402, REFUNDED, 1000000) is marked refunded, but the ledger shows no payment",
      "order ord_kept (x402, PAYMENT_FAILED, 1000000) was held for a refund by hand of its payer's transfer, but left review as PAYMENT_FAILED",
    ]);
    expect(audit.resolved).toEqual([expect.stringContaining("order ord_by_hand (x402, REFUNDED, 1000000): close by bob"), expect.stringContaining("order ord_other"), expect.stringContaining("order ord_kept")]);
  });

  it("holds an order served while the audit ran to its amount once the ledger shows its payment", () => {
    const payment = { id: "p", chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: "0x02", payer: PAYER, token: TOKEN, amount: 999_999n };
    const audit = auditOrders(records, [payment], [], Date.now(), 3_600, new Map([["ord_early", "SUCCESS"]]));
    expect(audit.awaitingLedger).toEqual([]);
    expect(audit.discrepancies).toContain(`order ord_late (x402, SUCCESS, 1000000) was served, but the ledger shows a payment of 999999 by ${PAYER}`);
  });

  it("lists an order or orphan pull refunded while the audit ran, its refund (or payment) not in the ledger yet, as awaiting the ledger; one refunded before must show", () => {
    const order = (requestId: string, nonce: string) => ({ ...served(requestId, nonce), status: "REFUNDED" }) as unknown as OpsOrder;
    const payment = (nonce: string) => ({ id: `42220-0x${"dd".repeat(32)}-${nonce}`, chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: nonce, payer: PAYER, token: TOKEN, amount: 1_000_000n });
    const pull = (id: string) => ({ chain: "CELO", order_id: id, payer: PAYER, token_address: TOKEN, amount: "500000", pull_tx_hash: `0x${"22".repeat(32)}`, status: "REFUNDED", refund_tx_hash: `0x${"33".repeat(32)}` });
    const [pullBefore, pullSince] = [`0x${"0e".repeat(32)}`, `0x${"0f".repeat(32)}`];
    const records: ServiceRecords = {
      // Paid and refunded before the ledger was caught up; refunded since (its payment shown, its refund not); paid and refunded since (neither shown).
      // And one paid before the snapshot and refunded since, whose payment the ledger does not show: that must show.
      orders: [order("ord_before", "0x08"), order("ord_refund_since", "0x09"), order("ord_all_since", "0x0a"), order("ord_paid_before", "0x0b")],
      orphans: { pulls: [pull(pullBefore), pull(pullSince)], payments: [] },
    };
    // The records as read before the heads: the second order still PENDING, the third not made yet, the second pull not refunded yet.
    const before = recordsBefore({
      orders: [order("ord_before", "0x08"), { ...order("ord_refund_since", "0x09"), status: "PENDING" }, { ...order("ord_paid_before", "0x0b"), status: "PAID" }],
      orphans: { pulls: [pull(pullBefore), { ...pull(pullSince), status: "REFUNDING", refund_tx_hash: null }], payments: [] },
    });
    const audit = auditOrders(records, [payment("0x08"), payment("0x09")], [], Date.now(), 3_600, before);
    expect(audit.awaitingLedger).toEqual([
      "order ord_refund_since (x402, REFUNDED, 1000000) was refunded on its receipt while the audit ran",
      "order ord_all_since (x402, REFUNDED, 1000000) was refunded on its receipt while the audit ran",
      `orphan pull ${pullSince} on CELO was refunded on its receipt while the audit ran`,
    ]);
    expect(audit.discrepancies).toEqual([
      "order ord_before (x402, REFUNDED, 1000000) is marked refunded, but the ledger shows no refund",
      "order ord_paid_before (x402, REFUNDED, 1000000) is marked refunded, but the ledger shows no payment",
      `orphan pull ${pullBefore} on CELO is marked refunded, but the ledger shows no refund`,
    ]);
    // Without the snapshot, every one is held to the ledger as it stands.
    expect(auditOrders(records, [payment("0x08"), payment("0x09")], [], Date.now(), 3_600).discrepancies).toHaveLength(6);
  });

  it("flags a refunded order whose refunds on chain fall short of its payment (less what a late landing's keeps back for its gas), and passes one refunded exactly", () => {
    const order = (requestId: string, nonce: string, fee = "0") => ({ ...served(requestId, nonce), status: "REFUNDED", refund_fee: fee }) as unknown as OpsOrder;
    const payment = (nonce: string) => ({ id: `42220-0x${nonce.slice(2).repeat(32)}-1`, chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: nonce, payer: PAYER, token: TOKEN, amount: 1_000_000n });
    const refund = (nonce: string, amount: bigint) => ({ id: `42220-0x${"cc".repeat(32)}-${nonce}`, chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: nonce, payer: PAYER, token: TOKEN, amount });
    const audit = auditOrders(
      { orders: [order("ord_short", "0x06"), order("ord_whole", "0x07"), order("ord_late", "0x08", "20000"), order("ord_late_short", "0x09", "20000")], orphans: { pulls: [], payments: [] } },
      [payment("0x06"), payment("0x07"), payment("0x08"), payment("0x09")],
      [refund("0x06", 400_000n), refund("0x07", 1_000_000n), refund("0x08", 980_000n), refund("0x09", 979_999n)],
      Date.now(),
      3_600,
    );
    expect(audit.discrepancies).toEqual([
      "order ord_short (x402, REFUNDED, 1000000) is marked refunded, but the ledger shows 400000 refunded of the 1000000 owed of its payment of 1000000",
      "order ord_late_short (x402, REFUNDED, 1000000) is marked refunded, but the ledger shows 979999 refunded of the 980000 owed of its payment of 1000000",
    ]);
  });

  it("lists an x402 order closed as not charged when a transfer of exactly its amount from its payer, made after it, came in booked as no payment; each transfer names one order", () => {
    const failed = (requestId: string, nonce: string, amount = "1000000") => ({ ...served(requestId, nonce), status: "PAYMENT_FAILED", amount }) as unknown as OpsOrder;
    const made = Math.floor(Date.now() / 1000);
    const inflow = (amount: bigint, tx: string, timestamp = BigInt(made)) => ({ chainId: 42220, token: TOKEN, from: PAYER, amount, txHash: tx, timestamp });
    const [a, early] = [`0x${"a1".repeat(32)}`, `0x${"c3".repeat(32)}`];
    const audit = auditOrders(
      { orders: [failed("ord_one", "0x06"), failed("ord_two", "0x07"), failed("ord_other_amount", "0x08", "999999")], orphans: { pulls: [], payments: [] } },
      [],
      [],
      Date.now(),
      3_600,
      undefined,
      // One transfer of the amount made after the orders, and one made a day before them.
      [inflow(1_000_000n, a), inflow(1_000_000n, early, BigInt(made - 86_400))],
    );
    expect(audit.review).toEqual([
      `order ord_one (x402, PAYMENT_FAILED, 1000000) was closed as not charged, but the ledger shows a transfer of exactly its amount from its payer into BillPay that no payment accounts for (${a}): refund it by hand if it was this bill's`,
    ]);
    expect(audit.discrepancies).toEqual([]);
  });
});
