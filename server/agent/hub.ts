/**
 * The agent hub's operations, behind every agent tool (agent/tools.ts) whatever the
 * transport (MCP, A2A): who a key speaks for, the PIN gate on paying, paying one bill or a
 * batch from the wallet's allowance, schedules, balances and history. Amounts leave as
 * decimal strings of raw token units (6 decimals), with a formatted figure beside them.
 */
import { createHash } from "node:crypto";
import { formatUnits, type Hex } from "viem";
import { chainInfo, chainByKey, resolveTokenSymbol, type ChainKey, type TokenSymbol } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import type { OptionsQuery } from "../biller/catalogue/international.ts";
import { ledgerPeriodLimit, readWalletState, type PeriodLimit } from "../chain/wallet-state.ts";
import type { Config } from "../config.ts";
import type { Db } from "../db.ts";
import { ServiceError } from "../errors.ts";
import { x402RailOf, type LedgerClient, type LedgerPayment, type LedgerRefund } from "../ledger-client.ts";
import { orderResult, type FlowDeps } from "../orders/fulfil.ts";
import { catchUpWaitMs, LAG_WINDOW_MS, LEDGER_LOOK_MS, ledgerLacksConfirmed } from "../orders/ledger-view.ts";
import { startPullOrders } from "../orders/pull-flow.ts";
import type { Order, PullGuard } from "../orders/store.ts";
import type { RateSource } from "../pricing/rates.ts";
import { RateVersions } from "../pricing/rate-versions.ts";
import type { AgentBill, PaymentRequest } from "../schemas.ts";
import { billHash, lockedQuote, quoteBill, type QuoteContext } from "../quote/quote.ts";
import { QuoteLocks } from "../quote/quote-locks.ts";
import { quoteView } from "../quote/quote-view.ts";
import type { Receipts } from "../orders/receipts.ts";
import type { PriceOffers } from "../pricing/offers.ts";
import type { Category } from "../pricing/price.ts";
import { customerView, type CustomerQuestion } from "../biller/customer-check.ts";
import type { Gates, Limits } from "../limits.ts";
import { checkCallbackUrl } from "../orders/callbacks.ts";
import type { Link, LinkStore } from "./links.ts";
import { checkCron, nextDue, UNPAYABLE, type Schedule, type ScheduleStatus, type ScheduleStore } from "./schedules.ts";
import { refuseFailingPayer } from "../orders/failing-payers.ts";

/** A bill as an agent names it: the REST bill without the wallet, chain and token (those come from the link or the call). */
export interface HubDeps {
  config: Config;
  db: Db;
  deployments: Deployments;
  rates: RateSource;
  flow: FlowDeps;
  links: LinkStore;
  schedules: ScheduleStore;
  ledger: LedgerClient;
  /** The service's rate limits (one set per instance, shared with the HTTP routes). */
  limits: Limits;
  /** Bounds on expensive work: links and PIN checks. */
  gates: Gates;
  /** Signs the prices the x402 route shows (pricing/offers.ts). */
  offers: PriceOffers;
  /** Signs paid bills' receipts (orders/receipts.ts). */
  receipts: Receipts;
}

/**
 * What must still hold when the pull is signed: a scheduled run's schedule is not cancelled,
 * an agent's call's key is still the wallet's (a re-link retires it). Every pull has one.
 */
function pullGuard(link: Pick<Link, "apiKeyHash">, scheduleId?: string): PullGuard {
  if (scheduleId) return { scheduleId };
  if (link.apiKeyHash) return { apiKeyHash: link.apiKeyHash };
  throw new Error("a pull needs the key or the schedule that asked for it");
}

const units = (v: bigint) => ({ units: v.toString(), formatted: formatUnits(v, 6) });

/**
 * A pay answers on its transaction's receipt, and the ledger indexes that block on its own pace
 * (a poll a second on a real profile). When what the ledger answers disagrees with what the
 * service knows (a payment or refund it confirmed, not in the records; an allowance the chain
 * shows otherwise; an order of the wallet's changed a moment ago), it is read again once it has
 * indexed the block the service has seen (orders/ledger-view.ts: up to LEDGER_CATCH_UP_MS);
 * else the answer says so (`ledger_behind`). Reads that agree, the usual case, wait for nothing.
 * "A moment ago" is LAG_WINDOW_MS.
 */
