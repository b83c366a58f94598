/**
 * Signed receipts (server/orders/receipts.ts) against the real local stack: a bill paid over
 * REST, MCP or from an agent's allowance carries the bill's receipt and x402's own (offer-receipt, read with the
 * extension's client helpers); each is checked offline against the signer the service
 * publishes, and names exactly the order, amount, transaction and outcome; a tampered receipt
 * fails; a refunded order's receipt names the refund.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { x402HTTPClient } from "@x402/core/http";
import { get as httpGet } from "node:http";
import { extractReceiptFromResponse, verifyReceiptSignatureEIP712, verifyReceiptSignatureJWS, type EIP712SignedReceipt, type JWSSignedReceipt } from "@x402/extensions/offer-receipt";
import { recoverTypedDataAddress, verifyTypedData, type Account, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { linkAgent, mcpAgent } from "../../lib/agent-client.ts";
import { chainInfo } from "../../lib/chains.ts";
import { callToolPaid } from "../../lib/mcp-x402-client.ts";
import { x402ClientFor } from "../../lib/x402-payer.ts";
import { addressOfJwk, methodFor, verifyX402Receipt, type DidDocument } from "../../lib/receipt-verifier.ts";
import { localPepper } from "../../server/agent/pin-pepper.ts";
import { loadConfig } from "../../server/config.ts";
import { Receipts, type BillReceipt } from "../../server/orders/receipts.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { chainActors } from "../support/actors.ts";
import { airtimeBill, x402Bill } from "../support/bills.ts";
import { runScript } from "../support/processes.ts";
import { freshAccounts, startPayingStackOnSharedChains, type SharedPayingStack } from "../support/stack.ts";

type Body = Record<string, unknown>;
interface Published {
  signer: Hex;
  bill_receipt: { domain: { name: string; version: string }; types: Record<string, Array<{ name: string; type: string }>> };
}

describe("signed receipts: checked offline against the published signer", () => {
  const accounts = freshAccounts();
  let paying: SharedPayingStack;
  let service: ServiceStack;
  let url: string;
  let published: Published;

  /** Whether a bill receipt is the published signer's signature over exactly its payload. */
  const verifies = (r: BillReceipt) =>
    verifyTypedData({
      address: published.signer,
      domain: published.bill_receipt.domain,
      types: published.bill_receipt.types,
      primaryType: "Receipt",
      message: { ...r.payload, amount: BigInt(r.payload.amount), issuedAt: BigInt(r.payload.issuedAt) },
      signature: r.signature,
    });

  /** Pays `body` on the REST route with the official client. */
  async function payRest(payer: Account, body: Body) {
    const post = (headers: Record<string, string> = {}) => fetch(`${url}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    const challenged = await post();
    const http = new x402HTTPClient(x402ClientFor(payer, paying.chains.deployments));
    const payload = await http.createPaymentPayload(http.getPaymentRequiredResponse((n) => challenged.headers.get(n), await challenged.json()));
    return post(http.encodePaymentSignatureHeader(payload));
  }

  beforeAll(async () => {
    paying = await startPayingStackOnSharedChains(accounts);
    service = paying.service;
    url = service.urls.service;
    published = (await (await fetch(`${url}/api/receipts/signer`)).json()) as Published;
  });
  afterAll(async () => {
    await paying?.close();
  });

  it("publishes one signer, the same for every instance on the same secret, and another for another secret", () => {
    expect(published.signer).toMatch(/^0x[0-9a-fA-F]{40}$/);
    expect(new Receipts(Buffer.from("one secret")).signer).toBe(new Receipts(Buffer.from("one secret")).signer);
    expect(new Receipts(Buffer.from("one secret")).signer).not.toBe(new Receipts(Buffer.from("another")).signer);
  });

  it("an order in one state gets the same receipts whenever they are asked for (dated by the order, not the clock); a refund gets a later bill receipt", async () => {
    const receipts = new Receipts(Buffer.from("one secret"));
    const order = {
      requestId: "req_000000000000aaaaaaaaaaaaaaaaaaaa",
      bodyHash: `0x${"cd".repeat(32)}`,
      bill: { serviceID: "mtn", nairaAmount: 500 },
      txHash: `0x${"ab".repeat(32)}`,
      chain: "CELO",
      tokenAddress: `0x${"11".repeat(20)}`,
      amount: 1_000_000n,
      status: "SUCCESS",
      refundTxHash: null,
      payer: accounts(7).address,
      createdAt: new Date("2026-11-26T07:00:00Z"),
      updatedAt: new Date("2026-11-26T07:00:03Z"),
    } as unknown as Parameters<Receipts["x402Receipt"]>[0];
    const resource = "http://127.0.0.1/api/pay/x402";
    const first = { x402: await receipts.x402Receipt(order, resource), bill: await receipts.billReceipt(order) };
    await new Promise((r) => setTimeout(r, 1100)); // past a second boundary: the clock must not enter them
    expect({ x402: await receipts.x402Receipt(order, resource), bill: await receipts.billReceipt(order) }).toEqual(first);
    const x402 = first.x402 as EIP712SignedReceipt;
    expect(x402.payload).toMatchObject({ version: 1, issuedAt: Math.floor(order.createdAt.getTime() / 1000), network: chainInfo("CELO").caip2, transaction: order.txHash });
    expect(await verifyReceiptSignatureEIP712(x402)).toMatchObject({ signer: receipts.signer });
    expect(first.bill!.payload.issuedAt).toBe(String(Math.floor(order.updatedAt.getTime() / 1000)));

    const refunded = { ...order, status: "REFUNDED" as const, refundTxHash: `0x${"ef".repeat(32)}`, updatedAt: new Date("2026-11-26T07:01:00Z") };
    const later = await receipts.billReceipt(refunded);
    expect(later!.payload).toMatchObject({ outcome: "REFUNDED", refundTransaction: refunded.refundTxHash, issuedAt: String(Math.floor(refunded.updatedAt.getTime() / 1000)) });
    expect(later!.signature).not.toBe(first.bill!.signature);
  });

  it("a REST payment's answer carries the bill's receipt and x402's; both verify, name the order exactly, and a tampered one does not", async () => {
    const payer = accounts(5);
    const res = await payRest(payer, x402Bill(payer.address));
    expect(res.status).toBe(200);
    const x402 = extractReceiptFromResponse(res) as EIP712SignedReceipt;
    const body = (await res.json()) as Body & { receipt: BillReceipt };
    const order = (await service.flow.orders.get(body.request_id as string))!;

    expect(await verifies(body.receipt)).toBe(true);
    expect(body.receipt.payload).toMatchObject({
      requestId: order.requestId,
      billHash: order.bodyHash,
      serviceID: "mtn",
      payer: order.payer,
      network: chainInfo("CELO").caip2,
      token: order.tokenAddress,
      amount: order.amount.toString(),
      transaction: body.tx_hash,
      outcome: "SUCCESS",
      refundTransaction: "",
    });
    for (const forged of [{ amount: (order.amount - 1n).toString() }, { outcome: "REFUNDED" }, { requestId: "req_000000000000aaaaaaaaaaaaaaaaaaaa" }]) {
      expect(await verifies({ ...body.receipt, payload: { ...body.receipt.payload, ...forged } })).toBe(false);
    }

    // x402's receipt, with the extension's own helpers.
    expect(x402.format).toBe("eip712");
    const checked = await verifyReceiptSignatureEIP712(x402);
    expect(checked.signer.toLowerCase()).toBe(published.signer.toLowerCase());
    expect(checked.payload).toMatchObject({ transaction: body.tx_hash, network: chainInfo("CELO").caip2, resourceUrl: `${url}/api/pay/x402` });
    expect(String(checked.payload.payer).toLowerCase()).toBe(payer.address.toLowerCase());

    // A stranger's check: the receipt and the DID document at the resource's host, nothing else.
    const did = `did:web:127.0.0.1%3A${new URL(url).port}`;
    expect(await verifyX402Receipt(x402)).toMatchObject({ did, method: `${did}#receipts-eip712`, payload: { transaction: body.tx_hash } });
    // The bill's receipt (BillPay's own EIP-712 domain) binds the same way: recover, then find the signer in the document.
    const billSigner = await recoverTypedDataAddress({
      domain: published.bill_receipt.domain,
      types: published.bill_receipt.types,
      primaryType: "Receipt",
      message: { ...body.receipt.payload, amount: BigInt(body.receipt.payload.amount), issuedAt: BigInt(body.receipt.payload.issuedAt) },
      signature: body.receipt.signature,
    });
    expect(await methodFor(billSigner, did)).toBe(`${did}#receipts-eip712`);
    // Anyone's receipt for this resource, however well formed, is not the service's.
    const stranger = await new Receipts(Buffer.from("a stranger's secret")).x402Receipt(order, `${url}/api/pay/x402`);
    await expect(verifyX402Receipt(stranger!)).rejects.toThrow(/does not list/);
  });

  it("publishes a did:web document binding the receipt key to the service's host, for the host it was asked at (never a forged one)", async () => {
    const port = new URL(url).port;
    const res = await fetch(`${url}/.well-known/did.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/did+json");
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    const doc = (await res.json()) as DidDocument;
    const did = `did:web:127.0.0.1%3A${port}`;
    expect(doc.id).toBe(did);
    const jwk = doc.verificationMethod!.find((m) => m.id === `${did}#receipts`)!;
    expect(jwk).toMatchObject({ type: "JsonWebKey2020", publicKeyJwk: { kty: "EC", crv: "secp256k1" } });
    expect(addressOfJwk(jwk.publicKeyJwk!)).toBe(published.signer);
    expect(doc.verificationMethod!.find((m) => m.id === `${did}#receipts-eip712`)).toMatchObject({ blockchainAccountId: `eip155:1:${published.signer}` });
    expect(doc.assertionMethod).toEqual([`${did}#receipts`, `${did}#receipts-eip712`]);
    expect(published).toMatchObject({ did, did_document: `http://127.0.0.1:${port}/.well-known/did.json` });

    // Asked under another allowed name, the document is that name's; under a forged Host, there is none.
    // (fetch cannot set Host; node:http can, as any client on the wire can.)
    const withHost = (host: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = httpGet(`${url}/.well-known/did.json`, { headers: { host }, timeout: 10_000 }, (r) => {
          let body = "";
          r.on("data", (chunk) => (body += chunk));
          r.on("end", () => resolve({ status: r.statusCode!, body }));
        });
        req.on("error", reject);
      });
    const local = await withHost(`localhost:${port}`);
    expect((JSON.parse(local.body) as DidDocument).id).toBe(`did:web:localhost%3A${port}`);
    const forged = await withHost("evil.example");
    expect(forged.status).toBeGreaterThanOrEqual(400);
    expect(forged.body).not.toContain("did:web:evil");
  });

  it("a JWS receipt (X402_RECEIPT_FORMAT=jws) verifies with the extension's verifier from its kid alone; a forged or misplaced one does not", async () => {
    expect(loadConfig({ X402_RECEIPT_FORMAT: "jws" }).X402_RECEIPT_FORMAT).toBe("jws");
    expect(() => loadConfig({ X402_RECEIPT_FORMAT: "pdf" })).toThrow();
    // The service's own key (the same pepper the local service derives it from), signing as JWS.
    const receipts = new Receipts(localPepper(loadConfig({}).PIN_PEPPER_FILE), "jws", url);
    expect(receipts.signer).toBe(published.signer);
    const payer = accounts(9);
    const res = await payRest(payer, x402Bill(payer.address));
    const order = (await service.flow.orders.get(((await res.json()) as Body).request_id as string))!;
    const jws = (await receipts.x402Receipt(order, `${url}/api/pay/x402`)) as JWSSignedReceipt;
    expect(jws.format).toBe("jws");
    // No key given: the extension resolves did:web:127.0.0.1%3A<port>#receipts over HTTP and checks ES256K.
    expect(await verifyReceiptSignatureJWS(jws)).toMatchObject({ resourceUrl: `${url}/api/pay/x402`, transaction: order.txHash });
    expect((await verifyX402Receipt(jws)).method).toBe(`did:web:127.0.0.1%3A${new URL(url).port}#receipts`);
    expect(receipts.published(`did:web:x`).x402_receipt).toEqual({ format: "jws", algorithm: "ES256K", key_id: "did:web:x#receipts" });

    // Forged: a stranger's key under the service's kid fails the signature.
    const forged = (await new Receipts(Buffer.from("a stranger's secret"), "jws", url).x402Receipt(order, `${url}/api/pay/x402`)) as JWSSignedReceipt;
    await expect(verifyReceiptSignatureJWS(forged)).rejects.toThrow();
    // Misplaced: the service's real receipt for a resource on another host is not bound to that host.
    const elsewhere = (await new Receipts(localPepper(loadConfig({}).PIN_PEPPER_FILE), "jws", url).x402Receipt(order, "mcp://tool/pay_bill")) as JWSSignedReceipt;
    await expect(verifyX402Receipt(elsewhere, { serviceOrigin: "http://localhost:1" })).rejects.toThrow(/not one of/);
    expect((await verifyX402Receipt(elsewhere, { serviceOrigin: url })).payload.resourceUrl).toBe("mcp://tool/pay_bill");
  });

  it("a refunded order's receipt, read from the order route, names the refund's transaction", async () => {
    const payer = accounts(6);
    const res = await payRest(payer, x402Bill(payer.address, { billersCode: "08099999999" }));
    const body = (await res.json()) as Body;
    expect(body.status).toBe("FAILED_VENDING");
    await expect.poll(async () => (await service.flow.orders.get(body.request_id as string))!.status, { timeout: 30_000 }).toBe("REFUNDED");
    const order = (await service.flow.orders.get(body.request_id as string))!;
    const read = (await (await fetch(`${url}/api/orders/${order.requestId}`)).json()) as Body & { receipt: BillReceipt };
    expect(read.receipt.payload).toMatchObject({ outcome: "REFUNDED", refundTransaction: order.refundTxHash, transaction: order.txHash, amount: order.amount.toString() });
    expect(order.refundTxHash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await verifies(read.receipt)).toBe(true);
    // The runnable example checks it as a stranger would: the order route, then the DID document.
    const script = await runScript("scripts/verify-receipt.ts", [order.requestId], { SERVICE_URL: url });
    expect(script.out).toContain(`order ${order.requestId}: REFUNDED`);
    expect(script.out).toContain("verified: every receipt is the service's");
    expect(script.code).toBe(0);
    const stranger = await runScript("scripts/verify-receipt.ts", ["--x402", JSON.stringify(await new Receipts(Buffer.from("a stranger")).x402Receipt(order, `${url}/api/pay/x402`))], { SERVICE_URL: url });
    expect(stranger.out).toContain("not verified");
    expect(stranger.code).toBe(1);
  });

  it("an agent's pay_bill from its allowance carries the bill's receipt, naming the pull's transaction", async () => {
    const payer = accounts(8);
    await chainActors(paying.chains.deployments, "CELO").approveAndAllow(payer, "USDC", 50n * 10n ** 6n);
    const apiKey = await linkAgent(url, payer, { pin: "2468" });
    const agent = await mcpAgent(url);
    try {
      const { isError, data } = await agent.call("pay_bill", { api_key: apiKey, pin: "2468", ...airtimeBill() });
      expect(isError).toBe(false);
      const receipt = data.receipt as BillReceipt;
      const order = (await service.flow.orders.get(data.request_id as string))!;
      expect(await verifies(receipt)).toBe(true);
      expect(receipt.payload).toMatchObject({ requestId: order.requestId, transaction: order.txHash, amount: order.amount.toString(), outcome: "SUCCESS" });
    } finally {
      await agent.close();
    }
  });

  it("a bill paid over MCP carries both receipts too: in the result, and in the settlement's _meta", async () => {
    const mcp = new Client({ name: "receipts-test", version: "1.0.0" });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${url}/api/mcp`)));
    try {
      const payer = accounts(7);
      const { result, settlement } = await callToolPaid(mcp, x402ClientFor(payer, paying.chains.deployments), "pay_bill", airtimeBill({ chain: "CELO", token: "USDC" }));
      const body = result.structuredContent as Body & { receipt: BillReceipt };
      expect(await verifies(body.receipt)).toBe(true);
      expect(body.receipt.payload).toMatchObject({ requestId: body.request_id, transaction: body.tx_hash, outcome: "SUCCESS" });
      const x402 = (settlement!.extensions as Record<string, { info: { receipt: EIP712SignedReceipt } }>)["offer-receipt"]!.info.receipt;
      const checked = await verifyReceiptSignatureEIP712(x402);
      expect(checked.signer.toLowerCase()).toBe(published.signer.toLowerCase());
      expect(checked.payload).toMatchObject({ transaction: body.tx_hash, resourceUrl: "mcp://tool/pay_bill" });
      // A host-less resource: the verifier names the service it connected to.
      expect((await verifyX402Receipt(x402, { serviceOrigin: url })).method).toMatch(/#receipts-eip712$/);
    } finally {
      await mcp.close();
    }
  });
});
