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

  it("keeps its state on disk across a restart", async () => {
    const dir = await tempDir();
    const first = await openDb({ pgliteDir: dir });
    const [made] = await first.query<{ id: string }>("INSERT INTO rate_version (fingerprint, rate_milli, source) VALUES ($1, 1550000, 'test') RETURNING id", ["restart"]);
    await first.close();
    const again = await openDb({ pgliteDir: dir });
    try {
      expect(await again.query("SELECT id, fingerprint FROM rate_version WHERE id = $1", [made!.id])).toEqual([{ id: made!.id, fingerprint: "restart" }]);
    } finally {
      await again.close();
    }
  });

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
