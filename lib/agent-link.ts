/** The agent-hub link's wire facts, shared by the service that checks them and the clients that sign them. */
export const LINK_PATH = "/api/agent/link";

/** The text a wallet personal_signs to link: `<Service> Agent Action: POST:/api/agent/link: <timestamp>`. */
export function linkMessage(serviceName: string, timestamp: string): string {
  return `${serviceName} Agent Action: POST:${LINK_PATH}: ${timestamp}`;
}
