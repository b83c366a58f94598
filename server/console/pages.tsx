/** @jsxImportSource hono/jsx */
/**
 * The operator console's pages, rendered on the server with hono/jsx. Each panel can be
 * fetched alone (?panel=<name>) so htmx refreshes it in place without a full reload.
 * Amounts are shown with their token's decimals, symbol and chain (lib/token-amounts.ts), or in
 * a table whose row names the token; nothing here shows a purchased code or a secret. The review forms POST (never GET) with the form's token (operator/csrf.ts).
 */
import type { Child, FC } from "hono/jsx";
import { formatUnits } from "viem";
import type { AuditReport } from "../audit/ledger.ts";
import type { ChainStatus } from "../chain/status.ts";
import type { Health, OrderRow } from "../operator/state.ts";
import type { ReviewRecord } from "../orders/review.ts";

export const units = (v: bigint | string | null | undefined) => (v === null || v === undefined ? "–" : formatUnits(BigInt(v), 6));

/** A table's rows, or one row saying "none": an empty table must not look unfinished. */
export function rowsOrNone<T>(items: T[], columns: number, row: (item: T) => Child): Child {
  return items.length > 0 ? items.map(row) : <tr class="none"><td colspan={columns} class="muted">none</td></tr>;
}
const short = (s: string | null | undefined, n = 10) => (s ? (s.length > n + 6 ? `${s.slice(0, n)}…${s.slice(-4)}` : s) : "–");

const CSS = `
body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.2rem;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a:hover{color:#fff}header strong{margin-right:1rem}
main{padding:1rem 1.2rem;display:grid;gap:1rem}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.8rem 1rem}
h2{font-size:1rem;margin:.1rem 0 .6rem}table{border-collapse:collapse;width:100%;font-size:.85rem}
th,td{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #eef0f3}th{color:#5b6577;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#137333}.bad{color:#b3261e;font-weight:600}.muted{color:#7a8394}
form{display:flex;gap:.5rem;margin-bottom:.6rem}form.review{flex-direction:column;align-items:flex-start}
form.review label{display:flex;flex-direction:column;gap:.2rem}.choice{margin:.2rem 0}tr.latest{background:#fff8e1}.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:1rem}
`;

export const Layout: FC<{ title: string; children?: Child }> = ({ title, children }) => (
  <html lang="en">
    <head>
      <meta charset="utf-8" />
      <title>{`${title} · BillPay console`}</title>
      <style>{CSS}</style>
      <script src="/console/assets/htmx.min.js"></script>
    </head>
    <body>
      <header>
        <strong>BillPay console</strong>
        <a href="/console">Overview</a>
        <a href="/console/orders">Orders</a>
        <a href="/console/money">Refunds and orphans</a>
        <a href="/console/wallets">Wallets</a>
        <a href="/console/schedules">Schedules</a>
      </header>
      <main>{children}</main>
    </body>
  </html>
);

/** A panel that refreshes itself every `every` seconds from `src`. */
export const Panel: FC<{ id: string; title: string; src: string; every?: number; children?: Child }> = ({ id, title, src, every = 15, children }) => (
  <section id={id} hx-get={src} hx-trigger={`every ${every}s`} hx-swap="outerHTML">
    <h2>{title}</h2>
    {children}
  </section>
);

