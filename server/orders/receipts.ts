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
import {
  createJWS,
  createReceiptDomain,
  RECEIPT_TYPES as X402_RECEIPT_TYPES,
  signReceiptEIP712,
  type EIP712SignedReceipt,
  type JWSSignedReceipt,
  type JWSSigner,
  type ReceiptPayload,
} from "@x402/extensions/offer-receipt";
import { sha256, type Hex } from "viem";
import { privateKeyToAccount, sign, type PrivateKeyAccount } from "viem/accounts";
import { chainInfo } from "../../lib/chains.ts";
import { didDocumentUrl, didWebFor } from "../../lib/receipt-verifier.ts";
import type { X402_RECEIPT_FORMATS } from "../config.ts";
import { paidForItsBill, type Order } from "./store.ts";

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

/** The receipt key's fragments in the DID document: as a JWK, and as the address EIP-712 recovers. */
const JWS_KEY = "receipts";
const EIP712_KEY = "receipts-eip712";

/** secp256k1's group order: a private key must be below it (and not zero). */
const CURVE_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

function deriveKey(secret: Buffer): Hex {
  for (let i = 0; ; i++) {
    const key = createHmac("sha256", secret).update(`billpay/receipt-key/v1/${i}`).digest("hex");
    const n = BigInt(`0x${key}`);
    if (n > 0n && n < CURVE_ORDER) return `0x${key}`;
  }
}

/** x402's receipt as the settlement carries it: EIP-712 (the default) or JWS (X402_RECEIPT_FORMAT). */
export type X402Receipt = EIP712SignedReceipt | JWSSignedReceipt;

export class Receipts {
  private readonly key: Hex;
  private readonly account: PrivateKeyAccount;

  /**
   * @param homeOrigin where the service is (PUBLIC_URL, or its own listening address): the DID
   *   of a JWS receipt whose resource has no host of its own (MCP's `mcp://tool/pay_bill`).
   */
  constructor(
    secret: Buffer,
    private readonly x402Format: (typeof X402_RECEIPT_FORMATS)[number] = "eip712",
    private readonly homeOrigin = "http://127.0.0.1",
  ) {
    this.key = deriveKey(secret);
    this.account = privateKeyToAccount(this.key);
  }

  get signer(): Hex {
    return this.account.address;
  }

  /** The signing key's public half as a JWK (secp256k1), for the DID document. */
  publicJwk(): { kty: "EC"; crv: "secp256k1"; x: string; y: string } {
    const point = Buffer.from(this.account.publicKey.slice(4), "hex"); // 0x04 || x || y
    return { kty: "EC", crv: "secp256k1", x: point.subarray(0, 32).toString("base64url"), y: point.subarray(32).toString("base64url") };
  }

  /** What a verifier needs, as GET /api/receipts/signer publishes it; `did` when the service knows where it is. */
  published(did?: string) {
    return {
      signer: this.signer,
      ...(did ? { did, did_document: didDocumentUrl(did), key_ids: { jws: `${did}#${JWS_KEY}`, eip712: `${did}#${EIP712_KEY}` } } : {}),
      bill_receipt: { format: "eip712", domain: RECEIPT_DOMAIN, primaryType: "Receipt", types: RECEIPT_TYPES },
      x402_receipt:
        this.x402Format === "jws"
          ? { format: "jws", algorithm: "ES256K", key_id: did ? `${did}#${JWS_KEY}` : `#${JWS_KEY}` }
          : { format: "eip712", domain: createReceiptDomain(), primaryType: "Receipt", types: X402_RECEIPT_TYPES },
    };
  }

  /**
   * The service's did:web document: the receipt key twice, as a JWK (what a JWS verifier,
   * @x402/extensions' included, resolves a `kid` to) and as the address an EIP-712 signature
   * recovers to (`blockchainAccountId`), both asserted by the service's own domain. A verifier
   * holding only a receipt and its `resourceUrl` fetches https://<that host>/.well-known/did.json
   * and checks the signer is listed there: the binding the offer-receipt spec (§4.5.1) leaves to
   * "an external key registry".
   */
  didDocument(did: string) {
    const jws = `${did}#${JWS_KEY}`;
    const eip712 = `${did}#${EIP712_KEY}`;
    return {
      "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1", "https://w3id.org/security/suites/secp256k1recovery-2020/v2"],
      id: did,
      verificationMethod: [
        { id: jws, type: "JsonWebKey2020", controller: did, publicKeyJwk: this.publicJwk() },
        // eip155:1: the chain id @x402/extensions' receipt domain signs under (createReceiptDomain); the address is the same on every chain.
        { id: eip712, type: "EcdsaSecp256k1RecoveryMethod2020", controller: did, blockchainAccountId: `eip155:1:${this.signer}` },
      ],
      assertionMethod: [jws, eip712],
    };
  }

  /** The bill's receipt, once the chain has shown the order's payment for it (paidForItsBill); else none. */
  async billReceipt(order: Order): Promise<BillReceipt | undefined> {
    if (!paidForItsBill(order)) return undefined;
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
  async x402Receipt(order: Order, resourceUrl: string): Promise<X402Receipt | undefined> {
    if (!paidForItsBill(order)) return undefined;
    const payload: ReceiptPayload = {
      version: 1,
      network: chainInfo(order.chain).caip2,
      resourceUrl,
      payer: order.payer,
      issuedAt: Math.floor(order.createdAt.getTime() / 1000),
      transaction: order.txHash,
    };
    if (this.x402Format === "jws") {
      // The kid names the resource's own host, so the key is found where the resource is served.
      const origin = /^https?:\/\//.test(resourceUrl) ? new URL(resourceUrl).origin : this.homeOrigin;
      return { format: "jws", signature: await createJWS(payload, this.jwsSigner(`${didWebFor(origin)}#${JWS_KEY}`)) };
    }
    const signature = await signReceiptEIP712(payload, (args) => this.account.signTypedData(args as Parameters<PrivateKeyAccount["signTypedData"]>[0]));
    return { format: "eip712", payload, signature };
  }

  /** ES256K over the JWS signing input: SHA-256, then r || s (low s, as viem signs). */
  private jwsSigner(kid: string): JWSSigner {
    return {
      kid,
      format: "jws",
      algorithm: "ES256K",
      sign: async (input) => {
        const signature = await sign({ hash: sha256(input), privateKey: this.key, to: "bytes" });
        return Buffer.from(signature.subarray(0, 64)).toString("base64url");
      },
    };
  }
}
