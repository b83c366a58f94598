/** Comparing a presented secret (a token, an API key) with the expected one. */
import { createHash, timingSafeEqual } from "node:crypto";

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/** Whether `given` is `expected`, in constant time whatever their lengths (both are hashed first). */
export function sameSecret(given: string, expected: string): boolean {
  return timingSafeEqual(digest(given), digest(expected));
}