export const TreasuryTable: FC<{ chains: ChainStatus[]; audit: AuditReport | { error: string } | null }> = ({ chains, audit }) => (
  <div>
    <table id="treasury">
      <thead>
        <tr><th>Chain</th><th>Token</th><th class="n">On chain</th><th class="n">Ledger</th><th title="the ledger's balance against the chain's at the block the ledger has indexed through">Match</th><th class="n">Refund budget left</th><th class="n">Pull budget left</th></tr>
      </thead>
      <tbody>
        {rowsOrNone(chains.flatMap((c) => c.tokens.map((t) => ({ c, t }))), 7, ({ c, t }) => (
            <tr data-chain={c.chain} data-token={t.symbol}>
              <td>{c.chain}</td>
              <td>{t.symbol}</td>
              <td class="n" data-field="onchain" data-units={t.onChain?.toString() ?? ""}>{units(t.onChain)}</td>
              <td class="n" data-field="ledger" data-units={t.ledger?.toString() ?? ""}>{units(t.ledger)}</td>
              <td class={t.matches === false ? "bad" : "ok"}>{t.matches === null ? "?" : t.matches ? "yes" : "NO"}</td>
              <td class="n">{t.refundBudget ? `${units(t.refundBudget.available)} / ${units(t.refundBudget.limit)}` : "–"}</td>
              <td class="n">{t.pullBudget ? `${units(t.pullBudget.available)} / ${units(t.pullBudget.limit)}` : "–"}</td>
            </tr>
        ))}
      </tbody>
    </table>
    <p id="audit-verdict">
      {audit === null ? (
        <span class="muted">The audit has not run yet.</span>
      ) : "error" in audit ? (
        <span class="bad">The audit could not run: {audit.error}</span>
      ) : audit.discrepancies.length === 0 ? (
        <span class="ok">Audit: no discrepancy ({audit.refundsChecked} refunds and {audit.pullsChecked} pulls checked{audit.orders ? `, ${audit.orders.ordersChecked} orders` : ""}).</span>
      ) : (
        <span class="bad">Audit: {audit.discrepancies.length} discrepancies</span>
      )}
    </p>
    {audit && !("error" in audit) && audit.discrepancies.length > 0 ? (
      <ul id="discrepancies">{audit.discrepancies.map((d) => <li class="bad">{d}</li>)}</ul>
    ) : null}
  </div>
);

/** A chain's problems, the ledger's first (it stalled, or fell behind its bound), then what could not be read. */
const ChainProblems: FC<{ problems: string[] }> = ({ problems }) => (
  <td class={problems.length ? "bad" : "muted"} data-field="problems">{problems.join("; ") || "none"}</td>
);

export const ChainsTable: FC<{ chains: ChainStatus[] }> = ({ chains }) => (
  <table id="chains">
    <thead><tr><th>Chain</th><th class="n">Head</th><th class="n">Indexed</th><th class="n">Lag (blocks / s)</th><th>Operator gas</th><th>Refunder gas</th><th>Problems</th></tr></thead>
    <tbody>
      {rowsOrNone(chains, 7, (c) => (
        <tr data-chain={c.chain}>
          <td>{c.chain} ({c.chainId})</td>
          <td class="n">{c.head?.toString() ?? "–"}</td>
          <td class="n">{c.indexed?.toString() ?? "–"}</td>
          <td class="n" data-field="lag">{c.lagBlocks === null ? "–" : `${c.lagBlocks} / ${c.lagSeconds}`}</td>
          {(["operator", "refunder"] as const).map((role) => {
            const k = c.keys.find((x) => x.role === role);
            return <td title={k?.address}>{k?.gasWei === null || !k ? "–" : `${formatUnits(k.gasWei, 18).slice(0, 10)}`}</td>;
          })}
          <ChainProblems problems={[...(c.ledger?.problem ? [c.ledger.problem] : []), ...c.errors]} />
        </tr>
      ))}
    </tbody>
  </table>
);

export const HealthTable: FC<{ health: Health[]; rate: { ngnPerUsd: string | null; source: string; readAt: string | null; ageSeconds: number | null; error?: string } }> = ({ health, rate }) => (
  <table id="health">
    <thead><tr><th>Part</th><th>State</th><th class="n">ms</th><th>Detail</th></tr></thead>
    <tbody>
      {health.map((h) => (
        <tr><td>{h.name}</td><td class={h.ok ? "ok" : "bad"}>{h.ok ? "up" : "DOWN"}</td><td class="n">{h.ms}</td><td class="muted">{h.error ?? h.url}</td></tr>
      ))}
      <tr>
        <td>exchange rate</td>
        <td class={rate.ngnPerUsd ? "ok" : "bad"} data-field="rate">{rate.ngnPerUsd ? `${rate.ngnPerUsd} NGN/USD` : "UNAVAILABLE"}</td>
        <td class="n">{rate.ageSeconds === null ? "" : `${rate.ageSeconds} s old`}</td>
        <td class="muted">{rate.source}{rate.error ? `: ${rate.error}` : ""}</td>
      </tr>
    </tbody>
  </table>
);

