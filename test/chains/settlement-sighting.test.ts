/**
 * An x402 settlement sighted on the service's own node (server/chain/settlement-sighting.ts)
 * from the log the node pushes as its block arrives, where the service reads the node over its
 * WebSocket: against a real local node, through a proxy that counts subscriptions, with heads
 * that never announce a block, so the search by heads can find nothing and only the pushed log
 * can name the transaction. Without the socket the same sighting finds nothing by its deadline.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Hex } from "viem";
import { openSocketUrlFor, readNodesOverWebSocket, sharedClientFor } from "../../lib/chain-client.ts";
import { ChainHeads } from "../../lib/chain-heads.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { sightAuthorization } from "../../server/chain/settlement-sighting.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { startRpcProxy, type RpcProxy } from "../support/rpc-proxy.ts";
import { freshAccounts, leaseSharedChains, type SharedChains } from "../support/stack.ts";

describe("a settlement sighted from the log the node pushes", () => {
  const accounts = freshAccounts();
  let stack: SharedChains;
  let celo: ChainActors;
  let proxy: RpcProxy;
  let deployments: Deployments;
  // Never told of a block: the search by heads looks at nothing.
  const heads = new ChainHeads(() => undefined);

  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
    celo = chainActors(stack.deployments, "CELO");
    const d = stack.deployments.chains.CELO!;
    proxy = await startRpcProxy(d.rpcUrl);
    // The service's node is the proxy (its WebSocket on the same port, as a local node's).
    deployments = { ...stack.deployments, chains: { CELO: { ...d, rpcUrl: proxy.url } } };
  });
  afterAll(async () => {
    heads.close();
    await proxy?.close();
    await stack?.close();
  });

  const signed = async (payer: number) => {
    const account = accounts(payer);
    const auth = await celo.signAuthorization(account, "USDC", 1_000n, stack.deployments.chains.CELO!.billPay.address as Hex);
    return { auth, key: { token: celo.tokenAddress("USDC"), payer: account.address, nonce: auth.nonce } };
  };

  it("names the settlement's transaction from the pushed log, with no search", async () => {
    const close = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }]);
    const stop = new AbortController();
    try {
      await expect.poll(() => openSocketUrlFor("CELO", proxy.url), { timeout: 10_000 }).toBe(proxy.wsUrl);
      const { auth, key } = await signed(3);
      const before = proxy.subscribes();
      const sighting = sightAuthorization({ deployments, heads }, "CELO", key, stop.signal, Date.now() + 60_000);
      // Subscribed before the settlement is sent (a local node mines it at once).
      await expect.poll(() => proxy.subscribes(), { timeout: 10_000 }).toBeGreaterThan(before);
      // A read sent after it on the same socket is answered after the node has taken the subscription.
      await sharedClientFor("CELO", proxy.url).getChainId();
      const receipt = await celo.submitAuthorization("USDC", auth);
      expect(await sighting).toBe(receipt.transactionHash);
    } finally {
      stop.abort();
      close();
    }
  });

  it("another authorization's settlement is not it", async () => {
    const close = readNodesOverWebSocket([{ chain: "CELO", rpcUrl: proxy.url }]);
    const stop = new AbortController();
    try {
      await expect.poll(() => openSocketUrlFor("CELO", proxy.url), { timeout: 10_000 }).toBe(proxy.wsUrl);
      const ours = await signed(4);
      const other = await signed(5);
      const before = proxy.subscribes();
      let found: Hex | undefined | "pending" = "pending";
      const sighting = sightAuthorization({ deployments, heads }, "CELO", ours.key, stop.signal, Date.now() + 60_000).then((h) => (found = h));
      await expect.poll(() => proxy.subscribes(), { timeout: 10_000 }).toBeGreaterThan(before);
      // A read sent after it on the same socket is answered after the node has taken the subscription.
      await sharedClientFor("CELO", proxy.url).getChainId();
      await celo.submitAuthorization("USDC", other.auth);
      // Ours is sent after the other one is mined: a sighting of the other would already be here.
      expect(found).toBe("pending");
      const receipt = await celo.submitAuthorization("USDC", ours.auth);
      await sighting;
      expect(found).toBe(receipt.transactionHash);
    } finally {
      stop.abort();
      close();
    }
  });

  it("without the node's WebSocket it has only the search, which finds nothing here by its deadline", async () => {
    const { auth, key } = await signed(6);
    const before = proxy.subscribes();
    const sighting = sightAuthorization({ deployments, heads }, "CELO", key, new AbortController().signal, Date.now() + 1_500);
    await celo.submitAuthorization("USDC", auth);
    expect(await sighting).toBeUndefined();
    expect(proxy.subscribes()).toBe(before);
  });
});
