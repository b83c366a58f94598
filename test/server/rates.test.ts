import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { openDb, type Db } from "../../server/db.ts";
import { loadConfig } from "../../server/config.ts";
import { priceUnder } from "../../server/quote/quote.ts";
import { RateVersions } from "../../server/pricing/rate-versions.ts";
import { GuardedRate, withinBand } from "../../server/pricing/rates.ts";

describe("the guarded rate source", () => {
  let db: Db;
  beforeAll(async () => {
    db = await openDb({ pgliteDir: undefined }); // in-memory PGlite
  });
  afterAll(() => db?.close());

  /** A source whose next readings are scripted: a number, or an Error to throw. `asked` counts the readings taken. */
  function source(name: string, readings: Array<bigint | Error>, cacheMs = 0, band = { maxDeviationPct: 5, referenceSeconds: 86_400, maxStalenessSeconds: 3_600, anchorMilli: 1_550_000n }) {
    const read = async () => {
      rates.asked++;
      const next = readings.shift();
      if (next === undefined) throw new Error("no more readings scripted");
      if (next instanceof Error) throw next;
      return next;
    };
    const rates = Object.assign(new GuardedRate(read, db, name, band, cacheMs), { asked: 0 });
    return rates;
  }
  afterEach(() => vi.useRealTimers());
  /** Moves the service's clock (Date only) forward. */
  const later = (ms: number) => vi.setSystemTime(Date.now() + ms);
  const ageLastGood = (name: string, seconds: number) =>
    db.query(`UPDATE fx_rate SET read_at = now() - make_interval(secs => $2) WHERE source = $1`, [name, seconds]);

  it("measures the band in whole basis points", () => {
    expect(withinBand(1_627_500n, 1_550_000n, 5)).toBe(true); // exactly +5%
    expect(withinBand(1_627_501n, 1_550_000n, 5)).toBe(false);
    expect(withinBand(1_472_500n, 1_550_000n, 5)).toBe(true); // exactly -5%
    expect(withinBand(1_472_499n, 1_550_000n, 5)).toBe(false);
  });

  it("takes readings within the band of the reference, starting from the configured anchor", async () => {
    const rates = source("steady", [1_560_000n, 1_600_000n]);
    expect(await rates.ngnPerUsdMilli()).toBe(1_560_000n);
    expect(await rates.ngnPerUsdMilli()).toBe(1_600_000n);
    // A first reading far from the anchor is refused, and with no good rate yet, quoting stops.
    await expect(source("fresh", [15_500n]).ngnPerUsdMilli()).rejects.toThrow(/more than 5% from the reference 1550000.*quoting is stopped/);
  });

  it("measures the band against the rate as it stood a window ago: small steps cannot walk it, and the true rate is believed again", async () => {
    // Twenty steps of +5%, each within 5% of the reading before it.
    const walk = Array.from({ length: 20 }, (_, i) => (1_550_000n * 105n ** BigInt(i + 1)) / 100n ** BigInt(i + 1));
    const rates = source("walked", [1_550_000n, ...walk, 1_550_000n]);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n);
    const served: bigint[] = [];
    for (let i = 0; i < walk.length; i++) served.push(await rates.ngnPerUsdMilli());
    // Only the first step is within 5% of the reference; every later one is refused.
    expect(served.every((r) => r <= 1_627_500n)).toBe(true);
    expect(served[0]).toBe(1_627_500n);
    const rows = await db.query<{ rate_milli: string }>(`SELECT rate_milli::text AS rate_milli FROM fx_rate WHERE source = 'walked' ORDER BY read_at`);
    expect(rows.map((r) => r.rate_milli)).toEqual(["1550000", "1627500"]);
    // The source comes back to the true rate: believed, although it is 4.8% below the last reading.
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n);
    // The reference is the rate as it stood a window ago (here 1,550,000, 25 h back), not the last reading.
    await db.query(
      `INSERT INTO fx_rate (rate_milli, source, read_at) VALUES (1550000, 'daily', now() - interval '25 hours'), (1600000, 'daily', now() - interval '30 minutes')`,
    );
    const daily = source("daily", [1_660_000n, 1_620_000n]);
    expect(await daily.ngnPerUsdMilli()).toBe(1_600_000n); // 1,660,000 is 3.75% from the last reading but 7.1% from the reference: refused
    expect(await daily.ngnPerUsdMilli()).toBe(1_620_000n); // within 5% of the reference
  });

  it("tells readings recorded in the same instant apart by the order they were taken", async () => {
    // PGlite's clock counts milliseconds, so two readings a quote apart can share read_at.
    const rates = source("tied", [1_550_000n, 1_627_500n]);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n);
    expect(await rates.ngnPerUsdMilli()).toBe(1_627_500n);
    await db.query(`UPDATE fx_rate SET read_at = now() - interval '1 minute' WHERE source = 'tied'`);
    // The reference is still the first reading, so 1,700,000 (+9.7% from it, +4.5% from the second) is refused,
    // and the last good rate that serves meanwhile is the second reading, not the first.
    const next = source("tied", [1_700_000n, 1_600_000n]);
    expect(await next.ngnPerUsdMilli()).toBe(1_627_500n);
    const rows = await db.query<{ rate_milli: string }>(`SELECT rate_milli::text AS rate_milli FROM fx_rate WHERE source = 'tied'`);
    expect(rows.map((r) => r.rate_milli).sort()).toEqual(["1550000", "1627500"]);
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

  it("asks a failing source once per interval, not once per quote, serving the last good rate meanwhile", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const rates = source("flaky", [1_550_000n, new Error("rate source answered 502"), 1_560_000n], 60_000);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n);
    later(60_001);
    const quotes = await Promise.all(Array.from({ length: 5 }, () => rates.ngnPerUsdMilli()));
    for (let i = 0; i < 5; i++) quotes.push(await rates.ngnPerUsdMilli());
    expect(quotes.every((r) => r === 1_550_000n)).toBe(true);
    expect(rates.asked).toBe(2); // ten quotes while the source was down: one reading
    later(60_001);
    expect(await rates.ngnPerUsdMilli()).toBe(1_560_000n); // back: the next interval reads it
    expect(rates.asked).toBe(3);
  });

  it("never serves the last good rate past its staleness limit, and asks a stopped source once per interval", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    expect(await source("aging", [1_550_000n]).ngnPerUsdMilli()).toBe(1_550_000n);
    await ageLastGood("aging", 3_590); // ten seconds of staleness left
    const rates = source("aging", [new Error("down"), new Error("down"), new Error("down")], 60_000);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n);
    later(5_000);
    expect(await rates.ngnPerUsdMilli()).toBe(1_550_000n); // within the interval: not asked again
    expect(rates.asked).toBe(1);
    later(6_000); // past the last good rate's limit, though inside the interval
    await expect(rates.ngnPerUsdMilli()).rejects.toThrow(/the rate source failed: down; no good rate within the last 3600 s, so quoting is stopped/);
    expect(rates.asked).toBe(2);
    await expect(rates.ngnPerUsdMilli()).rejects.toThrow(/quoting is stopped/);
    expect(rates.asked).toBe(2); // stopped: the answer stands until the next interval
    later(60_001);
    await expect(rates.ngnPerUsdMilli()).rejects.toThrow(/quoting is stopped/);
    expect(rates.asked).toBe(3);
  });
});

