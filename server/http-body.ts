/** Reading a JSON body: the content type must say JSON, and the text must parse; otherwise the problem response to send. */
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { problemResponse } from "./errors.ts";

export function parseJsonBody(contentType: string | undefined, text: string): unknown {
  const type = contentType ?? "";
  if (!type.toLowerCase().startsWith("application/json")) return problemResponse("UNSUPPORTED_MEDIA_TYPE", `got content-type "${type}"`);
  try {
    return JSON.parse(text);
  } catch (err) {
    return problemResponse("INVALID_JSON", (err as Error).message);
  }
}

export async function jsonBody(c: Context): Promise<unknown> {
  return parseJsonBody(c.req.header("content-type"), await c.req.text());
}

/**
 * A body limit: hono's bodyLimit with a fast path. hono's reads `c.req.raw.body`, which makes
 * @hono/node-server build a full web Request with a stream for every call (profiled: the
 * largest single cost of a 402 after the quote write went). A request that declares a
 * Content-Length within the limit, without Transfer-Encoding, needs no stream: Node's parser
 * never delivers more body than the length declared. Anything else goes through hono's.
 */
export function bodyLimitFast(maxSize: number, onError: () => Response): MiddlewareHandler {
  const slow = bodyLimit({ maxSize, onError });
  return async (c, next) => {
    const length = c.req.header("content-length");
    if (length !== undefined && /^\d{1,9}$/.test(length) && Number(length) <= maxSize && c.req.header("transfer-encoding") === undefined) {
      await next();
      return;
    }
    return slow(c, next);
  };
}