export const CountsTable: FC<{ counts: Array<{ status: string; rail: string; count: number; amount: bigint }> }> = ({ counts }) => (
  <table id="order-counts">
    <thead><tr><th>Status</th><th>Rail</th><th class="n">Orders</th><th class="n">Amount</th></tr></thead>
    <tbody>
      {rowsOrNone(counts, 4, (c) => (
        <tr data-status={c.status} data-rail={c.rail}>
          <td><a href={`/console/orders?status=${c.status}&rail=${c.rail}`}>{c.status}</a></td>
          <td>{c.rail}</td>
          <td class="n" data-field="count">{c.count}</td>
          <td class="n">{units(c.amount)}</td>
        </tr>
      ))}
    </tbody>
  </table>
);

export const OrdersTable: FC<{ orders: OrderRow[]; id?: string }> = ({ orders, id = "orders" }) => (
  <table id={id}>
    <thead><tr><th>Created</th><th>Order</th><th>Rail</th><th>Status</th><th>Product</th><th>Chain</th><th class="n">Amount</th><th>Payer</th><th>Note</th></tr></thead>
    <tbody>
      {rowsOrNone(orders, 9, (o) => (
        <tr data-request-id={o.request_id} data-status={o.status}>
          <td class="muted">{o.created_at.slice(0, 19)}</td>
          <td><a href={`/console/orders/${o.request_id}`}>{short(o.request_id, 14)}</a></td>
          <td>{o.rail}</td>
          <td class={o.status === "NEEDS_REVIEW" ? "bad" : ""}>{o.status}</td>
          <td>{o.service_id ?? "–"}</td>
          <td>{o.chain} {o.token}</td>
          <td class="n" data-units={o.amount}>{units(o.amount)} {o.token}</td>
          <td title={o.payer}>{short(o.payer)}</td>
          <td class="muted">{o.flag ?? o.failure_reason ?? ""}</td>
        </tr>
      ))}
    </tbody>
  </table>
);

/** Paid and refunded volume per hour, as bars (SVG drawn here: no chart library, no CDN). */
export const VolumeChart: FC<{ buckets: Array<{ hour: number; paid: bigint; refunded: bigint }> }> = ({ buckets }) => {
  const width = 720;
  const height = 160;
  const max = buckets.reduce((m, b) => (b.paid > m ? b.paid : b.refunded > m ? b.refunded : m), 1n);
  const barWidth = width / buckets.length;
  const y = (v: bigint) => Number((v * BigInt(height - 20)) / max);
  const totalPaid = buckets.reduce((s, b) => s + b.paid, 0n);
  const totalRefunded = buckets.reduce((s, b) => s + b.refunded, 0n);
  return (
    <figure id="volume" data-paid={totalPaid.toString()} data-refunded={totalRefunded.toString()}>
      <svg width={width} height={height} viewBox={`0 0 ${width} ${height}`} role="img" aria-label="Paid and refunded volume per hour">
        {buckets.map((b, i) => (
          <g>
            <rect x={i * barWidth + 1} y={height - 12 - y(b.paid)} width={barWidth / 2 - 1} height={y(b.paid)} fill="#2a7de1">
              <title>{`${new Date(b.hour * 1000).toISOString().slice(11, 16)} paid ${units(b.paid)}`}</title>
            </rect>
            <rect x={i * barWidth + barWidth / 2} y={height - 12 - y(b.refunded)} width={barWidth / 2 - 1} height={y(b.refunded)} fill="#e0562f">
              <title>{`${new Date(b.hour * 1000).toISOString().slice(11, 16)} refunded ${units(b.refunded)}`}</title>
            </rect>
          </g>
        ))}
        <line x1="0" x2={width} y1={height - 12} y2={height - 12} stroke="#99a" />
      </svg>
      <figcaption>
        Last 24 hours, per hour, all tokens (raw units shown with 6 decimals): <span style="color:#2a7de1">paid {units(totalPaid)}</span>,{" "}
        <span style="color:#e0562f">refunded {units(totalRefunded)}</span>.
      </figcaption>
    </figure>
  );
};

