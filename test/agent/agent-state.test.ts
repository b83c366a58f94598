/**
 * The agent hub's state on both databases the service runs on (PGlite by default,
 * PostgreSQL when configured): links and their keys, the PIN lockout under concurrent
 * attempts, idempotent pull orders, and a schedule's due time claimed once by racing
 * instances, with a cancel atomic against the claim.
 */
import { silentLog } from "../../server/log.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { hashApiKey, newApiKey, PinHasher, scryptPinHash } from "../../server/credentials.ts";
import { LinkStore } from "../../server/agent/links.ts";
import { ScheduleStore, checkCron, nextDue } from "../../server/agent/schedules.ts";
import { openDb, type Db } from "../../server/db.ts";
import { ServiceError } from "../../server/errors.ts";
import { OrderStore } from "../../server/orders/store.ts";
import { freshDatabase, tempDir } from "../support/stack.ts";

const WALLET = "0x00000000000000000000000000000000000000aa";
const bill = { serviceID: "mtn", serviceCategory: "AIRTIME" as const, network: "MTN", billersCode: "08011111111", nairaAmount: 100 };
const pins = new PinHasher(randomBytes(32));
/** The hub checks a PIN against the link its key was just read with (one statement); a wallet alone takes the reserving path. */
const VIA = { wallet: "by wallet", link: "against the link as read" } as const;
const walletFor = (tail: string, via: keyof typeof VIA) => `0x${"0".repeat(37)}${via === "link" ? "1" : "0"}${tail}`;
const checker = (links: LinkStore, wallet: string, key: () => string, via: keyof typeof VIA) => (pin: string) =>
  via === "wallet" ? links.checkPin(wallet, pin) : links.authenticate(key()).then((link) => links.checkPin(link, pin));
/** A wallet linked under a fresh key with `pinHash`, its PIN checked `via` the hub's way or by wallet; `relink` links it again under a new key. */
async function linkedWallet(links: LinkStore, tail: string, via: keyof typeof VIA, pinHash: string) {
  const wallet = walletFor(tail, via);
  let key = "";
  const relink = async (hash: string) => {
    key = newApiKey();
    await links.link({ wallet, apiKeyHash: hashApiKey(key), pinHash: hash, channel: "MCP", chain: "CELO", token: "USDC" });
  };
  await relink(pinHash);
  return { wallet, key: () => key, check: checker(links, wallet, () => key, via), relink };
}
const codeOf = async (p: Promise<unknown>) => p.then(() => "OK", (e: unknown) => (e instanceof ServiceError ? e.code : String(e)));

