/**
 * The audit: reconciles the ledger against the chain, and the service's orders against the
 * ledger, for operators (`npm run audit`, scripts/audit.ts, and the console's treasury panel).
 *   1. per chain and token, the indexed treasury balance equals BillPay's on-chain balanceOf;
 *   2. every refund matches an inbound payment of at least its amount: a pull by order id,
 *      an x402 payment by (token, payer, EIP-3009 nonce), with the same payer and token;
 *   3. every pull was within the spending allowance the payer had set, replaying each
 *      payer's allowance history in chain order, with what refunded pulls gave back;
 *   4. the service's orders against the ledger (audit/orders.ts): served orders paid
 *      exactly, refunds within payments, every payment accounted for; orders held for
 *      review and stuck ones listed, and what operators resolved from review.
 * It first waits until the ledger has indexed each chain up to the head seen at start.
 */
import { and, asc, createClient, eq, isNull, lte, sum } from "@ponder/client";
import { erc20Abi, formatUnits, type Address } from "viem";
import { publicClientFor } from "../../lib/chain-client.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { deployedChains, rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import * as schema from "../../ponder/ponder.schema.ts";
import { waitForLedgerBlock } from "../ledger-client.ts";
import { auditOrders, readServiceRecords, recordsBefore, type OrdersAudit, type OtherInflow, type ServiceRecords } from "./orders.ts";

const QUERY_TIMEOUT_MS = 30_000;

/** Every ledger query gets a deadline: an audit must end, with an answer or an error. */
function withTimeout<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`ledger query for ${what} took over ${QUERY_TIMEOUT_MS} ms`)), QUERY_TIMEOUT_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

export interface TreasuryLine {
  chain: ChainKey;
  token: string;
  symbol: string;
  ledgerBalance: bigint;
  onChainBalance: bigint;
  paymentsIn: bigint;
  otherIn: bigint;
  refunds: bigint;
  withdrawals: bigint;
  ok: boolean;
}

export interface AuditReport {
  treasury: TreasuryLine[];
  refundsChecked: number;
  pullsChecked: number;
  /** The orders' reconciliation; null when the audit was asked for the ledger only. */
  orders: OrdersAudit | null;
  discrepancies: string[];
}

const lower = (s: string) => s.toLowerCase();

interface AuditOptions {
  ledgerUrl: string;
  deployments: Deployments;
  /** The service whose orders are reconciled (its /ops routes, or its records read in-process); omitted: the ledger only. */
  service?: { url: string; token?: string } | { records: () => Promise<ServiceRecords> };
  /** An order unfinished for longer than this is listed as stuck. */
  stuckAfterSeconds?: number;
  /** How long to wait for the ledger to reach each chain's head before the audit cannot judge (LedgerNotCaughtUp); 30 s unless set. */
  waitMs?: number;
}

