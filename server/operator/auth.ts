/**
 * Who may see the operators' surfaces (/ops/*, /console, /metrics): whoever presents
 * OPS_TOKEN, as `Authorization: Bearer <token>` (scripts, Prometheus) or as the password of
 * HTTP basic auth with any user name (a browser), compared in constant time. With no token
 * configured, only callers on this machine, and only while the service is not public (no
 * PUBLIC_URL: behind a proxy every caller would look local).
 */
import { clientAddress } from "../limits.ts";
import { sameSecret } from "../../lib/same-secret.ts";
import type { Context, MiddlewareHandler } from "hono";
import { problemResponse } from "../errors.ts";


/** The token the caller presented (bearer, or basic auth's password), if any. */
export function presented(c: Context): string | null {
  const header = c.req.header("authorization") ?? "";
  const bearer = /^Bearer\s+(\S+)$/i.exec(header)?.[1];
  if (bearer) return bearer;
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header)?.[1];
  if (!basic) return null;
  const decoded = Buffer.from(basic, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon === -1 ? null : decoded.slice(colon + 1);
}

/** Whether the caller is on this machine: its client address (behind a trusted proxy, the one the proxy names). */
function fromThisMachine(c: Context): boolean {
  const address = clientAddress(c);
  return address === "127.0.0.1" || address === "::1" || address === "::ffff:127.0.0.1";
}

export function operatorAllowed(c: Context, token: string | undefined, isPublic: boolean): boolean {
  if (token) {
    const given = presented(c);
    return given !== null && sameSecret(given, token);
  }
  return !isPublic && fromThisMachine(c);
}

/** Guards a route: 401 with a basic-auth challenge (browsers then ask for the token), or 403 when no token is configured. */
export function requireOperator(token: string | undefined, isPublic: boolean): MiddlewareHandler {
  return async (c, next) => {
    if (operatorAllowed(c, token, isPublic)) return next();
    if (!token) {
      return problemResponse("OPS_FORBIDDEN", isPublic ? "this service is public: set OPS_TOKEN to open the operators' routes" : "without OPS_TOKEN only this machine may call the operators' routes");
    }
    const res = problemResponse("OPS_UNAUTHORIZED", "send the OPS_TOKEN as a bearer token, or as the basic-auth password");
    res.headers.set("www-authenticate", 'Basic realm="BillPay operators", charset="UTF-8"');
    return res;
  };
}

/**
 * Who is acting, for the record of an operator's action: with OPS_TOKEN, the name given with
 * it (the basic-auth user name a browser sends, or a script's X-Operator header); without
 * one, "local" (only this machine is let in), with the name a script gave beside it. Null
 * when a token is configured and no usable name came with it.
 */
export function operatorIdentity(c: Context, token: string | undefined): string | null {
  const given = (basicUser(c) || c.req.header("x-operator") || "").trim();
  const usable = /^[\p{L}\p{N}._@ -]{1,64}$/u.test(given) ? given : "";
  if (!token) return usable ? `local (${usable})` : "local";
  return usable || null;
}

function basicUser(c: Context): string {
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(c.req.header("authorization") ?? "")?.[1];
  if (!basic) return "";
  const decoded = Buffer.from(basic, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon === -1 ? "" : decoded.slice(0, colon);
}
