/**
 * `npm run pay:example`: pays one airtime bill on the running local stack with the
 * official x402 client (@x402/fetch), as Hardhat account #3. Shows the 402 it answered
 * and the result. Arguments: [phone] [nairaAmount] [token] [blockchain].
 */
import { wrapFetchWithPayment } from "@x402/fetch";
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { localUrl } from "../lib/local-ports.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";

const [phone = "08011111111", naira = "1550", token = "USDC", blockchain = "CELO"] = process.argv.slice(2);
const url = `${process.env.SERVICE_URL ?? localUrl("service")}/api/pay/x402`;
const payer = hardhatAccount(3);
const client = x402ClientFor(payer, await readDeployments(deploymentsPath()));

const bill = {
  serviceID: "mtn",
  serviceCategory: "AIRTIME",
  network: "MTN",
  billersCode: phone,
  nairaAmount: Number(naira),
  token,
  blockchain,
  wallet_address: payer.address,
};
const init = { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(bill), signal: AbortSignal.timeout(60_000) };
const challenge = await fetch(url, init);
console.log(`challenge: ${challenge.status}`, JSON.stringify((await challenge.json()) as unknown, null, 2));
const paid = await wrapFetchWithPayment(fetch, client)(url, { ...init, signal: AbortSignal.timeout(60_000) });
console.log(`paid: ${paid.status}`, JSON.stringify(await paid.json(), null, 2));
