import { afterAll, describe, expect, it } from "vitest";
import pg from "pg";
import type { Deployments } from "../../lib/deployments.ts";
import { ledgerDatabaseFor } from "../../stack/ledger-process.ts";
import { POSTGRES_URL } from "../support/stack.ts";

const chain = (rpcUrl: string, genesis: string) =>
  ({ rpcUrl, genesisHash: `0x${genesis.repeat(64)}` }) as unknown as NonNullable<Deployments["chains"]["CELO"]>;

describe("the ledger's PostgreSQL database for local chains", () => {
  const created: string[] = [];
  afterAll(async () => {
    const c = new pg.Client({ connectionString: POSTGRES_URL });
    await c.connect();
    for (const name of created) await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await c.end();
  });

  it("is one per genesis, created once, so a reset chain never reads an old chain's cache", async () => {
    const first: Deployments = { chains: { CELO: chain("http://127.0.0.1:8545", "a"), BASE: chain("http://127.0.0.1:8546", "b") } };
    const reset: Deployments = { chains: { CELO: chain("http://127.0.0.1:8545", "c"), BASE: chain("http://127.0.0.1:8546", "b") } };
    const a = await ledgerDatabaseFor(POSTGRES_URL, first);
    const again = await ledgerDatabaseFor(POSTGRES_URL, first);
    const b = await ledgerDatabaseFor(POSTGRES_URL, reset);
    created.push(new URL(a).pathname.slice(1), new URL(b).pathname.slice(1));
    expect(again).toBe(a);
    expect(b).not.toBe(a);
    expect(new URL(a).pathname).toMatch(/^\/\w+_local_[0-9a-f]{12}$/);
    const c = new pg.Client({ connectionString: a });
    await c.connect();
    expect((await c.query("SELECT current_database() AS db")).rows[0].db).toBe(new URL(a).pathname.slice(1));
    await c.end();
  });

  it("is the configured one for real chains", async () => {
    const real: Deployments = { chains: { CELO: chain("https://forno.example/celo", "a") } };
    expect(await ledgerDatabaseFor(POSTGRES_URL, real)).toBe(POSTGRES_URL);
  });
});
