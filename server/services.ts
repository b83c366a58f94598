/** Builds the service's collaborators from its configuration: one place, used by main.ts and the tests. */
import { activeNetwork } from "../lib/networks.ts";
import { facilitatorAuth } from "./x402-protocol/facilitator-auth.ts";
import type { ChainKey } from "../lib/chains.ts";
import { Metrics } from "./metrics.ts";
import type { FacilitatorClient } from "@x402/core/server";
import { log } from "./log.ts";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import { operatorAccount, refunderAccount } from "../lib/local-accounts.ts";
import { Catalogue } from "./biller/catalogue/catalogue.ts";
import { VtpassClient } from "./biller/vtpass/client.ts";
import { BillerAttempts } from "./orders/attempts.ts";
import { ChainOperator, type HotKeys } from "./chain/operator.ts";
import { KeyLeases } from "./chain/key-lease.ts";
import { DbPayerHolds } from "./chain/payer-holds.ts";
import { ChainHeads } from "../lib/chain-heads.ts";
import type { Config } from "./config.ts";
import type { Db } from "./db.ts";
import { Callbacks } from "./orders/callbacks.ts";
import { RefundBudgets } from "./chain/refund-budget.ts";
import { CustomerChecks } from "./biller/customer-check.ts";
import { LedgerClient } from "./ledger-client.ts";
import { LedgerHealth } from "./ledger-health.ts";
import { ledgerBounds } from "../lib/ledger-watch.ts";
import { buildGates, Limits } from "./limits.ts";
import { Orphans } from "./orders/ledger-pass.ts";
import { RefusedPayments } from "./orders/refused-payments.ts";
import { OrderStore } from "./orders/store.ts";
import { PaymentWatches } from "./orders/payment-watch.ts";
import { RefundWatches } from "./orders/refund-watch.ts";
import type { WorkerDeps } from "./orders/worker.ts";
import type { FlowDeps } from "./orders/fulfil.ts";
import type { RateSource } from "./pricing/rates.ts";
import { AgentHub } from "./agent/hub.ts";
import { LinkStore } from "./agent/links.ts";
import { PinHasher } from "./credentials.ts";
import { pinPepper } from "./agent/pin-pepper.ts";
import { Receipts } from "./orders/receipts.ts";
import { PriceOffers } from "./pricing/offers.ts";
import { ScheduleStore } from "./agent/schedules.ts";

/** Each served chain's confirmation depth: CONFIRMATIONS_<CHAIN>, else the profile's. */
export function confirmationsFor(config: Config): Partial<Record<ChainKey, number>> {
  const chains = activeNetwork().chains;
  const set = { CELO: config.CONFIRMATIONS_CELO, BASE: config.CONFIRMATIONS_BASE };
  return Object.fromEntries(Object.entries(chains).map(([key, info]) => [key, set[key as ChainKey] ?? info.confirmations]));
}

/** The service's hot keys from OPERATOR_PRIVATE_KEY and REFUNDER_PRIVATE_KEY (Hardhat's on the local profile). */
export function hotKeys(): HotKeys {
  return { operator: operatorAccount(), refunder: refunderAccount() };
}

