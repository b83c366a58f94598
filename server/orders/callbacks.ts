/**
 * Callbacks: a bill may name `callback_url`; when its order becomes final, the service POSTs
 * the order's result there, signed, and retries with backoff until a 2xx or the last attempt.
 *   - Signed: `X-BillPay-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>`,
 *     the key being SHA-256 of the payer's own secret: the `order_secret` of an x402 order,
 *     the `api_key` of an agent-hub order (the wallet's current one). The payer computes it;
 *     nobody else can.
 *   - Delivered only over https, to public addresses: a plain http URL, or a literal private,
 *     loopback or link-local host (or one a translator reaches: NAT64, 6to4), is refused when
 *     the bill arrives (422 CALLBACK_URL_NOT_ALLOWED); at delivery the name is
 *     resolved once, that address checked, and the connection made to it and no other (the
 *     name still gives Host and TLS SNI), so a second DNS answer cannot point it inside
 *     (CALLBACK_ALLOW_PRIVATE=1 skips both checks, for local development).
 *   - Bounded, as anyone can name a receiver that is slow on purpose: deliveries run on their
 *     own loop, CALLBACK_CONCURRENCY at once, never inside the worker's pass; each exchange
 *     (DNS, connect, request, answer) is cut off at CALLBACK_TIMEOUT_MS; at most 64 KiB of an
 *     answer is read; redirects are not followed.
 * Deliveries are queued by the statement that makes the order final (orders/store.ts) and
 * recorded in callback_delivery. The order route shows a coarse outcome only: the raw error
 * (which would map a receiver's network) goes to the log.
 */
import { type Log, silentLog } from "../log.ts";
import { createHmac } from "node:crypto";
import { hashApiKey } from "../credentials.ts";
import type { LookupAddress } from "node:dns";
import { lookup } from "node:dns/promises";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { BlockList, isIP } from "node:net";
import type { Db } from "../db.ts";
import { ServiceError } from "../errors.ts";
import { errorText } from "../log-safety.ts";
import { orderResult } from "./fulfil.ts";
import type { OrderStore } from "./store.ts";

const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.168.0.0", 16],
  ["192.0.0.0", 24],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, "ipv4");
}
for (const [net, prefix] of [
  ["::", 127],
  // Local-use NAT64 (RFC 8215): translated inside a network, not to a public host.
  ["64:ff9b:1::", 48],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, "ipv6");
}

/** An IPv6 address's eight 16-bit words (a trailing dotted IPv4 read as the last two), or undefined. */
function ipv6Words(address: string): number[] | undefined {
  if (isIP(address) !== 6) return undefined;
  let text = address.replace(/%.*$/, "");
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split("::") as [string, string | undefined];
  const part = (s: string) => (s === "" ? [] : s.split(":").map((w) => parseInt(w, 16)));
  const words = tail === undefined ? part(head) : [...part(head), ...Array(8 - part(head).length - part(tail).length).fill(0), ...part(tail)];
  return words.length === 8 ? words : undefined;
}

/**
 * The IPv4 address an IPv6 one reaches through a translator: IPv4-mapped (::ffff:0:0/96),
 * the well-known NAT64 prefix (64:ff9b::/96, RFC 6052) or 6to4 (2002::/16, RFC 3056). A
 * gateway on the service's network forwards such an address to that IPv4 host, so it is
 * judged by it: a DNS64 resolver gives public hosts NAT64 addresses, which stay allowed.
 */
function embeddedIpv4(address: string): string | undefined {
  const w = ipv6Words(address);
  if (!w) return undefined;
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  const zeros = (from: number, to: number) => w.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && w[5] === 0xffff) return v4(w[6]!, w[7]!);
  if (w[0] === 0x64 && w[1] === 0xff9b && zeros(2, 6)) return v4(w[6]!, w[7]!);
  if (w[0] === 0x2002) return v4(w[1]!, w[2]!);
  return undefined;
}

export function isPrivateAddress(address: string): boolean {
  const inside = embeddedIpv4(address);
  if (inside) return PRIVATE.check(inside, "ipv4");
  const kind = isIP(address);
  return kind === 4 ? PRIVATE.check(address, "ipv4") : kind === 6 ? PRIVATE.check(address, "ipv6") : false;
}

/** Settles with `work`, or rejects once `signal` aborts (the resolver takes no signal: a lookup that hangs is cut off here). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    if (signal.aborted) abort();
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

const hostOf = (url: string) => new URL(url).hostname.replace(/^\[|\]$/g, "");

/**
 * Refuses, when the bill arrives, a callback_url whose host is plainly not public, or that is
 * not https: the result carries the purchased code (an electricity token, an exam PIN), worth
 * money to whoever reads it on the way.
 */
