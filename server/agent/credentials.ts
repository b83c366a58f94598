/**
 * The agent hub's secrets. An api_key is 32 random bytes: stored only as its SHA-256 (a
 * fast hash suits a high-entropy key, and lets the key be looked up). A PIN has only 4 to
 * 6 digits, so it is stored with scrypt under its own salt, its parameters kept beside it
 * so they can be raised later; wrong attempts are capped by a lockout (agent/links.ts).
 * Every comparison is constant-time.
 */
import { createHash, randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from "node:crypto";

const API_KEY_PREFIX = "bpk_";
export const API_KEY_PATTERN = /^bpk_[A-Za-z0-9_-]{43}$/;
export const PIN_PATTERN = /^\d{4,6}$/;

/** scrypt cost: about 50 ms per PIN check on one core of these machines. */
const SCRYPT = { N: 16_384, r: 8, p: 1, keyLength: 32 };

function scrypt(secret: string, salt: Buffer, keyLength: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scryptCallback(secret, salt, keyLength, options, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

export function newApiKey(): string {
  return API_KEY_PREFIX + randomBytes(32).toString("base64url");
}

export function hashApiKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

/** Whether two hex digests are equal, in constant time. */
export function sameDigest(a: string, b: string): boolean {
  const x = Buffer.from(a, "hex");
  const y = Buffer.from(b, "hex");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** `scrypt$N$r$p$salt$hash` (salt and hash base64url). */
export async function hashPin(pin: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(pin, salt, SCRYPT.keyLength, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p, maxmem: 64 * 1024 * 1024 });
  return ["scrypt", SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString("base64url"), key.toString("base64url")].join("$");
}

export async function verifyPin(pin: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split("$");
  if (scheme !== "scrypt" || !salt || !hash) throw new Error("unrecognised PIN hash");
  const expected = Buffer.from(hash, "base64url");
  const actual = await scrypt(pin, Buffer.from(salt, "base64url"), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: 64 * 1024 * 1024,
  });
  return timingSafeEqual(actual, expected);
}
