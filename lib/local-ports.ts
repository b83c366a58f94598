/**
 * The local stack's ports: one table, each port with the variable that moves it. `npm start`,
 * the stand-ins run alone, the examples and the audit all read them from here, so moving a
 * port moves it for every one of them, the local chains' included.
 */
export const LOCAL_PORTS = {
  service: { variable: "PORT", defaultPort: 8080 },
  ledger: { variable: "LEDGER_PORT", defaultPort: 42069 },
  facilitator: { variable: "FACILITATOR_PORT", defaultPort: 8402 },
  biller: { variable: "BILLER_SANDBOX_PORT", defaultPort: 8403 },
  CELO: { variable: "CELO_PORT", defaultPort: 8545 },
  BASE: { variable: "BASE_PORT", defaultPort: 8546 },
} as const satisfies Record<string, { variable: string; defaultPort: number }>;

export type LocalPort = keyof typeof LOCAL_PORTS;

/** The port `name` listens on: its variable when set (0 picks a free one), else its default. */
export function localPort(name: LocalPort, env: Record<string, string | undefined> = process.env): number {
  const { variable, defaultPort } = LOCAL_PORTS[name];
  const raw = env[variable];
  if (raw === undefined || raw === "") return defaultPort;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`${variable} must be a port number (0 to 65535), not ${JSON.stringify(raw)}`);
  return port;
}

/** `http://127.0.0.1:<port>` for `name`. */
export function localUrl(name: LocalPort, env: Record<string, string | undefined> = process.env): string {
  return `http://127.0.0.1:${localPort(name, env)}`;
}