const isoSeconds = (t: bigint) => new Date(Number(t) * 1000).toISOString();

/** A periodic limit as check_balance shows it: null when the payer set none. */
function periodLimitView(limit: PeriodLimit | null) {
  if (!limit) return null;
  return {
    amount_per_period: units(limit.amountPerPeriod),
    period_seconds: Number(limit.periodSeconds),
    period_started: isoSeconds(limit.periodStart),
    period_ends: isoSeconds(limit.periodStart + limit.periodSeconds),
    spent_this_period: units(limit.spent),
    left_this_period: units(limit.available),
  };
}

export class AgentHub {
  /** The rate versions prices are made under, shared with the x402 route (one in-memory current version per instance). */
  readonly versions: RateVersions;
  private readonly pricing: QuoteContext;
  private readonly quoteLocks: QuoteLocks;

  constructor(readonly deps: HubDeps) {
    this.versions = new RateVersions(deps.db, deps.rates, deps.config.SERVICE_FEES_USD);
    this.pricing = { versions: this.versions, catalogue: deps.flow.catalogue, ttlSeconds: deps.config.QUOTE_TTL_SECONDS, refundBudgets: deps.flow.refundBudgets, customerChecks: deps.flow.customerChecks };
    this.quoteLocks = new QuoteLocks(deps.db);
  }

  authenticate(apiKey: string): Promise<Link> {
    return this.deps.links.authenticate(apiKey);
  }

  /** The gate on every paying tool. */
  checkPin(link: Link, pin: string): Promise<void> {
    return this.deps.gates.pin.run(() => this.deps.links.checkPin(link, pin));
  }

  /** The chain and token a pull uses: the call's, else the link's approved pair. */
  pullOption(link: Pick<Link, "approvedChain" | "approvedToken" | "scopeChain">, chain?: string, token?: string): { chain: ChainKey; token: TokenSymbol; tokenAddress: Hex } {
    const option = resolvePullOption(this.deps.deployments, chain ?? link.approvedChain, token ?? link.approvedToken);
    // A contract wallet's signature was checked on one chain: the same address elsewhere may be another contract.
    if (link.scopeChain && option.chain !== link.scopeChain) {
      throw new ServiceError("CHAIN_NOT_LINKED", `this key was linked by a contract wallet verified on ${link.scopeChain}; it pays only there (link again on ${option.chain} to pay there)`);
    }
    return option;
  }

  /** The bill's price now: what a live get_quote of it showed (quote-locks.ts), else under the current rate version. */
  private async price(link: Pick<Link, "wallet">, bill: AgentBill, chain: ChainKey, token: TokenSymbol) {
    const request: PaymentRequest = { ...bill, token, blockchain: chain, wallet_address: link.wallet };
    const { hash, quote, vend } = await quoteBill(request, this.pricing, { chain, token });
    const lock = await this.quoteLocks.locked(hash);
    const locked = lock && (await lockedQuote(request, this.pricing, { chain, token }, lock));
    return { bill: request, bodyHash: hash, amount: (locked ?? quote).amount, vend };
  }

  /** get_quote: the bill's price on the pull option under the current rate version, with its breakdown; pay_bill charges it until it expires. */
  async quote(link: Link, bill: AgentBill, options: { chain?: string; token?: string } = {}) {
    const option = this.pullOption(link, options.chain, options.token);
    const request: PaymentRequest = { ...bill, token: option.token, blockchain: option.chain, wallet_address: link.wallet };
    const { hash, quote } = await quoteBill(request, this.pricing, option);
    await this.quoteLocks.lock(hash, quote);
    return { quotes: [quoteView(request, quote)] };
  }

