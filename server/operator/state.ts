/**
 * What an operator watches, read fresh each time: the service's orders (by status and rail,
 * stuck, held for review, orphans), and per chain the ledger's lag, the hot keys' gas, each
 * token's treasury on chain beside the ledger's figure and its refund budget; the exchange
 * rate and its age; the facilitator's and the biller's health. The console and /metrics read
 * it. Every outward read has a timeout, and a failed read is reported, not thrown.
 */
import { PaymentWatches } from "../orders/payment-watch.ts";
import { ORDER_HOLDS_ORPHAN } from "../orders/ledger-pass.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND } from "../orders/store.ts";
import { stoodSql, UNFINISHED_STATUSES } from "../orders/lifecycle.ts";
import { and, asc, createClient, desc, eq, gte } from "@ponder/client";
import { erc20Abi, type Hex } from "viem";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import { explorerTxUrl, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import * as schema from "../../ponder/ponder.schema.ts";
import type { FacilitatorClient } from "@x402/core/server";
import type { BillerApi } from "../biller/upstream.ts";
import type { Db } from "../db.ts";
import { errorText } from "../log-safety.ts";
import type { RateSource } from "../pricing/rates.ts";
import type { LedgerHealth } from "../ledger-health.ts";
import type { ChainStatus, TokenStatus } from "../chain/status.ts";

const TIMEOUT_MS = 5_000;

export interface Health {
  name: string;
  url: string;
  ok: boolean;
  ms: number;
  error?: string;
}

function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took over ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

export interface OperatorStateDeps {
  db: Db;
  deployments: Deployments;
  ledgerUrl: string;
  rates: RateSource;
  biller: Pick<BillerApi, "ping">;
  /** Each chain's facilitator client (with its credentials) and its URL, for the health check. */
  facilitators: Partial<Record<ChainKey, { url: string; client: Pick<FacilitatorClient, "getSupported"> }>>;
  keys: { operator: string; refunder: string };
  /** An unfinished order past its lease and older than this is stuck. */
  stuckAfterSeconds: number;
  /** Whether the ledger keeps up with each chain: a stalled or lagging ledger is a Problem. */
  ledgerHealth: Pick<LedgerHealth, "latest">;
}

export class OperatorState {
  private readonly ledgerSql;
  /**
   * Per chain, the time (seconds) of the newest head read from its node, first the service's
   * start: a node that stops answering has its head's age grow from it, so the stale-head
   * alert fires for a node gone silent as for one frozen.
   */
  private readonly lastHeadTime = new Map<ChainKey, number>();
  private readonly startedAt = Math.floor(Date.now() / 1000);

  constructor(readonly deps: OperatorStateDeps) {
    this.ledgerSql = createClient(`${deps.ledgerUrl}/sql`, { schema });
  }

  async orderCounts(): Promise<Array<{ status: string; rail: string; count: number; amount: bigint }>> {
    const rows = await this.deps.db.query<{ status: string; rail: string; count: string; amount: string }>(
      `SELECT status, rail, count(*)::text AS count, coalesce(sum(amount), 0)::text AS amount FROM bill_order GROUP BY status, rail ORDER BY status, rail`,
    );
    return rows.map((r) => ({ status: r.status, rail: r.rail, count: Number(r.count), amount: BigInt(r.amount) }));
  }

  /**
   * Unfinished orders nobody holds (no live lease) that have stood longer than the limit,
   * oldest first. How long an order has stood is the audit's rule (orders/lifecycle.ts
   * unfinishedSince): since it last became unfinished, whatever moved it meanwhile. Each
   * requery moves a pending bill PENDING again, and each retry of a refund REFUNDING again,
   * so its last move would never grow old however long it keeps failing.
   */
  async stuck(limit = 50) {
    const rows = await this.deps.db.query<OrderRow>(
      `${ORDER_COLUMNS} WHERE status = ANY($1::text[]) AND (lease_until IS NULL OR lease_until < now()) AND ${stoodSql("$2")}
         ORDER BY coalesce(unfinished_since, created_at) LIMIT $3`,
      [UNFINISHED_STATUSES, this.deps.stuckAfterSeconds, limit],
    );
    return rows;
  }

  async review(limit = 50) {
    const rows = await this.deps.db.query<OrderRow>(`${ORDER_COLUMNS} WHERE status = 'NEEDS_REVIEW' ORDER BY updated_at DESC LIMIT $1`, [limit]);
    return rows;
  }

  /**
   * The newest 100 of each kind, those still open first: a payment waiting for an operator is
   * never pushed off the page by ones already settled (`npm run review -- list` lists them all).
   */
  async orphans() {
    const pulls = await this.deps.db.query<Record<string, string | null>>(
      `SELECT chain, order_id, payer, token_address, amount::text AS amount, pull_tx_hash, status, refund_tx_hash, created_at::text AS created_at FROM orphan_pull
        ORDER BY (status = 'REFUNDING') DESC, created_at DESC LIMIT 100`,
    );
    const payments = await this.deps.db.query<Record<string, string | null>>(
      `SELECT chain, token_address, payer, auth_nonce, amount::text AS amount, tx_hash, status, created_at::text AS created_at FROM orphan_payment
        ORDER BY (status IN ('NEEDS_REVIEW', '${ORPHAN_HELD_FOR_HAND_REFUND}')) DESC, created_at DESC LIMIT 100`,
    );
    return { pulls, payments };
  }

  /** x402 payments no order accounts for that wait for an operator: open, or held while refunded by hand (none an order holds). */
  async openOrphanPayments(): Promise<number> {
    const [row] = await this.deps.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM orphan_payment o
        WHERE status IN ('NEEDS_REVIEW', '${ORPHAN_HELD_FOR_HAND_REFUND}') AND NOT EXISTS (SELECT 1 FROM bill_order b WHERE ${ORDER_HOLDS_ORPHAN})`,
    );
    return row?.n ?? 0;
  }

  /** Payments a reorganisation took off the chain after the ledger confirmed them, and what became of each. */
  losses() {
    return new PaymentWatches(this.deps.db, this.deps.deployments).losses();
  }

  /** An order by its request id, or by the `ord_…` reference the logs name it by (server/log.ts orderRef). */
  async order(id: string): Promise<OrderRow | undefined> {
    if (/^ord_[0-9a-f]{16}$/.test(id)) {
      // The logs never carry the request id (it proves the payer); their reference is its hash.
      return (await this.deps.db.query<OrderRow>(`${ORDER_COLUMNS} WHERE 'ord_' || left(encode(sha256(convert_to(request_id, 'UTF8')), 'hex'), 16) = $1`, [id]))[0];
    }
    return (await this.deps.db.query<OrderRow>(`${ORDER_COLUMNS} WHERE request_id = $1`, [id]))[0];
  }

  /**
   * The request ids an order's pays were sent to the biller under, first first (what the
   * biller's support knows it by). While a fresh order's payment settles, its first may be
   * recorded and not yet sent (orders/fulfil.ts recordFirstAttempt); one never sent is deleted.
   */
  async billerAttempts(requestId: string): Promise<Array<{ biller_request_id: string; attempt: number; sent_at: string }>> {
    return this.deps.db.query(`SELECT biller_request_id, attempt, sent_at::text AS sent_at FROM biller_attempt WHERE request_id = $1 ORDER BY attempt`, [requestId]);
  }

  /** A page of orders, newest first, filtered by status and rail. */
  async orders(filter: { status?: string; rail?: string; before?: string; limit: number }) {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.status) where.push(`status = $${args.push(filter.status)}`);
    if (filter.rail) where.push(`rail = $${args.push(filter.rail)}`);
    if (filter.before) where.push(`(created_at, request_id) < (SELECT created_at, request_id FROM bill_order WHERE request_id = $${args.push(filter.before)})`);
    const rows = await this.deps.db.query<OrderRow>(
      `${ORDER_COLUMNS} ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY created_at DESC, request_id DESC LIMIT $${args.push(filter.limit)}`,
      args,
    );
    return rows;
  }

  async schedules(limit = 50) {
    const rows = await this.deps.db.query<Record<string, string | null>>(
      `SELECT s.id, s.wallet, s.chain, s.token, s.status, s.cron, s.runs::text AS runs, s.next_run_at::text AS next_run_at,
              r.due_at::text AS last_due_at, r.outcome AS last_outcome, r.error AS last_error
         FROM bill_schedule s
         LEFT JOIN LATERAL (SELECT due_at, outcome, error FROM schedule_run WHERE schedule_id = s.id ORDER BY due_at DESC LIMIT 1) r ON true
        ORDER BY s.created_at DESC LIMIT $1`,
      [limit],
    );
    return rows;
  }

  /** The rate quotes are made from now, its source, and when it was last read (null: a configured figure). */
  async rate(): Promise<{ ngnPerUsd: string | null; source: string; readAt: string | null; ageSeconds: number | null; error?: string }> {
    const source = this.deps.rates.source ?? "configured";
    const rows = await this.deps.db.query<{ read_at: string }>(`SELECT read_at::text AS read_at FROM fx_rate WHERE source = $1 ORDER BY read_at DESC LIMIT 1`, [source]);
    const readAt = rows[0]?.read_at ?? null;
    const ageSeconds = readAt ? Math.max(0, Math.round((Date.now() - Date.parse(readAt)) / 1000)) : null;
    try {
      const milli = await withTimeout(this.deps.rates.ngnPerUsdMilli(), "the rate");
      return { ngnPerUsd: (Number(milli) / 1000).toString(), source, readAt, ageSeconds };
    } catch (err) {
      return { ngnPerUsd: null, source, readAt, ageSeconds, error: errorText(err) };
    }
  }

  async chains(): Promise<ChainStatus[]> {
    const [status, treasury] = await Promise.all([
      this.ledgerGet<Record<string, { id: number; block: { number: number; timestamp: number } | null }>>("/status").catch(() => null),
      this.ledgerGet<{ treasury: Array<{ chainId: number; token: string; balance: string; indexedBlock?: number | null }> }>("/ledger/treasury").catch(() => null),
    ]);
    return Promise.all(
      (Object.keys(this.deps.deployments.chains) as ChainKey[]).map(async (chain) => {
        const d = this.deps.deployments.chains[chain]!;
        const ledger = this.deps.ledgerHealth.latest().find((p) => p.chain === chain) ?? null;
        const out: ChainStatus = { chain, chainId: d.chainId, head: null, indexed: null, lagBlocks: null, lagSeconds: null, headAgeSeconds: null, ledger, keys: [], tokens: [], errors: [] };
        const indexed = status ? Object.values(status).find((s) => s.id === d.chainId)?.block ?? null : null;
        if (!status) out.errors.push("the ledger's /status could not be read");
        const client = publicClientFor(chain, rpcUrlFor(chain, d));
        const billPay = d.billPay.address as Hex;
        try {
          const head = await withTimeout(client.getBlock({ blockTag: "latest" }), `${chain} head`);
          out.head = head.number;
          this.lastHeadTime.set(chain, Number(head.timestamp));
          if (indexed) {
            out.indexed = BigInt(indexed.number);
            out.lagBlocks = Math.max(0, Number(head.number - out.indexed));
            out.lagSeconds = Math.max(0, Number(head.timestamp) - indexed.timestamp);
          }
          const keys = [
            { role: "operator" as const, address: this.deps.keys.operator },
            { role: "refunder" as const, address: this.deps.keys.refunder },
          ];
          const rows = treasury?.treasury.filter((r) => r.chainId === d.chainId) ?? [];
          // The ledger's balances stand at the block its rows were read at; BillPay's on chain is
          // read at that block too, or any payment the ledger has not indexed yet would look
          // like a mismatch. A chain with no rows yet: the block /status gave. Rows without
          // their block (a ledger older than this service, mid-deploy): the head, as before.
          const ledgerAt = rows.length === 0 ? indexed?.number : (rows.find((r) => typeof r.indexedBlock === "number")?.indexedBlock ?? Number(head.number));
          const ledgerBlock = treasury && typeof ledgerAt === "number" ? BigInt(ledgerAt) : null;
          const atLedgerBlock =
            ledgerBlock === null || ledgerBlock === head.number
              ? Promise.resolve(undefined)
              : ledgerBlock > head.number
                ? Promise.reject(new Error(`the ledger has indexed block ${ledgerBlock}, past this node's head ${head.number}`))
                : this.balancesAt(client, d, ledgerBlock);
          // Unknown, and said: a match that cannot be judged must not pass for one (the alert reads errors too).
          const pastBalances = atLedgerBlock.catch((err: unknown) => {
            out.errors.push(`${chain}: the treasury cannot be compared with the ledger at its block ${ledgerBlock}: ${errorText(err).split("\n")[0]}`);
            return null;
          });
          const reads = await withTimeout(
            Promise.all([
              ...keys.map((k) => client.getBalance({ address: k.address as Hex, blockNumber: head.number })),
              client.multicall({
                allowFailure: true,
                blockNumber: head.number,
                contracts: d.tokens.flatMap((t) => [
                  { address: t.address as Hex, abi: erc20Abi, functionName: "balanceOf", args: [billPay] } as const,
                  { address: billPay, abi: billPayAbi, functionName: "refundBudget", args: [t.address as Hex] } as const,
                  { address: billPay, abi: billPayAbi, functionName: "pullBudget", args: [t.address as Hex] } as const,
                ]),
              }),
            ]),
            `${chain} balances`,
          );
          out.keys = keys.map((k, i) => ({ ...k, gasWei: reads[i] as bigint }));
          const calls = reads[keys.length] as Array<{ status: string; result?: unknown }>;
          const past = await pastBalances; // read beside the head's, under the same timeout
          out.tokens = d.tokens.map((t, i) => {
            const [balance, budget, pulls] = calls.slice(i * 3, i * 3 + 3);
            const ledgerRow = rows.find((r) => r.token.toLowerCase() === t.address.toLowerCase());
            const onChain = balance?.status === "success" ? (balance.result as bigint) : null;
            const ledger = ledgerRow ? BigInt(ledgerRow.balance) : treasury ? 0n : null;
            const compared = ledgerBlock === null ? null : ledgerBlock === head.number ? onChain : (past?.[i] ?? null);
            const bucket = (read: { status: string; result?: unknown } | undefined) => {
              const r = read?.status === "success" ? (read.result as readonly [bigint, bigint, bigint]) : null;
              return r ? { limit: r[0], period: r[1], available: r[2] } : null;
            };
            return {
              symbol: t.symbol,
              address: t.address,
              onChain,
              ledger,
              matches: compared === null || ledger === null ? null : compared === ledger,
              ledgerBlock,
              refundBudget: bucket(budget),
              pullBudget: bucket(pulls),
            };
          });
        } catch (err) {
          out.errors.push(`${chain} could not be read: ${errorText(err).split("\n")[0]}`);
        }
        out.headAgeSeconds = Math.max(0, Math.floor(Date.now() / 1000) - (this.lastHeadTime.get(chain) ?? this.startedAt));
        return out;
      }),
    );
  }

  /** BillPay's balance of each of the chain's tokens at `block`, in their order; throws when the node cannot answer for that block (pruned, or behind). */
  private async balancesAt(client: ReturnType<typeof publicClientFor>, d: Deployments["chains"][ChainKey] & object, block: bigint): Promise<bigint[]> {
    const calls = await withTimeout(
      client.multicall({ allowFailure: true, blockNumber: block, contracts: d.tokens.map((t) => ({ address: t.address as Hex, abi: erc20Abi, functionName: "balanceOf", args: [d.billPay.address as Hex] }) as const) }),
      `balances at block ${block}`,
    );
    return calls.map((c, i) => {
      if (c.status !== "success") throw new Error(`${d.tokens[i]!.symbol}'s balanceOf failed there: ${errorText(c.error).split("\n")[0]}`);
      return c.result as bigint;
    });
  }

  async health(): Promise<Health[]> {
    const timed = async (name: string, url: string, probe: () => Promise<unknown>): Promise<Health> => {
      const started = performance.now();
      try {
        await withTimeout(probe(), name);
        return { name, url, ok: true, ms: Math.round(performance.now() - started) };
      } catch (err) {
        return { name, url, ok: false, ms: Math.round(performance.now() - started), error: errorText(err) };
      }
    };
    const facilitators = Object.entries(this.deps.facilitators).map(([chain, f]) => timed(`facilitator ${chain}`, f!.url, () => f!.client.getSupported()));
    const biller = timed("biller", "", () => this.deps.biller.ping());
    return Promise.all([...facilitators, biller]);
  }

  /** Wallets the ledger knows, with the allowance each last set, what is left of it, the periodic limit and totals. */
  async wallets(limit = 100) {
    const c = schema.spendingAllowanceChange;
    const [accounts, sets] = await Promise.all([
      withTimeout(this.ledgerSql.db.select().from(schema.account).orderBy(desc(schema.account.updatedAt)).limit(limit), "ledger accounts"),
      withTimeout(this.ledgerSql.db.select().from(c).where(eq(c.kind, "set")).orderBy(desc(c.blockNumber), desc(c.logIndex)).limit(10_000), "ledger allowance changes"),
    ]);
    const key = (chainId: number, payer: string, token: string) => `${chainId}:${payer.toLowerCase()}:${token.toLowerCase()}`;
    const lastSet = new Map<string, bigint>();
    for (const s of sets) if (!lastSet.has(key(s.chainId, s.payer, s.token))) lastSet.set(key(s.chainId, s.payer, s.token), s.amount);
    // Only wallets that set an allowance: an x402 payer has an account (its payments) but none.
    return accounts
      .map((a) => ({ ...a, allowanceSet: lastSet.get(key(a.chainId, a.payer, a.token)) ?? null }))
      .filter((a) => a.allowanceSet !== null);
  }

  /** The latest refunds from the ledger, each with the service's order it refunded (by BillPay's order id), if any. */
  async refunds(limit = 50) {
    const refunds = await withTimeout(this.ledgerSql.db.select().from(schema.refund).orderBy(desc(schema.refund.timestamp)).limit(limit), "ledger refunds");
    const ids = refunds.map((r) => r.orderId.toLowerCase());
    const orders = ids.length
      ? await this.deps.db.query<{ onchain_order_id: string; request_id: string }>(`SELECT onchain_order_id, request_id FROM bill_order WHERE onchain_order_id = ANY($1::text[])`, [ids])
      : [];
    const byId = new Map(orders.map((o) => [o.onchain_order_id.toLowerCase(), o.request_id]));
    return refunds.map((r) => ({ ...r, requestId: byId.get(r.orderId.toLowerCase()) ?? null }));
  }

  /** Paid and refunded volume per hour over the last `hours`, per token (raw units), from the ledger. */
  async volume(hours = 24): Promise<Array<{ hour: number; paid: bigint; refunded: bigint }>> {
    const since = BigInt(Math.floor(Date.now() / 1000) - hours * 3600);
    const [payments, refunds] = await Promise.all([
      withTimeout(this.ledgerSql.db.select().from(schema.payment).where(and(gte(schema.payment.timestamp, since))).orderBy(asc(schema.payment.timestamp)).limit(10_000), "ledger payments"),
      withTimeout(this.ledgerSql.db.select().from(schema.refund).where(gte(schema.refund.timestamp, since)).orderBy(asc(schema.refund.timestamp)).limit(10_000), "ledger refunds"),
    ]);
    const start = Math.floor(Number(since) / 3600);
    const buckets = Array.from({ length: hours + 1 }, (_, i) => ({ hour: (start + i) * 3600, paid: 0n, refunded: 0n }));
    const at = (ts: bigint) => buckets[Math.min(buckets.length - 1, Math.max(0, Math.floor(Number(ts) / 3600) - start))]!;
    for (const p of payments) at(p.timestamp).paid += p.amount;
    for (const r of refunds) at(r.timestamp).refunded += r.amount;
    return buckets;
  }

  private async ledgerGet<T>(path: string): Promise<T> {
    const res = await fetch(`${this.deps.ledgerUrl}${path}`, { signal: AbortSignal.timeout(TIMEOUT_MS) });
    if (!res.ok) throw new Error(`ledger answered ${res.status} for ${path}`);
    return (await res.json()) as T;
  }
}

export interface OrderRow {
  request_id: string;
  rail: string;
  status: string;
  chain: string;
  token: string;
  payer: string;
  amount: string;
  tx_hash: string | null;
  refund_tx_hash: string | null;
  failure_reason: string | null;
  flag: string | null;
  service_id: string | null;
  created_at: string;
  updated_at: string;
}

const ORDER_COLUMNS = `SELECT request_id, rail, status, chain, token, payer, amount::text AS amount, tx_hash, refund_tx_hash, failure_reason, flag,
  bill->>'serviceID' AS service_id, created_at::text AS created_at, updated_at::text AS updated_at FROM bill_order`;

/** A transaction's link on the chain's block explorer; none on the local profile, which no explorer knows. */
export function txLink(chain: string, txHash: string | null): string | null {
  return (txHash && explorerTxUrl(chain, txHash)) || null;
}
