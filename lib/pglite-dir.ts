/**
 * The embedded PostgreSQL (PGlite) both the service and the ledger run, and the check that a data
 * directory was written by the same PostgreSQL major. One written by another (PGlite 0.2 ran 16)
 * cannot be opened, and PGlite says only that it failed to initialise.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** The PostgreSQL major of the PGlite in package.json (test/server/db.test.ts holds the two together). */
export const PGLITE_POSTGRES_MAJOR = 18;

/**
 * Throws, naming both majors and `wayOut`, when `dir` holds a database of another PostgreSQL
 * major. A directory with no database yet passes (PGlite makes one); one whose PG_VERSION cannot
 * be read throws that error. Nothing in it is touched.
 */
export function refuseOtherPostgresMajor(dir: string, wayOut: string): void {
  let found: string;
  try {
    found = readFileSync(join(dir, "PG_VERSION"), "utf8").trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return; // no database there yet
    throw err; // unreadable: say so now rather than let PGlite fail without a reason
  }
  if (found !== String(PGLITE_POSTGRES_MAJOR)) {
    throw new Error(`${dir} holds a PostgreSQL ${found} database, written by another PGlite; the embedded PGlite runs PostgreSQL ${PGLITE_POSTGRES_MAJOR}. ${wayOut}`);
  }
}