  /** pay_bill: one bill, one pull. */
  async payBill(
    link: Link,
    bill: AgentBill,
    options: { chain?: string; token?: string; idempotencyKey?: string; scheduleId?: string; allowDuplicate?: boolean } = {},
  ) {
    const option = this.pullOption(link, options.chain, options.token);
    const priced = await this.price(link, bill, option.chain, option.token);
    let idempotencyKey = options.idempotencyKey;
    if (!idempotencyKey && !options.allowDuplicate && !options.scheduleId) {
      // An agent retrying blindly: the same bill within the window answers with the first order.
      const { key, earlier } = await this.duplicateKey(link.wallet, priced.bodyHash);
      if (earlier) return { ...(await this.paidResult(earlier)), replayed: true };
      idempotencyKey = key;
    }
    const { orders, replay } = await this.pulling(link, [bill], (admit) =>
      startPullOrders(this.deps.flow, {
        wallet: link.wallet as Hex,
        ...option,
        bills: [priced],
        batch: false,
        idempotencyKey,
        scheduleId: options.scheduleId,
        guard: pullGuard(link, options.scheduleId),
        admit,
      }),
    );
    return { ...(await this.paidResult(orders[0]!)), ...(replay ? { replayed: true } : {}) };
  }

  /**
   * The implicit idempotency key of a bill paid without one: the bill's hash and the window
   * it falls in (so concurrent copies meet on one key), and the order of the previous window
   * if it is still within DUPLICATE_WINDOW_SECONDS.
   */
  private duplicateKey(wallet: string, bodyHash: string): Promise<{ key: string; earlier?: Order }> {
    return this.windowKey(bodyHash, async (k) => (await this.deps.flow.orders.findByIdempotencyKeys(wallet, [k]))[0]);
  }

  /**
   * The duplicate window's key for `hash` (the window it falls in, so concurrent copies meet on
   * one key), and what `find` shows under the previous window's key, if made within
   * DUPLICATE_WINDOW_SECONDS.
   */
  private async windowKey<T extends { createdAt: Date }>(hash: string, find: (key: string) => Promise<T | undefined>): Promise<{ key: string; earlier?: T }> {
    const windowMs = this.deps.config.DUPLICATE_WINDOW_SECONDS * 1000;
    const slot = Math.floor(Date.now() / windowMs);
    const key = (n: number) => `dup:${hash.slice(0, 40)}@${n}`;
    const earlier = await find(key(slot - 1));
    const recent = earlier && Date.now() - earlier.createdAt.getTime() < windowMs ? earlier : undefined;
    return { key: key(slot), earlier: recent };
  }

  /** pay_bill_batch: every bill in one pullBatch; a result per bill, in the order given. */
  async payBatch(link: Link, bills: AgentBill[], options: { chain?: string; token?: string; idempotencyKey?: string } = {}) {
    const max = this.deps.config.BATCH_MAX_BILLS;
    if (bills.length > max) throw new ServiceError("BATCH_TOO_LARGE", `a batch takes at most ${max} bills; got ${bills.length}`);
    const option = this.pullOption(link, options.chain, options.token);
    const priced = await Promise.all(bills.map((bill) => this.price(link, bill, option.chain, option.token)));
    // One payer's failed bills are refunded within his share of the budget: a batch that could
    // fail whole is held to it as a bill is, or its refunds would wait a budget period.
    await this.deps.flow.refundBudgets?.assertRefundable(option.chain, option.token, priced.reduce((s, p) => s + p.amount, 0n), "this batch costs");
    const { orders, replay } = await this.pulling(link, bills, (admit) =>
      startPullOrders(this.deps.flow, {
        wallet: link.wallet as Hex,
        ...option,
        bills: priced,
        batch: true,
        idempotencyKey: options.idempotencyKey,
        guard: pullGuard(link),
        admit,
      }),
    );
    const results = await Promise.all(orders.map((o) => this.paidResult(o)));
    return {
      batch_id: orders[0]!.batchId,
      chain: option.chain,
      token: option.token,
      total: units(orders.reduce((s, o) => s + o.amount, 0n)),
      succeeded: results.filter((r) => r.status === "SUCCESS").length,
      failed: results.filter((r) => r.status === "FAILED_VENDING").length,
      pending: results.filter((r) => r.status === "TIMEOUT").length,
      results,
      ...(replay ? { replayed: true } : {}),
    };
  }

