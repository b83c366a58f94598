/**
 * Credentials for each chain's facilitator, as @x402/core's HTTP facilitator client takes
 * them (headers per request path). FACILITATOR_AUTH_<CHAIN> chooses:
 *   - none: the local facilitator, or a public one;
 *   - api-key: `X-API-Key: FACILITATOR_API_KEY_<CHAIN>` on verify, settle and supported, as Celo's
 *     hosted facilitator takes its key (celo-org/docs, build/agents/x402: only /settle needs it,
 *     and Celo's own sample sends it on all three);
 *   - bearer: `Authorization: Bearer FACILITATOR_TOKEN_<CHAIN>` on verify, settle and supported;
 *   - cdp: Coinbase's (CDP) facilitator, through its own package (@coinbase/x402), which signs
 *     a short-lived JWT per request with CDP_API_KEY_ID and CDP_API_KEY_SECRET.
 * Secrets are read here only and never logged.
 */
import type { FacilitatorConfig } from "@x402/core/http";
import type { ChainKey } from "../../lib/chains.ts";
import type { Config } from "../config.ts";

export type FacilitatorAuth = FacilitatorConfig["createAuthHeaders"];

export function facilitatorAuth(config: Config, chain: ChainKey): FacilitatorAuth {
  switch (config[`FACILITATOR_AUTH_${chain}`]) {
    case "api-key": {
      const headers = { "X-API-Key": config[`FACILITATOR_API_KEY_${chain}`]! };
      return async () => ({ verify: headers, settle: headers, supported: headers });
    }
    case "bearer": {
      const headers = { Authorization: `Bearer ${config[`FACILITATOR_TOKEN_${chain}`]!}` };
      return async () => ({ verify: headers, settle: headers, supported: headers });
    }
    case "cdp": {
      // Loaded only when chosen: the package brings Coinbase's whole SDK (and its HTTP and JWT
      // libraries, some 300 modules) into every process that reads this file otherwise.
      const cdp = import("@coinbase/x402").then((m) => m.createCdpAuthHeaders(config.CDP_API_KEY_ID!, config.CDP_API_KEY_SECRET!)!);
      return async () => (await cdp)();
    }
    default:
      return undefined;
  }
}
