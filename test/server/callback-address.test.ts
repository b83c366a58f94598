/**
 * Which callback addresses are private (server/orders/callbacks.ts): a receiver is asked only
 * at a public address, and an IPv6 address that a translator on the service's network turns
 * into IPv4 (IPv4-mapped, NAT64's well-known prefix, 6to4) is judged by the IPv4 host it
 * reaches, so a DNS64 answer for a public host still passes.
 */
import { describe, expect, it } from "vitest";
import { checkCallbackUrl, isPrivateAddress } from "../../server/orders/callbacks.ts";

describe("a callback address", () => {
  it("is private on the networks no public host is on", () => {
    for (const a of ["10.0.0.5", "127.0.0.1", "169.254.169.254", "192.168.1.1", "192.0.0.8", "240.0.0.1", "255.255.255.255", "::1", "fd00::1", "fe80::1", "64:ff9b:1::a00:5"]) {
      expect(isPrivateAddress(a), a).toBe(true);
    }
    for (const a of ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"]) expect(isPrivateAddress(a), a).toBe(false);
  });

  it("reaching IPv4 through a translator is judged by the IPv4 host it reaches", () => {
    // NAT64 (64:ff9b::/96): 10.0.0.5 and 169.254.169.254 inside; 8.8.8.8 is a public host's DNS64 answer.
    expect(isPrivateAddress("64:ff9b::a00:5")).toBe(true);
    expect(isPrivateAddress("64:ff9b::169.254.169.254")).toBe(true);
    expect(isPrivateAddress("64:ff9b::808:808")).toBe(false);
    // 6to4 (2002::/16): 2002:7f00:1:: is 127.0.0.1's.
    expect(isPrivateAddress("2002:7f00:1::1")).toBe(true);
    expect(isPrivateAddress("2002:808:808::1")).toBe(false);
    // IPv4-mapped, dotted and in hex.
    expect(isPrivateAddress("::ffff:10.0.0.5")).toBe(true);
    expect(isPrivateAddress("::ffff:a00:5")).toBe(true);
    expect(isPrivateAddress("::ffff:808:808")).toBe(false);
  });

  it("is refused when the bill arrives, unless private receivers are allowed (local runs)", () => {
    expect(() => checkCallbackUrl("https://[64:ff9b::a00:5]/hook", false)).toThrow(/private or loopback/);
    expect(() => checkCallbackUrl("https://[2002:a00:5::1]/hook", false)).toThrow(/private or loopback/);
    expect(() => checkCallbackUrl("https://[64:ff9b::808:808]/hook", false)).not.toThrow();
    expect(() => checkCallbackUrl("http://[64:ff9b::a00:5]/hook", true)).not.toThrow();
  });
});
