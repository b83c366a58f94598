/**
 * `npm run case -- <kind>`: makes, on the running local stack, one of the cases an operator
 * must handle, the way a payer would make it (through the service's routes and the chain, never
 * its database), then waits until the service has done its part and says where to look.
 *
 *   failed-vend   a bill the biller cannot vend (the sandbox fails any phone but 08011111111):
 *                 FAILED_VENDING, then refunded on chain by the service (REFUNDED)
 *   review        an order held for an operator (NEEDS_REVIEW): its payment was refused (the
 *                 wallet was empty), then the payer landed another amount under the same nonce
 *   orphan        an x402 payment no order accounts for: an authorization sent to BillPay on
 *                 chain without asking the service; held for an operator (npm run review -- list)
 *   late-landing  a payment the service refused (the wallet was empty) that the payer landed
 *                 later anyway: the service refunds exactly it (REFUNDED, a late refund)
 *
 * Local chains only (it funds wallets from the local test accounts). SERVICE_URL names the
 * service (default: the local port), OPS_TOKEN the operators' token when one is set.
 */
import { x402HTTPClient } from "@x402/core/http";
import { createWalletClient, getContract, http, parseUnits, type Account, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { eip3009TokenAbi } from "../lib/generated/abis.ts";
import { publicClientFor } from "../lib/chain-client.ts";
import { viemChain } from "../lib/chains.ts";
import { deploymentsPath, readDeployments } from "../lib/deployments.ts";
import { randomNonce, signTransferAuthorization } from "../lib/eip3009.ts";
import { hardhatAccount } from "../lib/local-accounts.ts";
import { localUrl } from "../lib/local-ports.ts";
import { x402ClientFor } from "../lib/x402-payer.ts";

export const CASES = ["failed-vend", "review", "orphan", "late-landing"] as const;
type Case = (typeof CASES)[number];

const WAIT_MS = 60_000;

export async function makeCase(kind: Case, env: { serviceUrl: string; opsToken?: string; deploymentsFile?: string }, say: (line: string) => void = console.log): Promise<{ requestId?: string; status: string }> {
  const service = env.serviceUrl;
  const deployments = await readDeployments(env.deploymentsFile ?? deploymentsPath());
  const d = deployments.chains.CELO!;
  const usdc = d.tokens.find((t) => t.symbol === "USDC")!;
  const token = usdc.address as Hex;
  const billPay = d.billPay.address as Hex;
  const chain = viemChain("CELO", d.rpcUrl);
  const client = publicClientFor("CELO", d.rpcUrl);
  const walletOf = (account: Account) => createWalletClient({ account, chain, transport: http(d.rpcUrl) });
  /** A funded local account: the relayer of authorizations and the source of the empty wallet's money. */
  const funder = hardhatAccount(12);

  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${service}/api/pay/x402`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
  const bill = (payer: string, billersCode = "08011111111") => ({ serviceID: "mtn", serviceCategory: "AIRTIME", network: "MTN", billersCode, nairaAmount: 500, token: "USDC", blockchain: "CELO", wallet_address: payer });
  /** The order as the order route shows it (its id is all it takes). */
  const order = async (requestId: string) => (await (await fetch(`${service}/api/orders/${requestId}`, { signal: AbortSignal.timeout(10_000) })).json()) as { status: string; refund?: { status: string; tx_hash: string | null } };
  /** The order's internal state, as an operator's route shows it. */
  const internal = async (requestId: string) => {
    const res = await fetch(`${service}/ops/review/orders/${requestId}`, { headers: env.opsToken ? { authorization: `Bearer ${env.opsToken}` } : {}, signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`the operators' route answered ${res.status}: set OPS_TOKEN to the service's`);
    return ((await res.json()) as { order: { status: string; failure_reason: string | null } }).order;
  };
  const until = async <T>(what: string, read: () => Promise<T>, done: (v: T) => boolean): Promise<T> => {
    const end = Date.now() + WAIT_MS;
    for (;;) {
      const v = await read();
      if (done(v)) return v;
      if (Date.now() > end) throw new Error(`gave up waiting for ${what} after ${WAIT_MS / 1000} s`);
      await new Promise((r) => setTimeout(r, 500));
    }
  };
  const mined = async (hash: Hex) => client.waitForTransactionReceipt({ hash, timeout: 30_000 });
  const submit = async (a: { from: Hex; to: Hex; value: bigint; validAfter: bigint; validBefore: bigint; nonce: Hex; signature: Hex }) =>
    mined(
      await walletOf(funder).writeContract({
        address: token,
        abi: eip3009TokenAbi,
        functionName: "transferWithAuthorization",
        args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, a.signature],
      }),
    );
  const tokenContract = getContract({ address: token, abi: eip3009TokenAbi, client });
  const sign = async (payer: Account, value: bigint, nonce: Hex, validBefore: bigint) => {
    const { message, signature } = await signTransferAuthorization(walletOf(payer), tokenContract, { from: payer.address, to: billPay, value, nonce, validBefore });
    return { ...message, signature };
  };
  /** A payment from an empty wallet: the facilitator refuses it and the service says it did not settle. */
  const refusedPayment = async () => {
    const payer = privateKeyToAccount(generatePrivateKey());
    const body = bill(payer.address);
    const challenge = await post(body);
    const http402 = new x402HTTPClient(x402ClientFor(payer, deployments));
    const payload = await http402.createPaymentPayload(http402.getPaymentRequiredResponse((n) => challenge.headers.get(n), await challenge.json()));
    const answer = await post(body, http402.encodePaymentSignatureHeader(payload));
    const refused = (await answer.json()) as { code?: string; request_id?: string };
    if (!refused.request_id) throw new Error(`expected the service to refuse the empty wallet's payment with an order; it answered ${answer.status} ${JSON.stringify(refused)}`);
    say(`1. an empty wallet ${payer.address} paid; the service answered ${answer.status} ${refused.code}: nothing was charged (order ${refused.request_id})`);
    const authorization = (payload.payload as { authorization: { value: string; validBefore: string; nonce: Hex } }).authorization;
    // The payer funds the wallet afterwards: its signed authorization can now land.
    await mined(await walletOf(funder).writeContract({ address: token, abi: eip3009TokenAbi, functionName: "transfer", args: [payer.address, parseUnits("5", usdc.decimals)] }));
    return { payer, requestId: refused.request_id, authorization, signature: (payload.payload as { signature: Hex }).signature };
  };

  switch (kind) {
    case "failed-vend": {
      const payer = hardhatAccount(3);
      const { wrapFetchWithPayment } = await import("@x402/fetch");
      const res = await wrapFetchWithPayment(fetch, x402ClientFor(payer, deployments))(`${service}/api/pay/x402`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(bill(payer.address, "08099999999")),
        signal: AbortSignal.timeout(60_000),
      });
      const body = (await res.json()) as { status: string; request_id: string };
      say(`1. paid a bill for 08099999999, which the sandbox fails: ${body.status} (order ${body.request_id})`);
      const done = await until("the refund", () => order(body.request_id), (o) => o.refund?.status === "REFUNDED");
      say(`2. refunded on chain by the service: ${done.refund!.tx_hash}`);
      say(`see ${service}/console/orders/${body.request_id}`);
      return { requestId: body.request_id, status: "REFUNDED" };
    }
    case "late-landing": {
      const paid = await refusedPayment();
      const { value, validBefore, nonce } = paid.authorization;
      const landed = await submit({ from: paid.payer.address, to: billPay, value: BigInt(value), validAfter: 0n, validBefore: BigInt(validBefore), nonce, signature: paid.signature });
      say(`2. the payer landed the very authorization the service refused: ${landed.transactionHash}`);
      const done = await until("the late refund", () => internal(paid.requestId), (o) => o.status === "REFUNDED");
      say(`3. the service refunded exactly it (${done.failure_reason})`);
      say(`see ${service}/console/orders/${paid.requestId}`);
      return { requestId: paid.requestId, status: done.status };
    }
    case "review": {
      const paid = await refusedPayment();
      const { value, validBefore, nonce } = paid.authorization;
      // Another amount under the same nonce: what landed is not what the order was priced at.
      const other = await sign(paid.payer, BigInt(value) / 2n, nonce, BigInt(validBefore));
      const landed = await submit(other);
      say(`2. the payer landed half the amount under the same nonce: ${landed.transactionHash}`);
      const held = await until("the order to be held for review", () => internal(paid.requestId), (o) => o.status === "NEEDS_REVIEW");
      say(`3. held for an operator: ${held.failure_reason}`);
      say(`decide it at ${service}/console/orders/${paid.requestId}, or: npm run review -- show ${paid.requestId}`);
      return { requestId: paid.requestId, status: held.status };
    }
    case "orphan": {
      const payer = hardhatAccount(13);
      const authorization = await sign(payer, parseUnits("0.3", usdc.decimals), randomNonce(), BigInt(Math.floor(Date.now() / 1000) + 3600));
      const landed = await submit(authorization);
      say(`1. ${payer.address} sent 0.3 USDC to BillPay by an authorization, without asking the service: ${landed.transactionHash}`);
      const listed = await until(
        "the payment to be held for review",
        async () => {
          const res = await fetch(`${service}/ops/review`, { headers: env.opsToken ? { authorization: `Bearer ${env.opsToken}` } : {}, signal: AbortSignal.timeout(10_000) });
          if (!res.ok) throw new Error(`the operators' route answered ${res.status}: set OPS_TOKEN to the service's`);
          return ((await res.json()) as { orphans: Array<{ auth_nonce: string }> }).orphans;
        },
        (orphans) => orphans.some((o) => o.auth_nonce.toLowerCase() === authorization.nonce.toLowerCase()),
      );
      say(`2. held for an operator (${listed.length} such payment(s) now): see ${service}/console/money, or npm run review -- list`);
      return { status: "NEEDS_REVIEW" };
    }
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const kind = process.argv[2] as Case;
  if (!CASES.includes(kind)) {
    console.error(`usage: npm run case -- ${CASES.join("|")}`);
    process.exit(2);
  }
  try {
    await makeCase(kind, { serviceUrl: process.env.SERVICE_URL ?? localUrl("service"), opsToken: process.env.OPS_TOKEN });
  } catch (err) {
    console.error(`the case was not made: ${(err as Error).message}`);
    process.exit(1);
  }
}
