/**
 * `npm run chains`: bring up both local chains with the deployment and keep them running
 * until interrupted. Safe to run again against chains that already have the deployment.
 */
import { deploymentsPath } from "../lib/deployments.ts";
import { startLocalChains } from "./local-chains.ts";

const deploymentsFile = deploymentsPath();
const chains = await startLocalChains({ deploymentsFile, log: (line) => console.log(line) });
console.log(`deployments written to ${deploymentsFile}`);

let stopping = false;
async function stop(why: string) {
  if (stopping) return;
  stopping = true;
  console.log(`${why}: stopping local chains`);
  // A client still connected (a ledger left behind by an npm start that was killed) would hold
  // the nodes' close open: the process ends regardless.
  setTimeout(() => process.exit(0), 5_000).unref();
  await chains.close();
  process.exit(0);
}
process.on("SIGTERM", () => void stop("SIGTERM"));
// Started by `npm start` with a channel to it (stack/chains-process.ts): when that process is
// gone, however it ended (a SIGKILL included), the chains go too instead of holding their ports.
// The channel alone keeps nothing running. Ctrl-C reaches this process too, but npm start
// stops it last (SIGTERM), after the service and the ledger that still read the nodes.
if (!process.send) process.on("SIGINT", () => void stop("SIGINT"));
else {
  process.on("SIGINT", () => {});
  process.channel?.unref();
  // Gone already while the chains started: the channel's end was before anyone listened.
  if (!process.connected) void stop("npm start is gone");
  else process.once("disconnect", () => void stop("npm start is gone"));
}

// Keep running while this process serves a node; otherwise the deployment was all there was to do.
if (chains.started.length > 0) {
  console.log(`local chains ready (${chains.started.join(", ")} served here); Ctrl-C to stop`);
  setInterval(() => {}, 1 << 30);
}
