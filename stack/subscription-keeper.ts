/**
 * Keeps the local chains' WebSocket subscriptions alive, as a real node keeps them.
 *
 * Hardhat keeps each `eth_subscribe` as a filter that expires five minutes after it was made
 * unless something polls it (NomicFoundation/hardhat#2053, open; EDR's `Filter` renews its
 * deadline only when its events are taken by `eth_getFilterChanges`, and drops expired
 * filters, subscriptions included, after each mined block). A `newHeads` subscriber on a
 * local node therefore hears one head a second for exactly 300 s, then nothing, with its
 * socket open and no error: the ledger's realtime sync and the service's head watcher both
 * went quiet five minutes after `npm start`.
 *
 * The keeper sees every subscription made through this process's Hardhat networks (its
 * `network.onRequest` hook), and renews each live one every `renewEveryMs` with
 * `eth_getFilterChanges`, well inside the deadline. A subscription the node no longer knows
 * (unsubscribed, its socket closed) is forgotten. Subscribers need not know any of this.
 */
import hre from "hardhat";
import type { NetworkHooks } from "hardhat/types/hooks";
import type { NetworkConnection } from "hardhat/types/network";

/** Well inside Hardhat's five-minute filter deadline. */
export const RENEW_EVERY_MS = 60_000;

export interface SubscriptionKeeper {
  /** The subscription ids being kept, per connection. */
  live(): string[];
  /** Renews every live subscription now; resolves to how many the node still had. */
  renewNow(): Promise<number>;
  stop(): void;
}

let installed: SubscriptionKeeper | undefined;

/** Installs the keeper once per process (every local chain this process serves shares it). */
export function keepSubscriptionsAlive(renewEveryMs = RENEW_EVERY_MS): SubscriptionKeeper {
  if (installed) return installed;
  const kept = new Map<NetworkConnection<string>, Set<string>>();
  const handlers: Partial<NetworkHooks> = {
    async onRequest(context, connection, request, next) {
      const response = await next(context, connection, request);
      if (request.method === "eth_subscribe" && "result" in response && typeof response.result === "string") {
        let ids = kept.get(connection);
        if (!ids) kept.set(connection, (ids = new Set()));
        ids.add(response.result);
      } else if (request.method === "eth_unsubscribe" && Array.isArray(request.params)) {
        kept.get(connection)?.delete(String(request.params[0]));
      }
      return response;
    },
  };
  hre.hooks.registerHandlers("network", handlers);

  const renewNow = async () => {
    let renewed = 0;
    for (const [connection, ids] of kept) {
      for (const id of [...ids]) {
        const still = await connection.provider
          .request({ method: "eth_getFilterChanges", params: [id] })
          .then((r) => r !== null && r !== undefined)
          .catch(() => false);
        if (still) renewed += 1;
        else ids.delete(id);
      }
      if (ids.size === 0) kept.delete(connection);
    }
    return renewed;
  };
  const timer = setInterval(() => void renewNow(), renewEveryMs);
  timer.unref(); // the chains' servers keep the process alive, not the keeper
  installed = {
    live: () => [...kept.values()].flatMap((ids) => [...ids]),
    renewNow,
    stop() {
      clearInterval(timer);
      hre.hooks.unregisterHandlers("network", handlers);
      kept.clear();
      installed = undefined;
    },
  };
  return installed;
}
