/**
 * The ledger's read API, for the service and for operators. Amounts are decimal strings of
 * raw token units; addresses and hashes lower-case hex. Bad parameters get a 400
 * application/problem+json with a stable `code`. Ponder's SQL over HTTP is at /sql/* and
 * GraphQL at /graphql: they answer callers on this machine only (the socket's peer address,
 * never a forwarded header), other machines get 403 `LEDGER_QUERY_LOCAL_ONLY`, unless
 * LEDGER_OPEN_QUERY_API=1 opens them to everybody (lib/ledger-config.ts). The /ledger/*
 * routes, and Ponder's own /health, /ready, /status and /metrics, answer every caller.
 */
import { getConnInfo } from "@hono/node-server/conninfo";
import { Hono, type Context, type MiddlewareHandler } from "hono";
import { and, asc, client, desc, eq, graphql, gte, inArray, isNull, lt, notExists, or, replaceBigInts, sql } from "ponder";
import { db } from "ponder:api";
import schema from "ponder:schema";
import { z } from "zod";
import { isLoopbackAddress, LEDGER_OPEN_QUERY_API, ledgerQueryApiOpen } from "../../../lib/ledger-config.ts";

const { account, payment, refund, treasury, treasuryTransfer } = schema;

const app = new Hono();

/** Read once, at start: a bad value stops the ledger rather than guess. */
const queryApiOpen = ledgerQueryApiOpen();

/** The TCP peer's address (Ponder serves through @hono/node-server: c.env.incoming is the request), or undefined when unknown. */
function peerAddress(c: Context): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined;
  }
}

/**
 * Ponder's query API runs any read-only SQL (or GraphQL) its callers write, over every
 * table, and holds a stream open per live query: other machines get it only when the
 * operator opens it. An unknown peer counts as another machine.
 */
const thisMachineOnly: MiddlewareHandler = async (c, next) => {
  if (queryApiOpen || isLoopbackAddress(peerAddress(c))) return next();
  return c.body(
    JSON.stringify({
      type: "about:blank",
      title: "Forbidden",
      status: 403,
      code: "LEDGER_QUERY_LOCAL_ONLY",
      detail: `${c.req.path.startsWith("/graphql") ? "GraphQL" : "SQL over HTTP"} answers callers on the ledger's machine only; the /ledger/* read API answers everyone (${LEDGER_OPEN_QUERY_API}=1 opens it to every caller)`,
    }),
    403,
    { "content-type": "application/problem+json" },
  );
};

app.use("/sql", thisMachineOnly);
app.use("/sql/*", thisMachineOnly);
app.use("/graphql", thisMachineOnly);
app.use("/graphql/*", thisMachineOnly);
app.use("/sql/*", client({ db, schema }));
app.use("/graphql", graphql({ db, schema }));

const address = z
  .string()
  .regex(/^0x[0-9a-fA-F]{40}$/, "must be a 0x-prefixed 20-byte hex address")
  .transform((s) => s.toLowerCase() as `0x${string}`);
const bytes32 = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, "must be a 0x-prefixed 32-byte hex value")
  .transform((s) => s.toLowerCase() as `0x${string}`);
const INT32_MAX = 2 ** 31 - 1;
const chainId = z.coerce.number().int().positive().max(INT32_MAX);
const unixSeconds = z.coerce.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER).transform(BigInt);

const MAX_PAGE = 500;

function json(c: Context, body: unknown, status: 200 = 200) {
  return c.json(replaceBigInts(body as object, (v) => String(v)) as object, status);
}

function badRequest(c: Context, error: z.ZodError) {
  const detail = error.issues.map((i) => `${i.path.join(".") || "parameter"}: ${i.message}`).join("; ");
  return c.body(
    JSON.stringify({ type: "about:blank", title: "Bad request", status: 400, code: "INVALID_PARAMETER", detail }),
    400,
    { "content-type": "application/problem+json" },
  );
}

