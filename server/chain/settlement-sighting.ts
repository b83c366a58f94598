/**
 * An x402 authorization's settlement, sighted on the service's own node while the
 * facilitator's answer is still on its way. A facilitator answers `settle` once it has seen
 * the transaction's receipt on its node, and its answer then crosses the network; the
 * service hears of the same block from its own node (lib/chain-heads.ts) and can look for
 * the payment at once.
 *
 * What it finds is only a transaction's hash: the one whose log marked the order's EIP-3009
 * authorization used, read by the authorization's own key (token, payer, nonce) from blocks
 * the node announced after the settlement was asked for. The payment itself is then read
 * from that transaction's receipt (chain/receipt-payment.ts), by the ledger's own predicate,
 * and held to the order exactly, as a hash a facilitator names is: a wrong hash finds nothing
 * of the order's, and the facilitator's answer is then waited for as before. An EIP-3009 nonce
 * is used once per token and payer, so a transaction that used it either paid what the payer
 * signed or did not pay BillPay at all; the receipt tells which.
 *
 * Where the service reads its node over the node's WebSocket (lib/chain-client.ts), the node
 * is also asked to push that log as its block arrives (`eth_subscribe("logs")`, filtered by
 * the authorization's key): it costs the node no search, so it is taken at once, with no
 * grace, and the receipt is read beside the facilitator's own read of it rather than after its
 * answer. A pushed log is only a hash, as a searched one is, and a log the node withdraws
 * (`removed`, a reorganisation) is none.
 *
 * Permit2 payments are not sighted here: their nonce is Permit2's, logged by another
 * contract, and they keep waiting for the facilitator's hash.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseAbiItem, type Hex } from "viem";
import { openSocketUrlFor, sharedClientFor } from "../../lib/chain-client.ts";
import { pushLogs } from "../../lib/node-socket.ts";
import type { ChainHeads } from "../../lib/chain-heads.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { untilDeadline } from "./receipt-payment.ts";

const AUTHORIZATION_USED = parseAbiItem("event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)");

/**
 * How long after a block the facilitator's answer is given before the block is searched. A
 * facilitator beside the node answers within a few milliseconds of the block (the local
 * one's slowest of 40: 9 ms), and a search then only loads the node the receipt is read from
 * (measured, bills alternating with and without it: 3 ms more at p50); a hosted one answers
 * a network round trip and its own receipt poll later (one answering 150 ms after the
 * block: the payer answered at p50 77 ms after it instead of 175).
 */
const SIGHTING_GRACE_MS = 50;

export interface SightingDeps {
  deployments: Deployments;
  heads: ChainHeads;
}

/**
 * The hash of the transaction that used `payer`'s authorization `nonce` on `token`, once a
 * block announced after this call holds it; undefined when `signal` aborts first (the
 * facilitator answered), by `deadline` (epoch ms), or once the heads are closed. A failed
 * read is made again at the next block; it never decides anything.
 */
export async function sightAuthorization(
  deps: SightingDeps,
  chain: ChainKey,
  key: { token: Hex; payer: Hex; nonce: Hex },
  signal: AbortSignal,
  deadline: number,
): Promise<Hex | undefined> {
  const d = deps.deployments.chains[chain];
  if (!d) return undefined;
  const rpcUrl = rpcUrlFor(chain, d);
  const client = sharedClientFor(chain, rpcUrl);
  const ws = openSocketUrlFor(chain, rpcUrl);
  const pushed = ws ? pushedAuthorization(ws, key, signal) : undefined;
  // The settlement is asked for now, so no block the node had announced before holds it.
  // Before the first head is heard, the first one heard is looked at too.
  const known = deps.heads.latest(chain);
  let from: bigint | undefined = known > 0n ? known + 1n : undefined;
  const look = async (): Promise<Hex | null> => {
    const head = deps.heads.latest(chain);
    from ??= head > 0n ? head : undefined;
    if (from === undefined || head < from) return null;
    await sleep(SIGHTING_GRACE_MS, undefined, { signal }).catch(() => undefined);
    if (signal.aborted) return null;
    const logs = await client
      .getLogs({ address: key.token, event: AUTHORIZATION_USED, args: { authorizer: key.payer, nonce: key.nonce }, fromBlock: from, toBlock: head })
      .catch(() => undefined);
    const used = logs?.find((l) => !l.removed && l.transactionHash);
    if (used) return used.transactionHash!;
    if (logs) from = head + 1n;
    return null;
  };
  const searched = untilDeadline(deps, chain, deadline, look, signal).then((found) => found ?? undefined);
  return pushed ? Promise.race([pushed, searched]) : searched;
}

/**
 * The hash of the transaction whose log the node pushes for this authorization's key; never
 * settles before `signal` aborts when none comes (the search beside it answers at its
 * deadline). A subscription the node refuses or drops leaves the search alone.
 */
function pushedAuthorization(ws: string, key: { token: Hex; payer: Hex; nonce: Hex }, signal: AbortSignal): Promise<Hex | undefined> | undefined {
  let unsubscribe: (() => void) | undefined;
  const found = new Promise<Hex | undefined>((resolve) => {
    const done = (hash: Hex | undefined) => {
      unsubscribe?.();
      signal.removeEventListener("abort", aborted);
      resolve(hash);
    };
    const aborted = () => done(undefined);
    unsubscribe = pushLogs(ws, { address: key.token, event: AUTHORIZATION_USED, args: { authorizer: key.payer, nonce: key.nonce } }, (log) => {
      if (!log.removed && log.transactionHash) done(log.transactionHash);
    });
    if (signal.aborted) aborted();
    else signal.addEventListener("abort", aborted, { once: true });
  });
  return unsubscribe ? found : undefined;
}
