/** The project's scripts run as their own processes, the way an operator runs them. */
import { spawn, type ChildProcess } from "node:child_process";

/** Long enough for a deploy through Ignition; a script still running then has hung. */
const RUN_TIMEOUT_MS = 120_000;

function spawnScript(script: string, args: string[], env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, ["--import", "tsx", script, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
}

const ended = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;

/** Runs `script` to its end (killed after `timeoutMs`); its exit code and everything it printed. */
export function runScript(script: string, args: string[] = [], env: Record<string, string> = {}, timeoutMs = RUN_TIMEOUT_MS): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawnScript(script, args, env);
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    let out = "";
    child.stdout!.on("data", (d) => (out += d));
    child.stderr!.on("data", (d) => (out += d));
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

/**
 * Starts a long-running `script` and waits for `ready` in its output (killed if it never
 * comes); the process also ends with this one.
 */
export async function startScript(script: string, env: Record<string, string>, ready: string, timeoutMs = 60_000): Promise<{ child: ChildProcess; output: () => string; stop(): Promise<void> }> {
  const child = spawnScript(script, [], env);
  const kill = () => child.kill("SIGTERM");
  process.once("exit", kill);
  child.once("exit", () => process.off("exit", kill));
  let out = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      kill();
      reject(new Error(`${script} did not start: ${out}`));
    }, timeoutMs);
    const onData = (d: Buffer) => {
      out += d;
      if (out.includes(ready)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited (${code}): ${out}`));
    });
  });
  return {
    child,
    output: () => out,
    async stop() {
      // A process that ended by a signal has no exit code: waiting for its exit would never end.
      if (ended(child)) return;
      const exited = new Promise((r) => child.once("exit", r));
      kill();
      await exited;
    },
  };
}