/** A wallet's accounts, and its latest payments and refunds (`limit`, default 100; all of them page through /ledger/payments?payer=). */
app.get("/ledger/wallets/:address", async (c) => {
  const parsed = z.object({ address }).safeParse(c.req.param());
  const query = z.object({ limit: z.coerce.number().int().min(1).max(MAX_PAGE).default(100) }).strict().safeParse(c.req.query());
  if (!parsed.success) return badRequest(c, parsed.error);
  if (!query.success) return badRequest(c, query.error);
  const payer = parsed.data.address;
  const { limit } = query.data;
  const [accounts, payments, refunds] = await Promise.all([
    db.select().from(account).where(eq(account.payer, payer)).orderBy(asc(account.chainId), asc(account.token)),
    db.select().from(payment).where(eq(payment.payer, payer)).orderBy(desc(payment.timestamp), desc(payment.id)).limit(limit),
    db.select().from(refund).where(eq(refund.payer, payer)).orderBy(desc(refund.timestamp), desc(refund.id)).limit(limit),
  ]);
  return json(c, { address: payer, accounts, payments, refunds });
});

/** A BillPay order: its pull and refunds. An x402 order has no order id on chain until refunded: see /ledger/authorizations. */
app.get("/ledger/orders/:orderId", async (c) => {
  const parsed = z.object({ orderId: bytes32 }).safeParse(c.req.param());
  if (!parsed.success) return badRequest(c, parsed.error);
  const { orderId } = parsed.data;
  const [payments, refunds] = await Promise.all([
    db.select().from(payment).where(eq(payment.orderId, orderId)),
    db.select().from(refund).where(eq(refund.orderId, orderId)),
  ]);
  return json(c, { orderId, payments, refunds });
});

/**
 * An x402 payment, known by (chain, token, payer, nonce), and its refund if any: an EIP-3009
 * nonce, or with `?rail=permit2` a Permit2 nonce (32 bytes of hex), a space of its own.
 */
const signedRail = z.object({ rail: z.enum(["authorization", "permit2"]).default("authorization") }).strict();
app.get("/ledger/authorizations/:chainId/:token/:payer/:nonce", async (c) => {
  const parsed = z.object({ chainId, token: address, payer: address, nonce: bytes32 }).safeParse(c.req.param());
  const railQuery = signedRail.safeParse(c.req.query());
  if (!parsed.success) return badRequest(c, parsed.error);
  if (!railQuery.success) return badRequest(c, railQuery.error);
  const q = { ...parsed.data, ...railQuery.data };
  const [payments, refunds] = await Promise.all([
    db
      .select()
      .from(payment)
      .where(
        and(
          eq(payment.chainId, q.chainId),
          eq(payment.rail, q.rail),
          eq(payment.token, q.token),
          eq(payment.payer, q.payer),
          eq(payment.authorizationNonce, q.nonce),
        ),
      ),
    db
      .select()
      .from(refund)
      .where(
        and(
          eq(refund.chainId, q.chainId),
          eq(refund.rail, q.rail),
          eq(refund.token, q.token),
          eq(refund.payer, q.payer),
          eq(refund.authorizationNonce, q.nonce),
        ),
      ),
  ]);
  return json(c, { payment: payments[0] ?? null, refunds });
});

/**
 * One payer's payments and refunds under the given order ids (pulls) and nonces (x402,
 * EIP-3009 or Permit2), at most 100 of each, comma-separated: a page of its history in one
 * call. The caller matches each record to its order by its full key (chain, rail and token too).
 */
const MAX_KEYS = 100;
const keyList = z
  .string()
  .max(MAX_KEYS * 67)
  .optional()
  .transform((s) => (s ? s.split(",") : []))
  .pipe(z.array(bytes32).max(MAX_KEYS));
app.get("/ledger/payers/:address/records", async (c) => {
  const parsed = z.object({ address }).safeParse(c.req.param());
  const query = z.object({ orderIds: keyList, nonces: keyList }).strict().safeParse(c.req.query());
  if (!parsed.success) return badRequest(c, parsed.error);
  if (!query.success) return badRequest(c, query.error);
  const payer = parsed.data.address;
  const { orderIds, nonces } = query.data;
  if (orderIds.length === 0 && nonces.length === 0) return json(c, { payer, payments: [], refunds: [] });
  const under = (t: typeof payment | typeof refund) =>
    and(
      eq(t.payer, payer),
      or(...[orderIds.length > 0 ? inArray(t.orderId, orderIds) : undefined, nonces.length > 0 ? inArray(t.authorizationNonce, nonces) : undefined].filter((x) => x !== undefined)),
    );
  const [payments, refunds] = await Promise.all([db.select().from(payment).where(under(payment)), db.select().from(refund).where(under(refund))]);
  return json(c, { payer, payments, refunds });
});

