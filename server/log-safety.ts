/**
 * What of an error may be logged: viem's short message where it has one, and never a URL's
 * credentials or query (RPC URLs often carry a provider's API key in their path or query).
 */
export function errorText(err: unknown): string {
  const e = err as { shortMessage?: unknown; message?: unknown };
  const text = typeof e?.shortMessage === "string" ? e.shortMessage : typeof e?.message === "string" ? e.message : String(err);
  return text.replace(/\b(https?|wss?):\/\/[^\s"'<>]+/gi, (url) => {
    try {
      const u = new URL(url);
      return `${u.protocol}//${u.host}/…`;
    } catch {
      return "<url>";
    }
  });
}
