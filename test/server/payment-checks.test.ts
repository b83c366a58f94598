import { encodePaymentSignatureHeader } from "@x402/core/http";
import type { PaymentRequired } from "@x402/core/types";
import { beforeAll, describe, expect, it } from "vitest";
import type { Deployments } from "../../lib/deployments.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { checkPayment, decodePayment, PaymentRejected, type Expected } from "../../server/x402-protocol/payment.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";

// Addresses only: nothing here touches a chain.
const token = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const billPay = "0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9";
const deployments = {
  chains: { CELO: { chainId: 42220, tokens: [{ address: token, eip712Version: "2" }] } },
} as unknown as Deployments;
const payer = hardhatAccount(9);

async function signed(maxTimeoutSeconds = 300, amount = "1001000") {
  const required: PaymentRequired = {
    x402Version: 2,
    error: "payment required",
    resource: { url: "http://billpay.test/api/pay/x402", description: "bill", mimeType: "application/json" },
    accepts: [
      { scheme: "exact", network: "eip155:42220", asset: token, amount, payTo: billPay, maxTimeoutSeconds, extra: { name: "USDC", version: "2" } },
    ],
  };
  return x402ClientFor(payer, deployments).createPaymentPayload(required);
}

function expectRejected(action: () => unknown, code: string) {
  try {
    action();
  } catch (err) {
    expect(err).toBeInstanceOf(PaymentRejected);
    expect((err as PaymentRejected).code).toBe(code);
    return;
  }
  throw new Error(`expected ${code}, but the payment was accepted`);
}

describe("reading and checking an x402 payment", () => {
  let v2Header: string;
  let v1Header: string;
  let expected: Expected;

  beforeAll(async () => {
    const payload = await signed();
    v2Header = encodePaymentSignatureHeader(payload);
    const { accepted: _a, resource: _r, extensions: _e, ...rest } = payload as typeof payload & { extensions?: unknown };
    v1Header = Buffer.from(JSON.stringify({ ...rest, x402Version: 1, scheme: "exact", network: "eip155:42220" })).toString("base64");
    expected = {
      chain: "CELO",
      method: "eip3009",
      asset: token,
      payTo: billPay,
      amount: 1_001_000n,
      wallet: payer.address.toLowerCase(),
      maxTimeoutSeconds: 300,
      nowSeconds: BigInt(Math.floor(Date.now() / 1000)),
    };
  });

  it("reads the same authorization from a v2 PAYMENT-SIGNATURE and a v1 X-PAYMENT", () => {
    const v2 = decodePayment("PAYMENT-SIGNATURE", v2Header);
    const v1 = decodePayment("X-PAYMENT", v1Header);
    expect(v2).toMatchObject({ x402Version: 2, scheme: "exact", network: "eip155:42220", accepted: { asset: token, payTo: billPay } });
    expect(v1).toMatchObject({ x402Version: 1, scheme: "exact", network: "eip155:42220" });
    expect(v1.authorization).toEqual(v2.authorization);
    expect(v2.authorization).toMatchObject({ from: payer.address, to: billPay, value: 1_001_000n });
    expect(v2.signature).toBe(v1.signature);
    checkPayment(v2, expected);
    checkPayment(v1, expected);
    checkPayment({ ...v1, network: "celo" }, expected);
  });

  it("refuses a payment that does not match the bill: payer, amount, payee, asset, network, scheme", () => {
    const p = decodePayment("PAYMENT-SIGNATURE", v2Header);
    expectRejected(() => checkPayment(p, { ...expected, wallet: hardhatAccount(10).address }), "PAYER_MISMATCH");
    expectRejected(() => checkPayment(p, { ...expected, amount: 1_000_999n }), "AMOUNT_MISMATCH");
    expectRejected(() => checkPayment(p, { ...expected, payTo: hardhatAccount(10).address }), "PAYEE_MISMATCH");
    expectRejected(() => checkPayment(p, { ...expected, asset: billPay }), "PAYMENT_ASSET_MISMATCH");
    expectRejected(() => checkPayment(p, { ...expected, chain: "BASE" }), "PAYMENT_NETWORK_MISMATCH");
    expectRejected(() => checkPayment({ ...p, scheme: "upto" }, expected), "PAYMENT_SCHEME_UNSUPPORTED");
  });

  it("bounds the authorization's validity window", async () => {
    const p = decodePayment("PAYMENT-SIGNATURE", v2Header);
    const later = (s: number) => ({ ...expected, nowSeconds: expected.nowSeconds + BigInt(s) });
    // About to expire, or not valid yet: rejected before anything is stored (any wallet can
    // sign one, so storing it would be a free order).
    expectRejected(() => checkPayment(p, later(290)), "AUTHORIZATION_EXPIRES_TOO_SOON");
    expect(() => checkPayment(p, expected)).not.toThrow();
    expectRejected(
      () => checkPayment({ ...p, authorization: { ...p.authorization, validAfter: expected.nowSeconds + 3600n } }, expected),
      "AUTHORIZATION_NOT_YET_VALID",
    );
    expectRejected(() => checkPayment(p, later(10_000)), "AUTHORIZATION_EXPIRED");
    // Zero is BillPay's marker for a pull's refund: never an x402 nonce.
    expectRejected(() => checkPayment({ ...p, authorization: { ...p.authorization, nonce: `0x${"0".repeat(64)}` } }, expected), "NONCE_INVALID");
    // A client that signs for ten years is refused, even though its signature is good.
    const tenYears = decodePayment("PAYMENT-SIGNATURE", encodePaymentSignatureHeader(await signed(10 * 365 * 86_400)));
    expectRejected(() => checkPayment(tenYears, expected), "AUTHORIZATION_TOO_LONG");
  });

  it("refuses malformed headers with INVALID_PAYMENT_HEADER", async () => {
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64");
    // A well-signed payment whose payee is written in a mixed case that is not its checksum (a mistyped address).
    const good = await signed();
    const miscased = { ...good, payload: { ...good.payload, authorization: { ...(good.payload.authorization as Record<string, unknown>), to: `0x${billPay.slice(2, 6).toUpperCase()}${billPay.slice(6).toLowerCase()}` } } };
    const cases = [
      "%%%not-base64%%%",
      b64("just a string"),
      b64({ x402Version: 3, payload: {} }),
      b64({ x402Version: 1, scheme: "exact", network: "eip155:42220", payload: { signature: "0x12" } }),
      b64({ x402Version: 1, scheme: "exact", network: "eip155:42220", payload: { signature: "0x12", authorization: { from: "0x1" } } }),
      "A".repeat(20_000),
      encodePaymentSignatureHeader(miscased),
    ];
    // The same payment, its payee in lower case or checksummed, is read.
    for (const to of [billPay, billPay.toLowerCase()]) {
      expect(decodePayment("X-PAYMENT", encodePaymentSignatureHeader({ ...good, payload: { ...good.payload, authorization: { ...(good.payload.authorization as Record<string, unknown>), to } } })).authorization.to).toBe(to);
    }
    for (const header of cases) expectRejected(() => decodePayment("X-PAYMENT", header), "INVALID_PAYMENT_HEADER");
  });
});