/**
 * A payer's transfers of one token into BillPay that no payment accounts for: neither an x402
 * payment (its transfer carries no nonce the ledger could read) nor a pull of the payer's in
 * the same transaction. A Permit2 permit settled through another contract lands here, and so
 * does a plain transfer. Of exactly `amount` (raw units) when given; newest first, at most
 * `limit` (default 100); `more` says whether there are others. The service reads it before it
 * calls a Permit2 order whose nonce is spent "not charged" (server/orders/spent-permit2.ts).
 */
const rawAmount = z
  .string()
  .regex(/^(0|[1-9][0-9]{0,77})$/, "must be a whole number of raw token units")
  .transform(BigInt);
const unbookedQuery = z.object({ chainId, token: address, amount: rawAmount.optional(), limit: z.coerce.number().int().min(1).max(MAX_PAGE).default(100) }).strict();
app.get("/ledger/payers/:address/unbooked-inflows", async (c) => {
  const parsed = z.object({ address }).safeParse(c.req.param());
  const query = unbookedQuery.safeParse(c.req.query());
  if (!parsed.success) return badRequest(c, parsed.error);
  if (!query.success) return badRequest(c, query.error);
  const payer = parsed.data.address;
  const { chainId: chain, token, amount, limit } = query.data;
  const t = treasuryTransfer;
  // A pull's transfer carries no nonce either: it is the payer's pull of that token and amount
  // in the same transaction (pulls are sent to BillPay by its operator, never through a batcher).
  const pulledInSameTx = db
    .select({ one: sql`1` })
    .from(payment)
    .where(
      and(
        eq(payment.chainId, t.chainId),
        eq(payment.txHash, t.txHash),
        eq(payment.payer, t.from),
        eq(payment.token, t.token),
        eq(payment.amount, t.amount),
        eq(payment.rail, "pull"),
      ),
    );
  const unbooked = await db
    .select()
    .from(t)
    .where(
      and(
        eq(t.chainId, chain),
        eq(t.token, token),
        eq(t.from, payer),
        eq(t.inbound, true),
        isNull(t.authorizationNonce),
        amount === undefined ? undefined : eq(t.amount, amount),
        notExists(pulledInSameTx),
      ),
    )
    .orderBy(desc(t.blockNumber), desc(t.logIndex))
    .limit(limit + 1);
  return json(c, { payer, chainId: chain, token, amount: amount ?? null, transfers: unbooked.slice(0, limit), more: unbooked.length > limit });
});

/** Per chain and token; `otherInflow`/`otherOutflow` are what the totals hold beyond the named kinds. */
/**
 * What can be read: per chain, the block through which every event is in the tables these
 * routes read. Taken from Ponder's own checkpoint table, through the same connection as the
 * rows (the block's rows and its checkpoint are written in one transaction), so a reader that
 * waits for block N here and then reads finds every event of block N. Checkpoints are
 * Ponder's fixed-width strings: 10 digits of block time, 16 of chain id, 16 of block number.
 */
app.get("/ledger/readable", async (c) => {
  const result = await db.execute(sql`SELECT chain_id, latest_checkpoint FROM _ponder_checkpoint ORDER BY chain_id`);
  const rows = ((result as { rows?: unknown[] }).rows ?? (result as unknown as unknown[])) as Array<{ chain_id: number | string; latest_checkpoint: string }>;
  const chains = rows.map((r) => ({
    chainId: Number(r.chain_id),
    block: blockOf(r.latest_checkpoint),
    timestamp: Number(r.latest_checkpoint.slice(0, 10)),
  }));
  return c.json({ chains }, 200, { "cache-control": "no-store" });
});

const blockOf = (checkpoint: string) => Number(checkpoint.slice(26, 42));

