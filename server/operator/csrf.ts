/**
 * Cross-site request forgery, for the operators' state-changing routes. A browser that holds
 * the console's basic-auth credentials (or sits on the service's machine, where no token is
 * needed) sends them along with any request another site makes it send, so every change:
 *   - is a POST (a GET never changes anything);
 *   - is refused when the browser says it comes from elsewhere: a Sec-Fetch-Site other than
 *     same-origin, or an Origin (including "null") whose host is not the one the request was
 *     sent to (its Host, or PUBLIC_URL's);
 *   - from the console, carries the form's token: an HMAC, under a key derived from
 *     OPS_TOKEN (or, without one, random for this process), of the credential presented, the
 *     operator's name, what the form acts on and when it was issued; it lasts FORM_TOKEN_TTL.
 *     Another site can neither read it (same-origin policy) nor make it (no key);
 *   - from a script (/ops), is JSON with an X-Operator header: neither can be sent across
 *     sites without a CORS preflight, which the service never grants.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Context } from "hono";

/** How long a console form's token is accepted after the page was rendered. */
export const FORM_TOKEN_TTL_SECONDS = 4 * 3600;

export class FormTokens {
  private readonly key: Buffer;

  constructor(opsToken: string | undefined) {
    // Derived from OPS_TOKEN, every instance agrees on it; without one, it is this process's alone.
    this.key = opsToken ? createHmac("sha256", opsToken).update("billpay console form token v1").digest() : randomBytes(32);
  }

  /** A token for one form: `scope` names what it acts on (an order, a payment). */
  issue(credential: string, operator: string, scope: string, nowMs = Date.now()): string {
    const at = Math.floor(nowMs / 1000);
    return `${at}.${this.mac(credential, operator, scope, at)}`;
  }

  /** Whether `token` was issued for this credential, operator and scope, and is fresh. */
  check(token: string | undefined, credential: string, operator: string, scope: string, nowMs = Date.now()): boolean {
    const m = /^(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(token ?? "");
    if (!m) return false;
    const at = Number(m[1]);
    const age = Math.floor(nowMs / 1000) - at;
    if (age < -60 || age > FORM_TOKEN_TTL_SECONDS) return false;
    const expected = Buffer.from(this.mac(credential, operator, scope, at));
    const given = Buffer.from(m[2]!);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }

  private mac(credential: string, operator: string, scope: string, at: number): string {
    const bound = createHash("sha256").update(credential).digest("hex");
    return createHmac("sha256", this.key).update([bound, operator, scope, String(at)].join("\n")).digest("base64url");
  }
}

const hostOf = (value: string): string | null => {
  try {
    return new URL(value.includes("://") ? value : `http://${value}`).host.toLowerCase();
  } catch {
    return null;
  }
};

/** Why the request looks sent by another site, or null when nothing says so. */
export function crossSite(c: Context, publicUrl?: string): string | null {
  const site = c.req.header("sec-fetch-site");
  if (site !== undefined && site !== "same-origin") return `the browser says the request comes from ${site === "none" ? "no page" : `a ${site} page`}`;
  const origin = c.req.header("origin");
  if (origin === undefined) return null;
  const own = new Set([c.req.header("host"), publicUrl].filter((v): v is string => !!v).map(hostOf));
  const from = origin === "null" ? null : hostOf(origin);
  if (!from || !own.has(from)) return `the request comes from origin ${origin}, not this service's`;
  return null;
}
