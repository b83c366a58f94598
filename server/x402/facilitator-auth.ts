/**
 * Credentials for each chain's facilitator, as @x402/core's HTTP facilitator client takes
 * them (headers per request path). FACILITATOR_AUTH_<CHAIN> chooses:
 *   - none: the local facilitator, or a public one;
 *   - bearer: `Authorization: Bearer FACILITATOR_TOKEN_<CHAIN>` on verify, settle and supported;
 *   - cdp: Coinbase's (CDP) facilitator, through its own package (@coinbase/x402), which signs
 *     a short-lived JWT per request with CDP_API_KEY_ID and CDP_API_KEY_SECRET.
 * Secrets are read here only and never logged.
 */
import { createCdpAuthHeaders } from "@coinbase/x402";
import type { FacilitatorConfig } from "@x402/core/http";
import type { ChainKey } from "../../lib/chains.ts";
import type { Config } from "../config.ts";

export type FacilitatorAuth = FacilitatorConfig["createAuthHeaders"];

export function facilitatorAuth(config: Config, chain: ChainKey): FacilitatorAuth {
  switch (config[`FACILITATOR_AUTH_${chain}`]) {
    case "bearer": {
      const headers = { Authorization: `Bearer ${config[`FACILITATOR_TOKEN_${chain}`]!}` };
      return async () => ({ verify: headers, settle: headers, supported: headers });
    }
    case "cdp":
      return createCdpAuthHeaders(config.CDP_API_KEY_ID!, config.CDP_API_KEY_SECRET!);
    default:
      return undefined;
  }
}
