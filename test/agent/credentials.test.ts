import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PinHasher, scryptPinHash } from "../../server/credentials.ts";
import { localPepper } from "../../server/agent/pin-pepper.ts";

describe("PIN hashes under the server's pepper", () => {
  const pepper = randomBytes(32);
  const pins = new PinHasher(pepper);

  it("accepts the right PIN and refuses a wrong one", async () => {
    const stored = pins.hash("123456");
    expect(stored).toMatch(/^hmac\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{43}$/);
    expect(await pins.verify("123456", stored)).toEqual({ ok: true });
    for (const wrong of ["123457", "12345", "1234560", "", "654321"]) expect((await pins.verify(wrong, stored)).ok, wrong).toBe(false);
    // Each link has its own salt: the same PIN never stores the same.
    expect(pins.hash("123456")).not.toBe(stored);
  });

  it("is useless without the secret: another pepper (or none) neither reproduces nor verifies it", async () => {
    const stored = pins.hash("123456");
    const [, salt, mac] = stored.split("$");
    const other = new PinHasher(randomBytes(32));
    expect((await other.verify("123456", stored)).ok).toBe(false);
    // What an attacker holding only the table could compute: hashes of the salt and PIN without the pepper.
    const { createHash, createHmac } = await import("node:crypto");
    const unkeyed = [
      createHash("sha256").update(Buffer.from(salt!, "base64url")).update("123456").digest("base64url"),
      createHmac("sha256", Buffer.alloc(32)).update(Buffer.from(salt!, "base64url")).update("123456").digest("base64url"),
    ];
    expect(unkeyed).not.toContain(mac);
    expect(() => new PinHasher(randomBytes(16))).toThrow(/at least 32 bytes/);
  });

  it("still verifies a PIN hashed with scrypt before the pepper, and offers its rewrite", async () => {
    const old = await scryptPinHash("4321");
    const right = await pins.verify("4321", old);
    expect(right.ok).toBe(true);
    expect(right.upgrade).toMatch(/^hmac\$/);
    expect(await pins.verify("4321", right.upgrade!)).toEqual({ ok: true });
    expect(await pins.verify("4322", old)).toEqual({ ok: false });
    await expect(pins.verify("4321", "md5$abc")).rejects.toThrow(/unrecognised/);
  });

  it("keeps the local stack's generated pepper in its file, made once", async () => {
    const dir = await mkdtemp(join(tmpdir(), "billpay-pepper-"));
    try {
      const file = join(dir, "sub", "pin-pepper");
      const first = localPepper(file);
      expect(first.length).toBeGreaterThanOrEqual(32);
      expect(localPepper(file).equals(first)).toBe(true);
      expect((await readFile(file, "utf8")).trim()).toBe(first.toString("utf8"));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
