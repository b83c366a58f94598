/** @jsxImportSource hono/jsx */
/**
 * The operator console at /console, behind the operators' guard (operator/auth.ts), pages
 * rendered on the server, panels refreshed in place by htmx (served from node_modules, no
 * CDN). The treasury panel carries the audit's verdict: `npm run audit`'s own check, run here
 * at most every AUDIT_CACHE_MS. It reads, except for one thing: an order held for review, or
 * an x402 payment no order accounts for, can be decided from its page (orders/review.ts), by
 * a POST carrying the form's token and a reason, never from another site (operator/csrf.ts).
 * Every GET only reads.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { z } from "zod";
import { runAudit, type AuditReport } from "../audit/ledger.ts";
import type { ServiceRecords } from "../audit/orders.ts";
import type { Deployments } from "../../lib/deployments.ts";
import type { ChainKey } from "../../lib/chains.ts";
import { amountIn, describeAmount, tokenAt } from "../../lib/token-amounts.ts";
import { orderRef } from "../log.ts";
import { problemResponse, validationFailed } from "../errors.ts";
import type { Metrics } from "../metrics.ts";
import { operatorIdentity, presented, requireOperator } from "../operator/auth.ts";
import { crossSite, FormTokens } from "../operator/csrf.ts";
import { errorText } from "../log-safety.ts";
import { x402RailOf } from "../ledger-client.ts";
import { ORPHAN_HELD_FOR_HAND_REFUND } from "../orders/store.ts";
import { ledgerUnderKeyCaughtUp } from "../orders/ledger-view.ts";
import { MAX_REASON, ORPHAN_ACTIONS, orphanKey, orphanPayment, resolveOrder, resolveOrphanPayment, REVIEW_ACTIONS, validOrphanKey, whyNot, type ReviewDeps } from "../orders/review.ts";
import { txLink, type OperatorState } from "../operator/state.ts";
import type { Callbacks } from "../orders/callbacks.ts";
import type { Child } from "hono/jsx";
import { ChainsTable, CountsTable, HealthTable, KeyValue, Layout, OrdersTable, Panel, ReviewActionsTable, ReviewForm, ReviewResult, rowsOrNone, TreasuryTable, units, VolumeChart } from "./pages.tsx";

const AUDIT_CACHE_MS = 15_000;
const AUDIT_TIMEOUT_MS = 20_000;
const PAGE = 50;
const STATUSES = ["SETTLING", "PULLING", "PAID", "PENDING", "SUCCESS", "REFUNDING", "REFUNDED", "PAYMENT_FAILED", "REFUSED", "NEEDS_REVIEW"] as const;

const htmx = readFileSync(createRequire(import.meta.url).resolve("htmx.org/dist/htmx.min.js"));

export interface ConsoleDeps {
  state: OperatorState;
  metrics: Metrics;
  deployments: Deployments;
  ledgerUrl: string;
  token?: string;
  isPublic: boolean;
  /** The service's orders and orphans for the audit, read in this process: never fetched from a URL a request named. */
  records: () => Promise<ServiceRecords>;
  callbacks: Pick<Callbacks, "status">;
  /** Operators' decisions on what is held for review. */
  review: ReviewDeps;
  /** Where clients reach the service (an Origin naming it is this site's own). */
  publicUrl?: string;
}

/** Chains and tokens by their names, as every page shows them: ids and addresses only where nothing names them. */
function namesFor(deployments: Deployments) {
  const chains = Object.entries(deployments.chains) as Array<[ChainKey, NonNullable<Deployments["chains"][ChainKey]>]>;
  const byId = (chainId: number) => chains.find(([, d]) => d.chainId === Number(chainId));
  return {
    chain: (chainId: number) => byId(chainId)?.[0] ?? String(chainId),
    token: (chainId: number, address: string) =>
      byId(chainId)?.[1].tokens.find((t) => t.address.toLowerCase() === address.toLowerCase())?.symbol ?? short(address, 8),
    /** A token by its chain (key or id) and address: its symbol, else the shortened address. */
    tokenOf: (chain: string | number, address: string) => tokenAt(deployments, chain, address)?.symbol ?? short(address, 8),
    /** An amount with its decimals, symbol and chain (lib/token-amounts.ts). */
    amount: (chain: string | number, address: string, units: bigint | string) => describeAmount(deployments, chain, address, units),
  };
}