  /**
   * Starts a wallet's pull; one that reverted on chain (PULL_REVERTED: its allowance or balance
   * moved after the estimate, one small transaction of his against a whole pull at BillPay's
   * gas) counts against the wallet, whose new pulls are refused past RATE_LIMIT_REVERTED_PAYER,
   * as they are past RATE_LIMIT_FAILED_VENDS_PAYER bills the biller failed, and a bill whose
   * callback_url this service would not call (`admit`: a call its idempotency key answers with
   * its first order is still answered, whatever its bill says).
   */
  private async pulling<T>(link: Link, bills: AgentBill[], start: (admit: () => Promise<void>) => Promise<T>): Promise<T> {
    try {
      return await start(async () => {
        for (const b of bills) checkCallbackUrl(b.callback_url, this.deps.config.CALLBACK_ALLOW_PRIVATE);
        await this.deps.limits.check("revertedPayer", link.wallet.toLowerCase());
        await refuseFailingPayer(this.deps.flow.orders, link.wallet, this.deps.config.RATE_LIMIT_FAILED_VENDS_PAYER);
      });
    } catch (err) {
      // Each pull the reverted transaction carried counts: a batch's reverts at BillPay's gas for every one of them.
      if (err instanceof ServiceError && err.code === "PULL_REVERTED") for (const _ of bills) await this.deps.limits.count("revertedPayer", link.wallet.toLowerCase());
      throw err;
    }
  }

  /** A paying tool's answer for one order: its result and, once pulled, the bill's signed receipt (orders/receipts.ts). */
  private async paidResult(o: Order) {
    const receipt = await this.deps.receipts.billReceipt(o);
    return { ...this.result(o), ...(receipt ? { receipt } : {}) };
  }

  /** The REST route's result shape, plus what an agent wants to see of the charge. */
  result(o: Order, options: { showCode: boolean } = { showCode: true }) {
    return { ...orderResult(o, options), chain: o.chain, token: o.token, amount: units(o.amount) };
  }

  async scheduleBill(
    link: Link,
    bill: AgentBill,
    when: { runAt?: string; cron?: string; maxRuns?: number },
    options: { chain?: string; token?: string; idempotencyKey?: string; allowDuplicate?: boolean } = {},
  ) {
    const { config } = this.deps;
    const option = this.pullOption(link, options.chain, options.token);
    const maxRuns = when.cron ? (when.maxRuns ?? null) : 1;
    const request: PaymentRequest = { ...bill, token: option.token, blockchain: option.chain, wallet_address: link.wallet };
    const requestHash = createHash("sha256")
      .update(JSON.stringify([billHash(request, option), when.cron ? null : new Date(when.runAt!).toISOString(), when.cron ?? null, maxRuns]))
      .digest("hex");
    // Once per key: the agent's, or for a blind retry of the same schedule (no key, no
    // allow_duplicate) one of the duplicate window's, as pay_bill's; a schedule made twice
    // would pay its bill twice at every due time. A retry is answered before anything is
    // checked or priced (its run_at since past, a number check, a biller down), which could
    // refuse it while the first schedule stands.
    const replay = (earlier: Schedule) => {
      if (earlier.requestHash !== requestHash) {
        throw new ServiceError("IDEMPOTENCY_KEY_REUSED", `idempotency_key "${options.idempotencyKey}" already scheduled another bill (${earlier.id}); nothing was scheduled`);
      }
      return { ...scheduleView(earlier), replayed: true };
    };
    let idempotencyKey = options.idempotencyKey ?? null;
    if (idempotencyKey) {
      const earlier = await this.deps.schedules.byKey(link.wallet, idempotencyKey);
      if (earlier) return replay(earlier);
    } else if (!options.allowDuplicate) {
      const { key, earlier } = await this.windowKey(requestHash, async (k) => {
        const found = await this.deps.schedules.byKey(link.wallet, k);
        return found && { createdAt: found.createdAt, found };
      });
      // The previous window's copy, or this window's.
      const found = earlier?.found ?? (await this.deps.schedules.byKey(link.wallet, key));
      if (found) return replay(found);
      idempotencyKey = key;
    }
    checkCallbackUrl(bill.callback_url, config.CALLBACK_ALLOW_PRIVATE);
    const now = new Date();
    let firstRun: Date;
    if (when.cron) {
      firstRun = checkCron(when.cron, config.SCHEDULE_MIN_INTERVAL_SECONDS, now);
    } else {
      firstRun = new Date(when.runAt!);
      if (firstRun.getTime() < now.getTime() - 1_000) throw new ServiceError("VALIDATION_FAILED", "run_at is in the past");
      if (firstRun.getTime() > now.getTime() + 366 * 86_400_000) throw new ServiceError("VALIDATION_FAILED", "run_at is more than a year away");
    }
    // Priced now to show the agent what a run costs at today's rate; each run is priced when it
    // runs (at a get_quote's locked price, while a quote of the same bill lives).
    const priced = await this.price(link, bill, option.chain, option.token);
    const { created, ...schedule } = await this.deps.schedules.create({
      wallet: link.wallet,
      bill,
      chain: option.chain,
      token: option.token,
      runAt: when.cron ? null : firstRun,
      cron: when.cron ?? null,
      firstRun,
      maxRuns,
      maxPerWallet: config.SCHEDULE_MAX_PER_WALLET,
      apiKeyHash: link.apiKeyHash ?? null,
      idempotencyKey,
      requestHash,
    });
    // A copy made at the same moment under the same key: answered as a retry.
    if (!created) return replay(schedule);
    return { ...scheduleView(schedule), price_now: units(priced.amount) };
  }

