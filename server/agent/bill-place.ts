/**
 * Where a tool call pays, from every name it gives it. The tools name the chain `chain`; the
 * REST bill, whose eight fields an agent may send as they are, names it `blockchain` and
 * carries `token` and `wallet_address` too. Each is read, never dropped: a bill naming BASE is
 * not paid on the link's CELO because its field had the REST name.
 */
import { z } from "zod";
import { resolveTokenSymbol } from "../../lib/chains.ts";
import { ServiceError } from "../errors.ts";
import { paymentRequestSchema } from "../schemas.ts";

/** The REST bill's names for where and by whom it is paid, as the tools take them. */
export const restPlaceFields = {
  blockchain: z.string().trim().min(1).max(16).optional().describe("The same as chain: the REST bill's name for it"),
  wallet_address: paymentRequestSchema.shape.wallet_address.optional().describe("The REST bill's paying wallet, if named"),
};

interface NamedPlace {
  chain?: string;
  blockchain?: string;
  token?: string;
  wallet_address?: string;
}

const differ = (what: string, names: Set<string>) =>
  new ServiceError("VALIDATION_FAILED", `${what}: one call pays on one ${what}, and this one names ${[...names].join(" and ")}`);

/**
 * The one chain and token the named places agree on (undefined where none is named: the
 * caller's default). Names that differ are refused, as is a wallet other than `wallet` when
 * one is given (the agent hub pays from the linked wallet only).
 */
export function placeOf(named: NamedPlace[], wallet?: string): { chain?: string; token?: string } {
  // A chain's key is its name in upper case (lib/chains.ts chainByKey): one not served keeps its own, refused later by name.
  const chains = new Set(named.flatMap((n) => [n.chain, n.blockchain]).flatMap((c) => (c === undefined ? [] : [c.trim().toUpperCase()])));
  const tokens = new Set(named.flatMap((n) => (n.token === undefined ? [] : [resolveTokenSymbol(n.token) ?? n.token.trim().toUpperCase()])));
  if (chains.size > 1) throw differ("chain", chains);
  if (tokens.size > 1) throw differ("token", tokens);
  const other = wallet === undefined ? undefined : named.find((n) => n.wallet_address !== undefined && n.wallet_address.toLowerCase() !== wallet.toLowerCase());
  if (other) {
    throw new ServiceError("WALLET_MISMATCH", `wallet_address ${other.wallet_address} is not the wallet this api_key was linked by (${wallet}): the agent hub pays from the linked wallet only`);
  }
  return { chain: [...chains][0], token: [...tokens][0] };
}