export function mountConsole(app: Hono, deps: ConsoleDeps): void {
  const names = namesFor(deps.deployments);
  const guard = requireOperator(deps.token, deps.isPublic);
  app.use("/console", guard);
  app.use("/console/*", guard);
  app.use("/metrics", guard);

  app.get("/metrics", async (c) => c.body(await deps.metrics.render(deps.state), 200, { "content-type": deps.metrics.registry.contentType, "cache-control": "no-store" }));

  app.get("/console/assets/htmx.min.js", (c) => c.body(htmx, 200, { "content-type": "text/javascript; charset=utf-8", "cache-control": "public, max-age=86400" }));

  let audit: { at: number; report: Promise<AuditReport | { error: string }> } | null = null;
  const auditReport = (c: Context) => {
    if (!audit || Date.now() - audit.at > AUDIT_CACHE_MS) {
      const run = runAudit({ ledgerUrl: deps.ledgerUrl, deployments: deps.deployments, service: { records: deps.records } });
      const deadline = new Promise<{ error: string }>((r) => setTimeout(() => r({ error: `it took over ${AUDIT_TIMEOUT_MS / 1000} s` }), AUDIT_TIMEOUT_MS).unref());
      audit = { at: Date.now(), report: Promise.race([run.catch((err: Error) => ({ error: err.message })), deadline]) };
    }
    return audit.report;
  };

  /** Renders a panel alone for htmx, or inside the page. */
  const page = (c: Context, title: string, panels: Record<string, () => Promise<Child>>) => {
    const only = c.req.query("panel");
    if (only && panels[only]) return panels[only]().then((html) => c.html(<>{html}</>));
    return Promise.all(Object.values(panels).map((p) => p())).then((parts) => c.html(<Layout title={title}>{parts}</Layout>));
  };

  app.get("/console", (c) =>
    page(c, "Overview", {
      treasury: async () => {
        const [chains, report] = await Promise.all([deps.state.chains(), auditReport(c)]);
        return (
          <Panel id="treasury-panel" title="Treasury per chain and token: on chain, in the ledger, and the audit" src="/console?panel=treasury" every={30}>
            <TreasuryTable chains={chains} audit={report} />
          </Panel>
        );
      },
      chains: async () => (
        <Panel id="chains-panel" title="Chains: ledger lag and the hot keys' gas" src="/console?panel=chains">
          <ChainsTable chains={await deps.state.chains()} />
        </Panel>
      ),
      health: async () => {
        const [health, rate] = await Promise.all([deps.state.health(), deps.state.rate()]);
        return (
          <Panel id="health-panel" title="Facilitators, biller and exchange rate" src="/console?panel=health">
            <HealthTable health={health} rate={rate} />
          </Panel>
        );
      },
      volume: async () => (
        <Panel id="volume-panel" title="Paid and refunded volume" src="/console?panel=volume" every={60}>
          <VolumeChart buckets={await deps.state.volume(24)} />
        </Panel>
      ),
      counts: async () => (
        <Panel id="counts-panel" title="Orders by status and rail" src="/console?panel=counts">
          <CountsTable counts={await deps.state.orderCounts()} />
        </Panel>
      ),
      attention: async () => {
        const [stuck, review] = await Promise.all([deps.state.stuck(), deps.state.review()]);
        return (
          <Panel id="attention-panel" title={`Needs attention: ${stuck.length} stuck, ${review.length} waiting for review`} src="/console?panel=attention">
            <h2>Stuck (past their lease and {deps.state.deps.stuckAfterSeconds} s)</h2>
            <OrdersTable orders={stuck} id="stuck" />
            <h2>Waiting for review</h2>
            <OrdersTable orders={review} id="review" />
          </Panel>
        );
      },
    }),
  );

  const orderFilter = z
    .object({
      status: z.enum(STATUSES).optional(),
      rail: z.enum(["x402", "pull"]).optional(),
      before: z.string().regex(/^req_\w+$/).optional(),
      panel: z.string().optional(),
    })
    .strict();

  app.get("/console/orders", async (c) => {
    const parsed = orderFilter.safeParse(c.req.query());
    if (!parsed.success) throw validationFailed(parsed.error, "(query)");
    const f = parsed.data;
    const orders = await deps.state.orders({ status: f.status, rail: f.rail, before: f.before, limit: PAGE });
    const next = orders.length === PAGE ? `/console/orders?${new URLSearchParams({ ...(f.status ? { status: f.status } : {}), ...(f.rail ? { rail: f.rail } : {}), before: orders[PAGE - 1]!.request_id })}` : null;
    return c.html(
      <Layout title="Orders">
        <section>
          <h2>Orders{f.status ? ` ${f.status}` : ""}{f.rail ? ` on ${f.rail}` : ""}</h2>
          <form method="get" action="/console/orders">
            <select name="status">
              <option value="">any status</option>
              {STATUSES.map((s) => <option value={s} selected={s === f.status}>{s}</option>)}
            </select>
            <select name="rail">
              <option value="">any rail</option>
              {(["x402", "pull"] as const).map((r) => <option value={r} selected={r === f.rail}>{r}</option>)}
            </select>
            <button type="submit">Filter</button>
          </form>
          <OrdersTable orders={orders} />
          {next ? <p><a id="next-page" href={next}>Older orders →</a></p> : <p class="muted">No older orders.</p>}
        </section>
      </Layout>,
    );
  });

  const forms = new FormTokens(deps.token);
  /** The credential a form's token is bound to: the token presented, or "local" without one. */
  const credential = (c: Context) => presented(c) ?? "local";
  const orderScope = (requestId: string) => `order:${requestId}`;
  const orphanScope = (key: string) => `orphan:${key.toLowerCase()}`;

  /**
   * What a decision must pass before it is looked at: a POST from this site (no Sec-Fetch-Site
   * or Origin saying otherwise), a form of at most 8 KiB, the operator's name, and the form's
   * token for this credential, name and scope. Answers the form's fields, or the refusal.
   */
  const decisionForm = async (c: Context, scope: string): Promise<{ fields: Record<string, string>; operator: string } | Response> => {
    const why = crossSite(c, deps.publicUrl);
    if (why) return problemResponse("OPS_CROSS_SITE", why);
    const type = (c.req.header("content-type") ?? "").toLowerCase();
    if (!type.startsWith("application/x-www-form-urlencoded") && !type.startsWith("multipart/form-data")) return problemResponse("UNSUPPORTED_MEDIA_TYPE", "a decision is the console's form");
    const operator = operatorIdentity(c, deps.token);
    if (!operator) return problemResponse("OPS_OPERATOR_NAME", "give your name as the basic-auth user name: every decision is recorded with it");
    const body = await c.req.parseBody();
    const fields = Object.fromEntries(Object.entries(body).filter((e): e is [string, string] => typeof e[1] === "string"));
    if (!forms.check(fields.csrf, credential(c), operator, scope)) return problemResponse("OPS_CROSS_SITE", "the form's token is missing, stale, or not this operator's: reload the page and decide again");
    return { fields, operator };
  };

  /** A decision the console cannot take as sent (no reason, no such action): nothing recorded, nothing moved. */
  const badDecision = (c: Context, back: string, why: string) =>
    c.html(
      <Layout title="Decision not taken">
        <section>
          <h2>Nothing was done</h2>
          <p class="bad" id="review-error">{why}</p>
          <p><a href={back}>Back</a></p>
        </section>
      </Layout>,
      400,
    );

  const small = bodyLimit({ maxSize: 8_192, onError: () => problemResponse("BODY_TOO_LARGE", "a decision's form is at most 8192 bytes") });

  app.post("/console/orders/:requestId/review", small, async (c) => {
    const requestId = c.req.param("requestId");
    const form = await decisionForm(c, orderScope(requestId));
    if (form instanceof Response) return form;
    const back = `/console/orders/${encodeURIComponent(requestId)}`;
    const action = REVIEW_ACTIONS.find((a) => a === form.fields.action);
    const reason = (form.fields.reason ?? "").trim();
    if (!action) return badDecision(c, back, `the action must be one of ${REVIEW_ACTIONS.join(", ")}`);
    if (!reason) return badDecision(c, back, "a reason is required: it is kept with your name");
    if (reason.length > MAX_REASON) return badDecision(c, back, `the reason is at most ${MAX_REASON} characters`);
    const tx = (form.fields.refund_tx_hash ?? "").trim();
    if (tx && !/^0x[0-9a-fA-F]{64}$/.test(tx)) return badDecision(c, back, "the refund transaction must be a 0x-prefixed 32-byte hash");
    const result = await resolveOrder(deps.review, { requestId, action, reason, operator: form.operator, refundTxHash: tx || undefined });
    return c.redirect(`${back}?review=${result.record.id}#review`, 303);
  });

  app.get("/console/orders/:requestId", async (c) => {
    const order = await deps.state.order(c.req.param("requestId"));
    if (!order) return c.html(<Layout title="Order"><section><h2>No such order</h2></section></Layout>, 404);
    // Found by the logs' reference: the page lives at its request id.
    if (order.request_id !== c.req.param("requestId")) return c.redirect(`/console/orders/${encodeURIComponent(order.request_id)}`, 303);
    const callback = await deps.callbacks.status(order.request_id);
    const attempts = await deps.state.billerAttempts(order.request_id);
    const link = (hash: string | null) => {
      const href = txLink(order.chain, hash);
      return hash ? href ? <a href={href}>{hash}</a> : <code>{hash}</code> : "–";
    };
    return c.html(
      <Layout title={`Order ${order.request_id}`}>
        <section id="order">
          <h2>Order {order.request_id}</h2>
          <KeyValue
            rows={[
              ["Status", <strong data-field="status">{order.status}</strong>],
              ["Log reference", <code data-field="log-ref">{orderRef(order.request_id)}</code>],
              ["Rail", order.rail],
              ["Product", order.service_id ?? "–"],
              ["Payer", order.payer],
              ["Amount", amountIn(order.chain, order.token, order.amount)],
              ["1. Payment", link(order.tx_hash)],
              ["2. Vend", order.status === "SUCCESS" ? "delivered" : order.failure_reason ?? "not (yet) delivered"],
              ["Biller request ids", attempts.length ? attempts.map((a) => <div><code data-field="biller-request-id">{a.biller_request_id}</code> <span class="muted">attempt {a.attempt}, {a.sent_at}</span></div>) : "none sent"],
              ["3. Refund", link(order.refund_tx_hash)],
              ["Flag", order.flag ?? "–"],
              ["Callback", callback ? `${callback.status} after ${callback.attempts} attempt(s) to ${callback.url}` : "none"],
              ["Created / updated", `${order.created_at} / ${order.updated_at}`],
            ]}
          />
        </section>
        {await reviewSection(c, order.request_id)}
      </Layout>,
    );
  });

  /** The order's review: what the ledger shows under its key, the decision form while it is held, and every action taken on it. */
  const reviewSection = async (c: Context, requestId: string) => {
    const full = await deps.review.orders.get(requestId);
    if (!full) return null;
    const actions = await deps.review.reviews.forOrder(requestId);
    if (full.status !== "NEEDS_REVIEW" && actions.length === 0) return null;
    const justTaken = actions.find((a) => a.id === c.req.query("review"));
    let ledger: Child;
    let refused: ReturnType<typeof whyNot> | null = null;
    let paidShown = "";
    try {
      const view = await ledgerUnderKeyCaughtUp(deps.review, full);
      refused = whyNot(full, view);
      if (view.payment) paidShown = ` (${names.amount(view.payment.chainId, view.payment.token, view.payment.amount)})`;
      ledger = view.payment ? (
        <span data-field="ledger-paid" data-units={view.payment.amount}>
          {names.amount(view.payment.chainId, view.payment.token, view.payment.amount)} paid by {view.payment.payer} in <code>{view.payment.txHash}</code>
          {view.refunded > 0n ? `; ${names.amount(view.payment.chainId, view.payment.token, view.refunded)} refunded` : "; nothing refunded"}
        </span>
      ) : (
        <span data-field="ledger-paid" data-units="">no payment under the order's key</span>
      );
    } catch (err) {
      ledger = <span class="bad">the ledger could not be read: {errorText(err)}</span>;
    }
    const operator = operatorIdentity(c, deps.token);
    const permit2 = full.rail === "x402" && x402RailOf(full) === "permit2";
    return (
      <section id="review">
        <h2>Review</h2>
        <ReviewResult action={justTaken} />
        <KeyValue rows={[["Held because", full.status === "NEEDS_REVIEW" ? full.failureReason ?? "–" : `no longer held (${full.status})`], ["The ledger under its key", ledger]]} />
        {full.status !== "NEEDS_REVIEW" ? null : !operator ? (
          <p class="bad">Give your name as the basic-auth user name to decide: every decision is recorded with it.</p>
        ) : (
          <ReviewForm
            action={`/console/orders/${encodeURIComponent(requestId)}/review`}
            token={forms.issue(credential(c), operator, orderScope(requestId))}
            buttons={[
              { value: "refund", label: `Refund what the ledger shows paid${paidShown}`, refused: refused ? refused.refund : "the ledger could not be read" },
              { value: "serve", label: "Serve (vend the bill)", refused: refused ? refused.serve : "the ledger could not be read" },
              { value: "close", label: "Close: no money moves", refused: refused ? refused.close : "the ledger could not be read" },
              ...(permit2
                ? [{ value: "hold", label: "Hold for a refund by hand of the payer's transfer (before sending anything)", refused: refused ? refused.hold : "the ledger could not be read" }]
                : []),
            ]}
            extra={
              permit2 ? (
                <label>
                  Refund transaction (a Permit2 order held for a refund by hand: send the amount back, then close with it)
                  <input name="refund_tx_hash" pattern="0x[0-9a-fA-F]{64}" size={70} />
                </label>
              ) : undefined
            }
          />
        )}
        <h2>Actions taken</h2>
        <ReviewActionsTable actions={actions} highlight={justTaken?.id} amount={(units) => amountIn(full.chain, full.token, units)} />
      </section>
    );
  };

  const orphanParams = (c: Context) => ({ chain: c.req.param("chain")!, token_address: c.req.param("token")!, payer: c.req.param("payer")!, auth_nonce: c.req.param("nonce")! });
  const orphanPath = (k: { chain: string; token_address: string; payer: string; auth_nonce: string }) => `/console/orphans/${k.chain}/${k.token_address}/${k.payer}/${k.auth_nonce}`;

  app.get("/console/orphans/:chain/:token/:payer/:nonce", async (c) => {
    const params = orphanParams(c);
    const row = validOrphanKey(params) ? await orphanPayment(deps.review.db, params) : undefined;
    if (!row) return c.html(<Layout title="Payment"><section><h2>No such x402 payment without an order</h2></section></Layout>, 404);
    const key = orphanKey(row);
    const actions = await deps.review.reviews.forOrphan(key);
    const justTaken = actions.find((a) => a.id === c.req.query("review"));
    const operator = operatorIdentity(c, deps.token);
    return c.html(
      <Layout title="x402 payment without an order">
        <section id="orphan">
          <h2>x402 payment without an order</h2>
          <KeyValue
            rows={[
              ["State", <strong data-field="status">{row.status}</strong>],
              ["Chain", row.chain],
              ["Token", <span>{names.tokenOf(row.chain, row.token_address)} <code class="muted">{row.token_address}</code></span>],
              ["Payer", row.payer],
              ["Nonce", <code>{row.auth_nonce}</code>],
              ["Amount", <span data-field="amount">{names.amount(row.chain, row.token_address, row.amount)}</span>],
              ["Payment", <code>{row.tx_hash}</code>],
            ]}
          />
        </section>
        <section id="review">
          <h2>Review</h2>
          <ReviewResult action={justTaken} />
          <p class="muted">
            The service never held this payer's signed authorization, so it cannot refund the payment itself unless the payer offers that authorization again (it then
            refunds it on chain). To refund it by hand, first hold it (the service then cannot refund it too), then send exactly{" "}
            {names.amount(row.chain, row.token_address, row.amount)} to the payer, then close it with the transaction (checked on chain). Or close it as kept, saying why.
          </p>
          {row.status !== "NEEDS_REVIEW" && row.status !== ORPHAN_HELD_FOR_HAND_REFUND ? null : !operator ? (
            <p class="bad">Give your name as the basic-auth user name to decide: every decision is recorded with it.</p>
          ) : (
            <ReviewForm
              action={orphanPath(row)}
              token={forms.issue(credential(c), operator, orphanScope(key))}
              buttons={[
                ...(row.status === "NEEDS_REVIEW" ? [{ value: "hold", label: "Hold for a refund by hand", refused: null }] : []),
                { value: "close", label: "Close", refused: null },
              ]}
              extra={
                <label>
                  Refund transaction (when refunded by hand)
                  <input name="refund_tx_hash" pattern="0x[0-9a-fA-F]{64}" size={70} />
                </label>
              }
            />
          )}
          <h2>Actions taken</h2>
          <ReviewActionsTable actions={actions} highlight={justTaken?.id} amount={(units) => names.amount(row.chain, row.token_address, units)} />
        </section>
      </Layout>,
    );
  });

  app.post("/console/orphans/:chain/:token/:payer/:nonce", small, async (c) => {
    const params = orphanParams(c);
    if (!validOrphanKey(params)) return problemResponse("NOT_FOUND", "no x402 payment without an order under that key");
    const row = await orphanPayment(deps.review.db, params);
    if (!row) return problemResponse("NOT_FOUND", "no x402 payment without an order under that key");
    const form = await decisionForm(c, orphanScope(orphanKey(row)));
    if (form instanceof Response) return form;
    const back = orphanPath(row);
    const reason = (form.fields.reason ?? "").trim();
    const tx = (form.fields.refund_tx_hash ?? "").trim();
    const action = ORPHAN_ACTIONS.find((a) => a === form.fields.action);
    if (!action) return badDecision(c, back, "the actions on a payment without an order are hold and close");
    if (!reason) return badDecision(c, back, "a reason is required: it is kept with your name");
    if (reason.length > MAX_REASON) return badDecision(c, back, `the reason is at most ${MAX_REASON} characters`);
    if (tx && !/^0x[0-9a-fA-F]{64}$/.test(tx)) return badDecision(c, back, "the refund transaction must be a 0x-prefixed 32-byte hash");
    const result = await resolveOrphanPayment(deps.review, { ...row, action, reason, operator: form.operator, refundTxHash: tx || undefined });
    return c.redirect(`${back}?review=${result.record.id}#review`, 303);
  });

  app.get("/console/money", (c) =>
    page(c, "Refunds and orphans", {
      refunds: async () => (
        <Panel id="refunds-panel" title="Latest refunds (ledger)" src="/console/money?panel=refunds">
          <table id="refunds">
            <thead><tr><th>When</th><th>Chain</th><th>Token</th><th>Rail</th><th>Order</th><th>Payer</th><th class="n">Amount</th><th>Transaction</th></tr></thead>
            <tbody>
              {rowsOrNone(await deps.state.refunds(), 8, (r) => (
                <tr>
                  <td class="muted">{new Date(Number(r.timestamp) * 1000).toISOString().slice(0, 19)}</td>
                  <td>{names.chain(r.chainId)}</td>
                  <td title={r.token}>{names.token(r.chainId, r.token)}</td>
                  <td>{r.rail}</td>
                  <td>{r.requestId ? <a href={`/console/orders/${r.requestId}`}><code>{r.requestId}</code></a> : <code title={r.orderId}>{r.orderId.slice(0, 12)}… (no order)</code>}</td>
                  <td>{r.payer}</td>
                  <td class="n">{units(r.amount)}</td>
                  <td><code>{r.txHash.slice(0, 14)}…</code></td>
                </tr>
              ))}
            </tbody>
          </table>
        </Panel>
      ),
      losses: async () => (
        <Panel id="losses-panel" title="Payments a reorganisation took off the chain after they were confirmed" src="/console/money?panel=losses">
          <table id="lost-payments">
            <thead><tr><th>Noticed</th><th>Order</th><th>Chain</th><th>Rail</th><th>Lost transaction</th><th>Outcome</th><th>Collected again by</th><th>Detail</th></tr></thead>
            <tbody>
              {rowsOrNone(await deps.state.losses(), 8, (l) => (
                <tr>
                  <td class="muted">{l.lost_at ? new Date(l.lost_at).toISOString().slice(0, 19) : ""}</td>
                  <td><a href={`/console/orders/${l.request_id}`}><code>{l.request_id}</code></a></td>
                  <td>{l.chain}</td>
                  <td>{l.rail}</td>
                  <td><code>{short(l.tx_hash, 14)}</code></td>
                  <td>{l.outcome}</td>
                  <td><code>{short(l.recollect_tx_hash, 14)}</code></td>
                  <td>{l.detail ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Panel>
      ),
      orphans: async () => {
        const o = await deps.state.orphans();
        return (
          <Panel id="orphans-panel" title="Payments no order accounts for, and what was done" src="/console/money?panel=orphans">
            <h2>Pulls (refunded by the service)</h2>
            <table id="orphan-pulls">
              <thead><tr><th>Chain</th><th>Order id</th><th>Payer</th><th class="n">Amount</th><th>State</th><th>Refund</th></tr></thead>
              <tbody>
                {rowsOrNone(o.pulls, 6, (p) => (
                  <tr><td>{p.chain}</td><td><code>{short(p.order_id, 12)}</code></td><td>{p.payer}</td><td class="n">{names.amount(p.chain!, p.token_address!, p.amount!)}</td><td>{p.status}</td><td><code>{short(p.refund_tx_hash, 12)}</code></td></tr>
                ))}
              </tbody>
            </table>
            <h2>x402 payments (held for an operator)</h2>
            <table id="orphan-payments">
              <thead><tr><th>Chain</th><th>Payer</th><th>Nonce</th><th class="n">Amount</th><th>State</th><th>Transaction</th><th></th></tr></thead>
              <tbody>
                {rowsOrNone(o.payments, 7, (p) => (
                  <tr data-status={p.status}>
                    <td>{p.chain}</td><td>{p.payer}</td><td><code>{short(p.auth_nonce, 12)}</code></td><td class="n">{names.amount(p.chain!, p.token_address!, p.amount!)}</td><td>{p.status}</td><td><code>{short(p.tx_hash, 12)}</code></td>
                    <td><a href={`/console/orphans/${p.chain}/${p.token_address}/${p.payer}/${p.auth_nonce}`}>{p.status === "NEEDS_REVIEW" || p.status === ORPHAN_HELD_FOR_HAND_REFUND ? "Decide" : "Record"}</a></td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Panel>
        );
      },
    }),
  );

  app.get("/console/wallets", async (c) => {
    const wallets = await deps.state.wallets();
    return c.html(
      <Layout title="Wallets">
        <section>
          <h2>Wallets with allowances (ledger)</h2>
          <table id="wallets">
            <thead><tr><th>Payer</th><th>Chain</th><th>Token</th><th class="n">Allowance set</th><th class="n">Left</th><th class="n">Period limit (left)</th><th class="n">Paid</th><th class="n">Refunded</th><th class="n">Payments</th></tr></thead>
            <tbody>
              {rowsOrNone(wallets, 9, (w) => (
                <tr>
                  <td>{w.payer}</td>
                  <td>{names.chain(w.chainId)}</td>
                  <td title={w.token}>{names.token(w.chainId, w.token)}</td>
                  <td class="n">{units(w.allowanceSet)}</td>
                  <td class="n">{units(w.spendingAllowance)}</td>
                  <td class="n">{w.limitPeriod === 0n ? "none" : `${units(w.limitPerPeriod)} per ${w.limitPeriod} s (${units(w.limitPerPeriod - w.periodSpent)})`}</td>
                  <td class="n">{units(w.totalPaid)}</td>
                  <td class="n">{units(w.totalRefunded)}</td>
                  <td class="n">{w.paymentCount}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      </Layout>,
    );
  });

  app.get("/console/schedules", async (c) => {
    const schedules = await deps.state.schedules();
    return c.html(
      <Layout title="Schedules">
        <section>
          <h2>Schedules and their last runs</h2>
          <table id="schedules">
            <thead><tr><th>Schedule</th><th>Wallet</th><th>Status</th><th>When</th><th class="n">Runs</th><th>Next</th><th>Last run</th></tr></thead>
            <tbody>
              {rowsOrNone(schedules, 7, (s) => (
                <tr>
                  <td><code>{s.id}</code></td>
                  <td>{s.wallet}</td>
                  <td>{s.status}</td>
                  <td>{s.cron ?? "once"}</td>
                  <td class="n">{s.runs}</td>
                  <td class="muted">{s.next_run_at ?? "–"}</td>
                  <td>{s.last_due_at ? `${s.last_due_at}: ${s.last_outcome ?? "running"}${s.last_error ? ` (${s.last_error})` : ""}` : "never"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      </Layout>,
    );
  });
}

const short = (s: string | null | undefined, n: number) => (s ? `${s.slice(0, n)}…` : "–");
