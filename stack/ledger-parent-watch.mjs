/**
 * Preloaded into the ledger's Ponder process (`--import`, stack/ledger-process.ts), which is
 * started with a channel to the process that started it. When that process is gone, however
 * it ended (a SIGKILL included, which runs none of its exit handlers), Ponder is sent the
 * SIGTERM it would have sent, and shuts down as on Ctrl-C instead of holding its port and
 * indexing for no one: the next `npm start` would find the port taken. The channel alone keeps
 * nothing running. Plain JavaScript: Ponder's process loads no TypeScript.
 */
const SHUTDOWN_GRACE_MS = 10_000;

if (process.channel) {
  process.channel.unref();
  const stop = () => {
    process.kill(process.pid, "SIGTERM");
    // Ponder's shutdown ends the process; one that does not is ended here.
    setTimeout(() => process.exit(1), SHUTDOWN_GRACE_MS).unref();
  };
  // Gone already while Ponder loaded: the channel closed before anyone listened.
  if (!process.connected) stop();
  else process.once("disconnect", stop);
}
