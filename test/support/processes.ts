/** The project's scripts run as their own processes, the way an operator runs them. */
import { spawn, type ChildProcess } from "node:child_process";

/** Runs `script` to its end; its exit code and everything it printed. */
export function runScript(script: string, args: string[] = [], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", script, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("exit", (code) => resolve({ code, out }));
  });
}

/**
 * Starts a long-running `script` and waits for `ready` in its output (killed if it never
 * comes); the process also ends with this one.
 */
export async function startScript(script: string, env: Record<string, string>, ready: string, timeoutMs = 60_000): Promise<{ child: ChildProcess; output: () => string; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ["--import", "tsx", script], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const kill = () => child.kill("SIGTERM");
  process.once("exit", kill);
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
      process.off("exit", kill);
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      kill();
      await exited;
    },
  };
}
