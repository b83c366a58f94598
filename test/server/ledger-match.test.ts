/**
 * An x402 order is paid only by the ledger's payment under its own key (chain, token, payer,
 * authorization nonce): the matcher the order flow and the benchmark share. Addresses and
 * nonces are hex, so case never decides; every other field does.
 */
import { describe, expect, it } from "vitest";
import { isAuthorizationPayment, type LedgerPayment } from "../../server/ledger-client.ts";

const key = {
  chainId: 42220,
  token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  payer: "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
  nonce: "0xAB".padEnd(66, "c"),
};
const payment: LedgerPayment = {
  id: "42220-0x01-1",
  chainId: key.chainId,
  rail: "authorization",
  orderId: null,
  authorizationNonce: key.nonce.toLowerCase(),
  payer: key.payer.toLowerCase(),
  token: key.token.toLowerCase(),
  amount: "1001000",
  txHash: "0x01",
  blockNumber: "7",
  timestamp: "1795596926",
};

describe("isAuthorizationPayment", () => {
  const ours = isAuthorizationPayment(key);

  it("picks the payment under the order's key, whatever the case of its hex", () => {
    expect(ours(payment)).toBe(true);
    expect(ours({ ...payment, payer: key.payer, token: key.token.toUpperCase().replace("0X", "0x"), authorizationNonce: key.nonce })).toBe(true);
  });

  it("refuses a payment under any other key, or a pull", () => {
    expect(ours({ ...payment, chainId: 8453 })).toBe(false);
    expect(ours({ ...payment, token: "0x0000000000000000000000000000000000000001" })).toBe(false);
    expect(ours({ ...payment, payer: "0x0000000000000000000000000000000000000002" })).toBe(false);
    expect(ours({ ...payment, authorizationNonce: `0x${"0".repeat(64)}` })).toBe(false);
    expect(ours({ ...payment, authorizationNonce: null })).toBe(false);
    expect(ours({ ...payment, rail: "pull", orderId: key.nonce })).toBe(false);
  });
});
