/**
 * The image of a fresh PGlite cluster kept on disk (lib/pglite-image.ts): made once, then
 * only read; a database loaded from it is a fresh cluster; a file that is not a whole image is
 * made again; and a cache that cannot be written costs nothing but the image (initdb runs).
 * initdb runs once here, in the first test; the tests of how a bad file is replaced are handed
 * the bytes of a cluster already made (the run's own image), and count how often they are asked.
 */
import { lstat, mkdir, readdir, readFile, stat, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { discardPgliteImage, loadPgliteImage, pgliteImage, pgliteImagePath, pgliteInDirectory } from "../../lib/pglite-image.ts";
import { tempDir } from "../support/stack.ts";

describe("the PGlite cluster image", () => {
  const cacheHome = process.env.XDG_CACHE_HOME;
  /** A fresh cluster's bytes: the run's image (test/support/temp-root.ts made it), else initdb's now. */
  let cluster: Buffer;
  beforeAll(async () => {
    const runs = await pgliteImage();
    cluster = runs ? await readFile(runs) : Buffer.from(await (await freshDump()).arrayBuffer());
  });
  async function freshDump(): Promise<Blob> {
    const lite = await PGlite.create();
    const dump = await lite.dumpDataDir("none");
    await lite.close();
    return dump;
  }
  /** A maker handing back `cluster`, and how many times it was asked. */
  function counted() {
    const maker = Object.assign(async () => {
      maker.calls++;
      return new Blob([cluster]);
    }, { calls: 0 });
    return maker;
  }
  afterEach(() => {
    if (cacheHome === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = cacheHome;
  });

  it("is made once in the user's cache, read after, and loads as a fresh cluster", async () => {
    process.env.XDG_CACHE_HOME = await tempDir("pglite-cache");
    const path = await pgliteImage(); // initdb's own
    expect(path).toBe(pgliteImagePath());
    expect(path!.startsWith(process.env.XDG_CACHE_HOME)).toBe(true);
    const made = await stat(path!);
    expect(made.mode & 0o077).toBe(0); // the user's alone
    expect(await pgliteImage()).toBe(path);
    expect((await stat(path!)).mtimeMs).toBe(made.mtimeMs); // read, not made again

    const lite = await PGlite.create({ loadDataDir: await loadPgliteImage() });
    const [db] = (await lite.query<{ db: string; tables: number }>(`SELECT current_database() AS db, (SELECT count(*)::int FROM pg_tables WHERE schemaname = 'public') AS tables`)).rows;
    expect(db).toEqual({ db: "postgres", tables: 0 });
    await lite.close();
  });

  it("is made again when the file is not a whole image (a write cut off), and never loaded as it was", async () => {
    process.env.XDG_CACHE_HOME = await tempDir("pglite-cache-cut");
    const path = pgliteImagePath();
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, Buffer.alloc(3 * 1024 * 1024, 7)); // tar-sized, but not ending as a tar does
    const make = counted();
    expect(await pgliteImage(make)).toBe(path);
    expect(make.calls).toBe(1);
    const whole = await readFile(path);
    expect(whole.equals(cluster)).toBe(true);
    expect(whole.subarray(-1024).every((b) => b === 0)).toBe(true);
    const lite = await PGlite.create({ loadDataDir: await loadPgliteImage() });
    expect((await lite.query<{ db: string }>(`SELECT current_database() AS db`)).rows[0]!.db).toBe("postgres");
    await lite.close();
  });

  it("is made again when the file is blocks of zeros (a tar's size and end, no header), or after it was discarded", async () => {
    process.env.XDG_CACHE_HOME = await tempDir("pglite-cache-bad");
    const path = pgliteImagePath();
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, Buffer.alloc(2 * 1024 * 1024));
    const make = counted();
    expect(await pgliteImage(make)).toBe(path);
    expect(make.calls).toBe(1);
    const made = await readFile(path);
    expect(made.toString("latin1", 257, 262)).toBe("ustar");
    expect(made.equals(cluster)).toBe(true);
    expect(await pgliteImage(make)).toBe(path); // whole now: read, not made
    expect(make.calls).toBe(1);
    await discardPgliteImage(); // as a process does with one that would not load
    await expect(stat(path)).rejects.toThrow();
    expect(await pgliteImage(make)).toBe(path);
    expect(make.calls).toBe(2);
    expect((await stat(path)).size).toBe(made.length);
  });

  it("starts a directory's database from the image when the directory is new, and opens one already there as it is", async () => {
    // An image told apart from initdb's by a table of its own.
    const marking = await PGlite.create({ loadDataDir: new Blob([cluster]) });
    await marking.exec(`CREATE TABLE made_from_image (x int)`);
    const marked = await marking.dumpDataDir("none");
    await marking.close();
    const hasTable = async (lite: PGlite, name: string) => (await lite.query<{ t: string | null }>(`SELECT to_regclass($1)::text AS t`, [name])).rows[0]!.t !== null;

    const dir = join(await tempDir("pglite-dir"), "db");
    const made = await pgliteInDirectory(dir, async () => marked);
    expect(await hasTable(made, "made_from_image")).toBe(true);
    await made.exec(`CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)`);
    await made.close();

    expect((await readdir(dirname(dir))).sort()).toEqual(["db"]); // renamed into place, nothing left beside it

    // There now: opened as it is, never loaded over, the image not even asked for.
    const asked = counted();
    const again = await pgliteInDirectory(dir, asked);
    expect(asked.calls).toBe(0);
    expect((await again.query<{ x: number }>(`SELECT x FROM kept`)).rows).toEqual([{ x: 7 }]);
    expect(await hasTable(again, "made_from_image")).toBe(true);
    await again.close();
  });

  it("leaves whatever is already at a directory's path to PGlite, a link to nothing included, and never asks for the image", async () => {
    const base = await tempDir("pglite-link");
    const link = join(base, "db");
    await symlink(join(base, "not-mounted-yet"), link);
    const asked = counted();
    const lite = await pgliteInDirectory(link, asked);
    await expect(lite.waitReady).rejects.toThrow(); // as before: PGlite cannot make its directory there
    expect(asked.calls).toBe(0);
    expect((await lstat(link)).isSymbolicLink()).toBe(true);
    expect((await readdir(base)).sort()).toEqual(["db"]);
  });

  it("is none where the cache cannot be written, and nothing fails for it", async () => {
    const blocked = join(await tempDir("pglite-cache-blocked"), "a-file");
    await writeFile(blocked, "not a directory");
    process.env.XDG_CACHE_HOME = blocked;
    const make = counted();
    expect(await pgliteImage(make)).toBeUndefined();
    expect(make.calls).toBe(0); // initdb is not run for an image that cannot be kept
    expect(await loadPgliteImage()).toBeUndefined();
  });
});
