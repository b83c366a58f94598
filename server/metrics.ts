/**
 * Prometheus metrics (prom-client), served at /metrics to operators. Two kinds:
 *   - counted as things happen: vend latency, refunds and their amounts, facilitator and
 *     biller calls (latency and errors);
 *   - read at each scrape from OperatorState: orders by status and rail, stuck and
 *     waiting-for-review orders, ledger lag, the hot keys' gas, each token's treasury on chain
 *     beside the ledger's figure, and its refund budget.
 * The alerts built on them are in ops/prometheus/billpay-rules.yml.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { ChainStatus } from "./chain/status.ts";

/** What a scrape reads afresh (server/operator/state.ts's OperatorState provides it). */
export interface ScrapeSource {
  orderCounts(): Promise<Array<{ status: string; rail: string; count: number }>>;
  stuck(limit: number): Promise<readonly unknown[]>;
  review(limit: number): Promise<readonly unknown[]>;
  /** x402 payments no order accounts for that wait for an operator. */
  openOrphanPayments(): Promise<number>;
  chains(): Promise<ChainStatus[]>;
}

export class Metrics {
  readonly registry = new Registry();

  /**
   * Starts the loss counters at 0 for every chain and rail: a series that first appears at 1
   * is read by Prometheus's increase() as no increase, so the first loss of a process's life
   * would page nobody (BillPayPaymentLost, BillPayRefundLost).
   */
  startLossCounters(chains: readonly string[]): void {
    for (const chain of chains) {
      for (const rail of ["pull", "authorization", "permit2"]) this.paymentsLost.inc({ chain, rail }, 0);
      for (const rail of ["pull", "x402", "orphan_pull"]) this.refundsLost.inc({ chain, rail }, 0);
    }
  }

  readonly vendSeconds = new Histogram({
    name: "billpay_vend_seconds",
    help: "Time from a paid order to the biller's final answer or the deadline, by outcome",
    labelNames: ["outcome"],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    registers: [this.registry],
  });
  readonly refunds = new Counter({ name: "billpay_refunds_total", help: "Refunds sent on chain", labelNames: ["chain", "token", "rail"], registers: [this.registry] });
  readonly refundedUnits = new Counter({
    name: "billpay_refunded_units_total",
    help: "Raw token units refunded on chain (6 decimals)",
    labelNames: ["chain", "token"],
    registers: [this.registry],
  });
  readonly refundGasWei = new Counter({ name: "billpay_refund_gas_wei_total", help: "Gas the refunder key spent on refunds, in wei", labelNames: ["chain"], registers: [this.registry] });
  readonly refundsWaiting = new Counter({
    name: "billpay_refunds_waiting_total",
    help: "Times a refund was put off because the refund budget, or the payer's share of it, could not take it",
    labelNames: ["chain", "token"],
    registers: [this.registry],
  });
  readonly refundsAwaitingLedger = new Counter({
    name: "billpay_refunds_awaiting_ledger_total",
    help: "Times a refund was put off because the ledger had not yet indexed the block its payment is in (the ledger's lag alerts bound the wait)",
    labelNames: ["chain"],
    registers: [this.registry],
  });
  readonly orphanPulls = new Counter({
    name: "billpay_orphan_pulls_total",
    help: "Pulls that reached BillPay with no order: only someone else holding the operator key sends one",
    labelNames: ["chain"],
    registers: [this.registry],
  });
  readonly paymentsLost = new Counter({
    name: "billpay_payments_lost_total",
    help: "Payments the ledger had confirmed that a reorganisation took off the chain",
    labelNames: ["chain", "rail"],
    registers: [this.registry],
  });
  readonly paymentConfirmations = new Counter({
    name: "billpay_payment_confirmations_total",
    help: "Payments counted as paid, by what showed them first: the service's own node's receipt, or the ledger",
    labelNames: ["chain", "rail", "source"],
    registers: [this.registry],
  });
  readonly refundsLost = new Counter({
    name: "billpay_refunds_lost_total",
    help: "Refunds the service sent that a reorganisation took off the chain while their payment stood: an order's (rail pull or x402) is held for an operator to refund again, an orphan pull's (rail orphan_pull) is sent again by the ledger pass",
    labelNames: ["chain", "rail"],
    registers: [this.registry],
  });
  readonly lostPaymentOutcomes = new Counter({
    name: "billpay_lost_payment_outcomes_total",
    help: "What became of lost payments: recollected, review (an operator decides), void (the order was being refunded)",
    labelNames: ["chain", "rail", "outcome"],
    registers: [this.registry],
  });
  readonly lateDeliveries = new Counter({
    name: "billpay_biller_late_deliveries_total",
    help: "Pay attempts the biller delivered that did not settle their order (a second delivery, or one after a refund): the biller was paid twice",
    labelNames: ["status"],
    registers: [this.registry],
  });
  readonly refundFailures = new Counter({ name: "billpay_refund_failures_total", help: "Refund attempts that failed (retried, or held for review)", labelNames: ["chain", "token"], registers: [this.registry] });
  readonly upstreamSeconds = new Histogram({
    name: "billpay_upstream_seconds",
    help: "Latency of calls to the facilitator and the biller, by upstream, operation and outcome",
    labelNames: ["upstream", "operation", "outcome"],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    registers: [this.registry],
  });
  readonly upstreamErrors = new Counter({
    name: "billpay_upstream_errors_total",
    help: "Calls to the facilitator and the biller that failed or gave no answer",
    labelNames: ["upstream", "operation"],
    registers: [this.registry],
  });