export function checkCallbackUrl(url: string | undefined, allowPrivate: boolean): void {
  if (!url || allowPrivate) return;
  if (new URL(url).protocol !== "https:") {
    throw new ServiceError("CALLBACK_URL_NOT_ALLOWED", "callback_url must be https: the result it carries holds the purchased code");
  }
  // A trailing dot names the same host ("localhost." is localhost).
  const host = hostOf(url).toLowerCase().replace(/\.$/, "");
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

/** How much of a receiver's answer is read; the rest is never read. */
const MAX_ANSWER_BYTES = 64 * 1024;

/** What the last attempt came to: a fixed word, never the error's text. */
export const CALLBACK_OUTCOMES = ["delivered", "http_error", "unreachable", "refused_private_address", "timeout", "no_signing_key"] as const;
export type CallbackOutcome = (typeof CALLBACK_OUTCOMES)[number];
const isOutcome = (v: unknown): v is CallbackOutcome => CALLBACK_OUTCOMES.includes(v as CallbackOutcome);

export interface CallbackStatus {
  url: string;
  status: "PENDING" | "DELIVERED" | "FAILED";
  attempts: number;
  last_status: number | null;
  last_outcome: CallbackOutcome | null;
  delivered_at: string | null;
}

/** One answer for a name, as node:dns lookup gives it. */
export type Resolve = (host: string) => Promise<LookupAddress>;

export interface CallbackOptions {
  allowPrivate: boolean;
  timeoutMs: number;
  maxAttempts: number;
  backoffMs: number;
  /** Deliveries in flight at once, on the loop and in deliverDue. */
  concurrency: number;
  /** Resolves a callback host (tests answer for it); node:dns lookup by default. */
  resolve?: Resolve;
}

type Due = { request_id: string; url: string; attempts: number };
type Attempt = { outcome: CallbackOutcome; status: number | null; error: string | null };

export class Callbacks {
  private timer: NodeJS.Timeout | undefined;
  /** Slots taken: deliveries in flight, and those being claimed. */
  private busy = 0;
  private readonly running = new Set<Promise<unknown>>();

  constructor(
    private readonly db: Db,
    private readonly orders: OrderStore,
    private readonly options: CallbackOptions,
    private readonly log: Log = silentLog,
  ) {}

  async status(requestId: string): Promise<CallbackStatus | undefined> {
    const [row] = await this.db.query<Omit<CallbackStatus, "last_outcome" | "delivered_at"> & { outcome: string | null; delivered_at: Date | null }>(
      // last_error holds the outcome word; the raw text is only logged (rows from before hold text, shown as null).
      `SELECT url, status, attempts, last_status, last_error AS outcome, delivered_at FROM callback_delivery WHERE request_id = $1`,
      [requestId],
    );
    if (!row) return undefined;
    const { outcome, delivered_at, ...rest } = row;
    return { ...rest, last_outcome: isOutcome(outcome) ? outcome : null, delivered_at: delivered_at ? new Date(delivered_at).toISOString() : null };
  }

  /**
   * Sends due callbacks every `intervalMs`, apart from the worker's pass: free slots (of
   * `concurrency`) are filled each tick, and a slow receiver holds only its own slot.
   */
  start(intervalMs: number): void {
    this.timer ??= setInterval(() => this.track(this.fill()), intervalMs);
  }

  /** Stops the loop and waits for the deliveries in flight (each ends within timeoutMs). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  /** One pass, for tests and scripts: claims up to `limit` due callbacks and sends them, `concurrency` at a time. Returns how many were delivered. */
  async deliverDue(limit = 20): Promise<number> {
    const due = await this.claim(limit);
    let delivered = 0;
    const lane = async () => {
      for (let d = due.shift(); d; d = due.shift()) if (await this.deliver(d)) delivered++;
    };
    await Promise.all(Array.from({ length: this.options.concurrency }, lane));
    return delivered;
  }

  private async fill(): Promise<void> {
    const free = this.options.concurrency - this.busy;
    if (free <= 0) return;
    this.busy += free; // taken before the claim, so an overlapping tick cannot claim past the bound
    let due: Due[] = [];
    try {
      due = await this.claim(free);
    } catch (err) {
      this.log.error("callbacks could not be claimed", { error: errorText(err) });
    } finally {
      this.busy -= free - due.length;
    }
    for (const d of due) {
      this.track(
        this.deliver(d)
          .catch((err: unknown) => this.log.error("callback delivery failed", { requestId: d.request_id, error: errorText(err) }))
          .finally(() => this.busy--),
      );
    }
  }

  private track(work: Promise<unknown>): void {
    this.running.add(work);
    void work.finally(() => this.running.delete(work));
  }

  /**
   * Claimed by pushing the next attempt out past the exchange's timeout first: another instance
   * skips them. First attempts go before retries: receivers that never answer (any payer may
   * name one, for the price of a small bill) hold their slots only for their retries, behind
   * every other merchant's first delivery.
   */
  private claim(limit: number): Promise<Due[]> {
    return this.db.query<Due>(
      `UPDATE callback_delivery SET next_attempt_at = now() + make_interval(secs => $2), attempts = attempts + 1
       WHERE request_id IN (SELECT request_id FROM callback_delivery WHERE status = 'PENDING' AND next_attempt_at <= now()
                            ORDER BY attempts, next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
       RETURNING request_id, url, attempts`,
      [limit, Math.ceil(this.options.timeoutMs / 1000) + 60],
    );
  }

  private async deliver(d: Due): Promise<boolean> {
    const order = await this.orders.get(d.request_id);
    if (!order) return false;
    const key = order.rail === "x402" ? order.secretHash : await this.apiKeyHashOf(order.payer);
    let attempt: Attempt;
    if (!key) {
      attempt = { outcome: "no_signing_key", status: null, error: "no payer secret to sign with" };
    } else {
      const body = JSON.stringify({ event: "order.final", order: orderResult(order), chain: order.chain, token: order.token, amount: order.amount.toString() });
      attempt = await this.post(d.url, body, callbackSignature(key, Math.floor(Date.now() / 1000), body));
    }
    const ok = attempt.outcome === "delivered";
    const last = d.attempts >= this.options.maxAttempts;
    const backoffSeconds = (this.options.backoffMs * 2 ** (d.attempts - 1)) / 1000;
    await this.db.query(
      `UPDATE callback_delivery SET
         status = CASE WHEN $2 THEN 'DELIVERED' WHEN $3 THEN 'FAILED' ELSE 'PENDING' END,
         delivered_at = CASE WHEN $2 THEN now() ELSE NULL END,
         next_attempt_at = now() + make_interval(secs => $4::double precision),
         last_status = $5, last_error = $6
       WHERE request_id = $1`,
      [d.request_id, ok, !ok && last, backoffSeconds, attempt.status, attempt.outcome],
    );
    if (!ok) this.log.warn("callback not delivered", { requestId: d.request_id, attempt: d.attempts, final: last, outcome: attempt.outcome, error: attempt.error });
    return ok;
  }

  private async apiKeyHashOf(wallet: string): Promise<string | undefined> {
    const [row] = await this.db.query<{ api_key_hash: string }>(`SELECT api_key_hash FROM agent_link WHERE wallet = $1`, [wallet.toLowerCase()]);
    return row?.api_key_hash;
  }

  private async post(url: string, body: string, signature: string): Promise<Attempt> {
    const signal = AbortSignal.timeout(this.options.timeoutMs);
    try {
      // Resolved once: the address checked is the address connected to.
      const host = hostOf(url);
      const family = isIP(host);
      const address = family ? { address: host, family } : await untilAborted((this.options.resolve ?? lookup)(host), signal);
      if (!this.options.allowPrivate && isPrivateAddress(address.address)) {
        return { outcome: "refused_private_address", status: null, error: `${host} resolves to a private address` };
      }
      const headers = { "content-type": "application/json", "x-billpay-signature": signature, "user-agent": "BillPay-Callback/1" };
      const status = await untilAborted(postTo(new URL(url), address, body, headers, signal), signal);
      const ok = status >= 200 && status < 300; // a redirect is not followed: it could lead inside
      return { outcome: ok ? "delivered" : "http_error", status, error: ok ? null : `answered ${status}` };
    } catch (err) {
      return { outcome: signal.aborted ? "timeout" : "unreachable", status: null, error: errorText(err) };
    }
  }
}

/** POSTs `body` to `url` over a new connection to `address`; answers the status once at most MAX_ANSWER_BYTES of the answer are read. */
function postTo(url: URL, address: LookupAddress, body: string, headers: Record<string, string>, signal: AbortSignal): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = (url.protocol === "https:" ? httpsRequest : httpRequest)(
      url,
      {
        method: "POST",
        headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
        agent: false, // no pooled connection, which may have been opened to another address
        signal,
        // The name gives Host and TLS SNI; the connection goes to the checked address only.
        lookup: (_host, options, done) => (options.all ? done(null, [address]) : done(null, address.address, address.family)),
      },
      (res) => {
        let read = 0;
        res.on("data", (chunk: Buffer) => {
          read += chunk.length;
          if (read > MAX_ANSWER_BYTES) {
            res.destroy();
            resolve(res.statusCode!);
          }
        });
        res.on("end", () => resolve(res.statusCode!));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}
