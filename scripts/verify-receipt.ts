/**
 * `npm run receipt:verify`: checks receipts the way a stranger would, knowing nothing of this
 * service but what a receipt names (lib/receipt-verifier.ts).
 *
 *   npm run receipt:verify                 pays one airtime bill on the running local stack (as
 *                                          `npm run pay:example` does), then verifies both receipts
 *   npm run receipt:verify -- <request_id> verifies that order's bill receipt (GET /api/orders/<id>)
 *   npm run receipt:verify -- --x402 '<receipt JSON>' [--service <origin>]
 *                                          verifies an x402 receipt as the settlement carried it
 *
 * Exits 0 when every receipt verifies and its key is the service's (its did:web document lists
 * it), 1 otherwise.
 */
import { wrapFetchWithPayment } from "@x402/fetch";
import { extractReceiptFromResponse, type SignedReceipt } from "@x402/extensions/offer-receipt";
import { recoverTypedDataAddress, type Hex } from "viem";
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { localUrl } from "../lib/local-ports.ts";
import { didWebFor, methodFor, verifyX402Receipt } from "../lib/receipt-verifier.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";

interface BillReceipt {
  payload: Record<string, string>;
  signature: Hex;
}

const service = process.env.SERVICE_URL ?? localUrl("service");
const args = process.argv.slice(2);
const flag = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);

/** The bill's receipt: its domain and types are the service's own (published beside the signer); the key's binding is the DID's. */
async function verifyBillReceipt(receipt: BillReceipt): Promise<void> {
  const published = (await (await fetch(`${service}/api/receipts/signer`, { signal: AbortSignal.timeout(10_000) })).json()) as {
    bill_receipt: { domain: { name: string; version: string }; types: Record<string, Array<{ name: string; type: string }>> };
  };
  const signer = await recoverTypedDataAddress({
    domain: published.bill_receipt.domain,
    types: published.bill_receipt.types,
    primaryType: "Receipt",
    message: { ...receipt.payload, amount: BigInt(receipt.payload.amount!), issuedAt: BigInt(receipt.payload.issuedAt!) },
    signature: receipt.signature,
  });
  const did = didWebFor(service);
  const method = await methodFor(signer, did);
  console.log(`bill receipt: signed by ${signer}, listed in ${did} as ${method}`);
  console.log(`  order ${receipt.payload.requestId}: ${receipt.payload.outcome}, ${receipt.payload.amount} units on ${receipt.payload.network}, transaction ${receipt.payload.transaction}`);
}

async function verifyX402(receipt: SignedReceipt, serviceOrigin?: string): Promise<void> {
  const verified = await verifyX402Receipt(receipt, { serviceOrigin });
  console.log(`x402 receipt (${receipt.format}): listed in ${verified.did} as ${verified.method}`);
  console.log(`  ${verified.payload.resourceUrl} paid by ${verified.payload.payer} on ${verified.payload.network}, transaction ${verified.payload.transaction}`);
}

try {
  const x402 = flag("--x402");
  if (x402) {
    await verifyX402(JSON.parse(x402) as SignedReceipt, flag("--service") ?? service);
  } else if (args[0] && !args[0].startsWith("--")) {
    const res = await fetch(`${service}/api/orders/${encodeURIComponent(args[0])}`, { signal: AbortSignal.timeout(10_000) });
    const order = (await res.json()) as { receipt?: BillReceipt; detail?: string };
    if (!order.receipt) throw new Error(`no receipt for ${args[0]}: ${order.detail ?? "the payment is not settled yet"}`);
    await verifyBillReceipt(order.receipt);
  } else {
    const payer = hardhatAccount(3);
    const bill = { serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode: "08011111111", nairaAmount: 500, token: "USDC", blockchain: "CELO", wallet_address: payer.address };
    const pay = wrapFetchWithPayment(fetch, x402ClientFor(payer, await readDeployments(deploymentsPath())));
    const res = await pay(`${service}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(bill), signal: AbortSignal.timeout(60_000) });
    const x402Receipt = extractReceiptFromResponse(res);
    const body = (await res.json()) as { status: string; request_id: string; receipt?: BillReceipt };
    console.log(`paid: ${res.status} ${body.status} (${body.request_id})`);
    if (!x402Receipt || !body.receipt) throw new Error("the answer carries no receipt");
    await verifyX402(x402Receipt);
    await verifyBillReceipt(body.receipt);
  }
  console.log("verified: every receipt is the service's");
} catch (err) {
  console.error(`not verified: ${(err as Error).message}`);
  process.exit(1);
}