  async listSchedules(link: Link, status?: ScheduleStatus) {
    const list = await this.deps.schedules.list(link.wallet, status);
    return {
      schedules: list.map((s) => ({
        ...scheduleView(s),
        last_runs: s.lastRuns.map((r) => ({ due_at: r.dueAt.toISOString(), request_id: r.requestId, outcome: r.outcome ?? "RUNNING", error: r.error })),
      })),
    };
  }

  async cancelSchedule(link: Link, id: string) {
    return scheduleView(await this.deps.schedules.cancel(link.wallet, id));
  }

  /** Runs every due schedule once per due time (called by the worker on every instance). */
  async runDueSchedules(): Promise<number> {
    const { schedules } = this.deps;
    let ran = 0;
    const retries = await schedules.unfinishedRuns(this.deps.config.ORDER_LEASE_SECONDS);
    for (const { schedule, dueAt } of retries) await this.runSchedule(schedule, dueAt);
    for (const s of await schedules.due(20)) {
      const due = s.nextRunAt!;
      if (!(await schedules.claim(s, nextDue(s, due, this.deps.config.SCHEDULE_MIN_INTERVAL_SECONDS)))) continue;
      await this.runSchedule(s, due);
      ran++;
    }
    return ran;
  }

  private async runSchedule(s: Schedule, due: Date): Promise<void> {
    const link = { wallet: s.wallet, approvedChain: s.chain, approvedToken: s.token, channel: "SCHEDULE", linkedAt: s.createdAt };
    // The key ties the order to this run: a repeat after a crash finds it instead of paying again.
    const idempotencyKey = `${s.id}@${due.getTime()}`;
    try {
      // Made under a key the wallet has since replaced (written while a re-link retired it, so
      // the re-link did not see it to cancel): it never pays, and is cancelled. A run whose
      // order was made before (retried after a crash) is told as it stands. A re-link after
      // this look finds the schedule and cancels it, and the pull's guard (not cancelled) holds.
      if (s.apiKeyHash && (await this.deps.links.get(s.wallet))?.apiKeyHash !== s.apiKeyHash) {
        const [made] = await this.deps.flow.orders.findByIdempotencyKeys(s.wallet, [idempotencyKey]);
        if (!made) {
          // Already no longer ACTIVE (cancelled by the owner meanwhile, or completed): nothing to cancel.
          await this.deps.schedules.cancel(s.wallet, s.id).catch((err: unknown) => {
            if (!(err instanceof ServiceError)) throw err;
          });
          const error = "API_KEY_RETIRED: the key this schedule was made under is no longer the wallet's; the schedule is cancelled";
          await this.deps.schedules.finishRun(s.id, due, { outcome: "NOT_PAID", error });
          this.deps.flow.log.warn("scheduled bill not paid: its key was retired", { scheduleId: s.id });
          return;
        }
      }
      const result = await this.payBill(link, s.bill, { chain: s.chain, token: s.token, idempotencyKey, scheduleId: s.id });
      await this.deps.schedules.finishRun(s.id, due, { requestId: result.request_id, outcome: result.status });
    } catch (err) {
      // An agent sees the service's own refusals; anything else stays in the log.
      const error = err instanceof ServiceError ? `${err.code}: ${err.detail}` : "INTERNAL: the run failed unexpectedly; it was not paid";
      await this.deps.schedules.finishRun(s.id, due, { outcome: "NOT_PAID", error });
      this.deps.flow.log.warn("scheduled bill not paid", { scheduleId: s.id, error: err instanceof ServiceError ? err.code : (err as Error).message });
      // A bill this service will never send (its callback_url refused since it was made): no run
      // of it can pay, so the schedule stops now rather than run in vain for ever.
      if (err instanceof ServiceError && err.code === "CALLBACK_URL_NOT_ALLOWED") {
        // Already no longer ACTIVE (cancelled meanwhile): nothing to cancel; anything else is thrown.
        await this.deps.schedules.cancel(s.wallet, s.id).catch((e: unknown) => {
          if (!(e instanceof ServiceError)) throw e;
        });
        this.deps.flow.log.warn("schedule cancelled: its callback_url is one this service no longer calls", { scheduleId: s.id });
      }
      if (err instanceof ServiceError && UNPAYABLE.has(err.code) && (await this.deps.schedules.cancelUnpayable(s.id, due, this.deps.config.SCHEDULE_MAX_UNPAID_RUNS))) {
        this.deps.flow.log.warn("schedule cancelled: the wallet could not pay its runs", { scheduleId: s.id, runs: this.deps.config.SCHEDULE_MAX_UNPAID_RUNS });
      }
    }
  }

