/**
 * Rate limits (rate-limiter-flexible): in PostgreSQL when the service has a server, so every
 * instance counts against one budget; in memory on the embedded PGlite default, where there
 * is one instance. A limited call is 429 RATE_LIMITED with Retry-After. Calls that carry a
 * payment are limited only by how many of their kind did not settle (`unsettledAddress`,
 * `unsettledPayer`: checked before and counted after): a payment that settles is never counted. The
 * challenge's limit is always in memory: a 402 stores nothing, so that limit bounds only
 * one instance's work, and a shared counter would cost the very write the 402 no longer makes.
 */
import { isIPv6 } from "node:net";
import { getConnInfo } from "@hono/node-server/conninfo";
import pLimit, { type LimitFunction } from "p-limit";
import type { Context, MiddlewareHandler } from "hono";
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRes, type RateLimiterAbstract } from "rate-limiter-flexible";
import type { Config } from "./config.ts";
import type { Db } from "./db.ts";
import { ServiceError } from "./errors.ts";

export type LimitName =
  | "linkAddress"
  | "linkWallet"
  | "payingKey"
  | "challengeAddress"
  | "orderAddress"
  | "webhookOrder"
  | "unsettledAddress"
  | "unsettledPayer"
  | "verify"
  | "agentAddress"
  | "toolKey"
  | "revertedPayer";

const SETTINGS: Record<LimitName, keyof Config> = {
  linkAddress: "RATE_LIMIT_LINK_ADDRESS",
  linkWallet: "RATE_LIMIT_LINK_WALLET",
  payingKey: "RATE_LIMIT_PAYING_KEY",
  challengeAddress: "RATE_LIMIT_CHALLENGE_ADDRESS",
  orderAddress: "RATE_LIMIT_ORDER_ADDRESS",
  webhookOrder: "RATE_LIMIT_WEBHOOK_ORDER",
  unsettledAddress: "RATE_LIMIT_UNSETTLED_ADDRESS",
  unsettledPayer: "RATE_LIMIT_UNSETTLED_PAYER",
  verify: "RATE_LIMIT_VERIFY",
  agentAddress: "RATE_LIMIT_AGENT_ADDRESS",
  toolKey: "RATE_LIMIT_TOOL_KEY",
  revertedPayer: "RATE_LIMIT_REVERTED_PAYER",
};

/**
 * Limits kept in each instance's memory whatever the database (see the file's comment): each
 * bounds work on the instance that does it, checked on hot paths (every 402, every paid
 * x402 call, every MCP and A2A request, every agent pay), where a shared counter would cost a database round
 * trip per call. With N instances a caller gets N budgets; each instance's work stays bounded.
 */
const PER_INSTANCE: ReadonlySet<LimitName> = new Set(["challengeAddress", "unsettledAddress", "unsettledPayer", "agentAddress", "revertedPayer"]);

/** Limits keyed by the client's address (the number check's too, when its caller is an address). */
const BY_ADDRESS: ReadonlySet<LimitName> = new Set(["linkAddress", "challengeAddress", "orderAddress", "unsettledAddress", "agentAddress"]);

/**
 * The unit a client address is limited as: an IPv4 address itself, an IPv6 address's /64.
 * One subscriber is usually given a whole /64, and a host may take any of its 2^64 addresses
 * at will, so each would otherwise bring a budget of its own.
 */
export function addressGroup(address: string): string {
  const ip = address.replace(/%.*$/, ""); // a zone id names the interface, not the client
  // Not IPv6, or one carrying an IPv4 address written with dots: each such address is its own client.
  if (!isIPv6(ip) || ip.includes(".")) return address;
  const [head = "", tail] = ip.split("::");
  const words = (part: string) => (part === "" ? [] : part.split(":"));
  const groups = (tail === undefined ? words(head) : [...words(head), ...Array(8 - words(head).length - words(tail).length).fill("0"), ...words(tail)]).map((w) =>
    parseInt(w, 16).toString(16),
  );
  // An IPv4 address mapped into IPv6 (::ffff:0:0/96), or behind NAT64's well-known prefix (64:ff9b::/96), in hex.
  const prefix = groups.slice(0, 6).join(":");
  if (prefix === "0:0:0:0:0:ffff" || prefix === "64:ff9b:0:0:0:0") return address;
  return `${groups.slice(0, 4).join(":")}::/64`;
}

