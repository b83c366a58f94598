/**
 * Which logs of a transaction are a payment into BillPay, and under which unique key. This is
 * the one predicate: the ledger books payments by it (ponder/src/token.ts, ponder/src/billpay.ts),
 * and the service confirms a payment from its own node's receipt by it
 * (server/chain/receipt-payment.ts). Had the two been written apart, a receipt could confirm
 * what the ledger would never book.
 *
 *   - A pull: BillPay's own `Pulled` event, keyed by BillPay's order id.
 *   - An x402 payment: a token Transfer into BillPay that is the transfer of an EIP-3009
 *     authorization, keyed by (token, payer, nonce). EIP-3009 tokens mark the nonce used and
 *     then transfer in one call, so the same token logged `AuthorizationUsed` by the sender
 *     immediately before it. Anything else (a plain transfer after an unrelated authorization
 *     in the same transaction, say) is other inflow, never a payment.
 *   - An x402 Permit2 payment (lib/permit2.ts): a token Transfer into BillPay made by a
 *     transaction sent to the canonical x402 exact proxy whose calldata is its `settle` (or
 *     `settleWithPermit`) of exactly this transfer (token, owner, payee BillPay, amount), and
 *     which the proxy logged `Settled()` for immediately after it. Keyed by (token, payer,
 *     Permit2 nonce) under its own rail: Permit2 spends each (owner, nonce) once. The proxy
 *     reached any other way (a batch, a contract) is other inflow: its calldata is not the
 *     transaction's, and the ledger reads no call traces. That reading is the safe one: such a
 *     payment is never served or refunded by the service, and the audit shows it as inflow.
 */
import { decodeEventLog, hexToNumber, toEventSelector, type Hex, type RpcLog } from "viem";
import { billPayAbi } from "./generated/abis.ts";
import { permit2NonceKey, PROXY_SETTLED, proxySettlementIn, X402_EXACT_PROXY } from "./permit2.ts";

export const AUTHORIZATION_USED = toEventSelector("AuthorizationUsed(address,bytes32)");
const TRANSFER = toEventSelector("Transfer(address,address,uint256)");
const PULLED = toEventSelector(billPayAbi.find((e) => e.type === "event" && e.name === "Pulled")! as Parameters<typeof toEventSelector>[0]);

export interface RawLog {
  address: string;
  topics: readonly Hex[];
  data: Hex;
  logIndex: number;
}

const sameAddress = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
const topicAddress = (topic: Hex | undefined) => (topic ? `0x${topic.slice(26)}` : "");

/**
 * BillPay never calls transferWithAuthorization, so a transaction sent to BillPay (a pull, a
 * refund) carries no x402 payment. Inbound transfers of any other transaction may.
 */
export function mayCarryAuthorization(txTo: string | null, billPay: string): boolean {
  return txTo === null || !sameAddress(txTo, billPay);
}

/** The nonce of the AuthorizationUsed by `from` that `token` logged just before the transfer at `logIndex`, if any. */
export function authorizationNonceOf(logs: readonly RawLog[], transfer: { token: string; from: string; logIndex: number }): Hex | null {
  const before = logs.find((l) => l.logIndex === transfer.logIndex - 1);
  const isItsAuthorization =
    before !== undefined &&
    sameAddress(before.address, transfer.token) &&
    before.topics[0] === AUTHORIZATION_USED &&
    sameAddress(topicAddress(before.topics[1]), transfer.from);
  return isItsAuthorization ? before.topics[2]! : null;
}

/** Whether a transaction was sent to x402's proxy: its payments are then known by its calldata too (permit2NonceOf). */
export function isProxyCall(txTo: string | null): boolean {
  return txTo !== null && sameAddress(txTo, X402_EXACT_PROXY);
}

/**
 * The Permit2 nonce (as lib/permit2.ts keys it) of the x402 proxy settlement that made the
 * transfer at `logIndex`, if it is one: see the file's comment.
 */
export function permit2NonceOf(
  tx: { to: string | null; input?: Hex },
  logs: readonly RawLog[],
  transfer: { token: string; from: string; to: string; value: bigint; logIndex: number },
): Hex | null {
  if (!isProxyCall(tx.to)) return null;
  const after = logs.find((l) => l.logIndex === transfer.logIndex + 1);
  if (!after || !sameAddress(after.address, X402_EXACT_PROXY) || !PROXY_SETTLED.includes(after.topics[0]!)) return null;
  const s = proxySettlementIn(tx.input);
  const itsSettlement =
    s !== null && sameAddress(s.token, transfer.token) && sameAddress(s.owner, transfer.from) && sameAddress(s.to, transfer.to) && s.amount === transfer.value;
  return itsSettlement ? permit2NonceKey(s.nonce) : null;
}

/** How a payment reached BillPay: pulled by BillPay, an EIP-3009 authorization, or a Permit2 permit through x402's proxy. */
export type PaymentRail = "pull" | "authorization" | "permit2";

