/**
 * The cluster a fresh PGlite's initdb makes, kept on disk once per user and PGlite release, so
 * that an in-memory database (the service's; the ledger's on the local profile) loads it
 * instead of running initdb again: about 0.5 s against 3 s on an idle 2-core machine, and 6 s
 * on a busy one (docs/development.md, Tests). The same bytes initdb writes, so the same
 * database; each one still runs its own migrations.
 *
 * Kept in the user's own cache directory, not a /tmp that another user could write into,
 * and written under a temporary name, then renamed, so that processes starting at once never
 * read half a file. Any failure only means that initdb runs, as it did before.
 */
import { mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { PGlite } from "@electric-sql/pglite";

/** PGlite's release: an image is only loaded by the release that made it. */
function pgliteRelease(): string {
  const entry = createRequire(import.meta.url).resolve("@electric-sql/pglite");
  // node_modules/@electric-sql/pglite/dist/index.cjs: the package's own package.json is one up.
  return (JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")) as { version: string }).version;
}

export function pgliteImagePath(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "billpay-pglite", `initdb-${pgliteRelease()}.tar`);
}

/** The image's path, made first when it is missing; undefined when it cannot be made. */
export async function pgliteImage(): Promise<string | undefined> {
  const path = pgliteImagePath();
  try {
    await stat(path);
    return path;
  } catch {
    // Not made yet: made below.
  }
  try {
    // Where it cannot be kept, initdb is not run for it.
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const lite = await PGlite.create();
    const image = await lite.dumpDataDir("none");
    await lite.close();
    const part = `${path}.${process.pid}.${Date.now()}.part`;
    await writeFile(part, Buffer.from(await image.arrayBuffer()), { mode: 0o600 });
    await rename(part, path);
    return path;
  } catch {
    return undefined;
  }
}

/** The image as PGlite's `loadDataDir` takes it; undefined when there is none. */
export async function loadPgliteImage(): Promise<Blob | undefined> {
  const path = await pgliteImage();
  if (!path) return undefined;
  try {
    return new Blob([await readFile(path)]);
  } catch {
    return undefined;
  }
}
