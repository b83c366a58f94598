/**
 * Who may read an order's purchased code (an electricity token or exam PIN is as good as
 * cash): only its payer. Anyone with a request_id sees where the order stands; the code
 * needs `Authorization: Bearer <proof>`, one of
 *   - the order's secret (`ors_...`), returned once in the paying x402 response and stored
 *     only as its SHA-256;
 *   - the paying wallet's current agent api_key (`bpk_...`).
 * The paying response itself always carries the code, and so does a replay of the very
 * payment (signature included), which only the payer holds.
 */
import { ServiceError } from "../errors.ts";
import { hashApiKey, sameDigest } from "../agent/credentials.ts";
import type { LinkStore } from "../agent/links.ts";
import { hashOrderSecret, type Order } from "./store.ts";

/** False without proof; true with a right one; ORDER_PROOF_INVALID with a wrong one. */
export async function orderProof(authorization: string | undefined, order: Order, links: LinkStore): Promise<boolean> {
  if (!authorization) return false;
  const match = /^Bearer\s+(\S+)$/i.exec(authorization.trim());
  const proof = match?.[1];
  if (proof?.startsWith("ors_") && order.secretHash && sameDigest(hashOrderSecret(proof), order.secretHash)) return true;
  if (proof?.startsWith("bpk_")) {
    const link = await links.authenticate(proof).catch(() => undefined);
    if (link && link.wallet.toLowerCase() === order.payer.toLowerCase() && sameDigest(hashApiKey(proof), link.apiKeyHash!)) return true;
  }
  throw new ServiceError("ORDER_PROOF_INVALID", "send Authorization: Bearer <order_secret from the paying response> or the paying wallet's api_key");
}