export async function runAudit(options: AuditOptions): Promise<AuditReport> {
  const { deployments } = options;
  const ledger = createClient(`${options.ledgerUrl}/sql`, { schema });
  const discrepancies: string[] = [];

  // The records as they stand before the heads are read: an order served or refunded by now
  // has its payment and refund in a block the ledger is about to catch up to. One served or
  // refunded after this (on its own receipt) may not be (orders.ts recordsBefore).
  const before = await readRecords(options.service).then(
    (r) => r && recordsBefore(r),
    () => undefined, // reported below, where the records are read again
  );

  // Catch up first: balances compared mid-indexing would differ for no fault.
  const heads = new Map<ChainKey, bigint>();
  for (const key of deployedChains(deployments)) {
    const d = deployments.chains[key];
    if (!d) continue;
    const head = await publicClientFor(key, rpcUrlFor(key, d)).getBlockNumber();
    heads.set(key, head);
    await waitForLedgerBlock(options.ledgerUrl, d.chainId, head, options.waitMs);
  }

  const [treasuryRows, payments, refunds, allowanceChanges] = await Promise.all([
    withTimeout("treasury", ledger.db.select().from(schema.treasury)),
    withTimeout("payments", ledger.db.select().from(schema.payment)),
    withTimeout("refunds", ledger.db.select().from(schema.refund)),
    withTimeout(
      "allowance changes",
      ledger.db
        .select()
        .from(schema.spendingAllowanceChange)
        .orderBy(asc(schema.spendingAllowanceChange.blockNumber), asc(schema.spendingAllowanceChange.logIndex)),
    ),
  ]);

  // 0. Every payment and refund is in a token the ledger follows: otherwise its treasury
  //    movements are invisible here (a token accepted on chain after deployment, say).
  const followed = new Set(
    Object.values(deployments.chains).flatMap((d) => d.tokens.map((t) => `${d.chainId}:${lower(t.address)}`)),
  );
  for (const row of [...payments, ...refunds]) {
    if (!followed.has(`${row.chainId}:${lower(row.token)}`)) {
      discrepancies.push(`${row.id} is in token ${row.token} on chain ${row.chainId}, which the ledger does not follow`);
    }
  }

  // 1. Treasury balances at the chain head the ledger caught up to: the ledger's side is
  //    the sum of the transfers it indexed up to that block, the chain's is balanceOf there.
  const treasury: TreasuryLine[] = [];
  for (const key of deployedChains(deployments)) {
    const d = deployments.chains[key];
    if (!d) continue;
    const client = publicClientFor(key, rpcUrlFor(key, d));
    const head = heads.get(key)!;
    const t9 = schema.treasuryTransfer;
    const sums = await withTimeout(
      `${key} transfers`,
      ledger.db
        .select({ token: t9.token, inbound: t9.inbound, total: sum(t9.amount) })
        .from(t9)
        .where(and(eq(t9.chainId, d.chainId), lte(t9.blockNumber, head)))
        .groupBy(t9.token, t9.inbound),
    );
    for (const t of d.tokens) {
      const row = treasuryRows.find((r) => r.chainId === d.chainId && lower(r.token) === lower(t.address));
      const moved = (inbound: boolean) =>
        BigInt(sums.find((s) => lower(s.token) === lower(t.address) && s.inbound === inbound)?.total ?? 0);
      const ledgerBalance = moved(true) - moved(false);
      const onChainBalance = await client.readContract({
        address: t.address as Address,
        abi: erc20Abi,
        functionName: "balanceOf",
        args: [d.billPay.address as Address],
        blockNumber: head,
      });
      const paymentsIn = (row?.pullInflow ?? 0n) + (row?.authorizationInflow ?? 0n);
      const line: TreasuryLine = {
        chain: key,
        token: t.address,
        symbol: t.symbol,
        ledgerBalance,
        onChainBalance,
        paymentsIn,
        otherIn: (row?.totalInflow ?? 0n) - paymentsIn,
        refunds: row?.refunds ?? 0n,
        withdrawals: row?.withdrawals ?? 0n,
        ok: ledgerBalance === onChainBalance,
      };
      if (!line.ok) {
        discrepancies.push(
          `${key} ${t.symbol}: ledger balance ${line.ledgerBalance} differs from on-chain balance ${onChainBalance}`,
        );
      }
      treasury.push(line);
    }
  }

  // 2. Every refund matched to an inbound payment of at least its amount (an x402 refund to
  //    the payment booked under its nonce: an AuthorizationUsed immediately followed by the
  //    payer's transfer into BillPay, so a cancelled nonce or a plain transfer matches nothing;
  //    a Permit2 refund to the payment booked under its Permit2 nonce, the proxy's settlement).
  const refundedPerPayment = new Map<string, bigint>();
  for (const r of refunds) {
    const paid = payments.find((p) =>
      r.rail === "pull"
        ? p.rail === "pull" && p.chainId === r.chainId && p.orderId === r.orderId
        : p.rail === r.rail &&
          p.chainId === r.chainId &&
          lower(p.token) === lower(r.token) &&
          lower(p.payer) === lower(r.payer) &&
          p.authorizationNonce === r.authorizationNonce,
    );
    const what = `refund ${r.id} (${r.rail}, order ${r.orderId}, ${r.amount})`;
    if (!paid) {
      discrepancies.push(`${what} has no inbound payment`);
      continue;
    }
    if (lower(paid.payer) !== lower(r.payer) || lower(paid.token) !== lower(r.token)) {
      discrepancies.push(`${what} went to ${r.payer} in ${r.token}, but ${paid.payer} paid in ${paid.token}`);
    }
    const total = (refundedPerPayment.get(paid.id) ?? 0n) + r.amount;
    refundedPerPayment.set(paid.id, total);
    if (total > paid.amount) discrepancies.push(`${what}: refunds total ${total} exceed the payment of ${paid.amount}`);
  }

  // 3. Every pull within the allowance set, replaying, in chain order, the payer's sets, its
  //    pulls and the allowance its refunded pulls gave back. A restore must belong to a refund
  //    of a pull of this payer and token, made after the payer last set its allowance, and
  //    add exactly what that refund returned.
  type Change = (typeof allowanceChanges)[number];
  type Step = { block: bigint; logIndex: number; change?: Change; pull?: (typeof payments)[number] };
  const histories = new Map<string, Step[]>();
  const push = (key: string, step: Step) => histories.set(key, [...(histories.get(key) ?? []), step]);
  for (const c of allowanceChanges) {
    push(`${c.chainId}:${lower(c.payer)}:${lower(c.token)}`, { block: c.blockNumber, logIndex: c.logIndex, change: c });
  }
  const pulls = payments.filter((p) => p.rail === "pull");
  for (const p of pulls) {
    push(`${p.chainId}:${lower(p.payer)}:${lower(p.token)}`, { block: p.blockNumber, logIndex: p.logIndex, pull: p });
  }
  const MAX_UINT256 = 2n ** 256n - 1n;
  for (const steps of histories.values()) {
    steps.sort((a, b) => (a.block === b.block ? a.logIndex - b.logIndex : a.block < b.block ? -1 : 1));
    let allowance = 0n;
    let lastSetBlock = -1n;
    for (const step of steps) {
      const c = step.change;
      if (c?.kind === "set") {
        allowance = c.amount;
        lastSetBlock = c.blockNumber;
        continue;
      }
      if (c) {
        const pull = pulls.find((p) => p.chainId === c.chainId && p.orderId === c.orderId);
        const refunded = refunds.find((r) => r.chainId === c.chainId && r.orderId === c.orderId && r.txHash === c.txHash);
        const expected = allowance + c.amount > MAX_UINT256 ? MAX_UINT256 : allowance + c.amount;
        if (!pull || !refunded || lower(pull.payer) !== lower(c.payer) || lower(pull.token) !== lower(c.token)) {
          discrepancies.push(`allowance restore ${c.id} (${c.amount}) has no refunded pull of this payer and token`);
        } else if (refunded.amount !== c.amount) {
          discrepancies.push(`allowance restore ${c.id} gave back ${c.amount}, but the refund returned ${refunded.amount}`);
        } else if (pull.blockNumber <= lastSetBlock) {
          discrepancies.push(`allowance restore ${c.id} added to an allowance the payer set after its pull`);
        } else if (c.allowanceAfter !== expected) {
          discrepancies.push(`allowance restore ${c.id} reported ${c.allowanceAfter} left, expected ${expected}`);
        }
        allowance = c.allowanceAfter;
        continue;
      }
      const p = step.pull!;
      if (p.amount > allowance) {
        discrepancies.push(`pull ${p.id} of ${p.amount} exceeded the spending allowance of ${allowance}`);
      } else if (p.allowanceLeft !== allowance - p.amount) {
        discrepancies.push(`pull ${p.id} reported ${p.allowanceLeft} left, expected ${allowance - p.amount}`);
      }
      allowance = p.allowanceLeft ?? allowance - p.amount;
    }
  }

  // 4. The service's orders against the ledger.
  let orders: OrdersAudit | null = null;
  if (options.service) {
    try {
      const records = (await readRecords(options.service))!;
      orders = auditOrders(records, payments, refunds, Date.now(), options.stuckAfterSeconds ?? 3_600, before, await otherInflows(ledger, payments));
      discrepancies.push(...orders.discrepancies);
    } catch (err) {
      discrepancies.push(`the service's orders${"url" in options.service ? ` at ${options.service.url}` : ""} could not be read: ${(err as Error).message}`);
    }
  }

  return { treasury, refundsChecked: refunds.length, pullsChecked: pulls.length, orders, discrepancies };
}

