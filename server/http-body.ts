/** Reading a JSON body: the content type must say JSON, and the text must parse; otherwise the problem response to send. */
import type { Context } from "hono";
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
