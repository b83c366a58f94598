/**
 * The service's own state (quotes now; orders, links and schedules as they arrive) in
 * PostgreSQL: embedded PGlite by default, a PostgreSQL server when SERVER_DATABASE_URL is
 * set. One small interface over both, and forward-only migrations keyed by version.
 */
import { PGlite } from "@electric-sql/pglite";
import pg from "pg";

export interface Db {
  query<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

const MIGRATIONS: string[] = [
  `CREATE TABLE quote (
     body_hash   text        NOT NULL,
     chain       text        NOT NULL,
     token       text        NOT NULL,
     amount      numeric(78) NOT NULL,
     rate_milli  numeric(78) NOT NULL,
     created_at  timestamptz NOT NULL DEFAULT now(),
     expires_at  timestamptz NOT NULL,
     PRIMARY KEY (body_hash, chain, token, expires_at)
   );
   CREATE INDEX quote_live ON quote (body_hash, expires_at);`,
  // One row per order. The unique (chain, token, payer, nonce) is the once-only lock on
  // an x402 payment: taken before anything is settled, never released.
  `CREATE TABLE bill_order (
     request_id        text        PRIMARY KEY,
     biller_request_id text        NOT NULL UNIQUE,
     body_hash         text        NOT NULL,
     bill              jsonb       NOT NULL,
     chain             text        NOT NULL,
     token             text        NOT NULL,
     token_address     text        NOT NULL,
     payer             text        NOT NULL,
     amount            numeric(78) NOT NULL,
     auth_nonce        text        NOT NULL,
     payment           jsonb       NOT NULL,
     requirements      jsonb       NOT NULL,
     status            text        NOT NULL,
     tx_hash           text,
     purchased_code    text,
     units             text,
     failure_reason    text,
     refund_tx_hash    text,
     lease_until       timestamptz,
     created_at        timestamptz NOT NULL DEFAULT now(),
     updated_at        timestamptz NOT NULL DEFAULT now(),
     UNIQUE (chain, token_address, payer, auth_nonce)
   );
   CREATE INDEX bill_order_open ON bill_order (status, lease_until);`,
];

async function migrate(db: Db): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS schema_migration (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
  const done = new Set((await db.query<{ version: number }>(`SELECT version FROM schema_migration`)).map((r) => r.version));
  for (const [i, sql] of MIGRATIONS.entries()) {
    if (done.has(i + 1)) continue;
    await db.query(sql);
    // A concurrent instance may have applied it meanwhile: the key makes that a no-op.
    await db.query(`INSERT INTO schema_migration (version) VALUES ($1) ON CONFLICT DO NOTHING`, [i + 1]);
  }
}

export async function openDb(options: { url?: string; pgliteDir?: string }): Promise<Db> {
  let db: Db;
  if (options.url) {
    const pool = new pg.Pool({ connectionString: options.url, max: 10, connectionTimeoutMillis: 5_000, statement_timeout: 10_000 });
    db = {
      query: async (text, params) => (await pool.query(text, params)).rows,
      close: () => pool.end(),
    };
  } else {
    const lite = new PGlite(options.pgliteDir);
    db = {
      // PGlite runs one statement list per exec; parameterised queries go through query().
      query: async <T>(text: string, params?: unknown[]) =>
        params && params.length > 0 ? ((await lite.query(text, params)).rows as T[]) : ((await lite.exec(text)).at(-1)?.rows as T[]) ?? [],
      close: () => lite.close(),
    };
  }
  await migrate(db);
  return db;
}