  /** check_balance: per chain and pull token, from the chain (what can be pulled now) and the ledger (what was paid). */
  async balance(link: Link, chain?: string) {
    const chains = chain ? [resolvePullOption(this.deps.deployments, chain, "USDC").chain] : (Object.keys(this.deps.deployments.chains) as ChainKey[]);
    let ledgerError: string | undefined;
    const readAccounts = () =>
      this.deps.ledger.accounts(link.wallet).catch((err: Error) => {
        ledgerError = err.message;
        return null;
      });
    // The ledger and every chain are read at once.
    const ledgerAccounts = readAccounts();
    const perChain = await Promise.all(
      chains.map(async (key) => {
        const d = this.deps.deployments.chains[key]!;
        const tokens = chainInfo(key).tokens.filter((t) => t.acceptedForPulls);
        const addresses = tokens.map((t) => d.tokens.find((x) => x.symbol === t.symbol)!.address as Hex);
        return { key, tokens, states: await readWalletState(this.deps.deployments, key, link.wallet as Hex, addresses) };
      }),
    );
    let accounts = await ledgerAccounts;
    const accountOf = (key: ChainKey, token: string) => accounts?.find((a) => a.chainId === chainInfo(key).chainId && a.token.toLowerCase() === token.toLowerCase());
    // A chain whose allowance the ledger does not show as the chain does: behind the block read.
    // (A pull refunded within one poll leaves the allowance as it was: a recent order counts too,
    // looked up only when no allowance already disagrees.)
    const allowanceOff = perChain.filter(({ key, states }) => accounts && states.some((s) => BigInt(String(accountOf(key, s.token)?.spendingAllowance ?? 0)) !== s.spendingAllowance));
    const [newest] = accounts && allowanceOff.length === 0 ? await this.deps.flow.orders.history(link.wallet, 1) : [];
    const recent = newest && Date.now() - newest.updatedAt.getTime() < LAG_WINDOW_MS ? newest.chain : undefined;
    const disagree = recent ? perChain.filter(({ key }) => key === recent) : allowanceOff;
    let behind: string | undefined;
    if (disagree.length > 0) {
      const caught = await this.ledgerBehind(disagree.map(({ key, states }) => ({ chain: key, block: states[0]!.blockNumber })));
      behind = caught.behind;
      if (caught.reachedAny) accounts = await readAccounts();
    }
    const balances = [];
    for (const { key, tokens, states } of perChain) {
      for (const [i, t] of tokens.entries()) {
        const s = states[i]!;
        const account = accountOf(key, s.token);
        balances.push({
          chain: key,
          token: t.symbol,
          token_address: s.token,
          approved: key === link.approvedChain && t.symbol === link.approvedToken,
          balance: units(s.balance),
          token_allowance: units(s.tokenAllowance),
          spending_allowance: units(s.spendingAllowance),
          period_limit: periodLimitView(s.periodLimit),
          spendable_now: units(s.spendable),
          block_number: s.blockNumber.toString(),
          ledger: account
            ? {
                spending_allowance: units(BigInt(String(account.spendingAllowance))),
                period_limit: periodLimitView(ledgerPeriodLimit(account, s.blockTimestamp)),
                total_paid: units(BigInt(String(account.totalPaid))),
                total_refunded: units(BigInt(String(account.totalRefunded))),
                payments: account.paymentCount,
                refunds: account.refundCount,
              }
            : null,
        });
      }
    }
    return {
      wallet: link.wallet,
      approved_chain: link.approvedChain,
      approved_token: link.approvedToken,
      balances,
      ...(ledgerError ? { ledger_error: `ledger unavailable: ${ledgerError}` } : {}),
      ...(behind ? { ledger_behind: behind } : {}),
    };
  }