  readonly facilitatorRefusals = new Counter({
    name: "billpay_facilitator_refusals_total",
    help: "Facilitator calls refused for the service itself (401 credentials, 402 out of credits, 429 rate limit): nothing was settled",
    labelNames: ["chain", "operation", "status"],
    registers: [this.registry],
  });

  private readonly orders = this.gauge("billpay_orders", "Orders by status and rail", ["status", "rail"]);
  private readonly stuck = this.gauge("billpay_orders_stuck", "Unfinished orders past their lease and the stuck threshold", []);
  private readonly review = this.gauge("billpay_orders_needs_review", "Orders held for an operator (NEEDS_REVIEW)", []);
  private readonly orphanPayments = this.gauge("billpay_orphan_payments_open", "x402 payments no order accounts for, not yet dealt with", []);
  private readonly ledgerLagBlocks = this.gauge("billpay_ledger_lag_blocks", "Blocks between the chain's head and the ledger's last indexed block", ["chain"]);
  private readonly ledgerLagSeconds = this.gauge("billpay_ledger_lag_seconds", "Seconds between the head block and the ledger's last indexed block", ["chain"]);
  private readonly ledgerStalled = this.gauge("billpay_ledger_stalled", "1 while the ledger stands still behind a moving chain for longer than LEDGER_STALL_SECONDS, or cannot be read for six times that", ["chain"]);
  private readonly ledgerBehind = this.gauge("billpay_ledger_behind", "1 while the ledger is more than LEDGER_MAX_LAG_BLOCKS behind the chain's head", ["chain"]);
  private readonly headAgeSeconds = this.gauge("billpay_chain_head_age_seconds", "Seconds since the head block of the service's node was made (the newest one read, while the node cannot be read): a node that stops following its chain, or answering, freezes the ledger's watch too", ["chain"]);
  private readonly ledgerStillSeconds = this.gauge("billpay_ledger_still_seconds", "How long the ledger has stood still behind the chain's head", ["chain"]);
  private readonly gas = this.gauge("billpay_hot_key_gas_wei", "Native balance of the operator and refunder keys", ["chain", "role", "address"]);
  private readonly treasuryOnChain = this.gauge("billpay_treasury_onchain_units", "BillPay's token balance on chain", ["chain", "token"]);
  private readonly treasuryLedger = this.gauge("billpay_treasury_ledger_units", "BillPay's token balance as the ledger indexed it", ["chain", "token"]);
  private readonly treasuryMismatch = this.gauge("billpay_treasury_mismatch", "1 when the on-chain treasury differs from the ledger's", ["chain", "token"]);
  private readonly budgetAvailable = this.gauge("billpay_refund_budget_available_units", "What the token's refund budget allows now", ["chain", "token"]);
  private readonly budgetLimit = this.gauge("billpay_refund_budget_limit_units", "The token's refund budget limit", ["chain", "token"]);
  private readonly pullBudgetAvailable = this.gauge("billpay_pull_budget_available_units", "What the token's operator-wide pull budget allows now", ["chain", "token"]);
  private readonly pullBudgetLimit = this.gauge("billpay_pull_budget_limit_units", "The token's operator-wide pull budget limit", ["chain", "token"]);
  private readonly scrapeErrors = this.gauge("billpay_metrics_read_errors", "Parts of the last scrape that could not be read", []);

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "billpay_process_" });
  }

  private gauge(name: string, help: string, labelNames: string[]) {
    return new Gauge({ name, help, labelNames, registers: [this.registry] });
  }

  /** Records one upstream call that was timed elsewhere. */
  observeUpstream(upstream: "facilitator" | "biller", operation: string, seconds: number, ok: boolean): void {
    this.upstreamSeconds.observe({ upstream, operation, outcome: ok ? "ok" : "error" }, seconds);
    if (!ok) this.upstreamErrors.inc({ upstream, operation });
  }

  /** Times an upstream call, counting its failures. */
  async timeUpstream<T>(upstream: "facilitator" | "biller", operation: string, call: () => Promise<T>, failed: (result: T) => boolean = () => false): Promise<T> {
    const end = this.upstreamSeconds.startTimer({ upstream, operation });
    try {
      const result = await call();
      const bad = failed(result);
      end({ outcome: bad ? "error" : "ok" });
      if (bad) this.upstreamErrors.inc({ upstream, operation });
      return result;
    } catch (err) {
      end({ outcome: "error" });
      this.upstreamErrors.inc({ upstream, operation });
      throw err;
    }
  }

  /** Reads the state gauges afresh, then renders every metric. */
  async render(state: ScrapeSource): Promise<string> {
    let errors = 0;
    const [counts, stuck, review, orphans, chains] = await Promise.all([
      state.orderCounts(),
      state.stuck(1000),
      state.review(1000),
      state.openOrphanPayments(),
      state.chains(),
    ]);
    this.orders.reset();
    for (const c of counts) this.orders.set({ status: c.status, rail: c.rail }, c.count);
    this.stuck.set(stuck.length);
    this.review.set(review.length);
    this.orphanPayments.set(orphans);
    for (const g of [this.headAgeSeconds, this.ledgerLagBlocks, this.ledgerLagSeconds, this.ledgerStalled, this.ledgerBehind, this.ledgerStillSeconds, this.gas, this.treasuryOnChain, this.treasuryLedger, this.treasuryMismatch, this.budgetAvailable, this.budgetLimit, this.pullBudgetAvailable, this.pullBudgetLimit]) g.reset();
    for (const c of chains) {
      errors += c.errors.length;
      if (c.lagBlocks !== null) this.ledgerLagBlocks.set({ chain: c.chain }, c.lagBlocks);
      if (c.lagSeconds !== null) this.ledgerLagSeconds.set({ chain: c.chain }, c.lagSeconds);
      if (c.headAgeSeconds !== null) this.headAgeSeconds.set({ chain: c.chain }, c.headAgeSeconds);
      if (c.ledger) {
        this.ledgerStalled.set({ chain: c.chain }, c.ledger.state === "stalled" ? 1 : 0);
        this.ledgerBehind.set({ chain: c.chain }, c.ledger.state === "behind" ? 1 : 0);
        this.ledgerStillSeconds.set({ chain: c.chain }, Math.round(c.ledger.stillMs / 1000));
      }
      for (const k of c.keys) if (k.gasWei !== null) this.gas.set({ chain: c.chain, role: k.role, address: k.address }, Number(k.gasWei));
      for (const t of c.tokens) {
        const labels = { chain: c.chain, token: t.symbol };
        if (t.onChain !== null) this.treasuryOnChain.set(labels, Number(t.onChain));
        if (t.ledger !== null) this.treasuryLedger.set(labels, Number(t.ledger));
        if (t.matches !== null) this.treasuryMismatch.set(labels, t.matches ? 0 : 1);
        if (t.refundBudget) {
          this.budgetAvailable.set(labels, Number(t.refundBudget.available));
          this.budgetLimit.set(labels, Number(t.refundBudget.limit));
        }
        if (t.pullBudget) {
          this.pullBudgetAvailable.set(labels, Number(t.pullBudget.available));
          this.pullBudgetLimit.set(labels, Number(t.pullBudget.limit));
        }
      }
    }
    this.scrapeErrors.set(errors);
    return this.registry.metrics();
  }
}
