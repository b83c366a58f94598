/**
 * The kept refusals' bounds on the service's own database (orders/refused-payments.ts): what
 * a payer may have kept at once, and how long a record lives, whatever its authorization's
 * window says.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toHex } from "viem";
import { openDb, type Db } from "../../server/db.ts";
import { KEPT_AT_MOST_SECONDS, PER_PAYER, RefusedPayments, type RefusedPayment } from "../../server/orders/refused-payments.ts";

const DAY = 86_400n;
const now = () => BigInt(Math.floor(Date.now() / 1000));
let seq = 0;

function refusal(payer: string, validBefore: bigint): RefusedPayment {
  return {
    chain: "CELO",
    rail: "authorization",
    token: "USDC",
    tokenAddress: "0x00000000000000000000000000000000000000aa",
    payer,
    nonce: toHex(++seq, { size: 32 }),
    amount: 1_000_000n,
    validBefore,
    bill: {},
    bodyHash: "h",
    payment: {},
    requirements: {},
    reason: "refused: AUTHORIZATION_TOO_LONG",
  };
}

describe("kept refusals", () => {
  let db: Db;
  let kept: RefusedPayments;
  beforeAll(async () => {
    db = await openDb({});
    kept = new RefusedPayments(db);
  });
  afterAll(async () => db?.close());

  const backdate = (payer: string, seconds: bigint) =>
    db.query(`UPDATE refused_payment SET created_at = created_at - make_interval(secs => $2) WHERE payer = $1`, [payer, Number(seconds)]);
  const count = async (payer: string) => (await db.query(`SELECT 1 FROM refused_payment WHERE payer = $1`, [payer])).length;

  it("count against their payer for a week at most, however long their authorization runs, and are purged a day after", async () => {
    const payer = "0x00000000000000000000000000000000000000b1";
    const years = now() + 10n * 365n * DAY;
    const first = refusal(payer, years);
    const until = await kept.record(first, now());
    // It counts for a week from now, not for its ten years.
    expect(until).not.toBeNull();
    expect(Number(until! - now())).toBeGreaterThan(KEPT_AT_MOST_SECONDS - 60);
    expect(Number(until! - now())).toBeLessThanOrEqual(KEPT_AT_MOST_SECONDS);
    for (let i = 1; i < PER_PAYER; i++) expect(await kept.record(refusal(payer, years), now())).not.toBeNull();
    // Full: the next is not kept.
    expect(await kept.record(refusal(payer, years), now())).toBeNull();
    // Offered again six days on, the same refusal is told the week it was kept for, not a new one.
    await backdate(payer, 6n * DAY);
    expect(await kept.record(first, now())).toBe(until! - 6n * DAY);

    // A week on, those records no longer count: the payer may have new ones kept.
    await backdate(payer, DAY + 60n);
    expect(await kept.record(refusal(payer, years), now())).not.toBeNull();
    // Not purged yet: a landing within the day after still finds its record.
    expect(await kept.purge(now())).toBe(0);
    expect(await count(payer)).toBe(PER_PAYER + 1);

    // A day later the capped ones are gone; the new one stays.
    await backdate(payer, DAY);
    expect(await kept.purge(now())).toBe(PER_PAYER);
    expect(await count(payer)).toBe(1);
  });

  it("with a short window, live until it expires and are purged a day after, as before the cap", async () => {
    const payer = "0x00000000000000000000000000000000000000b2";
    const soon = now() + 300n;
    expect(await kept.record(refusal(payer, soon), now())).toBe(soon);
    expect(await kept.purge(now() + 300n + DAY - 10n)).toBe(0);
    expect(await kept.purge(now() + 300n + DAY + 10n)).toBe(1);
  });
});
