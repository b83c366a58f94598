import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { PGLITE_POSTGRES_MAJOR } from "../../lib/pglite-dir.ts";
import { openDb } from "../../server/db.ts";
import { runScript } from "../support/processes.ts";

const dirs: string[] = [];
async function tempDir() {
  const dir = await mkdtemp(join(tmpdir(), "billpay-db-"));
  dirs.push(dir);
  return dir;
}

describe("the service's embedded database (PGlite)", () => {
  afterEach(async () => {
    for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
  });

  it("runs the PostgreSQL major the code names", async () => {
    const db = await openDb({});
    try {
      const [row] = await db.query<{ v: string }>("SELECT current_setting('server_version_num') AS v");
      expect(Math.floor(Number(row!.v) / 10_000)).toBe(PGLITE_POSTGRES_MAJOR);
    } finally {
      await db.close();
    }
  });

  it("opens each in-memory database empty and migrated, whatever one opened before it in the process wrote or still holds", async () => {
    // The second and later ones start from the first's initdb image (server/db.ts).
    const migrations = async (db: Awaited<ReturnType<typeof openDb>>) => (await db.query<{ n: number }>("SELECT count(*)::int AS n FROM schema_migration"))[0]!.n;
    const first = await openDb({});
    const migrated = await migrations(first);
    expect(migrated).toBeGreaterThan(0);
    await first.query("CREATE TABLE left_behind (x int)");
    await first.query("INSERT INTO schema_migration (version) VALUES (999999)");
    const [second, third] = await Promise.all([openDb({}), openDb({})]);
    try {
      for (const db of [second, third]) {
        expect(await migrations(db)).toBe(migrated);
        expect(await db.query("SELECT 1 FROM pg_tables WHERE tablename = 'left_behind'")).toEqual([]);
      }
      await second.query("CREATE TABLE only_here (x int)");
      expect(await third.query("SELECT 1 FROM pg_tables WHERE tablename = 'only_here'")).toEqual([]);
    } finally {
      await Promise.all([first.close(), second.close(), third.close()]);
    }
  });

  it("keeps its state on disk across a restart, in a directory it made (from the cluster image) or one that was there, empty", async () => {
    for (const dir of [join(await tempDir(), "service"), await tempDir()]) await keepsStateAcrossRestart(dir);
  });

  async function keepsStateAcrossRestart(dir: string) {
    const first = await openDb({ pgliteDir: dir });
    const [made] = await first.query<{ id: string }>("INSERT INTO rate_version (fingerprint, rate_milli, source) VALUES ($1, 1550000, 'test') RETURNING id", ["restart"]);
    await first.close();
    const again = await openDb({ pgliteDir: dir });
    try {
      expect(await again.query("SELECT id, fingerprint FROM rate_version WHERE id = $1", [made!.id])).toEqual([{ id: made!.id, fingerprint: "restart" }]);
    } finally {
      await again.close();
    }
  }

  it("refuses a directory written by another PostgreSQL major, saying which and what to do, and leaves it as it was", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "PG_VERSION"), "16\n");
    await writeFile(join(dir, "postgresql.conf"), "# an older PGlite's\n");
    await expect(openDb({ pgliteDir: dir })).rejects.toThrow(
      new RegExp(`holds a PostgreSQL 16 database.*runs PostgreSQL ${PGLITE_POSTGRES_MAJOR}.*Move the directory aside`),
    );
    expect((await readdir(dir)).sort()).toEqual(["PG_VERSION", "postgresql.conf"]);
    expect(await readFile(join(dir, "PG_VERSION"), "utf8")).toBe("16\n");
  });

  it("says why when PG_VERSION cannot be read, instead of letting PGlite fail without a reason", async () => {
    const dir = await tempDir();
    await mkdir(join(dir, "PG_VERSION"));
    await expect(openDb({ pgliteDir: dir })).rejects.toThrow(/EISDIR/);
  });

  it("is refused by npm start before any chain, ledger or service starts, in one line", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "PG_VERSION"), "16\n");
    const { code, out } = await runScript("stack/start.ts", [], { SERVER_PGLITE_DIR: dir });
    expect(code).toBe(1);
    expect(out).toContain(`${dir} holds a PostgreSQL 16 database`);
    expect(out).not.toMatch(/started chain id|ledger:|at refuseOtherPostgresMajor/);
    expect(await readdir(dir)).toEqual(["PG_VERSION"]);
  });
});