export interface ChainPayment {
  rail: PaymentRail;
  /** A pull's BillPay order id. */
  orderId: Hex | null;
  /** An x402 payment's EIP-3009 nonce, or its Permit2 nonce (rail permit2). */
  authorizationNonce: Hex | null;
  payer: Hex;
  token: Hex;
  amount: bigint;
  logIndex: number;
}

/**
 * Every payment into BillPay a transaction's logs show, as the ledger would book them. `input`,
 * the transaction's calldata, is needed only for a transaction sent to the x402 proxy.
 */
export function paymentsInLogs(tx: { to: string | null; input?: Hex; logs: readonly RawLog[] }, billPay: string): ChainPayment[] {
  const payments: ChainPayment[] = [];
  for (const log of tx.logs) {
    if (sameAddress(log.address, billPay) && log.topics[0] === PULLED) {
      const { args } = decodeEventLog({ abi: billPayAbi, eventName: "Pulled", topics: log.topics as [Hex, ...Hex[]], data: log.data });
      payments.push({ rail: "pull", orderId: args.orderId, authorizationNonce: null, payer: args.payer, token: args.token, amount: args.amount, logIndex: log.logIndex });
      continue;
    }
    if (log.topics[0] !== TRANSFER || log.topics.length !== 3) continue;
    const from = topicAddress(log.topics[1]) as Hex;
    const to = topicAddress(log.topics[2]);
    if (!sameAddress(to, billPay) || sameAddress(from, billPay) || !mayCarryAuthorization(tx.to, billPay)) continue;
    if (log.data.length !== 66) continue; // a Transfer's value is one word; anything else is not a payment
    const amount = BigInt(log.data);
    const nonce = authorizationNonceOf(tx.logs, { token: log.address, from, logIndex: log.logIndex });
    const permit2Nonce = nonce ? null : permit2NonceOf(tx, tx.logs, { token: log.address, from, to, value: amount, logIndex: log.logIndex });
    if (!nonce && !permit2Nonce) continue;
    payments.push({ rail: nonce ? "authorization" : "permit2", orderId: null, authorizationNonce: (nonce ?? permit2Nonce)!, payer: from, token: log.address as Hex, amount, logIndex: log.logIndex });
  }
  return payments;
}

/** What the predicate reads of a receipt: its block, and its logs. */
export interface BlockReceipt {
  blockHash: Hex;
  logs: readonly RawLog[];
}

/**
 * A transaction's logs as they stand in the block an event was read from. Ponder's RPC cache
 * keys a receipt by the transaction's hash alone and keeps it through a reorganisation (it drops
 * cached results by block number only), so a transaction included again in the replacing block,
 * its logs at other positions, would be judged by the receipt of the block that went: a payment
 * taken for other inflow. A receipt of another block gives way to the logs of the event's own
 * block, read by its hash (`inBlock`: eth_getLogs by block hash, which Ponder does not cache,
 * and which answers for that block or not at all).
 */
export async function logsInBlock(blockHash: Hex, receipt: () => Promise<BlockReceipt>, inBlock: () => Promise<readonly RawLog[]>): Promise<readonly RawLog[]> {
  const r = await receipt();
  return sameAddress(r.blockHash, blockHash) ? r.logs : inBlock();
}

/** An EIP-1193 request function asking for logs (a viem client's `request`, Ponder's too). */
export type GetLogsRequest = (args: { method: "eth_getLogs"; params: [{ blockHash: Hex; address: Hex[] }] }) => Promise<unknown>;

/** Whose logs the x402 predicate reads of a token's transfer: the token's own, and x402's proxy's (authorizationNonceOf, permit2NonceOf). */
const predicateLogSources = (token: Hex): Hex[] => [token, X402_EXACT_PROXY];

/**
 * The logs of transaction `txHash` in the block `blockHash` that the predicate reads of the
 * transfer at `transfer.logIndex` (EIP-234's filter by block hash). The transfer's own log must
 * be among them: a node that answers nothing for a block it does not know (some do, rather
 * than an error) fails here, instead of the transfer being judged by no logs at all.
 */
export async function transactionLogsInBlock(request: GetLogsRequest, blockHash: Hex, txHash: Hex, transfer: { token: Hex; logIndex: number }): Promise<RawLog[]> {
  const logs = (await request({ method: "eth_getLogs", params: [{ blockHash, address: predicateLogSources(transfer.token) }] })) as RpcLog[];
  const own = logs.flatMap((l) => (sameAddress(l.transactionHash ?? "", txHash) && l.logIndex !== null ? [{ address: l.address, topics: l.topics, data: l.data, logIndex: hexToNumber(l.logIndex) }] : []));
  if (!own.some((l) => l.logIndex === transfer.logIndex)) throw new Error(`the node gave no log ${transfer.logIndex} of ${txHash} in block ${blockHash}, where its transfer was read`);
  return own;
}
