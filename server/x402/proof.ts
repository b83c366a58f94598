/**
 * Who may read an order's purchased code (an electricity token or exam PIN is as good as
 * cash): only its payer. Anyone with a request_id sees where the order stands; the code
 * needs one of
 *   - `Authorization: Bearer <the order's secret>` (`ors_...`), returned once in the paying
 *     x402 response and stored only as its SHA-256;
 *   - the paying wallet's signature of lib/order-proof.ts's message, fresh within
 *     LINK_SIGNATURE_WINDOW_SECONDS (X-Wallet-Signature, X-Wallet-Timestamp): a contract
 *     wallet is asked within a gas cap.
 * The paying response itself carries the code. A replay of the stored payment does not
 * without a proof: once settled, the authorization and its signature are public on chain.
 * An agent's api_key alone is no proof: a key without its PIN cannot pay, so it reads no code
 * either; an agent reads its codes with transaction_history and the PIN, which counts a wrong
 * PIN towards the wallet's lockout (agent/tools.ts).
 */
import { isHex, type Hex } from "viem";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { messageSigner } from "../../lib/contract-signature.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { orderProofMessage } from "../../lib/order-proof.ts";
import { ServiceError } from "../errors.ts";
import { sameDigest } from "../credentials.ts";
import { hashOrderSecret, type Order } from "../orders/store.ts";

export interface ProofDeps {
  deployments: Deployments;
  /** How fresh a wallet's signed proof must be. */
  windowSeconds: number;
}

/** False without proof; true with a right one; ORDER_PROOF_INVALID with a wrong one. */
export async function orderProof(header: (name: string) => string | undefined, order: Order, deps: ProofDeps): Promise<boolean> {
  const signature = header("x-wallet-signature")?.trim();
  if (signature !== undefined) {
    if (await walletProof(signature, header("x-wallet-timestamp")?.trim(), order, deps)) return true;
    throw new ServiceError("ORDER_PROOF_INVALID", `X-Wallet-Signature must be the paying wallet's signature of "${orderProofMessage(order.requestId, "<X-Wallet-Timestamp>")}", made within ${deps.windowSeconds} s`);
  }
  const authorization = header("authorization");
  if (!authorization) return false;
  const match = /^Bearer\s+(\S+)$/i.exec(authorization.trim());
  const proof = match?.[1];
  if (proof?.startsWith("ors_") && order.secretHash && sameDigest(hashOrderSecret(proof), order.secretHash)) return true;
  const agentKey = proof?.startsWith("bpk_") ? "; an agent's api_key alone shows no code: an agent reads its codes with transaction_history and its PIN" : "";
  throw new ServiceError("ORDER_PROOF_INVALID", `send Authorization: Bearer <order_secret from the paying response>, or the paying wallet's signed proof (X-Wallet-Signature, X-Wallet-Timestamp)${agentKey}`);
}

/** Whether the order's payer signed the proof message for this order at a time within the window. */
async function walletProof(signature: string, timestamp: string | undefined, order: Order, deps: ProofDeps): Promise<boolean> {
  if (!isHex(signature) || !timestamp || !/^\d{1,16}$/.test(timestamp)) return false;
  if (Math.abs(Date.now() - Number(timestamp)) > deps.windowSeconds * 1000) return false;
  const chain = order.chain as ChainKey;
  return (await messageSigner(deployedClientFor(deps.deployments, chain), order.payer as Hex, orderProofMessage(order.requestId, timestamp), signature)) !== null;
}
