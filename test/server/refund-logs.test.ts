/**
 * The one refund predicate (lib/refund-logs.ts): BillPay's refund logs as the ledger books
 * them, and as the service finds one on its own node under an order's key. Each kind of
 * refund is matched by its own key only; hex case never decides.
 */
import { decodeEventLog, encodeAbiParameters, encodeEventTopics, type Hex } from "viem";
import { describe, expect, it } from "vitest";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { permit2NonceKey } from "../../lib/permit2.ts";
import { isRefundUnder, REFUND_EVENTS, refundOf, type RefundKey } from "../../lib/refund-logs.ts";

const token = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as Hex;
const payer = "0x90F79bf6EB2c4f870365E785982E1f101E93b906" as Hex;
const orderId = `0x${"ab".repeat(32)}` as Hex;
const nonce = `0x${"cd".repeat(32)}` as Hex;
const ZERO = `0x${"0".repeat(64)}` as Hex;

/** A BillPay refund log, as a node answers it, read back the way the service reads logs. */
function logged(eventName: "Refunded" | "Permit2Refunded", last: Hex | bigint) {
  const topics = encodeEventTopics({ abi: billPayAbi, eventName, args: { orderId, payer, token } });
  const data = encodeAbiParameters([{ type: "uint256" }, { type: eventName === "Refunded" ? "bytes32" : "uint256" }], [1_001_000n, last as never]);
  return refundOf(decodeEventLog({ abi: REFUND_EVENTS, topics: topics as [Hex, ...Hex[]], data }) as Parameters<typeof refundOf>[0]);
}

describe("BillPay's refund logs", () => {
  it("are booked under the key of what they refund: a pull's order id, an x402 payment's nonce on its own rail", () => {
    expect(logged("Refunded", ZERO)).toEqual({ rail: "pull", orderId, authorizationNonce: null, payer, token, amount: 1_001_000n });
    expect(logged("Refunded", nonce)).toMatchObject({ rail: "authorization", authorizationNonce: nonce });
    // A Permit2 nonce is a uint256 on chain, written as the order keeps it (its 32-byte hex).
    expect(logged("Permit2Refunded", 7n)).toMatchObject({ rail: "permit2", authorizationNonce: permit2NonceKey(7n) });
  });

  it("match an order's key only, whatever the case of its hex", () => {
    const upper = (h: Hex) => h.toUpperCase().replace("0X", "0x") as Hex;
    const pull = logged("Refunded", ZERO);
    const eip3009 = logged("Refunded", nonce);
    const permit2 = logged("Permit2Refunded", 7n);
    const x402 = (rail: "authorization" | "permit2", n: Hex, t = token, p = payer): RefundKey => ({ rail, token: t, payer: p, nonce: n });

    expect(isRefundUnder({ orderId: upper(orderId) }, pull)).toBe(true);
    expect(isRefundUnder({ orderId: `0x${"ac".repeat(32)}` }, pull)).toBe(false);

    expect(isRefundUnder(x402("authorization", upper(nonce), upper(token), upper(payer)), eip3009)).toBe(true);
    expect(isRefundUnder(x402("authorization", `0x${"ce".repeat(32)}`), eip3009)).toBe(false);
    expect(isRefundUnder(x402("authorization", nonce, "0x0000000000000000000000000000000000000001"), eip3009)).toBe(false);
    expect(isRefundUnder(x402("authorization", nonce, token, "0x0000000000000000000000000000000000000002"), eip3009)).toBe(false);
    expect(isRefundUnder(x402("permit2", nonce), eip3009)).toBe(false); // another rail, however alike the nonce

    expect(isRefundUnder(x402("permit2", permit2NonceKey(7n)), permit2)).toBe(true);
    expect(isRefundUnder(x402("permit2", permit2NonceKey(8n)), permit2)).toBe(false);
    expect(isRefundUnder(x402("authorization", permit2NonceKey(7n)), permit2)).toBe(false);
    // A pull's refund is not an x402 payment's, nor the other way round.
    expect(isRefundUnder(x402("authorization", ZERO), pull)).toBe(false);
  });
});
