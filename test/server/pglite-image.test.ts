/**
 * The image of a fresh PGlite cluster kept on disk (lib/pglite-image.ts): made once, then
 * only read; a database loaded from it is a fresh cluster that takes every migration; and a
 * cache that cannot be written costs nothing but the image (initdb runs, as before).
 */
import { stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { afterEach, describe, expect, it } from "vitest";
import { loadPgliteImage, pgliteImage, pgliteImagePath } from "../../lib/pglite-image.ts";
import { openDb } from "../../server/db.ts";
import { tempDir } from "../support/stack.ts";

describe("the PGlite cluster image", () => {
  const cacheHome = process.env.XDG_CACHE_HOME;
  afterEach(() => {
    if (cacheHome === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = cacheHome;
  });

  it("is made once in the user's cache, read after, and loads as a fresh cluster", async () => {
    process.env.XDG_CACHE_HOME = await tempDir("pglite-cache");
    const path = await pgliteImage();
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
    // The service's in-memory database takes every migration on it.
    const service = await openDb({});
    expect((await service.query<{ n: number }>(`SELECT count(*)::int AS n FROM schema_migration`))[0]!.n).toBeGreaterThan(0);
    await service.close();
  });

  it("is none where the cache cannot be written, and nothing fails for it", async () => {
    const blocked = join(await tempDir("pglite-cache-blocked"), "a-file");
    await writeFile(blocked, "not a directory");
    process.env.XDG_CACHE_HOME = blocked;
    expect(await pgliteImage()).toBeUndefined();
    expect(await loadPgliteImage()).toBeUndefined();
  });
});
