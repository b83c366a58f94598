/**
 * The service's reader of the ledger (the Ponder app's HTTP API, ponder/src/api). The
 * service decides an order's money from here, never from its own memory: a pull is paid
 * when the ledger shows its Pulled event, an x402 payment when it shows the transfer, each
 * of exactly the order's amount (paymentMismatch).
 *
 * Whoever waits for a payment is woken when the ledger indexes one: Ponder's live query (SSE,
 * fed by the ledger database's LISTEN/NOTIFY) pushes the newest payments as they change, and
 * a waiter finds its own among them without asking again. Polling the read API stays as the
 * fallback, quicker while the push is not connected.
 */
import { createClient, desc } from "@ponder/client";
import type { Hex } from "viem";
import { chainInfo, type ChainKey } from "../lib/chains.ts";
import { amountIn } from "../lib/token-amounts.ts";
import * as schema from "../ponder/ponder.schema.ts";
import type { PaymentRail } from "../lib/payment-logs.ts";
import type { RefundKey } from "../lib/refund-logs.ts";

/** The rails of x402 payments: EIP-3009's, and Permit2's through x402's exact proxy. */
export type SignedRail = Exclude<PaymentRail, "pull">;

/** The ledger rail an x402 order's payment arrives on: Permit2's when its stored payment says so (x402-protocol/payment.ts), else EIP-3009's. */
export function x402RailOf(o: { payment?: unknown }): SignedRail {
  return (o.payment as { method?: string } | null | undefined)?.method === "permit2" ? "permit2" : "authorization";
}

const LEDGER_TIMEOUT_MS = 5_000;

export interface LedgerPayment {
  id: string;
  chainId: number;
  rail: PaymentRail;
  orderId: string | null;
  authorizationNonce: string | null;
  payer: string;
  token: string;
  amount: string;
  txHash: string;
  blockNumber: string;
  timestamp: string;
}

export interface LedgerRefund {
  id: string;
  chainId: number;
  rail: PaymentRail;
  orderId: string;
  /** Set on the refund of an x402 payment: its EIP-3009 nonce. */
  authorizationNonce?: string | null;
  payer: string;
  token: string;
  amount: string;
  txHash: string;
  blockNumber: string;
  timestamp: string;
}

/**
 * Why a ledger payment is not exactly the order's, or null when it is: the same payer and
 * token and exactly the order's amount. Anything else is never served or refunded by the
 * service; the order waits for an operator.
 */
export function paymentMismatch(order: { payer: string; tokenAddress: string; amount: bigint; chain?: string; token?: string }, p: LedgerPayment): string | null {
  if (p.payer.toLowerCase() !== order.payer.toLowerCase()) return `the chain shows a payment by ${p.payer}, not the order's payer`;
  if (p.token.toLowerCase() !== order.tokenAddress.toLowerCase()) return `the chain shows a payment in ${p.token}, not the order's token`;
  // Operators read this reason: amounts with decimals and symbol where the order names its token.
  const amount = (units: bigint | string) => (order.chain && order.token ? amountIn(order.chain, order.token, units) : String(units));
  if (BigInt(p.amount) !== order.amount) return `the chain shows ${amount(p.amount)} paid under this key; the order is for ${amount(order.amount)}`;
  return null;
}

/** Picks the x402 payment under its unique key: (chain, rail, token, payer, nonce); the rail is EIP-3009's unless named. */
export function isAuthorizationPayment(key: { chainId: number; rail?: SignedRail; token: string; payer: string; nonce: string }): (p: LedgerPayment) => boolean {
  const [token, payer, nonce] = [key.token, key.payer, key.nonce].map((v) => v.toLowerCase());
  const rail = key.rail ?? "authorization";
  return (p) =>
    p.rail === rail && p.chainId === key.chainId && p.token.toLowerCase() === token && p.payer.toLowerCase() === payer && p.authorizationNonce?.toLowerCase() === nonce;
}

export type KeyedOrder = { chain: string; rail: string; onchainOrderId: string; tokenAddress: string; payer: string; authNonce: string | null; payment?: unknown };