  /**
   * transaction_history: the wallet's orders, newest first, each with its payment and refund
   * in the ledger. `showCode`: the caller proved the PIN, so purchased codes (an exam PIN is
   * anyone's who reads it) are shown; with the key alone they are withheld, as the x402
   * rail withholds them from a caller without the payer's proof.
   */
  async history(link: Link, limit: number, cursor?: string, options: { showCode: boolean } = { showCode: false }) {
    let after: string | undefined;
    if (cursor) {
      after = Buffer.from(cursor, "base64url").toString("utf8");
      const order = /^req_\w+$/.test(after) ? await this.deps.flow.orders.get(after) : undefined;
      if (!order || order.payer !== link.wallet.toLowerCase()) throw new ServiceError("CURSOR_INVALID", "the cursor is not one this wallet's history returned");
    }
    const orders = await this.deps.flow.orders.history(link.wallet, limit + 1, after);
    const page = orders.slice(0, limit);
    // The whole page's payments and refunds in one ledger call.
    let records: { payments: LedgerPayment[]; refunds: LedgerRefund[] } | undefined;
    let ledgerError: string | undefined;
    const readRecords = async () => {
      try {
        return await this.deps.ledger.records(
          link.wallet,
          page.filter((o) => o.rail === "pull").map((o) => o.onchainOrderId),
          page.flatMap((o) => (o.rail === "pull" || !o.authNonce ? [] : [o.authNonce])),
        );
      } catch (err) {
        ledgerError = (err as Error).message;
        return undefined;
      }
    };
    records = await readRecords();
    // Orders whose payment or refund the service confirmed and the ledger does not show yet.
    const unseen = records ? page.filter((o) => !inLedger(o, records!)) : [];
    let behind: string | undefined;
    if (unseen.length > 0) {
      const caught = await this.ledgerBehind([...new Set(unseen.map((o) => o.chain as ChainKey))].map((chain) => ({ chain, block: this.deps.flow.heads.latest(chain) })));
      behind = caught.behind;
      if (caught.reachedAny) records = await readRecords();
    }
    const items = page.map((o) => {
        const onchain = records ? onchainView(o, records) : null;
        return {
          ...this.result(o, options),
          rail: o.rail === "pull" ? "agent" : "x402",
          bill: o.bill,
          created_at: o.createdAt.toISOString(),
          batch_id: o.batchId,
          schedule_id: o.scheduleId,
          onchain,
          ...(ledgerError ? { ledger_error: ledgerError } : {}),
        };
      });
    const last = page.at(-1);
    return { transactions: items, next_cursor: orders.length > limit && last ? Buffer.from(last.requestId, "utf8").toString("base64url") : null, ...(behind ? { ledger_behind: behind } : {}) };
  }

  /**
   * Waits (orders/ledger-view.ts catchUpWaitMs) for the ledger to index each chain up to its
   * block: whether it got there on any (worth reading again), and what it says where it did
   * not, for the answer to carry.
   */
  private async ledgerBehind(at: Array<{ chain: ChainKey; block: bigint }>): Promise<{ reachedAny: boolean; behind?: string }> {
    const looks = await Promise.all(
      at
        .filter((a) => a.block > 0n)
        .map(async ({ chain, block }) => {
          const r = await this.deps.ledger.reachBlock(chainInfo(chain).chainId, block, catchUpWaitMs(this.deps.flow.ledgerHealth, chain), LEDGER_LOOK_MS);
          return r.reached ? null : `${chain}: indexed through block ${r.indexed ?? "none"} of ${block}`;
        }),
    );
    const short = looks.filter((s) => s !== null);
    return {
      reachedAny: short.length < looks.length,
      ...(short.length ? { behind: `the ledger has not indexed the newest blocks yet (${short.join("; ")}): their payments and refunds do not show here yet` } : {}),
    };
  }

