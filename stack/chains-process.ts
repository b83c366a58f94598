/**
 * The local chains in a process of their own (`npm run chains`, stack/chains.ts), as a real
 * node is never in the service's process.
 *
 * Why not in `npm start`'s own process: the service's embedded database (PGlite, a Postgres
 * compiled to WebAssembly) runs each statement synchronously on the event loop, and creating
 * a new data directory holds it for seconds (3 s on a quiet 2-core machine, over 10 s on a busy
 * one). A node on that event loop answers nothing meanwhile: the ledger's block reads timed out
 * (10 s), its supervisor took it for stalled and restarted it, and an in-memory ledger then
 * indexed everything again, which on that machine took a minute. In a process of their own the
 * nodes answer whatever the service is doing.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

/** The project's root: tsx resolves from there, and stack/chains.ts's paths are relative to it. */
const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** What stack/chains.ts prints once it serves the nodes it started. */
const READY = "local chains ready";
/** Two nodes and a deployment through Ignition, with room for a busy machine. */
const START_TIMEOUT_MS = 180_000;
const STOP_TIMEOUT_MS = 15_000;

export interface ChainsProcess {
  /** The process serving the nodes; undefined when both chains were already running (another `npm run chains`). */
  process?: ChildProcess;
  /** Told once if the process ends before `close` (the stack cannot go on without its chains). */
  onExit(handler: (why: string) => void): void;
  close(): Promise<void>;
}

/**
 * Starts stack/chains.ts with `env` (its ports, and DEPLOYMENTS_FILE as an absolute path: it
 * runs in the project's root) and waits until it serves the chains, or has deployed onto
 * chains already running and ended. Each line it prints goes to `log` (standard output) or
 * `logError` (standard error).
 */
export async function startChainsProcess(options: {
  env: Record<string, string | undefined>;
  log: (line: string) => void;
  logError: (line: string) => void;
  timeoutMs?: number;
}): Promise<ChainsProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", "stack/chains.ts"], {
    cwd: ROOT,
    env: { ...process.env, ...options.env },
    // The channel is how the child sees this process end, however it ends (process.exit, a
    // crash, SIGKILL): the child stops when it closes (stack/chains.ts).
    stdio: ["ignore", "pipe", "pipe", "ipc"],
  });
  child.channel?.unref();
  let closing = false;
  let exitHandler: ((why: string) => void) | undefined;
  /** How the process ended: its signal, or `code N`. */
  const exited = new Promise<string>((resolve) => child.once("exit", (code, signal) => resolve(signal ?? `code ${code}`)));

  let output = "";
  let ready = false;
  let onReady = () => {};
  const lines = (stream: NodeJS.ReadableStream, to: (line: string) => void) => {
    let rest = "";
    stream.on("data", (d: Buffer) => {
      const parts = (rest + d.toString()).split("\n");
      rest = parts.pop()!;
      for (const line of parts) {
        to(line);
        if (ready) continue;
        output += `${line}\n`;
        if (line.includes(READY)) {
          ready = true;
          onReady();
        }
      }
    });
  };
  lines(child.stdout!, options.log);
  lines(child.stderr!, options.logError);

  const timeoutMs = options.timeoutMs ?? START_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  const started = await new Promise<"serving" | "ended">((resolve, reject) => {
    onReady = () => resolve("serving");
    timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the local chains did not start in ${timeoutMs / 1000} s:\n${output}`));
    }, timeoutMs);
    void exited.then((why) => {
      // Chains already served by another process: the script deployed (or found the deployment) and ended.
      if (why === "code 0") resolve("ended");
      else reject(new Error(`the local chains ended (${why}) before they were ready:\n${output}`));
    });
  }).finally(() => clearTimeout(timer));

  /** Why the serving process ended before `close`, once it has. */
  let endedEarly: string | undefined;
  if (started === "serving") {
    void exited.then((why) => {
      if (closing) return;
      endedEarly = `the local chains' process ended (${why})`;
      exitHandler?.(endedEarly);
    });
  }
  return {
    process: started === "serving" ? child : undefined,
    onExit(handler) {
      exitHandler = handler;
      // An end that came before anyone asked is told at once.
      if (endedEarly) handler(endedEarly);
    },
    async close() {
      closing = true;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const force = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
      child.kill("SIGTERM");
      await exited;
      clearTimeout(force);
    },
  };
}
