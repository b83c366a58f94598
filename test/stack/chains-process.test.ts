/**
 * The local chains in a process of their own (stack/chains-process.ts), as `npm start` runs
 * them: started and served there, reused when another process serves them already, stopped
 * on close, and an end before close told to the stack.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { publicClientFor } from "../../lib/chain-client.ts";
import { startChainsProcess, type ChainsProcess } from "../../stack/chains-process.ts";
import { freePort } from "../../stack/ledger-process.ts";
import { tempDir } from "../support/stack.ts";

describe("the local chains in a process of their own", () => {
  const opened: ChainsProcess[] = [];
  afterAll(async () => {
    for (const c of opened) await c.close();
  });

  const blockNumber = (port: number) => publicClientFor("CELO", `http://127.0.0.1:${port}`).getBlockNumber();

  it("serves both chains from a child process; a second start finds them served, leaves them be, and ends; close stops them", async () => {
    const dir = await tempDir("chains-process");
    const env = { CELO_PORT: String(await freePort()), BASE_PORT: String(await freePort()), DEPLOYMENTS_FILE: join(dir, "deployments.json") };
    const lines: string[] = [];
    const first = await startChainsProcess({ env, log: (l) => lines.push(l), logError: (l) => lines.push(l) });
    opened.push(first);
    expect(first.process?.pid).toBeGreaterThan(0);
    expect(first.process?.pid).not.toBe(process.pid);
    expect(lines.join("\n")).toContain(`CELO: started chain id 42220 at http://127.0.0.1:${env.CELO_PORT}`);
    expect(await blockNumber(Number(env.CELO_PORT))).toBeGreaterThan(0n);

    // `npm start` beside an `npm run chains` already serving them: the deployment is found, nothing is started.
    const again: string[] = [];
    const second = await startChainsProcess({ env, log: (l) => again.push(l), logError: (l) => again.push(l) });
    expect(second.process).toBeUndefined();
    expect(again.join("\n")).toContain("CELO: reusing the node already running");
    await second.close();
    expect(await blockNumber(Number(env.CELO_PORT))).toBeGreaterThan(0n);

    let told = "";
    first.onExit((why) => (told = why));
    await first.close();
    expect(first.process!.exitCode !== null || first.process!.signalCode !== null).toBe(true);
    expect(told).toBe(""); // a close is no failure
    await expect(blockNumber(Number(env.CELO_PORT))).rejects.toThrow();
  });

  it("refuses a port that serves another chain, with the child's own words; an end before close is told to the stack", async () => {
    const dir = await tempDir("chains-process");
    const env = { CELO_PORT: String(await freePort()), BASE_PORT: String(await freePort()), DEPLOYMENTS_FILE: join(dir, "deployments.json") };
    const quiet = () => {};
    const chains = await startChainsProcess({ env, log: quiet, logError: quiet });
    opened.push(chains);
    // BASE's port given as CELO's: that node answers with chain id 8453.
    const crossed = { ...env, CELO_PORT: env.BASE_PORT, BASE_PORT: env.CELO_PORT, DEPLOYMENTS_FILE: join(dir, "crossed.json") };
    await expect(startChainsProcess({ env: crossed, log: quiet, logError: quiet })).rejects.toThrow(/the local chains ended \(code 1\) before they were ready:[\s\S]*already serves chain id 8453/);

    const told = new Promise<string>((resolve) => chains.onExit(resolve));
    chains.process!.kill("SIGKILL");
    expect(await told).toBe("the local chains' process ended (SIGKILL)");
  });
});
