/**
 * The receipt and settlement waits (server/chain/receipt-payment.ts untilDeadline) look again
 * as each block arrives. Closed heads (shutdown) answer every wait at once, so a wait on them
 * must end instead of looking again without pause until its deadline.
 */
import { describe, expect, it } from "vitest";
import { ChainHeads } from "../../lib/chain-heads.ts";
import { untilDeadline } from "../../server/chain/receipt-payment.ts";
import { sightAuthorization } from "../../server/chain/settlement-sighting.ts";

describe("waits on a chain's blocks", () => {
  it("end at once on closed heads, and on an aborted signal, after one look", async () => {
    const heads = new ChainHeads(() => undefined);
    heads.close();
    let looks = 0;
    const look = async () => (looks++, null);
    expect(await untilDeadline({ heads }, "CELO", Date.now() + 3_000, look)).toBeNull();
    expect(looks).toBe(1);

    const open = new ChainHeads(() => undefined);
    const stop = new AbortController();
    stop.abort();
    expect(await untilDeadline({ heads: open }, "CELO", Date.now() + 3_000, look, stop.signal)).toBeNull();
    expect(looks).toBe(2);
    open.close();
  });

  it("a settlement's search on closed heads finds nothing and ends", async () => {
    const heads = new ChainHeads(() => undefined);
    heads.close();
    const deployments = { chains: { CELO: { rpcUrl: "http://127.0.0.1:1" } } } as unknown as Parameters<typeof sightAuthorization>[0]["deployments"];
    const key = { token: `0x${"1".repeat(40)}`, payer: `0x${"2".repeat(40)}`, nonce: `0x${"3".repeat(64)}` } as const;
    const started = Date.now();
    expect(await sightAuthorization({ deployments, heads }, "CELO", key, new AbortController().signal, started + 60_000)).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(60_000); // not waited out to its deadline
  });
});
