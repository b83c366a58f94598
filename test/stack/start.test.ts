/**
 * `npm start` as a newcomer runs it beside something else: every port moved by its variable
 * (lib/local-ports.ts), the service's PORT included, which the ledger must not take for its
 * own. The stack comes up on the moved ports only, and the examples, reading the same
 * variables, pay through it.
 */
import { createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOCAL_PORTS, type LocalPort } from "../../lib/local-ports.ts";
import { runScript, startScript } from "../support/processes.ts";
import { tempDir } from "../support/stack.ts";

/**
 * A port nothing listens on now, below the range the system hands out for port 0 (32768 and
 * up on Linux): the other suites running beside this one bind port 0, and one of theirs took a
 * port picked from that range between the pick and this stack's start (seen once in CI).
 */
async function freePort(taken: Set<number>): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (taken.has(port)) continue;
    const server = createServer();
    const bound = await new Promise<boolean>((r) => {
      server.once("error", () => r(false));
      server.listen(port, "127.0.0.1", () => r(true));
    });
    if (!bound) continue;
    await new Promise((r) => server.close(r));
    taken.add(port);
    return port;
  }
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
async function listening(port: number): Promise<boolean> {
  try {
    await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(1_000) });
    return true;
  } catch (err) {
    return !String((err as Error).cause ?? err).includes("ECONNREFUSED");
  }
}

describe("npm start with every port moved", () => {
  let env: Record<string, string>;
  let ports: Record<LocalPort, number>;
  let stack: Awaited<ReturnType<typeof startScript>>;

  beforeAll(async () => {
    const dir = await tempDir("start-moved");
    ports = {} as Record<LocalPort, number>;
    const taken = new Set<number>();
    for (const name of Object.keys(LOCAL_PORTS) as LocalPort[]) ports[name] = await freePort(taken);
    env = {
      ...Object.fromEntries((Object.keys(LOCAL_PORTS) as LocalPort[]).map((name) => [LOCAL_PORTS[name].variable, String(ports[name])])),
      DEPLOYMENTS_FILE: join(dir, "deployments.json"),
      SERVER_PGLITE_DIR: join(dir, "service"),
      PIN_PEPPER_FILE: join(dir, "pin-pepper"),
      LOG_REQUESTS: "0",
    };
    stack = await startScript("stack/start.ts", env, "stack ready", 180_000);
  }, 200_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it("binds every piece on its moved port, and nothing on the defaults' it was told to leave", async () => {
    const out = stack.output();
    expect(out).toContain(`service: http://127.0.0.1:${ports.service}`);
    expect(out).toContain(`facilitator: http://127.0.0.1:${ports.facilitator}`);
    expect(out).toContain(`biller sandbox: http://127.0.0.1:${ports.biller}`);
    expect(out).toContain(`ledger: http://127.0.0.1:${ports.ledger}`);
    expect(out).toContain(`CELO: started chain id 42220 at http://127.0.0.1:${ports.CELO}`);
    expect(out).toContain(`BASE: started chain id 8453 at http://127.0.0.1:${ports.BASE}`);
    // The stack's own lines (a ledger restart among them) say why a piece is not there.
    for (const name of Object.keys(LOCAL_PORTS) as LocalPort[]) expect(await listening(ports[name]), `${name}\n${out}`).toBe(true);
    // The ledger answers on its own port, not on the service's PORT.
    expect((await fetch(`http://127.0.0.1:${ports.ledger}/ready`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${ports.service}/healthz`)).status).toBe(200);
  });

  it("pays through it with the x402 example, which reads the same variables, and the audit agrees", async () => {
    const paid = await runScript("scripts/pay-example.ts", [], env);
    expect(paid.code, paid.out).toBe(0);
    expect(paid.out).toContain("paid: 200");
    expect(paid.out).toMatch(/"status": "SUCCESS"/);
    const audit = await runScript("scripts/audit.ts", [], env);
    expect(audit.code, audit.out).toBe(0);
    // In token amounts, not raw units: the bill's payment is about one USDC.
    expect(audit.out).toMatch(/^CELO\s+USDC\s+1\.\d+\s/m);
  });

  it("an agent holding a wallet pays over MCP with x402, no link, with the example (npm run agent:x402-example)", async () => {
    const paid = await runScript("scripts/agent-x402-example.ts", [], env);
    expect(paid.code, paid.out).toBe(0);
    expect(paid.out).toMatch(/"status": "SUCCESS"/);
    expect(paid.out).toMatch(/"success": true/);
  });

  it("makes each case an operator handles with npm run case, the way a payer would, and the service does its part", async () => {
    const made = async (kind: string) => {
      const run = await runScript("scripts/operator-case.ts", [kind], env);
      expect(run.code, run.out).toBe(0);
      return run.out;
    };
    expect(await made("failed-vend")).toMatch(/FAILED_VENDING[\s\S]*refunded on chain by the service: 0x[0-9a-f]{64}/);
    expect(await made("late-landing")).toMatch(/402 PAYMENT_NOT_SETTLED[\s\S]*the service refunded exactly it/);
    expect(await made("review")).toMatch(/held for an operator: the chain shows 0\.\d+ USDC on CELO paid under this key/);
    expect(await made("orphan")).toContain("held for an operator (1 such payment(s) now)");
    // The operator's list shows what the cases left for a person: the held order and the orphan.
    const listed = await runScript("scripts/review.ts", ["list"], env);
    expect(listed.code, listed.out).toBe(0);
    expect(listed.out).toContain("0.3 USDC on CELO");
    const usage = await runScript("scripts/operator-case.ts", ["nonsense"], env);
    expect(usage.code).toBe(2);
    expect(usage.out).toContain("usage: npm run case -- failed-vend|review|orphan|late-landing");
  });

  it("stops on a signal with everything it started, and reports no failure of its own ledger", async () => {
    const exit = new Promise<number | null>((r) => stack.child.once("exit", (code) => r(code)));
    await stack.stop();
    expect(await exit).toBe(0);
    expect(stack.output()).toContain("SIGTERM: stopping");
    expect(stack.output()).not.toContain("ledger exited");
    for (const name of Object.keys(LOCAL_PORTS) as LocalPort[]) expect(await listening(ports[name]), name).toBe(false);
  });
});
