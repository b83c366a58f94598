/**
 * The head-age gauge for a node that stops answering (server/operator/state.ts): its age keeps
 * growing from the newest head read (the service's start, before any), so the stale-head alert
 * fires for a node gone silent as for one frozen; it is not left out of the scrape.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Deployments } from "../../lib/deployments.ts";
import { OperatorState, type OperatorStateDeps } from "../../server/operator/state.ts";

const silent = "http://127.0.0.1:9"; // nothing listens: every read is refused
const deployments = {
  chains: { CELO: { chainId: 42220, rpcUrl: silent, billPay: { address: `0x${"11".repeat(20)}`, block: 0 }, tokens: [] } },
} as unknown as Deployments;

describe("the head age of a node that does not answer", () => {
  afterEach(() => vi.restoreAllMocks());

  it("grows from the service's start, and is reported with the error, not left out", async () => {
    const state = new OperatorState({ deployments, ledgerUrl: silent, keys: { operator: "0x01", refunder: "0x02" }, ledgerHealth: { latest: () => [] } } as unknown as OperatorStateDeps);
    const start = Date.now();
    vi.spyOn(Date, "now").mockReturnValue(start + 120_000); // two minutes of silence
    const [celo] = await state.chains();
    expect(celo!.head).toBeNull();
    expect(celo!.errors).toContainEqual(expect.stringContaining("CELO could not be read"));
    expect(celo!.headAgeSeconds).toBeGreaterThanOrEqual(119);
  });
});
