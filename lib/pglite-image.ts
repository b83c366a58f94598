/**
 * The cluster a fresh PGlite's initdb makes, kept on disk once per user and PGlite release, so
 * that an in-memory database (the service's; the ledger's on the local profile), and the
 * service's database in a directory it makes, load it instead of running initdb again: about
 * 0.5 s against 3 s on an idle 2-core machine, and 4.5 s on a busy one (docs/development.md,
 * Tests). The same bytes initdb writes, so the same database; each one still runs its own
 * migrations.
 *
 * Kept in the user's own cache directory (0700; an absolute XDG_CACHE_HOME, else ~/.cache),
 * not a /tmp that another user could write into. Written under a temporary name that must not
 * exist yet, flushed, then renamed, so that processes starting at once never read half a
 * file; a file that does not end as a whole tar does is not used, and is made again. Any
 * failure only means that initdb runs: a process that could not make the image does not try
 * again.
 */
import { lstat, mkdir, mkdtemp, open, readFile, rename, rm, stat, unlink } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { dirname, isAbsolute, join } from "node:path";
import { PGlite } from "@electric-sql/pglite";

/** PGlite's release: an image is only loaded by the release that made it. */
function pgliteRelease(): string {
  const entry = createRequire(import.meta.url).resolve("@electric-sql/pglite");
  // node_modules/@electric-sql/pglite/dist/index.cjs: the package's own package.json is one up.
  return (JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")) as { version: string }).version;
}

export function pgliteImagePath(env: NodeJS.ProcessEnv = process.env): string {
  const cache = env.XDG_CACHE_HOME && isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : join(homedir(), ".cache");
  return join(cache, "billpay-pglite", `initdb-${pgliteRelease()}.tar`);
}

const TAR_BLOCK = 512;

/**
 * Whether the file begins and ends as a whole tar does (a ustar header first, a size in blocks,
 * its two zero blocks last): a cut-off write or a stray file does not. PGlite, given bytes that
 * are no tar, tries them as gzip and its stream fails outside any promise: they must never reach it.
 */
async function looksWhole(path: string): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const { size } = await file.stat();
    if (size < 1024 * 1024 || size % TAR_BLOCK !== 0) return false;
    const head = Buffer.alloc(TAR_BLOCK);
    await file.read(head, 0, head.length, 0);
    if (head.toString("latin1", 257, 262) !== "ustar") return false;
    const end = Buffer.alloc(2 * TAR_BLOCK);
    await file.read(end, 0, end.length, size - end.length);
    return end.every((b) => b === 0);
  } finally {
    await file.close();
  }
}

/** Where this process could not make the image: initdb runs, and making it there is not tried again. */
const unavailable = new Set<string>();

/** The bytes of a fresh cluster: a new PGlite's initdb, dumped. */
export type ClusterMaker = () => Promise<Blob>;

async function freshCluster(): Promise<Blob> {
  const lite = await PGlite.create();
  try {
    return await lite.dumpDataDir("none");
  } finally {
    await lite.close();
  }
}

/**
 * The image's path, made first when it is missing (or not whole); undefined when it cannot be
 * had. `make` is initdb's; the tests of how the file is kept pass one that hands back bytes
 * already made, as initdb takes seconds each time.
 */
export async function pgliteImage(make: ClusterMaker = freshCluster): Promise<string | undefined> {
  let path: string | undefined;
  let part: string | undefined;
  try {
    path = pgliteImagePath();
    if (unavailable.has(path)) return undefined;
    const found = await stat(path).catch(() => undefined);
    if (found?.isFile() && (await looksWhole(path))) return path;
    if (found) await unlink(path);
    // Where it cannot be kept, initdb is not run for it.
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const image = await make();
    part = `${path}.${process.pid}.${Date.now()}.part`;
    const file = await open(part, "wx", 0o600);
    try {
      await file.writeFile(Buffer.from(await image.arrayBuffer()));
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(part, path);
    return path;
  } catch {
    if (part) await unlink(part).catch(() => {});
    unavailable.add(path ?? "");
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

/** Removes an image that would not load (it looked whole), so that the next process makes it again. */
export async function discardPgliteImage(): Promise<void> {
  try {
    await unlink(pgliteImagePath());
  } catch {
    // Gone already, or never made.
  }
}

/**
 * A PGlite on a directory. Where nothing is at `dir` yet, a fresh cluster is loaded from the
 * image into a directory beside it, closed, and renamed into place, so that the directory
 * appears whole or not at all (2.0 to 2.6 s, opening included, against initdb's 3.5 to 5.8 s
 * on disk). Anything already at `dir` (a cluster, an empty directory, a link, even one to
 * nothing) is opened as it is, as is every directory when there is no image; `image` is only
 * asked for a new one. A load that fails removes its own directory and the image, and initdb
 * runs, as it always did.
 */
export async function pgliteInDirectory(dir: string, image: () => Promise<Blob | undefined>): Promise<PGlite> {
  const taken = async () => (await lstat(dir).catch(() => undefined)) !== undefined;
  if (!(await taken())) {
    const blob = await image();
    let part: string | undefined;
    try {
      if (blob) {
        part = await mkdtemp(`${dir}.part-`);
        const lite = await PGlite.create({ dataDir: part, loadDataDir: blob }).catch(async (err: unknown) => {
          await discardPgliteImage();
          throw err;
        });
        await lite.close();
        // Never over anything that came meanwhile: another process's directory is its own.
        if (!(await taken())) {
          await rename(part, dir);
          part = undefined;
        }
      }
    } catch {
      // Where the directory cannot be made beside it, or the image would not load: initdb.
    } finally {
      if (part) await rm(part, { recursive: true, force: true });
    }
  }
  return new PGlite(dir);
}
