/**
 * The direction of imports (docs/architecture.md) is kept by `npm run lint:imports`
 * (dependency-cruiser, .dependency-cruiser.cjs): no cycles, each part imports only the parts
 * below it. Run here so that an import that breaks them fails the suite.
 */
import { execFile } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { tempDir } from "../support/stack.ts";

const ROOT = join(import.meta.dirname, "../..");
const DEPCRUISE = join(ROOT, "node_modules/.bin/depcruise");
const run = promisify(execFile);
const cruise = (...args: string[]) => run(DEPCRUISE, ["--config", ".dependency-cruiser.cjs", ...args], { cwd: ROOT, timeout: 60_000 }).then(
  (r) => ({ code: 0, out: r.stdout + r.stderr }),
  (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }),
);

describe("the direction of imports", () => {
  it("holds across the code: no cycle, nothing imports a part above it", async () => {
    const { code, out } = await cruise("server", "lib", "ponder", "services", "stack", "scripts");
    expect(out, out).toContain("no dependency violations found");
    expect(code).toBe(0);
  });

  it("fails on an import that points up or closes a cycle", async () => {
    // Files in a scratch folder laid out like the project's: lib/ reaching up into server/, and two files importing each other.
    const dir = await tempDir("imports");
    await mkdir(join(dir, "lib"), { recursive: true });
    await mkdir(join(dir, "server/orders"), { recursive: true });
    await writeFile(join(dir, "lib/shared.ts"), 'import { order } from "../server/orders/a.ts";\nexport const shared = order;\n');
    await writeFile(join(dir, "server/orders/a.ts"), 'import { b } from "./b.ts";\nexport const order = b;\n');
    await writeFile(join(dir, "server/orders/b.ts"), 'import { order } from "./a.ts";\nexport const b = () => order;\n');
    await writeFile(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: { module: "nodenext", allowImportingTsExtensions: true, noEmit: true } }));
    const config = join(ROOT, ".dependency-cruiser.cjs");
    const { code, out } = await run(DEPCRUISE, ["--config", config, "--no-progress", "lib", "server"], { cwd: dir, timeout: 60_000 }).then(
      (r) => ({ code: 0, out: r.stdout + r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }),
    );
    expect(code, out).not.toBe(0);
    expect(out).toContain("lib-is-shared: lib/shared.ts → server/orders/a.ts");
    expect(out).toMatch(/no-cycles: server\/orders\/(a|b)\.ts/);
  });
});
