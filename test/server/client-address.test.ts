/**
 * The unit a client address is rate-limited as (server/limits.ts addressGroup): an IPv4
 * address itself; an IPv6 address's /64, however it is written; an IPv4 address carried in
 * IPv6 (mapped, or behind NAT64's well-known prefix) itself, so that NAT64's clients are not
 * one client.
 */
import { describe, expect, it } from "vitest";
import { addressGroup } from "../../server/limits.ts";

describe("addressGroup", () => {
  it("keeps an IPv4 address, and anything that is not an address, as it is", () => {
    expect(addressGroup("203.0.113.7")).toBe("203.0.113.7");
    expect(addressGroup("unknown")).toBe("unknown");
  });

  it("takes an IPv6 address's /64, however it is written", () => {
    const group = "2001:db8:1:2::/64";
    for (const a of ["2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:0db8:0001:0002:0:0:0:5", "2001:DB8:1:2::abcd", "2001:db8:1:2::1%eth0"]) expect(addressGroup(a)).toBe(group);
    expect(addressGroup("2001:db8:1:3::1")).toBe("2001:db8:1:3::/64");
    expect(addressGroup("2001:db8::")).toBe("2001:db8:0:0::/64");
  });

  it("keeps an IPv4 address carried in IPv6 whole, in dots or in hex", () => {
    for (const a of ["64:ff9b::192.0.2.1", "64:ff9b::c000:201", "::ffff:c000:201"]) expect(addressGroup(a)).toBe(a);
    expect(addressGroup("64:ff9b::c000:202")).not.toBe(addressGroup("64:ff9b::c000:201"));
  });
});
