/**
 * The service's log: pino, JSON lines (pretty in development), real levels, and on every line
 * the HTTP request's id and the order's reference where they apply.
 *
 * Nothing secret reaches a line. Every field passes through `scrub` here, the one place
 * that knows what is secret:
 *   - an order's request_id is never written: `requestId`/`requestIds` fields become
 *     `order`/`orders`, a one-way reference (ord_ + 16 hex of its SHA-256), and a request_id
 *     inside any text is replaced the same way (orders that carry a purchased code are read
 *     with their id and a proof; the reference leads an operator to the order in the console);
 *   - api keys (bpk_...), order secrets (ors_...), PIN and signature fields, payment headers
 *     and purchased codes are redacted;
 *   - URLs keep only their scheme and host (RPC URLs carry providers' keys in path or query).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { createHash } from "node:crypto";
import type { Writable } from "node:stream";
import pino from "pino";
import { API_KEY_IN_TEXT } from "./credentials.ts";

export type LogFields = Record<string, unknown>;
export interface Log {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

/** The HTTP request a line was written under, set by the request-id middleware (server/app.ts). */
export const requestContext = new AsyncLocalStorage<{ reqId: string }>();

const REQUEST_ID = /req_\d{12}[0-9a-f]{20}/g;
const SECRET_FIELDS = new Set([
  "api_key",
  "apiKey",
  "pin",
  "signature",
  "purchased_code",
  "purchasedCode",
  "order_secret",
  "authorization",
  "x-payment",
  "payment-signature",
  "token_code",
]);

export function orderRef(requestId: string): string {
  return `ord_${createHash("sha256").update(requestId).digest("hex").slice(0, 16)}`;
}

function scrubText(text: string): string {
  return text
    .replace(REQUEST_ID, (id) => orderRef(id))
    .replace(API_KEY_IN_TEXT, "bpk_[redacted]")
    .replace(/ors_[A-Za-z0-9_-]{32}/g, "ors_[redacted]")
    .replace(/\b(https?|wss?):\/\/[^\s"'<>]+/gi, (url) => {
      try {
        const u = new URL(url);
        return `${u.protocol}//${u.hostname}${u.port ? `:${u.port}` : ""}/…`;
      } catch {
        return "<url>";
      }
    });
}

function scrubValue(value: unknown, depth: number): unknown {
  if (typeof value === "string") return scrubText(value);
  if (depth > 4 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, depth + 1));
  return scrub(value as LogFields, depth + 1);
}

/** A line's fields made safe to write (see the file's comment). */
export function scrub(fields: LogFields, depth = 0): LogFields {
  const out: LogFields = {};
  for (const [key, value] of Object.entries(fields)) {
    if (SECRET_FIELDS.has(key)) out[key] = "[redacted]";
    else if (key === "requestId" && typeof value === "string") out.order = orderRef(value);
    else if (key === "requestIds" && Array.isArray(value)) out.orders = value.map((v) => orderRef(String(v)));
    else out[key] = scrubValue(value, depth);
  }
  return out;
}

export interface LogOptions {
  level?: string;
  /** Human-readable lines (development); JSON otherwise. */
  pretty?: boolean;
  /** Where lines go; standard output when absent. */
  destination?: Writable;
}

export function createLog(options: LogOptions = {}): Log {
  const level = options.level ?? "info";
  const formatters = {
    level: (label: string) => ({ level: label }),
    log: (obj: Record<string, unknown>) => scrub(obj),
  };
  const mixin = () => {
    const ctx = requestContext.getStore();
    return ctx ? { req_id: ctx.reqId } : {};
  };
  const base = { level, formatters, mixin, base: undefined, timestamp: pino.stdTimeFunctions.isoTime };
  const logger = options.destination
    ? pino(base, options.destination)
    : options.pretty
      ? pino({ ...base, transport: { target: "pino-pretty", options: { colorize: true, translateTime: "SYS:HH:MM:ss.l" } } })
      : pino(base);
  const at = (lvl: "debug" | "info" | "warn" | "error") => (msg: string, fields: LogFields = {}) => logger[lvl](fields, scrubText(msg));
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

/** The process's log, as configured by LOG_LEVEL and LOG_FORMAT (pretty by default in development, JSON otherwise). */
let processLog: Log | undefined;
export function log(): Log {
  processLog ??= createLog({
    level: process.env.LOG_LEVEL ?? "info",
    pretty: (process.env.LOG_FORMAT ?? (process.env.NODE_ENV === "production" || !process.stdout.isTTY ? "json" : "pretty")) === "pretty",
  });
  return processLog;
}

/** Replaces the process's log (tests capture lines this way). */
export function setLog(next: Log): void {
  processLog = next;
}

/** A log that writes nothing (the default of parts built without one). */
export const silentLog: Log = { debug() {}, info() {}, warn() {}, error() {} };
