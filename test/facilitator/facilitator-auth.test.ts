/**
 * The facilitator client's credentials, against a local stand-in that demands them and
 * answers in the facilitator's wire format: a bearer token per chain, and Coinbase's CDP
 * facilitator's signed JWT (made by @coinbase/x402), checked here with the key's public half.
 */
import { createPublicKey, generateKeyPairSync, verify } from "node:crypto";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../server/config.ts";
import { facilitatorAuth } from "../../server/x402-protocol/facilitator-auth.ts";
import { listen } from "../support/http-server.ts";

const supported = { kinds: [{ x402Version: 2, scheme: "exact", network: "eip155:42220" }], extensions: [], signers: {} };

describe("facilitator credentials", () => {
  // A CDP-style Ed25519 key: base64 of seed and public key, as the CDP portal issues them.
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const jwk = privateKey.export({ format: "jwk" }) as { d: string; x: string };
  const cdpSecret = Buffer.concat([Buffer.from(jwk.d, "base64url"), Buffer.from(jwk.x, "base64url")]).toString("base64");
  const seen: Array<{ path: string; authorization: string | undefined }> = [];
  let standIn: Awaited<ReturnType<typeof listen>>;

  /** Accepts `Bearer s3cret-token`, or a CDP JWT signed by the test key naming this request. */
  function authorised(path: string, authorization: string | undefined): boolean {
    const token = /^Bearer (.+)$/.exec(authorization ?? "")?.[1];
    if (!token) return false;
    if (token === "s3cret-token") return true;
    const [header, payload, signature] = token.split(".");
    if (!header || !payload || !signature) return false;
    const ok = verify(null, Buffer.from(`${header}.${payload}`), createPublicKey(publicKey.export({ format: "pem", type: "spki" })), Buffer.from(signature, "base64url"));
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString()) as { sub?: string; uris?: string[]; exp?: number };
    const head = JSON.parse(Buffer.from(header, "base64url").toString()) as { alg?: string; kid?: string };
    return (
      ok &&
      head.alg === "EdDSA" &&
      head.kid === "cdp-key-id" &&
      claims.sub === "cdp-key-id" &&
      (claims.exp ?? 0) > Date.now() / 1000 &&
      (claims.uris ?? []).some((u) => u.endsWith(`/platform/v2/x402/${path}`))
    );
  }

  beforeAll(async () => {
    const app = new Hono();
    for (const path of ["supported", "verify"] as const) {
      const handler = (c: import("hono").Context) => {
        const authorization = c.req.header("authorization");
        seen.push({ path, authorization });
        if (!authorised(path, authorization)) return c.json({ error: "unauthorized" }, 401);
        return path === "supported" ? c.json(supported) : c.json({ isValid: false, invalidReason: "invalid_exact_evm_payload_signature", payer: "0x0000000000000000000000000000000000000001" });
      };
      app.get(`/${path}`, handler);
      app.post(`/${path}`, handler);
    }
    standIn = await listen(app.fetch);
  });
  afterAll(() => standIn?.close());

  const client = (env: Record<string, string>, chain: "CELO" | "BASE" = "CELO") =>
    new HTTPFacilitatorClient({ url: standIn.url, timeoutMs: 5_000, createAuthHeaders: facilitatorAuth(loadConfig(env), chain) });
  const requirements = { scheme: "exact", network: "eip155:42220", asset: "0x0000000000000000000000000000000000000002", amount: "1", payTo: "0x0000000000000000000000000000000000000003", maxTimeoutSeconds: 60, extra: {} };
  const payload = { x402Version: 2, resource: { url: "http://x", description: "", mimeType: "" }, accepted: requirements, payload: {} };

  it("sends the chain's bearer token on supported and verify, and only to that chain's facilitator", async () => {
    const celo = client({ FACILITATOR_AUTH_CELO: "bearer", FACILITATOR_TOKEN_CELO: "s3cret-token" });
    expect(await celo.getSupported()).toMatchObject({ kinds: [{ network: "eip155:42220" }] });
    expect(await celo.verify(payload as never, requirements as never)).toMatchObject({ isValid: false, invalidReason: "invalid_exact_evm_payload_signature" });
    expect(seen.slice(-2).map((s) => s.authorization)).toEqual(["Bearer s3cret-token", "Bearer s3cret-token"]);
    // BASE has no credentials configured: it sends none, and the stand-in refuses it.
    await expect(client({ FACILITATOR_AUTH_CELO: "bearer", FACILITATOR_TOKEN_CELO: "s3cret-token" }, "BASE").getSupported()).rejects.toThrow(/401/);
    expect(seen.at(-1)!.authorization).toBeUndefined();
    await expect(client({ FACILITATOR_AUTH_CELO: "bearer", FACILITATOR_TOKEN_CELO: "wrong" }).getSupported()).rejects.toThrow(/401/);
  });

  it("signs each CDP request with the API key, through @coinbase/x402", async () => {
    const cdp = client({ FACILITATOR_AUTH_CELO: "cdp", CDP_API_KEY_ID: "cdp-key-id", CDP_API_KEY_SECRET: cdpSecret });
    expect(await cdp.getSupported()).toMatchObject({ kinds: [{ scheme: "exact" }] });
    expect(await cdp.verify(payload as never, requirements as never)).toMatchObject({ isValid: false });
    expect(seen.at(-1)!.authorization).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
    // Another key's JWT does not pass.
    const other = generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" }) as { d: string; x: string };
    const wrongSecret = Buffer.concat([Buffer.from(other.d, "base64url"), Buffer.from(other.x, "base64url")]).toString("base64");
    await expect(client({ FACILITATOR_AUTH_CELO: "cdp", CDP_API_KEY_ID: "cdp-key-id", CDP_API_KEY_SECRET: wrongSecret }).getSupported()).rejects.toThrow(/401/);
  });

  it("refuses a configuration that names an authentication without its credentials", () => {
    expect(() => loadConfig({ FACILITATOR_AUTH_BASE: "bearer" })).toThrow(/FACILITATOR_AUTH_BASE=bearer needs FACILITATOR_TOKEN_BASE/);
    expect(() => loadConfig({ FACILITATOR_AUTH_CELO: "cdp", CDP_API_KEY_ID: "id" })).toThrow(/needs CDP_API_KEY_ID and CDP_API_KEY_SECRET/);
    expect(() => loadConfig({ FACILITATOR_AUTH_CELO: "oauth" })).toThrow(/FACILITATOR_AUTH_CELO/);
  });
});