export function buildFlow(config: Config, deployments: Deployments, db: Db, keys: HotKeys = hotKeys()): WorkerDeps {
  const metrics = new Metrics();
  metrics.startLossCounters(Object.keys(deployments.chains));
  const facilitator = (url: string, chain: ChainKey) =>
    timedFacilitator(new HTTPFacilitatorClient({ url, timeoutMs: config.FACILITATOR_TIMEOUT_MS, createAuthHeaders: facilitatorAuth(config, chain) }), metrics);
  const biller = new VtpassClient({
    baseUrl: config.BILLER_BASE_URL,
    apiKey: config.BILLER_API_KEY,
    secretKey: config.BILLER_SECRET_KEY,
    publicKey: config.BILLER_PUBLIC_KEY,
    timeoutMs: config.BILLER_TIMEOUT_MS,
    observe: (operation, seconds, ok) => metrics.observeUpstream("biller", operation, seconds, ok),
  });
  const keyLeases = new KeyLeases(db, log());
  const heads = new ChainHeads((chain) => {
    const d = deployments.chains[chain];
    return d && rpcUrlFor(chain, d);
  });
  const orders = new OrderStore(db, keyLeases.instance);
  return {
    orders,
    keyLeases,
    attempts: new BillerAttempts(db),
    orphans: new Orphans(db),
    callbacks: new Callbacks(db, orders, callbackOptions(config), log()),
    facilitators: { CELO: facilitator(config.FACILITATOR_URL_CELO, "CELO"), BASE: facilitator(config.FACILITATOR_URL_BASE, "BASE") },
    biller,
    catalogue: new Catalogue(biller, config.CATALOGUE_TTL_MS),
    customerChecks: new CustomerChecks(biller, config.VERIFY_CACHE_MS, (payer) => orders.failedVerifications(payer, config.VERIFY_UPFRONT_WINDOW_SECONDS), config.VERIFY_UPFRONT_AFTER_FAILURES),
    refundBudgets: new RefundBudgets(deployments, config.REFUND_BUDGET_CACHE_MS, config.REFUND_PRESSURE_PERCENT, config.REFUND_PAYER_SHARE_PERCENT),
    operator: new ChainOperator(
      deployments,
      keys,
      { replaceAfterMs: config.TX_REPLACE_AFTER_MS, maxReplacements: config.TX_MAX_REPLACEMENTS },
      heads,
      (address) => keyLeases.confirm(address),
      // Instances share a PostgreSQL server; PGlite belongs to one process, so there is none to hold against.
      db.pool ? new DbPayerHolds(db, keys.operator.address) : undefined,
      config.RATE_LIMIT_REVERTED_PAYER.seconds * 1000,
    ),
    heads,
    vendDeadlineMs: config.VEND_DEADLINE_MS,
    requeryIntervalMs: config.REQUERY_INTERVAL_MS,
    unknownRequestGraceMs: config.BILLER_UNKNOWN_GRACE_MS,
    maxPayAttempts: config.BILLER_MAX_PAY_ATTEMPTS,
    defaultPhone: config.BILLER_DEFAULT_PHONE,
    defaultEmail: config.BILLER_DEFAULT_EMAIL,
    refundPayerSharePercent: config.REFUND_PAYER_SHARE_PERCENT,
    refundLateSlicePercent: config.REFUND_LATE_SLICE_PERCENT,
    lateLandingFee: config.LATE_LANDING_FEE,
    verifyRetrySeconds: config.VERIFY_RETRY_SECONDS,
    verifyUnavailableDeadlineSeconds: config.VERIFY_UNAVAILABLE_DEADLINE_SECONDS,
    refundWaitReviewSeconds: config.REFUND_WAIT_REVIEW_SECONDS,
    log: log(),
    metrics,
    deployments,
    ledger: new LedgerClient(config.LEDGER_URL),
    refused: new RefusedPayments(db),
    ledgerHealth: new LedgerHealth({ ledgerUrl: config.LEDGER_URL, deployments, bounds: ledgerBounds(config), log: log() }),
    ledgerWaitMs: config.LEDGER_WAIT_MS,
    confirmations: confirmationsFor(config),
    watches: new PaymentWatches(db, deployments),
    refundWatches: new RefundWatches(db, deployments),
    recollectReviewSeconds: config.RECOLLECT_REVIEW_SECONDS,
    leaseSeconds: config.ORDER_LEASE_SECONDS,
    graceSeconds: config.WORKER_GRACE_SECONDS,
    reversalChecksSeconds: config.BILLER_REVERSAL_CHECKS_SECONDS,
  };
}

/** A facilitator client whose verify and settle calls are timed and counted. */
function timedFacilitator(client: HTTPFacilitatorClient, metrics: Metrics): FacilitatorClient {
  return {
    verify: (payload, requirements) => metrics.timeUpstream("facilitator", "verify", () => client.verify(payload, requirements)),
    settle: (payload, requirements) => metrics.timeUpstream("facilitator", "settle", () => client.settle(payload, requirements), (r) => !r.success),
    getSupported: () => client.getSupported(),
  };
}

export const callbackOptions = (config: Config) => ({
  allowPrivate: config.CALLBACK_ALLOW_PRIVATE,
  timeoutMs: config.CALLBACK_TIMEOUT_MS,
  concurrency: config.CALLBACK_CONCURRENCY,
  maxAttempts: config.CALLBACK_MAX_ATTEMPTS,
  backoffMs: config.CALLBACK_BACKOFF_MS,
});

/** The agent hub over an order flow: links, schedules and the tools' operations. */
export function buildHub(config: Config, deployments: Deployments, db: Db, flow: FlowDeps, rates: RateSource): AgentHub {
  const pepper = pinPepper(config, activeNetwork());
  return new AgentHub({
    config,
    db,
    deployments,
    rates,
    flow,
    links: new LinkStore(
      db,
      {
        maxAttempts: config.PIN_MAX_ATTEMPTS,
        lockSeconds: config.PIN_LOCK_SECONDS,
        maxLockouts: config.PIN_MAX_LOCKOUTS,
        pins: new PinHasher(pepper),
      },
      log(),
    ),
    schedules: new ScheduleStore(db),
    ledger: flow.ledger,
    limits: new Limits(config, db),
    gates: buildGates(config),
    offers: new PriceOffers(pepper),
    receipts: new Receipts(pepper, config.X402_RECEIPT_FORMAT, config.PUBLIC_URL ? new URL(config.PUBLIC_URL).origin : `http://${config.HOST.includes(":") ? `[${config.HOST}]` : config.HOST}:${config.PORT}`),
  });
}

/**
 * Leases this instance's hot keys (chain/key-lease.ts): throws KeyHeld when another live
 * instance signs with one. Orders a dead predecessor on these keys had leased are released,
 * so the worker resumes them at its next pass.
 */
export async function claimKeys(flow: WorkerDeps): Promise<void> {
  const { operator, refunder } = flow.operator.addresses;
  const dead = await flow.keyLeases.claim([
    { role: "operator", address: operator },
    { role: "refunder", address: refunder },
  ]);
  for (const previous of dead) {
    const released = await flow.orders.releaseInstance(previous);
    flow.log.info("resuming what a stopped instance on these keys left", { previous, orders: released });
  }
}
