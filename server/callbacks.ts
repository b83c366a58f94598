/**
 * Callbacks: a bill may name `callback_url`; when its order becomes final, the service POSTs
 * the order's result there, signed, and retries with backoff until a 2xx or the last attempt.
 *   - Signed: `X-BillPay-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>`,
 *     the key being SHA-256 of the payer's own secret: the `order_secret` of an x402 order,
 *     the `api_key` of an agent-hub order (the wallet's current one). The payer computes it;
 *     nobody else can.
 *   - Delivered only to public addresses: a literal private, loopback or link-local host is
 *     refused when the bill arrives (422 CALLBACK_URL_NOT_ALLOWED), and every name is
 *     resolved again at delivery, so a DNS answer cannot point it inside either
 *     (CALLBACK_ALLOW_PRIVATE=1 allows both, for local development).
 * Deliveries are queued by the statement that makes the order final (orders/store.ts) and
 * recorded in callback_delivery, shown on the order route.
 */
import { type Log, silentLog } from "./log.ts";
import { createHmac } from "node:crypto";
import { hashApiKey } from "./agent/credentials.ts";
import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";
import type { Db } from "./db.ts";
import { ServiceError } from "./errors.ts";
import { errorText } from "./log-safety.ts";
import { orderResult } from "./orders/fulfil.ts";
import type { OrderStore } from "./orders/store.ts";

const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, "ipv4");
}
for (const [net, prefix] of [
  ["::", 127],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, "ipv6");
}

function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return PRIVATE.check(mapped, "ipv4");
  const kind = isIP(address);
  return kind === 4 ? PRIVATE.check(address, "ipv4") : kind === 6 ? PRIVATE.check(address, "ipv6") : false;
}

/** The resolver takes no signal: a lookup that hangs is cut off here. */
function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms)));
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

const hostOf = (url: string) => new URL(url).hostname.replace(/^\[|\]$/g, "");

/** Refuses, when the bill arrives, a callback_url whose host is plainly not public. */
export function checkCallbackUrl(url: string | undefined, allowPrivate: boolean): void {
  if (!url || allowPrivate) return;
  const host = hostOf(url).toLowerCase();
  if (host === "localhost" || host.endsWith(".localhost") || host.endsWith(".internal") || isPrivateAddress(host)) {
    throw new ServiceError("CALLBACK_URL_NOT_ALLOWED", `callback_url ${new URL(url).host} is a private or loopback address; use a public one`);
  }
}

/** The HMAC signature header for `body`. */
export function callbackSignature(keyHex: string, timestamp: number, body: string): string {
  const mac = createHmac("sha256", Buffer.from(keyHex, "hex")).update(`${timestamp}.${body}`).digest("hex");
  return `t=${timestamp},v1=${mac}`;
}

/** The payer's key for a secret it holds: SHA-256 of the order_secret or the api_key, hex (the digest the service stores). */
export const callbackKeyOf = hashApiKey;

export interface CallbackStatus {
  url: string;
  status: "PENDING" | "DELIVERED" | "FAILED";
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  delivered_at: string | null;
}

export class Callbacks {
  constructor(
    private readonly db: Db,
    private readonly orders: OrderStore,
    private readonly options: { allowPrivate: boolean; timeoutMs: number; maxAttempts: number; backoffMs: number },
    private readonly log: Log = silentLog,
  ) {}

  async status(requestId: string): Promise<CallbackStatus | undefined> {
    const [row] = await this.db.query<CallbackStatus & { delivered_at: Date | null }>(
      `SELECT url, status, attempts, last_status, last_error, delivered_at FROM callback_delivery WHERE request_id = $1`,
      [requestId],
    );
    return row && { ...row, delivered_at: row.delivered_at ? new Date(row.delivered_at).toISOString() : null };
  }

  /** One pass: sends every due callback once (claimed by pushing its next attempt out first). Returns how many were delivered. */
  async deliverDue(limit = 20): Promise<number> {
    const due = await this.db.query<{ request_id: string; url: string; attempts: number }>(
      `UPDATE callback_delivery SET next_attempt_at = now() + make_interval(secs => $2), attempts = attempts + 1
       WHERE request_id IN (SELECT request_id FROM callback_delivery WHERE status = 'PENDING' AND next_attempt_at <= now()
                            ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
       RETURNING request_id, url, attempts`,
      [limit, Math.ceil(this.options.timeoutMs / 1000) + 60],
    );
    let delivered = 0;
    for (const d of due) if (await this.deliver(d)) delivered++;
    return delivered;
  }

  private async deliver(d: { request_id: string; url: string; attempts: number }): Promise<boolean> {
    const order = await this.orders.get(d.request_id);
    if (!order) return false;
    const key = order.rail === "x402" ? order.secretHash : await this.apiKeyHashOf(order.payer);
    let outcome: { ok: boolean; status: number | null; error: string | null };
    if (!key) {
      outcome = { ok: false, status: null, error: "no payer secret to sign with" };
    } else {
      const body = JSON.stringify({ event: "order.final", order: orderResult(order), chain: order.chain, token: order.token, amount: order.amount.toString() });
      outcome = await this.post(d.url, body, callbackSignature(key, Math.floor(Date.now() / 1000), body));
    }
    const last = d.attempts >= this.options.maxAttempts;
    const backoffSeconds = (this.options.backoffMs * 2 ** (d.attempts - 1)) / 1000;
    await this.db.query(
      `UPDATE callback_delivery SET
         status = CASE WHEN $2 THEN 'DELIVERED' WHEN $3 THEN 'FAILED' ELSE 'PENDING' END,
         delivered_at = CASE WHEN $2 THEN now() ELSE NULL END,
         next_attempt_at = now() + make_interval(secs => $4::double precision),
         last_status = $5, last_error = $6
       WHERE request_id = $1`,
      [d.request_id, outcome.ok, !outcome.ok && last, backoffSeconds, outcome.status, outcome.error],
    );
    if (!outcome.ok) this.log.warn("callback not delivered", { requestId: d.request_id, attempt: d.attempts, final: last, error: outcome.error ?? outcome.status });
    return outcome.ok;
  }

  private async apiKeyHashOf(wallet: string): Promise<string | undefined> {
    const [row] = await this.db.query<{ api_key_hash: string }>(`SELECT api_key_hash FROM agent_link WHERE wallet = $1`, [wallet.toLowerCase()]);
    return row?.api_key_hash;
  }

  private async post(url: string, body: string, signature: string): Promise<{ ok: boolean; status: number | null; error: string | null }> {
    try {
      if (!this.options.allowPrivate) {
        // Resolved now, at delivery: a name that answers with a private address is refused.
        const host = hostOf(url);
        const addresses = isIP(host) ? [{ address: host }] : await withTimeout(lookup(host, { all: true }), this.options.timeoutMs, "DNS lookup");
        if (addresses.some((a) => isPrivateAddress(a.address))) return { ok: false, status: null, error: "the callback host resolves to a private address" };
      }
      const res = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json", "x-billpay-signature": signature, "user-agent": "BillPay-Callback/1" },
        body,
        redirect: "error", // a redirect could lead inside
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      await res.arrayBuffer().catch(() => undefined);
      return { ok: res.ok, status: res.status, error: res.ok ? null : `answered ${res.status}` };
    } catch (err) {
      return { ok: false, status: null, error: errorText(err) };
    }
  }
}
