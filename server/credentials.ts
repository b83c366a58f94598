/**
 * The agent hub's secrets. An api_key is 32 random bytes: stored only as its SHA-256 (a
 * fast hash suits a high-entropy key, and lets the key be looked up). Every comparison is
 * constant-time.
 *
 * A PIN has only 4 to 6 digits, so no hash of it alone resists offline guessing: with the
 * old scrypt (about 50 ms per check) all 10^6 six-digit PINs take about 14 CPU-hours, an
 * afternoon on one machine, once the database leaks. So a PIN is stored as HMAC-SHA-256
 * under its own salt and a server-side secret, the pepper (PIN_PEPPER), kept outside the
 * database: a leaked table without it cannot be guessed against at all, and with it scrypt
 * would not have held either. Online guessing is bounded by the lockout (agent/links.ts:
 * PIN_MAX_ATTEMPTS per lockout, PIN_MAX_LOCKOUTS before the key is retired), not by the
 * hash's cost; so the check costs microseconds instead of 50 ms of a core per paying call.
 * Hashes made before (`scrypt$...`) still verify, and are rewritten under the pepper on the
 * first right PIN.
 */
import { createHash, createHmac, randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from "node:crypto";

const API_KEY_PREFIX = "bpk_";
/** An api_key anywhere in a text (logs, stored messages); API_KEY_PATTERN is one whole key. */
export const API_KEY_IN_TEXT = /bpk_[A-Za-z0-9_-]{43}/g;
export const API_KEY_PATTERN = new RegExp(`^${API_KEY_IN_TEXT.source}$`);
export const PIN_PATTERN = /^\d{4,6}$/;

/** The least pepper accepted: 32 bytes, as many as the HMAC's output. */
export const MIN_PEPPER_BYTES = 32;

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

/** PIN hashes under one pepper: `hmac$salt$mac` (base64url), and the old `scrypt$N$r$p$salt$hash`. */
export class PinHasher {
  constructor(private readonly pepper: Buffer) {
    if (pepper.length < MIN_PEPPER_BYTES) throw new Error(`the PIN pepper must be at least ${MIN_PEPPER_BYTES} bytes`);
  }

  hash(pin: string): string {
    const salt = randomBytes(16);
    return ["hmac", salt.toString("base64url"), this.mac(salt, pin).toString("base64url")].join("$");
  }

  /** Whether checking a PIN against `stored` takes microseconds (a hash under the pepper), not a slow older hash. */
  quick(stored: string): boolean {
    return stored.startsWith("hmac$");
  }

  /** Whether `pin` is the stored one; `upgrade` is its hash under the pepper when the stored one is older. */
  async verify(pin: string, stored: string): Promise<{ ok: boolean; upgrade?: string }> {
    const [scheme, salt, mac] = stored.split("$");
    if (scheme === "scrypt") {
      const ok = await verifyScryptPin(pin, stored);
      return ok ? { ok, upgrade: this.hash(pin) } : { ok };
    }
    if (scheme !== "hmac" || !salt || !mac) throw new Error("unrecognised PIN hash");
    const expected = Buffer.from(mac, "base64url");
    const actual = this.mac(Buffer.from(salt, "base64url"), pin);
    return { ok: expected.length === actual.length && timingSafeEqual(actual, expected) };
  }

  private mac(salt: Buffer, pin: string): Buffer {
    // Salt first, fixed length: a PIN cannot run into the salt.
    return createHmac("sha256", this.pepper).update(salt).update(pin, "utf8").digest();
  }
}

/** The old PIN hash (scrypt, about 50 ms): only verified now, and made by tests of that path. */
const SCRYPT = { N: 16_384, r: 8, p: 1, keyLength: 32 };

function scrypt(secret: string, salt: Buffer, keyLength: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scryptCallback(secret, salt, keyLength, options, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

/** `scrypt$N$r$p$salt$hash` (salt and hash base64url), as links made before the pepper stored PINs. */
export async function scryptPinHash(pin: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(pin, salt, SCRYPT.keyLength, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p, maxmem: 64 * 1024 * 1024 });
  return ["scrypt", SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString("base64url"), key.toString("base64url")].join("$");
}

async function verifyScryptPin(pin: string, stored: string): Promise<boolean> {
  const [, n, r, p, salt, hash] = stored.split("$");
  if (!salt || !hash) throw new Error("unrecognised PIN hash");
  const expected = Buffer.from(hash, "base64url");
  const actual = await scrypt(pin, Buffer.from(salt, "base64url"), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: 64 * 1024 * 1024,
  });
  return timingSafeEqual(actual, expected);
}