/**
 * An order's unique key on its chain, as the ledger keys its payment and its refunds: a pull
 * by BillPay's order id, an x402 payment by (rail, token, payer, nonce). The one place an
 * order's key is read from the order.
 */
export function orderKeyOf(o: KeyedOrder): RefundKey {
  if (o.rail === "pull") return { orderId: o.onchainOrderId as Hex };
  return { rail: x402RailOf(o), token: o.tokenAddress as Hex, payer: o.payer as Hex, nonce: o.authNonce as Hex };
}

/** Picks an order's payment under its unique key, on its own chain (orderKeyOf). */
export function isPaymentOf(o: KeyedOrder): (p: LedgerPayment) => boolean {
  const chainId = chainInfo(o.chain).chainId;
  const key = orderKeyOf(o);
  if (!("orderId" in key)) return isAuthorizationPayment({ chainId, ...key });
  const id = key.orderId.toLowerCase();
  return (p) => p.rail === "pull" && p.chainId === chainId && p.orderId?.toLowerCase() === id;
}

/**
 * A payment's unique key on the chain, as the ledger keys it: a pull by (chain, BillPay order
 * id), an x402 payment by (chain, rail, token, payer, nonce).
 */
export function paymentKey(p: Pick<LedgerPayment, "chainId" | "rail" | "orderId" | "token" | "payer" | "authorizationNonce">): string {
  return p.rail === "pull"
    ? `${p.chainId}:pull:${p.orderId!.toLowerCase()}`
    : `${p.chainId}:${p.rail}:${p.token.toLowerCase()}:${p.payer.toLowerCase()}:${p.authorizationNonce!.toLowerCase()}`;
}

/** A token transfer into BillPay as the ledger's read API shows it (figures as decimal strings). */
export interface LedgerInflow {
  id: string;
  chainId: number;
  token: string;
  from: string;
  amount: string;
  txHash: string;
  blockNumber: string;
  logIndex: number;
  timestamp: string;
}

export interface LedgerAccount {
  chainId: number;
  token: string;
  payer: string;
  [figure: string]: unknown;
}

/** How often a waiter reads the ledger anyway: rarely while pushes arrive, often while they do not. */
const POLL_WHILE_PUSHED_MS = 250;
const POLL_WITHOUT_PUSH_MS = 50;
/** How many of the newest payments each push carries: a waiter finds its own among them without asking. */
const PUSHED_PAYMENTS = 64;
const RESUBSCRIBE_AFTER_MS = 1_000;

export class LedgerClient {
  private readonly waiters = new Set<(why: "pushed") => void>();
  /** The newest payments, as the ledger last pushed them. */
  private recent: LedgerPayment[] = [];
  private live?: { unsubscribe(): void };
  private pushing = false;
  private resubscribeAt = 0;

  constructor(readonly url: string) {}

