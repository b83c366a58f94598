import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import { GuardedRate, withinBand } from "../../server/pricing/rates.ts";

describe("the guarded rate source", () => {
  let db: Db;
  beforeAll(async () => {
    db = await openDb({ pgliteDir: undefined }); // in-memory PGlite
  });
  afterAll(() => db?.close());

  /** A source whose next readings are scripted: a number, or an Error to throw. */
  function source(name: string, readings: Array<bigint | Error>, band = { maxDeviationPct: 5, maxStalenessSeconds: 3_600, anchorMilli: 1_550_000n }) {
    const read = async () => {
      const next = readings.shift();
      if (next === undefined) throw new Error("no more readings scripted");
      if (next instanceof Error) throw next;
      return next;
    };
    return new GuardedRate(read, db, name, band, 0);
  }
  const ageLastGood = (name: string, seconds: number) =>
    db.query(`UPDATE fx_rate SET read_at = now() - make_interval(secs => $2) WHERE source = $1`, [name, seconds]);

  it("measures the band in whole basis points", () => {
    expect(withinBand(1_627_500n, 1_550_000n, 5)).toBe(true); // exactly +5%
    expect(withinBand(1_627_501n, 1_550_000n, 5)).toBe(false);
    expect(withinBand(1_472_500n, 1_550_000n, 5)).toBe(true); // exactly -5%
    expect(withinBand(1_472_499n, 1_550_000n, 5)).toBe(false);
  });

  it("takes readings within the band of the last good rate, starting from the configured anchor", async () => {
    const rates = source("steady", [1_560_000n, 1_600_000n]);
    expect(await rates.ngnPerUsdMilli()).toBe(1_560_000n);
    expect(await rates.ngnPerUsdMilli()).toBe(1_600_000n);
    // A first reading far from the anchor is refused, and with no good rate yet, quoting stops.
    await expect(source("fresh", [15_500n]).ngnPerUsdMilli()).rejects.toThrow(/more than 5% from the last good 1550000.*quoting is stopped/);
  });

  it("refuses a reading outside the band and serves the last good rate until it is too old", async () => {
    const rates = source("jumpy", [1_550_000n, 155_000n, new Error("rate source answered 500"), 155_000n]);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n); // a tenfold move is one bad reading, not a price
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n); // the source is down: the last good rate serves
    await ageLastGood("jumpy", 3_601);
    await expect(rates.ngnPerUsdMilli()).rejects.toThrow(/no good rate within the last 3600 s/);
    // The refused readings were never recorded as good.
    const rows = await db.query<{ rate_milli: string }>(`SELECT rate_milli::text AS rate_milli FROM fx_rate WHERE source = 'jumpy'`);
    expect(rows.map((r) => r.rate_milli)).toEqual(["1550000"]);
  });
});