for (const kind of ["pglite", "postgresql"] as const) {
  describe(`agent state on ${kind}`, () => {
    let db: Db;
    let drop: (() => Promise<void>) | undefined;

    beforeAll(async () => {
      if (kind === "postgresql") {
        const fresh = await freshDatabase("agent_state");
        drop = fresh.drop;
        // Two instances starting at once on a new database: both migrate cleanly, one after the other.
        const [first, second] = await Promise.all([openDb({ url: fresh.url }), openDb({ url: fresh.url })]);
        await second.close();
        db = first;
      } else {
        db = await openDb({});
      }
    });
    afterAll(async () => {
      await db?.close();
      await drop?.();
    });

    it("links, retires the old key on a re-link, and spends each signature once", async () => {
      const links = new LinkStore(db, { maxAttempts: 3, lockSeconds: 60, maxLockouts: 3, pins });
      const first = newApiKey();
      const second = newApiKey();
      await links.link({ wallet: WALLET, apiKeyHash: hashApiKey(first), pinHash: pins.hash("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
      expect(await links.authenticate(first)).toMatchObject({ wallet: WALLET, approvedChain: "CELO", approvedToken: "USDC" });
      await links.link({ wallet: WALLET, apiKeyHash: hashApiKey(second), pinHash: pins.hash("5678"), channel: "A2A", chain: "CELO", token: "USD₮" });
      expect(await codeOf(links.authenticate(first))).toBe("API_KEY_RETIRED");
      expect(await links.authenticate(second)).toMatchObject({ channel: "A2A", approvedToken: "USD₮" });
      expect(await codeOf(links.authenticate(newApiKey()))).toBe("API_KEY_INVALID");
      expect(await links.useSignature("sig-1", WALLET)).toBe(true);
      expect(await links.useSignature("sig-1", WALLET)).toBe(false);
    });

    for (const via of ["wallet", "link"] as const) {
      it(`locks after the limit even when wrong PINs arrive at once, never for right ones, and refuses the right PIN while locked (${VIA[via]})`, async () => {
        const links = new LinkStore(db, { maxAttempts: 3, lockSeconds: 60, maxLockouts: 3, pins });
        const { wallet, check } = await linkedWallet(links, "bb", via, pins.hash("1234"));
        expect(await codeOf(check("1234"))).toBe("OK");
        // Eight right PINs at once: never a lock; those beyond the attempts left wait their turn.
        const rights = await Promise.all(Array.from({ length: 8 }, () => codeOf(check("1234"))));
        expect(rights.filter((c) => c === "OK").length).toBeGreaterThanOrEqual(3);
        expect(rights.every((c) => c === "OK" || c === "PIN_BUSY")).toBe(true);
        // Checked in one statement each, none is ever in flight beside another: all pass.
        if (via === "link") expect(rights).toEqual(Array(8).fill("OK"));
        // Wrong, wrong, right: the right one clears the count.
        expect(await codeOf(check("0000"))).toBe("PIN_INVALID");
        expect(await codeOf(check("0000"))).toBe("PIN_INVALID");
        expect(await codeOf(check("1234"))).toBe("OK");
        // Eight guesses at once: only three are ever checked (two wrong, the third locks).
        const codes = await Promise.all(Array.from({ length: 8 }, () => codeOf(check("0000"))));
        expect(codes.filter((c) => c === "PIN_INVALID")).toHaveLength(2);
        // The others were refused unchecked: busy while the three were in flight, locked once
        // the third had locked (a PIN check now takes microseconds, so which depends on timing).
        expect(codes.filter((c) => c === "PIN_LOCKED").length).toBeGreaterThanOrEqual(1);
        expect(codes.filter((c) => c === "PIN_LOCKED" || c === "PIN_BUSY")).toHaveLength(6);
        const [row] = await db.query<{ pin_lockouts: number; pin_failures: number }>(`SELECT pin_lockouts, pin_failures FROM agent_link WHERE wallet = $1`, [wallet]);
        expect(row).toEqual({ pin_lockouts: 1, pin_failures: 0 }); // one lockout: exactly three wrong PINs were checked
        expect(await codeOf(check("1234"))).toBe("PIN_LOCKED");
      });

      it(`still takes a PIN hashed with scrypt before the pepper, and rewrites it under the pepper on the first right PIN (${VIA[via]})`, async () => {
        const links = new LinkStore(db, { maxAttempts: 3, lockSeconds: 60, maxLockouts: 3, pins });
        const { wallet, check } = await linkedWallet(links, "dd", via, await scryptPinHash("4321"));
        const stored = async () => (await db.query<{ pin_hash: string }>(`SELECT pin_hash FROM agent_link WHERE wallet = $1`, [wallet]))[0]!.pin_hash;
        expect(await codeOf(check("1111"))).toBe("PIN_INVALID");
        expect(await stored()).toMatch(/^scrypt\$/); // a wrong PIN rewrites nothing
        expect(await codeOf(check("4321"))).toBe("OK");
        expect(await stored()).toMatch(/^hmac\$/);
        expect(await codeOf(check("4321"))).toBe("OK");
        expect(await codeOf(check("1111"))).toBe("PIN_INVALID");
      });

      it(`escalates PIN lockouts, does not forgive them for a right PIN, and retires the key after the last (${VIA[via]})`, async () => {
        const events: string[] = [];
        const links = new LinkStore(db, { maxAttempts: 2, lockSeconds: 60, maxLockouts: 3, pins }, { ...silentLog, warn: (msg) => void events.push(msg) });
        const { wallet, key, check } = await linkedWallet(links, "cc", via, pins.hash("1234"));
        const unlock = () => db.query(`UPDATE agent_link SET locked_until = now() - interval '1 second' WHERE wallet = $1`, [wallet]);
        const lockFor = async () => {
          expect(await codeOf(check("0000"))).toBe("PIN_INVALID");
          const err = (await check("0000").catch((e) => e)) as ServiceError;
          expect(err.code).toBe("PIN_LOCKED");
          return err.extra!.retry_after_seconds as number;
        };
        expect(await lockFor()).toBeGreaterThan(55);
        expect(await codeOf(check("1234"))).toBe("PIN_LOCKED"); // no guessing meanwhile, not even right
        await unlock();
        expect(await codeOf(check("1234"))).toBe("OK"); // the owner's right PIN
        const second = await lockFor();
        expect(second).toBeGreaterThan(115); // twice as long, and not forgiven by the right PIN
        expect(second).toBeLessThanOrEqual(120);
        await unlock();
        expect(await codeOf(check("0000"))).toBe("PIN_INVALID");
        expect(await codeOf(check("0000"))).toBe("API_KEY_RETIRED");
        expect(await codeOf(links.authenticate(key()))).toBe("API_KEY_RETIRED");
        expect(events).toEqual(["pin lockout", "pin lockout", "pin lockout: key retired"]);
      });

      it(`bounds the wrong PINs of a key's life when a guesser stops short of every lockout and the key's own agent pays between his tries (${VIA[via]})`, async () => {
        const events: string[] = [];
        const links = new LinkStore(db, { maxAttempts: 3, lockSeconds: 60, maxLockouts: 3, pins }, { ...silentLog, warn: (msg) => void events.push(msg) });
        const { key, check, relink } = await linkedWallet(links, "ee", via, pins.hash("1234"));
        const wrong = async () => (await check("0000").catch((e: unknown) => e)) as ServiceError;
        for (let round = 0; round < 4; round++) {
          expect((await wrong()).code).toBe("PIN_INVALID");
          const second = await wrong();
          expect(second.code).toBe("PIN_INVALID"); // one short of the lockout...
          expect(second.extra!.attempts_left).toBe(1);
          expect(await codeOf(check("1234"))).toBe("OK"); // ...and the agent's own pay clears that count
        }
        // Not the key's: the ninth wrong PIN (3 attempts x 3 lockouts) retires it, though no lockout ever began.
        expect((await wrong()).code).toBe("API_KEY_RETIRED");
        expect(await codeOf(links.authenticate(key()))).toBe("API_KEY_RETIRED");
        expect(events).toEqual(["pin lockout: key retired"]);
        // A new link's key starts its own count.
        await relink(pins.hash("1234"));
        expect((await wrong()).extra!.attempts_left).toBe(2);
      });
    }

    it("checks a PIN against the link as its key was read, in one statement, and writes nothing once that key, PIN or limit no longer stands", async () => {
      const statements: string[] = [];
      const counting: Db = { ...db, query: (text, params) => (/agent_link/.test(text) && statements.push(text), db.query(text, params)) };
      const links = new LinkStore(counting, { maxAttempts: 3, lockSeconds: 60, maxLockouts: 3, pins });
      const wallet = walletFor("ff", "link");
      const key = newApiKey();
      await links.link({ wallet, apiKeyHash: hashApiKey(key), pinHash: pins.hash("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
      const link = await links.authenticate(key);
      const pinState = async () => (await db.query(`SELECT pin_failures, pin_wrong_total, pin_pending FROM agent_link WHERE wallet = $1`, [wallet]))[0];

      statements.length = 0;
      await links.checkPin(link, "1234");
      expect(statements).toHaveLength(1); // no reservation and release around it
      statements.length = 0;
      expect(await codeOf(links.checkPin(link, "0000"))).toBe("PIN_INVALID");
      expect(statements).toHaveLength(1);
      expect(await pinState()).toEqual({ pin_failures: 1, pin_wrong_total: 1, pin_pending: 0 });

      // A guesser locks the key after the owner's link was read: the owner's right PIN is refused.
      expect(await codeOf(links.checkPin(await links.authenticate(key), "0000"))).toBe("PIN_INVALID");
      expect(await codeOf(links.checkPin(await links.authenticate(key), "0000"))).toBe("PIN_LOCKED");
      expect(await codeOf(links.checkPin(link, "1234"))).toBe("PIN_LOCKED");
      expect(await codeOf(links.checkPin(link, "0000"))).toBe("PIN_LOCKED"); // and a guess counts nothing while locked
      expect(await pinState()).toEqual({ pin_failures: 0, pin_wrong_total: 3, pin_pending: 0 });

      // Linked again (a new key and PIN) after the link was read: the old key's PIN, right or
      // wrong, is refused as retired and counts nothing against the new link.
      const renewed = newApiKey();
      await links.link({ wallet, apiKeyHash: hashApiKey(renewed), pinHash: pins.hash("9999"), channel: "MCP", chain: "CELO", token: "USDC" });
      expect(await codeOf(links.checkPin(link, "1234"))).toBe("API_KEY_RETIRED");
      expect(await codeOf(links.checkPin(link, "0000"))).toBe("API_KEY_RETIRED");
      expect(await pinState()).toEqual({ pin_failures: 0, pin_wrong_total: 0, pin_pending: 0 });
      expect(await codeOf(links.checkPin(await links.authenticate(renewed), "9999"))).toBe("OK");

      // Checks under way on the reserving path fill the attempts left: a guess checked in one
      // statement is refused unchecked and uncounted, and so is the right PIN.
      const current = await links.authenticate(renewed);
      await db.query(`UPDATE agent_link SET pin_failures = 1, pin_pending = 2, pin_attempt_at = now() WHERE wallet = $1`, [wallet]);
      expect(await codeOf(links.checkPin(current, "0000"))).toBe("PIN_BUSY");
      expect(await codeOf(links.checkPin(current, "9999"))).toBe("PIN_BUSY");
      expect(await pinState()).toEqual({ pin_failures: 1, pin_wrong_total: 0, pin_pending: 2 });
      // A reservation a minute old was a crash's: it no longer counts.
      await db.query(`UPDATE agent_link SET pin_attempt_at = now() - interval '61 seconds' WHERE wallet = $1`, [wallet]);
      expect(await codeOf(links.checkPin(current, "0000"))).toBe("PIN_INVALID");
      expect(await pinState()).toMatchObject({ pin_failures: 2, pin_wrong_total: 1 });
    });

    it("creates a pull order once per idempotency key, even when two requests race", async () => {
      const orders = new OrderStore(db);
      const order = (n: number) => ({
        requestId: `req_20261121120${n}00000000000000000000`,
        vend: null,
        bodyHash: "h",
        bill: bill as unknown as Record<string, unknown>,
        chain: "CELO",
        token: "USDC",
        tokenAddress: "0x00000000000000000000000000000000000000cc",
        payer: WALLET,
        amount: 1_000n,
        batchId: null,
        scheduleId: null,
        idempotencyKey: "same-key",
      });
      const [a, b] = await Promise.all([orders.createPullOrders([order(1)], 60), orders.createPullOrders([order(2)], 60)]);
      expect([a.created, b.created].sort()).toEqual([false, true]);
      expect(a.orders[0]!.requestId).toBe(b.orders[0]!.requestId);
      expect(a.orders[0]).toMatchObject({ rail: "pull", status: "PULLING", amount: 1_000n });
    });

    it("records a gathered group's pull hashes together, each under its own guard and with its own outcome", async () => {
      const wallet = (n: number) => `0x${n.toString(16).padStart(40, "0")}`;
      const links = new LinkStore(db, { maxAttempts: 3, lockSeconds: 60, maxLockouts: 3, pins });
      const link = async (w: string) => {
        const key = newApiKey();
        await links.link({ wallet: w, apiKeyHash: hashApiKey(key), pinHash: pins.hash("1234"), channel: "MCP", chain: "CELO", token: "USDC" });
        return hashApiKey(key);
      };
      const [current, retired] = [await link(wallet(0x101)), await link(wallet(0x102))];
      await link(wallet(0x102)); // re-linked: its first key is retired
      const scheduled = await link(wallet(0x103)); // a schedule's wallet also paying by key, in the same tick
      const schedules = new ScheduleStore(db);
      const later = new Date(Date.now() + 3_600_000);
      const schedule = (w: string) => schedules.create({ wallet: w, bill, chain: "CELO", token: "USDC", runAt: later, cron: null, firstRun: later, maxRuns: null, maxPerWallet: 10, apiKeyHash: null });
      const [active, cancelled] = [await schedule(wallet(0x103)), await schedule(wallet(0x104))];
      await schedules.cancel(wallet(0x104), cancelled.id);

      const orders = new OrderStore(db);
      const pullOrder = async (n: number, payer: string) => {
        const id = `2026112412${n}000000000000000000000`;
        const made = await orders.createPullOrders(
          [{ requestId: `req_${id}`, vend: null, bodyHash: "h", bill: bill as unknown as Record<string, unknown>, chain: "CELO", token: "USDC", tokenAddress: "0x00000000000000000000000000000000000000cc", payer, amount: 1_000n, batchId: null, scheduleId: null, idempotencyKey: `group-${n}` }],
          60,
        );
        return made.orders[0]!.requestId;
      };
      const ids: string[] = [];
      for (const [n, w] of [[10, 0x101], [11, 0x102], [12, 0x105], [13, 0x103], [14, 0x104], [15, 0x106], [16, 0x106], [17, 0x103], [18, 0x101], [19, 0x101], [20, 0x106]] as const) {
        ids.push(await pullOrder(n, wallet(w)));
      }
      expect(await orders.setTxHash([ids[6]!], "0xfirst")).toBe(true);

      let statements = 0;
      const counted: Db = {
        query: <T,>(text: string, params?: unknown[]) => {
          statements++;
          return db.query<T>(text, params);
        },
        transaction: (work) => db.transaction(work),
        close: () => db.close(),
      };
      const group = new OrderStore(counted);
      const outcomes = await Promise.all([
        group.setTxHash([ids[0]!], "0xgroup", { apiKeyHash: current }), // its wallet's current key: recorded
        group.setTxHash([ids[1]!], "0xgroup", { apiKeyHash: retired }), // a retired key: not recorded
        group.setTxHash([ids[2]!], "0xgroup", { apiKeyHash: current }), // a current key, but another wallet's: not recorded
        group.setTxHash([ids[3]!], "0xgroup", { scheduleId: active.id }), // an active schedule: recorded
        group.setTxHash([ids[4]!], "0xgroup", { scheduleId: cancelled.id }), // a cancelled schedule: not recorded
        group.setTxHash([ids[5]!], "0xgroup"), // no guard: recorded
        group.setTxHash([ids[6]!], "0xgroup"), // recorded once already: not again
        group.setTxHash([ids[7]!], "0xgroup", { apiKeyHash: scheduled }), // the schedule's wallet, by key: recorded
        group.setTxHash([ids[8]!, ids[9]!], "0xgroup", { apiKeyHash: current }), // a batch of two under one key: recorded
        group.setTxHash([ids[10]!], "0xgroup"), // one order named twice in the tick:
        group.setTxHash([ids[10]!], "0xother"), //   only one of the two holds
      ]);
      expect(statements).toBe(2); // one per kind of guard
      expect(outcomes.slice(0, 9)).toEqual([true, false, false, true, false, true, false, true, true]);
      expect(outcomes.slice(9).filter(Boolean)).toHaveLength(1);
      const hashes = await Promise.all(ids.map(async (id) => (await orders.get(id))!.txHash));
      expect(hashes.slice(0, 10)).toEqual(["0xgroup", null, null, "0xgroup", null, "0xgroup", "0xfirst", "0xgroup", "0xgroup", "0xgroup"]);
      expect(hashes[10]).toBe(outcomes[9] ? "0xgroup" : "0xother");

      // A schedule's last run under way (the schedule COMPLETED, so a re-link does not cancel
      // it) pays only while the key it was made under is still its wallet's.
      const owner = wallet(0x107);
      const madeUnder = await link(owner);
      const last = await schedules.create({ wallet: owner, bill, chain: "CELO", token: "USDC", runAt: later, cron: null, firstRun: later, maxRuns: null, maxPerWallet: 10, apiKeyHash: madeUnder });
      await db.query(`UPDATE bill_schedule SET status = 'COMPLETED' WHERE id = $1`, [last.id]);
      const [stillHis, afterRelink] = [await pullOrder(21, owner), await pullOrder(22, owner)];
      expect(await orders.setTxHash([stillHis], "0xlast", { scheduleId: last.id })).toBe(true);
      await link(owner); // re-linked: the key the schedule was made under is retired
      expect(await orders.setTxHash([afterRelink], "0xlast", { scheduleId: last.id })).toBe(false);
      expect((await orders.get(afterRelink))!.txHash).toBeNull();

      // Signed again in another transaction (alone, after its batch was refused): under the
      // guard again, and only in place of the hash it names.
      const [again, retiredMeanwhile] = [await pullOrder(23, wallet(0x101)), await pullOrder(24, wallet(0x108))];
      const meanwhile = await link(wallet(0x108));
      for (const [id, key] of [[again, current], [retiredMeanwhile, meanwhile]] as const) expect(await orders.setTxHash([id], "0xbatch", { apiKeyHash: key })).toBe(true);
      await link(wallet(0x108)); // re-linked between the batch and the pull of its own
      expect(await orders.setTxHash([again], "0xalone", { apiKeyHash: current }, "0xnot-the-batch")).toBe(false);
      expect(await orders.setTxHash([again], "0xalone", { apiKeyHash: current }, "0xbatch")).toBe(true);
      expect(await orders.setTxHash([retiredMeanwhile], "0xalone2", { apiKeyHash: meanwhile }, "0xbatch")).toBe(false);
      expect((await orders.get(retiredMeanwhile))!.txHash).toBe("0xbatch");

      // The same transaction at a higher fee: no guard, but not once the order is written off;
      // the one the chain took is recorded whatever the state.
      expect(await orders.replaceTxHash([again], "0xalone", "0xbumped")).toBe(true);
      await db.query(`UPDATE bill_order SET status = 'PAYMENT_FAILED' WHERE request_id = $1`, [again]);
      expect(await orders.replaceTxHash([again], "0xbumped", "0xbumped-again")).toBe(false);
      expect((await orders.get(again))!.txHash).toBe("0xbumped");
      expect(await orders.replaceTxHash([again], "0xbumped", "0xalone", true)).toBe(true);
      expect((await orders.get(again))!.txHash).toBe("0xalone");

      // A batch's replacement goes out for all of its orders or none.
      const batch = [await pullOrder(25, wallet(0x109)), await pullOrder(26, wallet(0x109))];
      expect(await orders.setTxHash(batch, "0xpair")).toBe(true);
      await db.query(`UPDATE bill_order SET status = 'PAYMENT_FAILED' WHERE request_id = $1`, [batch[1]]);
      expect(await orders.replaceTxHash(batch, "0xpair", "0xpair-bumped")).toBe(false);
      expect(await Promise.all(batch.map(async (id) => (await orders.get(id))!.txHash))).toEqual(["0xpair", "0xpair"]);

      // Written off as unsent in place of a transaction that moved nothing, and only that one.
      const resigned = await pullOrder(27, wallet(0x109));
      expect(await orders.setTxHash([resigned], "0xnever-sent")).toBe(true);
      expect(await orders.writeOffUnsent(resigned)).toBeUndefined();
      expect(await orders.writeOffUnsent(resigned, "0xanother")).toBeUndefined();
      expect((await orders.writeOffUnsent(resigned, "0xnever-sent"))?.status).toBe("PAYMENT_FAILED");
    });

    it("claims each due time once across racing instances; a cancelled schedule is never claimed", async () => {
      const schedules = new ScheduleStore(db);
      const first = checkCron("*/5 * * * * *", 1);
      const s = await schedules.create({ wallet: WALLET, bill, chain: "CELO", token: "USDC", runAt: null, cron: "*/5 * * * * *", firstRun: first, maxRuns: null, maxPerWallet: 10, apiKeyHash: null });
      const due = { ...s, nextRunAt: first };
      const wins = await Promise.all(Array.from({ length: 4 }, () => schedules.claim(due, nextDue(due, first, 1))));
      expect(wins.filter(Boolean)).toHaveLength(1);
      const [listed] = await schedules.list(WALLET, "ACTIVE");
      expect(listed).toMatchObject({ runs: 1, lastRuns: [expect.objectContaining({ dueAt: first, outcome: null })] });

      const again = { ...s, nextRunAt: listed!.nextRunAt };
      await schedules.cancel(WALLET, s.id);
      expect(await schedules.claim(again, nextDue(again, again.nextRunAt!, 1))).toBe(false);
      expect(await codeOf(schedules.cancel(WALLET, s.id))).toBe("SCHEDULE_NOT_ACTIVE");
      expect(await codeOf(schedules.cancel("0x00000000000000000000000000000000000000dd", s.id))).toBe("SCHEDULE_NOT_FOUND");
      expect(() => checkCron("* * * * * *", 2)).toThrow(/more often/);
      expect(() => checkCron("61 * * * *", 1)).toThrow(/not a cron/);
    });

    it("caps a wallet's schedules active or made within a day: a one-off done at once makes no room for the next", async () => {
      const schedules = new ScheduleStore(db);
      const owner = "0x00000000000000000000000000000000000000ee";
      const now = new Date();
      const oneOff = () => schedules.create({ wallet: owner, bill, chain: "CELO", token: "USDC", runAt: now, cron: null, firstRun: now, maxRuns: 1, maxPerWallet: 2, apiKeyHash: null });
      const made = [await oneOff(), await oneOff()];
      // Both ran at once and are done: none is active.
      await db.query(`UPDATE bill_schedule SET status = 'COMPLETED' WHERE id = ANY($1::text[])`, [made.map((s) => s.id)]);
      expect(await codeOf(oneOff())).toBe("VALIDATION_FAILED");
      // A day on, the wallet may make them again.
      await db.query(`UPDATE bill_schedule SET created_at = now() - interval '25 hours' WHERE id = ANY($1::text[])`, [made.map((s) => s.id)]);
      const third = await oneOff();
      expect(await codeOf(oneOff())).toBe("OK");
      expect(await codeOf(oneOff())).toBe("VALIDATION_FAILED");
      // A cancelled schedule (by the wallet, or its re-link) runs nothing more, and frees its place.
      await schedules.cancel(owner, third.id);
      expect(await codeOf(oneOff())).toBe("OK");
    });

    it("never runs a schedule sooner than the minimum interval after its last run, however its pattern hides a short gap", () => {
      // At :00 and :59 of six hours of the 1st and the 31st: from early on the 31st its first
      // six runs are an hour or more apart, and checkCron lets it through; later, 23:59 on the
      // 31st and 00:00 on the 1st come a minute apart.
      const pattern = "0 0,59 0,4,8,12,16,23 1,31 * *";
      const now = new Date("2026-12-31T16:30:00Z");
      expect(checkCron(pattern, 300, new Date("2026-12-31T00:30:00Z"))).toEqual(new Date("2026-12-31T00:59:00Z"));
      const s = { cron: pattern, maxRuns: null, runs: 0 } as unknown as Parameters<typeof nextDue>[0];
      const last = new Date("2026-12-31T23:59:00Z");
      expect(nextDue(s, last, 60, last)).toEqual(new Date("2027-01-01T00:00:00Z"));
      // With five minutes between runs, the one a minute later is passed over for the next after it.
      expect(nextDue(s, last, 300, last)).toEqual(new Date("2027-01-01T00:59:00Z"));
      // Missed times still collapse into one run from now.
      expect(nextDue(s, new Date("2026-12-31T12:00:00Z"), 300, now)).toEqual(new Date("2026-12-31T16:59:00Z"));
    });
  });
}

describe("schedules across a restart", () => {
  it("are still there, and due, when the service opens its database again", async () => {
    const dir = await tempDir("schedules-restart");
    const before = await openDb({ pgliteDir: dir });
    const runAt = new Date(Date.now() + 200);
    const s = await new ScheduleStore(before).create({ wallet: WALLET, bill, chain: "CELO", token: "USDC", runAt, cron: null, firstRun: runAt, maxRuns: 1, maxPerWallet: 10, apiKeyHash: null });
    await before.close();
    await new Promise((r) => setTimeout(r, 300));
    const after = await openDb({ pgliteDir: dir });
    try {
      const due = await new ScheduleStore(after).due(10);
      expect(due.map((x) => x.id)).toEqual([s.id]);
      expect(await new ScheduleStore(after).claim(due[0]!, nextDue(due[0]!, due[0]!.nextRunAt!, 1))).toBe(true);
    } finally {
      await after.close();
    }
  });
});