function limitKey(name: LimitName, key: string): string {
  if (BY_ADDRESS.has(name)) return addressGroup(key);
  return name === "verify" && key.startsWith("address:") ? `address:${addressGroup(key.slice("address:".length))}` : key;
}

export class Limits {
  private readonly limiters = new Map<LimitName, RateLimiterAbstract>();

  constructor(config: Config, db: Db) {
    for (const [name, setting] of Object.entries(SETTINGS) as Array<[LimitName, keyof Config]>) {
      const { points, seconds } = config[setting] as { points: number; seconds: number };
      if (points === 0) continue; // turned off
      const options = { keyPrefix: name, points, duration: seconds };
      this.limiters.set(
        name,
        db.pool && !PER_INSTANCE.has(name)
          ? new RateLimiterPostgres({ ...options, storeClient: db.pool, storeType: "pool", tableName: "rate_limit", tableCreated: true, clearExpiredByTimeout: false })
          : new RateLimiterMemory(options),
      );
    }
  }

  /** RATE_LIMITED if `key`'s budget under `name` is already spent, without counting this call. */
  async check(name: LimitName, key: string): Promise<void> {
    const limiter = this.limiters.get(name);
    if (!limiter) return;
    const res = await limiter.get(limitKey(name, key));
    if (res && res.consumedPoints >= limiter.points) throw limitedError(name, res);
  }

  /** Counts one call against `name` for `key`, after the fact: never refuses. */
  async count(name: LimitName, key: string): Promise<void> {
    await this.limiters.get(name)?.penalty(limitKey(name, key), 1);
  }

  /** Counts one call against `name` for `key`; RATE_LIMITED once the budget is spent. */
  async take(name: LimitName, key: string): Promise<void> {
    const limiter = this.limiters.get(name);
    if (!limiter) return;
    try {
      await limiter.consume(limitKey(name, key));
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err; // the store failed: that is an error, not a limit
      throw limitedError(name, err);
    }
  }
}

function limitedError(name: LimitName, res: RateLimiterRes): ServiceError {
  const retry = Math.max(1, Math.ceil(res.msBeforeNext / 1000));
  return new ServiceError("RATE_LIMITED", `too many ${DESCRIPTIONS[name]}; retry in ${retry} s`, { retry_after_seconds: retry });
}

const DESCRIPTIONS: Record<LimitName, string> = {
  linkAddress: "link requests from this address",
  linkWallet: "link requests for this wallet",
  payingKey: "paying calls with this api_key",
  challengeAddress: "new bills priced for this address",
  orderAddress: "order lookups from this address",
  webhookOrder: "biller webhooks for this order",
  unsettledAddress: "payments that did not settle from this address",
  unsettledPayer: "payments that did not settle from this payer",
  verify: "number checks from this caller",
  agentAddress: "MCP and A2A requests from this address",
  toolKey: "reading tool calls with this api_key",
  revertedPayer: "pulls of this wallet that reverted on chain (its allowance or balance moved after the service checked it)",
};

/** A bounded memory of keys seen lately (oldest forgotten first). */
export class RecentKeys {
  private readonly keys = new Set<string>();
  constructor(private readonly capacity: number) {}

  /** Whether `key` is remembered. */
  has(key: string): boolean {
    return this.keys.has(key);
  }