function readRecords(service: AuditOptions["service"]): Promise<ServiceRecords | undefined> {
  if (!service) return Promise.resolve(undefined);
  return "records" in service ? service.records() : readServiceRecords(service.url, service.token);
}

/** Token amounts for people: every token the service settles has 6 decimals (lib/networks.ts); --json keeps raw units. */
const TOKEN_DECIMALS = 6;
const amount = (raw: bigint) => formatUnits(raw, TOKEN_DECIMALS);

export function formatAudit(report: AuditReport): string {
  const head = ["chain", "token", "ledger balance", "on-chain balance", "payments in", "other in", "refunds", "withdrawals", ""];
  const rows = report.treasury.map((l) => [
    l.chain,
    l.symbol,
    amount(l.ledgerBalance),
    amount(l.onChainBalance),
    amount(l.paymentsIn),
    amount(l.otherIn),
    amount(l.refunds),
    amount(l.withdrawals),
    l.ok ? "ok" : "MISMATCH",
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  // Amounts right-aligned, so their decimal points line up.
  const line = (cells: string[]) => cells.map((c, i) => (i >= 2 && i <= 7 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join("  ").trimEnd();
  const out = [line(head), ...rows.map(line), ""];
  out.push(`refunds matched to payments: ${report.refundsChecked}; pulls checked against allowances: ${report.pullsChecked}`);
  if (report.orders) {
    out.push(`orders reconciled with the ledger: ${report.orders.ordersChecked}`);
    if (report.orders.review.length) out.push(`held for review: ${report.orders.review.length}`, ...report.orders.review.map((r) => `  - ${r}`));
    if (report.orders.resolved.length) out.push(`resolved by operators: ${report.orders.resolved.length}`, ...report.orders.resolved.map((r) => `  - ${r}`));
    if (report.orders.stuck.length) out.push(`stuck: ${report.orders.stuck.length}`, ...report.orders.stuck.map((r) => `  - ${r}`));
    if (report.orders.awaitingLedger.length) out.push(`served or refunded since the audit began, not in the ledger yet: ${report.orders.awaitingLedger.length}`, ...report.orders.awaitingLedger.map((r) => `  - ${r}`));
  } else {
    out.push("orders: not reconciled (--ledger-only)");
  }
  if (report.discrepancies.length === 0) out.push("audit: no discrepancies");
  else out.push(`audit: ${report.discrepancies.length} discrepancies`, ...report.discrepancies.map((d) => `  - ${d}`));
  return out.join("\n");
}

/** The report as JSON: bigints as decimal strings. */
export function auditJson(report: AuditReport): string {
  return JSON.stringify({ ok: report.discrepancies.length === 0, ...report }, (_, v) => (typeof v === "bigint" ? v.toString() : v), 2);
}


/**
 * Transfers into BillPay that no payment accounts for: inbound, no x402 nonce, and not the
 * transfer of a pull (its payer's pull of that token and amount in the same transaction).
 */
async function otherInflows(ledger: ReturnType<typeof createClient<typeof schema>>, payments: Array<typeof schema.payment.$inferSelect>): Promise<OtherInflow[]> {
  const t = schema.treasuryTransfer;
  // The predicate of the ledger's own unbooked-inflows route (ponder/src/api), for every payer
  // at once: its pulls are left out here, as the ledger's SQL over HTTP takes no subquery.
  const rows = await withTimeout("other inflows", ledger.db.select().from(t).where(and(eq(t.inbound, true), isNull(t.authorizationNonce))));
  const pullKey = (chainId: number, tx: string, from: string, token: string, amount: bigint) => `${chainId}:${lower(tx)}:${lower(from)}:${lower(token)}:${amount}`;
  const pulled = new Set(payments.filter((p) => p.rail === "pull").map((p) => pullKey(p.chainId, p.txHash, p.payer, p.token, p.amount)));
  return rows
    .filter((r) => !pulled.has(pullKey(r.chainId, r.txHash, r.from, r.token, r.amount)))
    .map((r) => ({ chainId: r.chainId, token: r.token, from: r.from, amount: r.amount, txHash: r.txHash, timestamp: r.timestamp }));
}