describe("rate versions", () => {
  let db: Db;
  beforeAll(async () => {
    db = await openDb({ pgliteDir: undefined }); // in-memory PGlite
  });
  afterAll(() => db?.close());

  const fees = loadConfig({}).SERVICE_FEES_USD;
  /** A rate source whose figure the test sets. */
  const settable = (milli: bigint) => {
    const source = { milli, source: "test", ngnPerUsdMilli: async () => source.milli };
    return source;
  };
  const rows = () => db.query<{ id: string; rate_milli: string; open: boolean }>(`SELECT id::text AS id, rate_milli::text AS rate_milli, live_until IS NULL AS open FROM rate_version ORDER BY rate_version.id`);

  it("writes a version only when the rate changes, superseding the open one; a restart reuses it", async () => {
    const rate = settable(1_550_000n);
    const versions = new RateVersions(db, rate, fees);
    const first = await versions.current();
    expect((await Promise.all(Array.from({ length: 20 }, () => versions.current()))).every((v) => v.id === first.id)).toBe(true);
    expect(await rows()).toEqual([{ id: first.id, rate_milli: "1550000", open: true }]);

    rate.milli = 1_600_000n;
    const second = await versions.current();
    expect(second.id).not.toBe(first.id);
    expect(await rows()).toEqual([
      { id: first.id, rate_milli: "1550000", open: false },
      { id: second.id, rate_milli: "1600000", open: true },
    ]);
    // Another instance (or a restart) with the same figures finds the open version.
    expect((await new RateVersions(db, settable(1_600_000n), fees).current()).id).toBe(second.id);
    expect(await rows()).toHaveLength(2);
    // A price is a pure function of the bill and the version.
    expect(priceUnder({ nairaAmount: 1600, serviceCategory: "ELECTRICITY" }, second).amount).toBe(1_101_000n);
  });

  it("offers for a payment only the versions live within its window", async () => {
    const versions = new RateVersions(db, settable(1_700_000n), fees);
    const current = await versions.current();
    const ids = (await versions.liveWithin(3_600)).map((v) => v.id);
    expect(ids[0]).toBe(current.id); // newest first; the superseded ones were live moments ago
    expect(ids.length).toBeGreaterThan(1);
    await db.query(`UPDATE rate_version SET live_until = now() - interval '2 hours' WHERE live_until IS NOT NULL`);
    expect((await versions.liveWithin(3_600)).map((v) => v.id)).toEqual([current.id]);
    expect((await versions.liveWithin(3 * 3_600)).length).toBe(ids.length);
  });

  it("answers RATE_UNAVAILABLE when the source fails", async () => {
    const versions = new RateVersions(db, { ngnPerUsdMilli: async () => Promise.reject(new Error("down")) }, fees);
    await expect(versions.current()).rejects.toMatchObject({ code: "RATE_UNAVAILABLE" });
  });
});