  /**
   * Resolves when the ledger indexes a new payment, or after the polling interval: the caller
   * then reads what it waits for. The live query opens on the first wait.
   */
  nextPayment(): Promise<"pushed" | "poll"> {
    this.subscribe();
    return new Promise((resolve) => {
      const done = (why: "pushed" | "poll") => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve(why);
      };
      const timer = setTimeout(() => done("poll"), this.pushing ? POLL_WHILE_PUSHED_MS : POLL_WITHOUT_PUSH_MS);
      this.waiters.add(done);
    });
  }

  /** Whether pushes are arriving: a waiter then need not ask the read API before the next one. */
  get pushingNow(): boolean {
    return this.pushing;
  }

  /**
   * The payment `ours` picks once the ledger shows it, or null after `waitMs`. A push carries
   * the newest payments; `read` (the read API) is asked only when pushes are not arriving: at
   * first, after a wake that was a poll, and when there is no time to wait for a push.
   */
  async awaitPayment(
    ours: (p: LedgerPayment) => boolean,
    read: () => Promise<LedgerPayment | null | undefined>,
    waitMs: number,
    onReadError: (err: unknown) => void,
  ): Promise<LedgerPayment | null> {
    const deadline = Date.now() + waitMs;
    let ask = !this.pushing || waitMs <= 0;
    let reported = false;
    for (;;) {
      let found = this.pushed(ours);
      if (!found && ask) {
        try {
          found = (await read()) ?? undefined;
        } catch (err) {
          // Once per wait: a ledger that is down fails every read until it is back.
          if (!reported) onReadError(err);
          reported = true;
        }
      }
      if (found) return found;
      if (Date.now() >= deadline) return null;
      ask = (await this.nextPayment()) === "poll";
    }
  }

  /**
   * The pushed payment `match` picks, if it is among the newest the ledger pushed, until the
   * stream is seen to drop: a live query sends the rows anew when the ledger removes one (a
   * reorganisation), but a dropped stream sends nothing, and what it last sent may hold a
   * payment the ledger no longer does. (A stream that goes quiet without closing is not seen
   * until it does: what decides money reads the ledger's API again, as a late landing's
   * refund does at its depth.)
   */
  pushed(match: (p: LedgerPayment) => boolean): LedgerPayment | undefined {
    return this.pushing ? this.recent.find(match) : undefined;
  }

  private subscribe(): void {
    if (this.live || Date.now() < this.resubscribeAt) return;
    const p = schema.payment;
    this.live = createClient(`${this.url}/sql`, { schema }).live(
      (db) => db.select().from(p).orderBy(desc(p.timestamp), desc(p.blockNumber), desc(p.logIndex)).limit(PUSHED_PAYMENTS),
      (rows) => {
        // The read API's shape: figures as decimal strings (JSON has no bigint).
        this.recent = rows.map((r) => ({
          id: r.id,
          chainId: r.chainId,
          rail: r.rail,
          orderId: r.orderId,
          authorizationNonce: r.authorizationNonce,
          payer: r.payer,
          token: r.token,
          amount: String(r.amount),
          txHash: r.txHash,
          blockNumber: String(r.blockNumber),
          timestamp: String(r.timestamp),
        }));
        this.pushing = true;
        for (const wake of [...this.waiters]) wake("pushed");
      },
      // The ledger refuses live queries until its backfill is done, and an event stream
      // refused once stays closed: drop it and open a new one a little later. Waiters poll meanwhile.
      () => {
        this.live?.unsubscribe();
        this.live = undefined;
        this.pushing = false;
        this.recent = [];
        this.resubscribeAt = Date.now() + RESUBSCRIBE_AFTER_MS;
      },
    );
  }

  /** Closes the live query (shutdown). */
  close(): void {
    this.live?.unsubscribe();
    this.live = undefined;
    this.pushing = false;
    this.recent = [];
  }

  private async get<T>(path: string): Promise<T> {
    const res = await fetch(`${this.url}${path}`, { signal: AbortSignal.timeout(LEDGER_TIMEOUT_MS) });
    if (!res.ok) throw new Error(`ledger answered ${res.status} for ${path.split("?")[0]}`);
    return (await res.json()) as T;
  }

  /** A BillPay order's pull and refunds. */
  order(onchainOrderId: string): Promise<{ payments: LedgerPayment[]; refunds: LedgerRefund[] }> {
    return this.get(`/ledger/orders/${onchainOrderId}`);
  }

  /** An x402 payment by (chain, token, payer, nonce) on its rail (EIP-3009's unless named), and its refunds. */
  authorization(chain: ChainKey, token: string, payer: string, nonce: string, rail: SignedRail = "authorization"): Promise<{ payment: LedgerPayment | null; refunds: LedgerRefund[] }> {
    return this.get(`/ledger/authorizations/${chainInfo(chain).chainId}/${token}/${payer}/${nonce}${rail === "permit2" ? "?rail=permit2" : ""}`);
  }

  /** One payer's payments and refunds under these order ids and nonces (at most 100 of each), in one call. */
  records(payer: string, orderIds: string[], nonces: string[]): Promise<{ payments: LedgerPayment[]; refunds: LedgerRefund[] }> {
    const params = new URLSearchParams();
    if (orderIds.length > 0) params.set("orderIds", orderIds.join(","));
    if (nonces.length > 0) params.set("nonces", nonces.join(","));
    return this.get(`/ledger/payers/${payer.toLowerCase()}/records?${params}`);
  }

  /**
   * A payer's transfers of `token` into BillPay that no payment accounts for (a permit settled
   * through another contract, a plain transfer), of exactly `amount` when given, the newest
   * `limit`; `more` when there are others.
   */
  unbookedInflows(chainId: number, token: string, payer: string, amount?: bigint, limit = 100): Promise<{ transfers: LedgerInflow[]; more: boolean }> {
    const exactly = amount === undefined ? "" : `&amount=${amount}`;
    return this.get(`/ledger/payers/${payer.toLowerCase()}/unbooked-inflows?chainId=${chainId}&token=${token.toLowerCase()}${exactly}&limit=${limit}`);
  }

  /** One chain's payments of one rail in ledger order (time, block, log), from `from` (unix seconds) or after `cursor`. */
  payments(q: {
    chainId: number;
    rail: LedgerPayment["rail"];
    from?: bigint;
    cursor?: string;
    limit: number;
  }): Promise<{ payments: LedgerPayment[]; nextCursor: string | null }> {
    const params = new URLSearchParams({ rail: q.rail, chainId: String(q.chainId), limit: String(q.limit) });
    if (q.cursor) params.set("cursor", q.cursor);
    else if (q.from !== undefined) params.set("from", q.from.toString());
    return this.get(`/ledger/payments?${params}`);
  }

  /**
   * The block of `chainId` through which every event can be read from the ledger's routes
   * (/ledger/readable: Ponder's checkpoint, read through the same connection as the rows),
   * or null before its first.
   */
  async indexedBlock(chainId: number): Promise<bigint | null> {
    const { chains } = await this.get<{ chains: Array<{ chainId: number; block: number }> }>("/ledger/readable");
    const chain = chains.find((s) => s.chainId === chainId);
    return chain && chain.block > 0 ? BigInt(chain.block) : null;
  }

  /**
   * Waits (looking every `everyMs`, up to `waitMs`) until the ledger has indexed `chainId` up
   * to at least `block`. Where it stood at the last look, and why that look failed if it did (a
   * ledger that is away may come back before the deadline).
   */
  async reachBlock(chainId: number, block: bigint, waitMs: number, everyMs = 50): Promise<{ reached: boolean; indexed: bigint | null; readError?: string }> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      let indexed: bigint | null = null;
      let readError: string | undefined;
      try {
        indexed = await this.indexedBlock(chainId);
      } catch (err) {
        readError = (err as Error).message.split("\n")[0];
      }
      if (indexed !== null && indexed >= block) return { reached: true, indexed };
      if (Date.now() >= deadline) return { reached: false, indexed, readError };
      await new Promise((r) => setTimeout(r, everyMs));
    }
  }

  /** A wallet's per-chain, per-token totals. */
  async accounts(wallet: string): Promise<LedgerAccount[]> {
    return (await this.get<{ accounts: LedgerAccount[] }>(`/ledger/wallets/${wallet.toLowerCase()}?limit=1`)).accounts;
  }
}

/**
 * The ledger did not reach a block in the time given: it is behind, stalled or away. Whoever
 * judges from the ledger (the audit) cannot judge yet; the message is one line saying what was
 * waited for and where the ledger stood.
 */
export class LedgerNotCaughtUp extends Error {
  constructor(
    readonly chainId: number,
    readonly block: bigint,
    readonly indexed: bigint | null,
    readonly waitedMs: number,
    readonly readError?: string,
  ) {
    const stood = readError ? `could not be read (${readError})` : indexed === null ? "had indexed nothing yet" : `stood at block ${indexed}`;
    super(`the ledger did not reach block ${block} of chain ${chainId} in ${Math.round(waitedMs / 1000)} s: it ${stood}`);
  }
}

/** Waits until the ledger has indexed `chainId` up to at least `block`; LedgerNotCaughtUp when it does not in `timeoutMs`. */
export async function waitForLedgerBlock(url: string, chainId: number, block: bigint, timeoutMs = 30_000): Promise<void> {
  const { reached, indexed, readError } = await new LedgerClient(url).reachBlock(chainId, block, timeoutMs);
  if (!reached) throw new LedgerNotCaughtUp(chainId, block, indexed, timeoutMs, readError);
}