  /** list_plans: a product's plans with their prices (null: any amount), from the catalogue every bill is checked against. */
  plans(serviceID: string) {
    return this.deps.flow.catalogue.plans(serviceID);
  }

  /** verify_customer: the biller's number check, free, cached and limited per caller. */
  async verifyCustomer(q: CustomerQuestion, caller: string) {
    await this.deps.limits.take("verify", caller);
    await this.deps.flow.catalogue.requireListed(q.serviceID, q.serviceCategory as Category);
    return customerView(q, await this.deps.flow.customerChecks.verify(q));
  }

  /** list_international_options: countries, then product types, operators and plans, then a bill to pay. */
  internationalOptions(query: OptionsQuery) {
    return this.deps.flow.catalogue.international.options(query);
  }
}

/**
 * An order's payment and refunds among a page's ledger records, matched by the order's
 * full key: a pull by its order id on its chain; an x402 payment by (chain, rail, token, nonce)
 * (the records are all the payer's).
 */
function onchainView(o: Order, records: { payments: LedgerPayment[]; refunds: LedgerRefund[] }) {
  const chainId = chainInfo(o.chain).chainId;
  const lower = (s: string | null | undefined) => s?.toLowerCase();
  const ours = (r: { chainId: number; rail?: string; token: string; orderId?: string | null; authorizationNonce?: string | null }) =>
    Number(r.chainId) === chainId &&
    (o.rail === "pull"
      ? lower(r.orderId) === lower(o.onchainOrderId)
      : o.authNonce !== null && r.rail === x402RailOf(o) && lower(r.token) === lower(o.tokenAddress) && lower(r.authorizationNonce) === lower(o.authNonce));
  const payment = records.payments.find(ours);
  return {
    payment: payment ? { tx_hash: payment.txHash, amount: units(BigInt(payment.amount)), block_number: String(payment.blockNumber), timestamp: String(payment.timestamp) } : null,
    refunds: records.refunds.filter(ours).map((r) => ({ tx_hash: r.txHash, amount: units(BigInt(r.amount)), timestamp: String(r.timestamp) })),
  };
}

/** Whether the ledger's records show what the service confirmed of `o` (orders/ledger-view.ts). */
function inLedger(o: Order, records: { payments: LedgerPayment[]; refunds: LedgerRefund[] }): boolean {
  const { payment, refunds } = onchainView(o, records);
  return !ledgerLacksConfirmed(o, payment, refunds.map((r) => r.tx_hash));
}

function scheduleView(s: Schedule) {
  return {
    schedule_id: s.id,
    status: s.status,
    kind: s.cron ? "recurring" : "once",
    cron: s.cron,
    run_at: s.runAt?.toISOString() ?? null,
    next_run_at: s.nextRunAt?.toISOString() ?? null,
    runs: s.runs,
    max_runs: s.maxRuns,
    chain: s.chain,
    token: s.token,
    bill: s.bill,
    created_at: s.createdAt.toISOString(),
    cancelled_at: s.cancelledAt?.toISOString() ?? null,
  };
}

/** Resolves a chain and token the agent hub can pull, deployed here; refuses anything else clearly. */
export function resolvePullOption(deployments: Deployments, chainName: string, tokenName: string): { chain: ChainKey; token: TokenSymbol; tokenAddress: Hex } {
  const chain = chainByKey(chainName);
  if (!chain || !deployments.chains[chain.key]) {
    throw new ServiceError("UNSUPPORTED_CHAIN", `chain "${chainName}" is not one the agent hub pays on; use ${Object.keys(deployments.chains).join(" or ")}`);
  }
  const pullable = chain.tokens.filter((t) => t.acceptedForPulls).map((t) => t.symbol);
  const token = resolveTokenSymbol(tokenName);
  if (!token || !pullable.includes(token)) {
    throw new ServiceError("TOKEN_NOT_PULLABLE", `token "${tokenName}" cannot be paid through the agent hub on ${chain.key}; use ${pullable.join(", ")}`);
  }
  const address = deployments.chains[chain.key]!.tokens.find((t) => t.symbol === token)!.address as Hex;
  return { chain: chain.key, token, tokenAddress: address };
}
