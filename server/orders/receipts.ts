/**
 * Receipts the service signs for a paid bill, which anyone can check offline against the
 * signer the service publishes (GET /api/receipts/signer). Two, for two readers:
 *
 *   - x402's own receipt (the `offer-receipt` extension, @x402/extensions 2.27.0, EIP-712
 *     form): network, resource, payer, transaction and when, made with the extension's own
 *     helper and carried where its client helper looks for it, in the settlement's
 *     `extensions["offer-receipt"].info.receipt`. It is deliberately thin (the extension keeps
 *     receipts private by design), so it names neither the bill nor the outcome.
 *   - The bill's receipt (`receipt` in the answer), EIP-712 under BillPay's own domain: the
 *     order, the bill (its hash, which covers every field and the wallet, chain and token,
 *     plus the product and the naira amount, but no phone, meter or account number, so the
 *     receipt may be shown to whoever holds the order's id), what was paid (payer, network,
 *     token, amount, settlement transaction) and the outcome (the order's status when signed,
 *     and the refund's transaction once refunded). GET /api/orders/{id} signs it for the order
 *     as it stands, so a refund carries one too.
 *
 * The key is derived from the PIN pepper (one server secret, already required on every real
 * profile and shared by every instance) under its own label, as the price offers' is: every
 * instance signs with the same key, and it survives restarts. A receipt binds the service's
 * word only: the chain, through the transaction it names, is what shows the money moved.
 */
import { createHmac } from "node:crypto";
import { createReceiptDomain, RECEIPT_TYPES as X402_RECEIPT_TYPES, signReceiptEIP712, type EIP712SignedReceipt, type ReceiptPayload } from "@x402/extensions/offer-receipt";
import type { Hex } from "viem";
import { privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { chainInfo } from "../../lib/chains.ts";
import { paymentConfirmed, type Order } from "./store.ts";

/** Where the extension's client helper (extractReceiptFromResponse) reads a receipt in a settlement. */
export const OFFER_RECEIPT_KEY = "offer-receipt";

/** The bill receipt's EIP-712 domain and types: published beside the signer, fixed for version 1. */
export const RECEIPT_DOMAIN = { name: "BillPay receipt", version: "1" } as const;
export const RECEIPT_TYPES = {
  Receipt: [
    { name: "requestId", type: "string" },
    { name: "billHash", type: "string" },
    { name: "serviceID", type: "string" },
    { name: "nairaAmount", type: "string" },
    { name: "payer", type: "address" },
    { name: "network", type: "string" },
    { name: "token", type: "address" },
    { name: "amount", type: "uint256" },
    { name: "transaction", type: "string" },
    { name: "outcome", type: "string" },
    { name: "refundTransaction", type: "string" },
    { name: "issuedAt", type: "uint256" },
  ],
} as const;

/** The bill receipt as sent: the message with its integers as decimal strings, and the signature. */
export interface BillReceipt {
  format: "eip712";
  primaryType: "Receipt";
  signer: Hex;
  payload: {
    requestId: string;
    billHash: string;
    serviceID: string;
    nairaAmount: string;
    payer: Hex;
    network: string;
    token: Hex;
    amount: string;
    transaction: string;
    outcome: string;
    refundTransaction: string;
    issuedAt: string;
  };
  signature: Hex;
}

/** secp256k1's group order: a private key must be below it (and not zero). */
const CURVE_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

function deriveKey(secret: Buffer): Hex {
  for (let i = 0; ; i++) {
    const key = createHmac("sha256", secret).update(`billpay/receipt-key/v1/${i}`).digest("hex");
    const n = BigInt(`0x${key}`);
    if (n > 0n && n < CURVE_ORDER) return `0x${key}`;
  }
}

export class Receipts {
  private readonly account: PrivateKeyAccount;

  constructor(secret: Buffer) {
    this.account = privateKeyToAccount(deriveKey(secret));
  }

  get signer(): Hex {
    return this.account.address;
  }

  /** What a verifier needs, as GET /api/receipts/signer publishes it. */
  published() {
    return {
      signer: this.signer,
      bill_receipt: { format: "eip712", domain: RECEIPT_DOMAIN, primaryType: "Receipt", types: RECEIPT_TYPES },
      x402_receipt: { format: "eip712", domain: createReceiptDomain(), primaryType: "Receipt", types: X402_RECEIPT_TYPES },
    };
  }

  /** The bill's receipt, once the chain has shown the order's payment (paymentConfirmed); else none. */
  async billReceipt(order: Order): Promise<BillReceipt | undefined> {
    if (!paymentConfirmed(order)) return undefined;
    const message = {
      requestId: order.requestId,
      billHash: order.bodyHash,
      serviceID: String(order.bill.serviceID ?? ""),
      nairaAmount: String(order.bill.nairaAmount ?? ""),
      payer: order.payer as Hex,
      network: chainInfo(order.chain).caip2,
      token: order.tokenAddress as Hex,
      amount: order.amount,
      transaction: order.txHash,
      outcome: order.status,
      refundTransaction: order.refundTxHash ?? "",
      // Dated when the order last changed (updated_at), not when it is asked for: a final
      // order's answer, its replay and a read of the order route carry the same receipt, and
      // a refund, which changes the order, gets a later one.
      issuedAt: BigInt(Math.floor(order.updatedAt.getTime() / 1000)),
    };
    const signature = await this.account.signTypedData({ domain: RECEIPT_DOMAIN, types: RECEIPT_TYPES, primaryType: "Receipt", message });
    return {
      format: "eip712",
      primaryType: "Receipt",
      signer: this.signer,
      payload: { ...message, amount: message.amount.toString(), issuedAt: message.issuedAt.toString() },
      signature,
    };
  }

  /**
   * x402's receipt for a settled payment of `resourceUrl`, signed with the extension's helper.
   * It is dated when the service took the payment (the order's creation), not when it is
   * asked for, so every answer for one order carries the very same receipt: a retry under
   * the same payment id gets the first answer byte for byte (the extension's own
   * createReceiptEIP712 stamps the clock, which made a retry's PAYMENT-RESPONSE differ
   * whenever a second ticked in between).
   */
  async x402Receipt(order: Order, resourceUrl: string): Promise<EIP712SignedReceipt | undefined> {
    if (!paymentConfirmed(order)) return undefined;
    const payload: ReceiptPayload = {
      version: 1,
      network: chainInfo(order.chain).caip2,
      resourceUrl,
      payer: order.payer,
      issuedAt: Math.floor(order.createdAt.getTime() / 1000),
      transaction: order.txHash,
    };
    const signature = await signReceiptEIP712(payload, (args) => this.account.signTypedData(args as Parameters<PrivateKeyAccount["signTypedData"]>[0]));
    return { format: "eip712", payload, signature };
  }
}
