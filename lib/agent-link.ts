/** The agent-hub link's wire facts, shared by the service that checks them and the clients that sign them. */
export const LINK_PATH = "/api/agent/link";

/** The text a wallet personal_signs to link: `<Service> Agent Action: POST:/api/agent/link: <timestamp>`. */
export function linkMessage(serviceName: string, timestamp: string): string {
  return `${serviceName} Agent Action: POST:${LINK_PATH}: ${timestamp}`;
}

/** Where a Sign-In with Ethereum link gets its one-time nonce. */
export const LINK_NONCE_PATH = "/api/agent/link/nonce";

/** The statement a Sign-In with Ethereum link message carries. */
export const LINK_STATEMENT = "Link this wallet to the agent hub: agents holding the api_key may pay bills from the allowance it approves.";