export const KeyValue: FC<{ rows: Array<[string, Child]> }> = ({ rows }) => (
  <table>
    <tbody>{rows.map(([k, v]) => <tr><th>{k}</th><td>{v}</td></tr>)}</tbody>
  </table>
);

/** An operator's actions on an order or payment held for review, oldest first (orders/review.ts). */
export const ReviewActionsTable: FC<{ actions: ReviewRecord[]; highlight?: string; amount: (units: string) => string }> = ({ actions, highlight, amount }) =>
  actions.length === 0 ? (
    <p class="muted" id="review-actions-none">No operator has acted on it.</p>
  ) : (
    <table id="review-actions">
      <thead><tr><th>When</th><th>Who</th><th>Action</th><th>Why</th><th class="n">Amount</th><th>Outcome</th><th>Detail</th><th>Transaction</th></tr></thead>
      <tbody>
        {actions.map((a) => (
          <tr data-review-id={a.id} data-action={a.action} data-outcome={a.outcome} class={a.id === highlight ? "latest" : ""}>
            <td class="muted">{a.created_at.slice(0, 19)}</td>
            <td data-field="operator">{a.operator}</td>
            <td>{a.action}</td>
            <td data-field="reason">{a.reason}</td>
            <td class="n" data-field="amount">{a.amount ? amount(a.amount) : "–"}</td>
            <td class={a.outcome === "REFUSED" || a.outcome === "FAILED" ? "bad" : a.outcome === "DONE" ? "ok" : ""} data-field="outcome">{a.outcome}</td>
            <td data-field="detail">{a.detail ?? ""}</td>
            <td><code>{short(a.tx_hash, 14)}</code></td>
          </tr>
        ))}
      </tbody>
    </table>
  );

/** The result of the action just taken, above its order or payment. */
export const ReviewResult: FC<{ action: ReviewRecord | undefined }> = ({ action }) =>
  action ? (
    <p id="review-result" data-outcome={action.outcome} class={action.outcome === "REFUSED" || action.outcome === "FAILED" ? "bad" : "ok"}>
      {action.action} by {action.operator}: {action.outcome}. {action.detail ?? ""}
    </p>
  ) : null;

/**
 * The decision form: POST only, with the form's token (operator/csrf.ts) and a reason.
 * `buttons`: each action with its label and, when what the ledger shows now would refuse it, why.
 */
export const ReviewForm: FC<{ action: string; token: string; buttons: Array<{ value: string; label: string; refused: string | null }>; extra?: Child }> = ({ action, token, buttons, extra }) => (
  <form method="post" action={action} id="review-form" class="review">
    <input type="hidden" name="csrf" value={token} />
    <label>
      Reason (required, kept with your name)
      <textarea name="reason" required maxlength={500} rows={2} cols={60}></textarea>
    </label>
    {extra}
    <div>
      {buttons.map((b) => (
        <div class="choice">
          <button type="submit" name="action" value={b.value} id={`review-${b.value}`}>{b.label}</button>{" "}
          <span class={b.refused ? "muted" : "ok"} data-refused={b.value}>{b.refused ? `would be refused: ${b.refused}` : "allowed by what the ledger shows now"}</span>
        </div>
      ))}
    </div>
  </form>
);