/**
 * Each row with `indexedBlock`, the block its chain is indexed through, read in the same
 * statement (one snapshot): the balance is BillPay's on chain at that block, which is what an
 * operator's comparison must read (a block indexed after the rows would make any payment in it
 * look like a mismatch).
 */
app.get("/ledger/treasury", async (c) => {
  const rows = await db
    // The outer column named with its table: drizzle writes a lone table's columns unqualified.
    .select({ row: treasury, checkpoint: sql<string | null>`(SELECT c.latest_checkpoint FROM _ponder_checkpoint c WHERE c.chain_id = ${treasury}.${sql.identifier("chain_id")})` })
    .from(treasury)
    .orderBy(asc(treasury.chainId), asc(treasury.token));
  const withOther = rows.map(({ row: r, checkpoint }) => ({
    ...r,
    otherInflow: r.totalInflow - r.pullInflow - r.authorizationInflow,
    otherOutflow: r.totalOutflow - r.refunds - r.withdrawals,
    indexedBlock: checkpoint ? blockOf(checkpoint) : null,
  }));
  return json(c, { treasury: withOther });
});

/** Cursor: base64url of the last row's sort key "<timestamp>:<chainId>:<blockNumber>:<logIndex>". */
const cursor = z.string().transform((s, ctx) => {
  const m = /^(\d{1,20}):(\d{1,10}):(\d{1,20}):(\d{1,10})$/.exec(Buffer.from(s, "base64url").toString("utf8"));
  const key = m && { timestamp: BigInt(m[1]!), chainId: Number(m[2]), blockNumber: BigInt(m[3]!), logIndex: Number(m[4]) };
  if (!key || key.chainId > INT32_MAX || key.logIndex > INT32_MAX) {
    ctx.addIssue({ code: "custom", message: "is not a cursor returned by this endpoint" });
    return z.NEVER;
  }
  return key;
});
const encodeCursor = (row: { timestamp: bigint; chainId: number; blockNumber: bigint; logIndex: number }) =>
  Buffer.from(`${row.timestamp}:${row.chainId}:${row.blockNumber}:${row.logIndex}`, "utf8").toString("base64url");

const paymentsQuery = z
  .object({
    from: unixSeconds.optional(),
    to: unixSeconds.optional(),
    chainId: chainId.optional(),
    token: address.optional(),
    payer: address.optional(),
    rail: z.enum(["pull", "authorization", "permit2"]).optional(),
    limit: z.coerce.number().int().min(1).max(MAX_PAGE).default(100),
    cursor: cursor.optional(),
  })
  .strict()
  .refine((q) => q.from === undefined || q.to === undefined || q.from <= q.to, {
    message: "`from` must not be after `to`",
    path: ["from"],
  });

/** Payments in a time range [from, to) in unix seconds, oldest first (chain order within a second), paginated. */
app.get("/ledger/payments", async (c) => {
  const parsed = paymentsQuery.safeParse(c.req.query());
  if (!parsed.success) return badRequest(c, parsed.error);
  const q = parsed.data;
  const rows = await db
    .select()
    .from(payment)
    .where(
      and(
        q.from !== undefined ? gte(payment.timestamp, q.from) : undefined,
        q.to !== undefined ? lt(payment.timestamp, q.to) : undefined,
        q.chainId !== undefined ? eq(payment.chainId, q.chainId) : undefined,
        q.token ? eq(payment.token, q.token) : undefined,
        q.payer ? eq(payment.payer, q.payer) : undefined,
        q.rail ? eq(payment.rail, q.rail) : undefined,
        q.cursor
          ? sql`(${payment.timestamp}, ${payment.chainId}, ${payment.blockNumber}, ${payment.logIndex}) >
                (${q.cursor.timestamp}, ${q.cursor.chainId}, ${q.cursor.blockNumber}, ${q.cursor.logIndex})`
          : undefined,
      ),
    )
    .orderBy(asc(payment.timestamp), asc(payment.chainId), asc(payment.blockNumber), asc(payment.logIndex))
    .limit(q.limit + 1);
  const page = rows.slice(0, q.limit);
  const last = page[page.length - 1];
  return json(c, { payments: page, nextCursor: rows.length > q.limit && last ? encodeCursor(last) : null });
});

export default app;