  /** Remembers `key`; true when it was not remembered already. */
  add(key: string): boolean {
    if (this.keys.has(key)) return false;
    if (this.keys.size >= this.capacity) this.keys.delete(this.keys.values().next().value!);
    this.keys.add(key);
    return true;
  }
}

/** The socket's peer, or "unknown" for a request not served over a socket (in-process). */
function peerAddress(c: Context): string {
  try {
    return getConnInfo(c).remote.address ?? "unknown";
  } catch {
    return "unknown";
  }
}

const CLIENT_ADDRESS = "clientAddress";

/**
 * Sets each request's client address: the socket's peer; or, when that peer is one of
 * `trustedProxies` (TRUSTED_PROXIES), the nearest address in X-Forwarded-For that is not a
 * trusted proxy (read from the right: only what the proxies appended is believed, so a
 * client cannot name itself). Rate limits and the operators' locality check read it.
 */
export function clientAddressMiddleware(trustedProxies: readonly string[]): MiddlewareHandler {
  const trusted = new Set(trustedProxies.map(normalIp));
  return async (c, next) => {
    let address = peerAddress(c);
    if (trusted.has(normalIp(address))) {
      const hops = (c.req.header("x-forwarded-for") ?? "").split(",").map((h) => normalIp(h.trim())).filter((h) => h !== "");
      address = [...hops].reverse().find((h) => !trusted.has(h)) ?? hops[0] ?? address;
    }
    c.set(CLIENT_ADDRESS as never, address as never);
    await next();
  };
}

/** An IPv4 address written as IPv6 (::ffff:a.b.c.d) is the IPv4 one. */
function normalIp(address: string): string {
  return address.toLowerCase().replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, "$1");
}

/** The caller's address, as clientAddressMiddleware set it (the socket's peer without it). */
export function clientAddress(c: Context): string {
  return (c.get(CLIENT_ADDRESS as never) as string | undefined) ?? peerAddress(c);
}

/**
 * A bound on one kind of expensive work (a PIN check, a link's signature check): at most
 * `concurrency` at once, at most `queue` waiting, at most `perSecond` started in any second
 * (0: no such bound), and past that an immediate 503 SERVICE_BUSY. A flood of one kind then
 * queues behind itself, or is turned away cheaply, instead of taking every core from the
 * other routes. The rate matters once the work is quick: a queue never fills then, and only
 * the rate keeps a flood of signature checks from crowding out the 402s.
 */
export class Gate {
  private readonly limit: LimitFunction;
  private second = 0;
  private startedThisSecond = 0;

  constructor(
    private readonly what: string,
    concurrency: number,
    private readonly queue: number,
    private readonly perSecond = 0,
    private readonly clock: () => number = Date.now,
  ) {
    this.limit = pLimit(concurrency);
  }

  /** SERVICE_BUSY now if the queue is full or this second's share is spent: lets a route refuse before it reads the body. */
  admit(): void {
    const now = Math.floor(this.clock() / 1000);
    if (now !== this.second) {
      this.second = now;
      this.startedThisSecond = 0;
    }
    if (this.limit.pendingCount >= this.queue || (this.perSecond > 0 && this.startedThisSecond >= this.perSecond)) {
      throw new ServiceError("SERVICE_BUSY", `too many ${this.what} in progress; retry in a moment`, { retry_after_seconds: 1 });
    }
  }

  run<T>(work: () => Promise<T>): Promise<T> {
    try {
      this.admit();
    } catch (err) {
      return Promise.reject(err);
    }
    this.startedThisSecond++;
    return this.limit(work);
  }
}

/** The service's gates, one per kind of expensive work. */
export function buildGates(config: Config) {
  return {
    link: new Gate("links", config.LINK_CONCURRENCY, config.LINK_QUEUE, config.LINK_PER_SECOND),
    pin: new Gate("PIN checks", config.PIN_CONCURRENCY, config.PIN_QUEUE),
  };
}
export type Gates = ReturnType<typeof buildGates>;
