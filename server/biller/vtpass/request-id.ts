/**
 * VTpass's request_id rule (buying-services page, "Request ID Format"): at least 12
 * characters, the first 12 numeric and "today's date + current hour and minute"
 * (YYYYMMDDHHII) in Africa/Lagos time (GMT+1, no daylight saving), then any alphanumerics.
 * A pay whose id is not today's date is refused with 085, so an id is made when its pay is
 * recorded, at most a settlement before it is sent, never further ahead; one that crosses
 * Lagos midnight on the way is refused and sent once more under a fresh id (orders/fulfil.ts).
 */
import { randomBytes } from "node:crypto";

const LAGOS_OFFSET_MS = 60 * 60 * 1000;

/** YYYYMMDDHHII in Lagos time. */
export function lagosStamp(now: Date): string {
  const lagos = new Date(now.getTime() + LAGOS_OFFSET_MS);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${lagos.getUTCFullYear()}${p(lagos.getUTCMonth() + 1)}${p(lagos.getUTCDate())}${p(lagos.getUTCHours())}${p(lagos.getUTCMinutes())}`;
}

/** A new request id: the Lagos stamp of `now`, then 20 random hex characters. */
export function newRequestId(now = new Date()): string {
  return `${lagosStamp(now)}${randomBytes(10).toString("hex")}`;
}
