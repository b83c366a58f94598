/**
 * The audit and orders served on their own receipt: an order served while the audit ran may
 * not be in the ledger the audit read, and is listed as such; an order already served before
 * the audit caught the ledger up to the chain must be in it, or it is a discrepancy (a
 * payment the chain no longer holds).
 */
import { describe, expect, it } from "vitest";
import { auditOrders, type ServiceRecords } from "../../server/audit/orders.ts";
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
    const audit = auditOrders(records, [], [], Date.now(), 3_600, new Set(["ord_early"]));
    expect(audit.awaitingLedger).toEqual(["order ord_late (x402, SUCCESS, 1000000) was served on its receipt while the audit ran"]);
    // Served before the ledger was caught up: it must be there.
    expect(audit.discrepancies).toEqual(["order ord_early (x402, SUCCESS, 1000000) was served, but the ledger shows no payment"]);
  });

  it("holds every served order to the ledger when it is not told which were served before", () => {
    const audit = auditOrders(records, [], [], Date.now(), 3_600);
    expect(audit.awaitingLedger).toEqual([]);
    expect(audit.discrepancies).toHaveLength(2);
  });

  it("holds an order served while the audit ran to its amount once the ledger shows its payment", () => {
    const payment = { id: "p", chainId: 42220, rail: "authorization", orderId: null, authorizationNonce: "0x02", payer: PAYER, token: TOKEN, amount: 999_999n };
    const audit = auditOrders(records, [payment], [], Date.now(), 3_600, new Set(["ord_early"]));
    expect(audit.awaitingLedger).toEqual([]);
    expect(audit.discrepancies).toContain(`order ord_late (x402, SUCCESS, 1000000) was served, but the ledger shows a payment of 999999 by ${PAYER}`);
  });
});
