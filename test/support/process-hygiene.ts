/**
 * Vitest setup file: a worker keeps its process from one test file to the next
 * (`isolate: false` in vitest.config.ts), so a file that leaves the environment or the
 * process's log changed changes every file after it in that worker, and only in some orders.
 * This fails the file that leaves them changed, naming what it left, instead of a later file
 * failing for a reason it cannot see.
 */
import { afterAll } from "vitest";
import { log } from "../../server/log.ts";

// Taken as this module runs: Vitest runs a setup file afresh before each test file is loaded,
// so a change the file makes at its top level, outside any hook, is seen too.
const environment: Record<string, string | undefined> = { ...process.env };
const processLog = log();

afterAll(() => {
  const names = new Set([...Object.keys(environment), ...Object.keys(process.env)]);
  const changed = [...names].filter((name) => environment[name] !== process.env[name]).sort();
  const left: string[] = [];
  if (changed.length > 0) left.push(`the environment (${changed.join(", ")})`);
  if (log() !== processLog) left.push("the process's log (setLog)");
  if (left.length > 0) {
    throw new Error(`this test file left ${left.join(" and ")} changed: the next test file in this worker shares the process (isolate: false); put it back when the file ends`);
  }
});
