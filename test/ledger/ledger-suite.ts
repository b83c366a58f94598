import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { encodeAbiParameters, keccak256, maxUint256, parseUnits, toBytes, toHex, type Address, type Hex } from "viem";
import { billPayAbi } from "../../lib/generated/abis.ts";
import { chainInfo } from "../../lib/chains.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { runAudit } from "../../server/audit/ledger.ts";
import { startLedger, waitForLedgerBlock, type Ledger, type LedgerOptions } from "../../stack/ledger-process.ts";
import { chainActors, type ChainActors, type SignedAuthorization } from "../support/actors.ts";
import { runScript } from "../support/processes.ts";
import { startTestChains, uniqueSchema } from "../support/stack.ts";

const u = (n: string) => parseUnits(n, 6);
const lower = (a: string) => a.toLowerCase();
let seq = 0;
const orderId = (): Hex => toHex(0x1e0000 + ++seq, { size: 32 });

const alice = hardhatAccount(3);
const bob = hardhatAccount(4);
const carol = hardhatAccount(5);
const dave = hardhatAccount(6);
const treasurer = hardhatAccount(21);
const PAUSER_ROLE = keccak256(toBytes("PAUSER_ROLE"));

type Row = Record<string, string | number | boolean | null>;

async function getJson(url: string) {
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  return { status: res.status, type: res.headers.get("content-type"), body: (await res.json()) as Record<string, unknown> };
}

/** `npm run audit` on the ledger alone: this suite runs no service (the orders' half is tested in test/security). */
function runAuditCli(env: Record<string, string>, args: string[] = []): Promise<{ code: number | null; out: string }> {
  return runScript("scripts/audit.ts", ["--ledger-only", ...args], env);
}

/** The whole ledger suite against one database kind; each kind has its own test file. */
export function ledgerSuite(db: "PGlite" | "PostgreSQL", databaseUrl?: string) {
  describe(`ledger on ${db}`, () => {
    let stack: Awaited<ReturnType<typeof startTestChains>>;
    let ledger: Ledger;
    let ledgerOptions: LedgerOptions;
    let celo: ChainActors;
    let base: ChainActors;
    const ids = { o1: orderId(), o2: orderId(), o3: orderId(), o4: orderId(), o5: orderId(), o6: orderId() };
    let n1: Hex;
    let n2: Hex;
    let carolFirst: SignedAuthorization;

    async function caughtUp() {
      for (const a of [celo, base]) {
        await waitForLedgerBlock(ledger.url, a.deployment.chainId, await a.publicClient.getBlockNumber());
      }
    }
    const api = (path: string) => getJson(`${ledger.url}${path}`);
    const wallet = async (who: Address) => (await api(`/ledger/wallets/${who}`)).body as { accounts: Row[]; payments: Row[]; refunds: Row[] };
    const accountOf = async (who: Address, chainId: number, token: Address) =>
      (await wallet(who)).accounts.find((a) => a.chainId === chainId && a.token === lower(token));
    const treasuryOf = async (chainId: number, token: Address) =>
      ((await api("/ledger/treasury")).body.treasury as Row[]).find((t) => t.chainId === chainId && t.token === lower(token));

    beforeAll(async () => {
      stack = await startTestChains();
      ledgerOptions = {
        deploymentsFile: stack.deploymentsFile,
        databaseUrl,
        pgliteDir: join(stack.dir, "pglite"),
        schema: uniqueSchema("ledger_test"),
        viewsSchema: uniqueSchema("ledger_views"),
        logTo: join(stack.dir, "ponder.log"),
      };
      ledger = await startLedger(ledgerOptions);
      celo = chainActors(stack.deployments, "CELO");
      base = chainActors(stack.deployments, "BASE");

      // Agent hub: allowances, single pulls and a batch.
      await celo.approveAndAllow(alice, "USDC", u("100"));
      await celo.approveAndAllow(bob, "USD₮", u("50"));
      await celo.pull(ids.o1, alice.address, "USDC", u("10"));
      await celo.pull(ids.o2, alice.address, "USDC", u("15"));
      await celo.pullBatch([
        { orderId: ids.o3, payer: alice.address, symbol: "USDC", amount: u("5") },
        { orderId: ids.o4, payer: bob.address, symbol: "USD₮", amount: u("7") },
      ]);
      // x402: two EIP-3009 payments into BillPay.
      carolFirst = (await celo.payByAuthorization(carol, "USDC", u("3"))).authorization;
      n1 = carolFirst.nonce;
      n2 = (await celo.payByAuthorization(carol, "USDC", u("4"))).nonce;
      // Refunds of both kinds, a plain transfer in, a withdrawal, a pause.
      await celo.refund(ids.o2, u("15"));
      await celo.refundAuthorization(ids.o5, "USDC", carolFirst, u("3"));
      await celo.transfer(carol, "USDC", celo.billPay, u("1"));
      await celo.withdraw("USDC", treasurer.address, u("2"));
      // Dave's authorization pays someone else; the same transaction then moves Dave's
      // tokens into BillPay by a plain transferFrom: a transfer in, not an x402 payment.
      const elsewhere = await celo.signAuthorization(dave, "USDC", u("2"), treasurer.address);
      await celo.authorizationThenTransfer(dave, "USDC", elsewhere, u("1"));
      await celo.pause(true);
      await celo.pause(false);
      await celo.grantOrRevokeRole(true, PAUSER_ROLE, treasurer.address);
      await celo.grantOrRevokeRole(false, PAUSER_ROLE, treasurer.address);
      await celo.setTokenAccepted("USA₮", false);
      // Base: a limited token approval, then a pull.
      await base.approveAndAllow(alice, "USDC", u("20"), u("25"));
      await base.pull(ids.o6, alice.address, "USDC", u("6"));
      await caughtUp();
    });

    afterAll(async () => {
      await ledger?.stop();
      await stack?.close();
    });

    it("records every inbound payment with its rail, reference and figures", async () => {
      const usdc = celo.tokenAddress("USDC");
      const { body } = await api(`/ledger/payments?chainId=42220`);
      const payments = body.payments as Row[];
      expect(payments).toHaveLength(6);
      const pulls = payments.filter((p) => p.rail === "pull");
      expect(pulls.map((p) => [p.orderId, p.amount, p.allowanceLeft])).toEqual([
        [ids.o1, u("10").toString(), u("90").toString()],
        [ids.o2, u("15").toString(), u("75").toString()],
        [ids.o3, u("5").toString(), u("70").toString()],
        [ids.o4, u("7").toString(), u("43").toString()],
      ]);
      const x402 = payments.filter((p) => p.rail === "authorization");
      expect(x402).toEqual([
        expect.objectContaining({ authorizationNonce: n1, payer: lower(carol.address), token: lower(usdc), amount: u("3").toString(), orderId: null }),
        expect.objectContaining({ authorizationNonce: n2, payer: lower(carol.address), token: lower(usdc), amount: u("4").toString(), orderId: null }),
      ]);
      for (const p of payments) expect(p.txHash).toMatch(/^0x[0-9a-f]{64}$/);
    });

    it("says, per chain, the block through which every event can be read, and its rows are there", async () => {
      await caughtUp();
      const { status, body } = await api("/ledger/readable");
      expect(status).toBe(200);
      const chains = body.chains as Array<{ chainId: number; block: number; timestamp: number }>;
      expect(chains.map((c) => c.chainId).sort((x, y) => x - y)).toEqual([8453, 42220]);
      for (const a of [celo, base]) {
        const readable = chains.find((c) => c.chainId === a.deployment.chainId)!;
        // A block of the chain (its own time), never ahead of the chain's head.
        expect(BigInt(readable.block)).toBeLessThanOrEqual(await a.publicClient.getBlockNumber());
        expect(BigInt(readable.timestamp)).toBe((await a.publicClient.getBlock({ blockNumber: BigInt(readable.block) })).timestamp);
      }
      // Every payment of a block it names is readable: the newest CELO payment is at or below it.
      const newest = ((await api(`/ledger/payments?chainId=42220`)).body.payments as Row[]).at(-1)!;
      expect(Number(newest.blockNumber)).toBeLessThanOrEqual(chains.find((c) => c.chainId === 42220)!.block);
    });

    it("records refunds of both kinds and withdrawals", async () => {
      const o2 = (await api(`/ledger/orders/${ids.o2}`)).body;
      expect((o2.payments as Row[]).map((p) => p.amount)).toEqual([u("15").toString()]);
      expect(o2.refunds).toEqual([expect.objectContaining({ rail: "pull", amount: u("15").toString(), authorizationNonce: null })]);

      const x = (await api(`/ledger/authorizations/42220/${celo.tokenAddress("USDC")}/${carol.address}/${n1}`)).body;
      expect(x.payment).toMatchObject({ rail: "authorization", amount: u("3").toString() });
      expect(x.refunds).toEqual([expect.objectContaining({ orderId: ids.o5, rail: "authorization", amount: u("3").toString() })]);
      const unpaid = (await api(`/ledger/authorizations/42220/${celo.tokenAddress("USDC")}/${carol.address}/${toHex(9, { size: 32 })}`)).body;
      expect(unpaid).toEqual({ payment: null, refunds: [] });
    });

    it("keeps each payer's allowances and totals per chain and token", async () => {
      const usdc = celo.tokenAddress("USDC");
      // 100 set, 30 pulled, then the refund of o2 gave back the 15 it used.
      expect(await accountOf(alice.address, 42220, usdc)).toMatchObject({
        spendingAllowance: u("85").toString(),
        tokenAllowance: (maxUint256 - u("30")).toString(),
        totalPaid: u("30").toString(),
        totalRefunded: u("15").toString(),
        net: u("15").toString(),
        paymentCount: 3,
        refundCount: 1,
      });
      expect(await accountOf(carol.address, 42220, usdc)).toMatchObject({
        spendingAllowance: "0",
        totalPaid: u("7").toString(),
        totalRefunded: u("3").toString(),
        net: u("4").toString(),
        paymentCount: 2,
        refundCount: 1,
      });
      expect(await accountOf(bob.address, 42220, celo.tokenAddress("USD₮"))).toMatchObject({
        spendingAllowance: u("43").toString(),
        totalPaid: u("7").toString(),
        net: u("7").toString(),
      });
      // A limited ERC-20 approval is spent by the pull although the token emits no Approval then.
      expect(await accountOf(alice.address, 8453, base.tokenAddress("USDC"))).toMatchObject({
        tokenAllowance: u("19").toString(),
        spendingAllowance: u("14").toString(),
        totalPaid: u("6").toString(),
      });
    });

    it("never books a plain transfer as an x402 payment, even after the sender's own authorization in the same transaction", async () => {
      const daves = (await wallet(dave.address)).payments;
      expect(daves).toEqual([]);
      expect(await accountOf(dave.address, 42220, celo.tokenAddress("USDC"))).toBeUndefined();
    });

    it("lists a payer's transfers into BillPay that no payment accounts for: plain ones, never a pull or an x402 payment", async () => {
      const usdc = lower(celo.tokenAddress("USDC"));
      const unbooked = async (who: Address, extra = "") =>
        (await api(`/ledger/payers/${who}/unbooked-inflows?chainId=42220&token=${usdc}${extra}`)).body as { transfers: Row[]; more: boolean };
      expect(await unbooked(alice.address)).toMatchObject({ transfers: [], more: false }); // single and batched pulls
      const carols = await unbooked(carol.address); // two x402 payments and one plain transfer
      expect(carols.transfers.map((t) => t.amount)).toEqual([u("1").toString()]);
      expect(carols.transfers[0]).toMatchObject({ from: lower(carol.address), inbound: true, authorizationNonce: null });
      expect((await unbooked(dave.address)).transfers.map((t) => t.amount)).toEqual([u("1").toString()]);
      expect(await unbooked(bob.address)).toMatchObject({ transfers: [], more: false });
      expect(await unbooked(carol.address, "&limit=1")).toMatchObject({ more: false });
      expect((await unbooked(carol.address, `&amount=${u("1")}`)).transfers).toHaveLength(1);
      expect((await unbooked(carol.address, `&amount=${u("3")}`)).transfers).toEqual([]); // her x402 payment of 3 is booked
      expect((await api(`/ledger/payers/${carol.address}/unbooked-inflows?chainId=8453&token=${usdc}`)).body).toMatchObject({ transfers: [] });
    });

    it("keeps the treasury per chain and token, equal to BillPay's balance on chain", async () => {
      const usdc = celo.tokenAddress("USDC");
      // Other inflow: carol's plain transfer and dave's transfer after an unrelated authorization.
      expect(await treasuryOf(42220, usdc)).toMatchObject({
        pullInflow: u("30").toString(),
        authorizationInflow: u("7").toString(),
        otherInflow: u("2").toString(),
        refunds: u("18").toString(),
        withdrawals: u("2").toString(),
        otherOutflow: "0",
        balance: u("19").toString(),
      });
      expect(await celo.balanceOf("USDC", celo.billPay)).toBe(u("19"));
      expect((await treasuryOf(42220, celo.tokenAddress("USD₮")))?.balance).toBe(u("7").toString());
      expect((await treasuryOf(8453, base.tokenAddress("USDC")))?.balance).toBe(u("6").toString());
    });

    it("indexes roles, the accept-list and pauses", async () => {
      const query = `{ roleMembers(where: { chainId: 42220 }) { items { role account active } }
        acceptedTokens(where: { chainId: 42220 }) { items { token accepted } }
        contractStates { items { chainId paused } }
        adminEvents(where: { chainId: 42220 }, orderBy: "blockNumber") { items { kind } }
        withdrawals { items { chainId token to amount } }
        refundBudgets(where: { chainId: 42220 }) { items { token limit period } }
        spendingAllowanceChanges(orderBy: "blockNumber") { items { chainId kind orderId payer amount allowanceAfter } } }`;
      const res = await fetch(`${ledger.url}/graphql`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ query }),
      });
      const { data } = (await res.json()) as { data: Record<string, { items: Row[] }> };
      const operatorRole = (await celo.publicClient.readContract({
        address: celo.billPay,
        abi: billPayAbi,
        functionName: "OPERATOR_ROLE",
      })) as Hex;
      expect(data.roleMembers!.items).toContainEqual({
        role: operatorRole,
        account: lower(stack.deployments.chains.CELO!.roles.operator),
        active: true,
      });
      expect(data.roleMembers!.items).toContainEqual({ role: PAUSER_ROLE, account: lower(treasurer.address), active: false });
      const accepted = Object.fromEntries(data.acceptedTokens!.items.map((t) => [t.token, t.accepted]));
      expect(accepted).toEqual({
        [lower(celo.tokenAddress("USDC"))]: true,
        [lower(celo.tokenAddress("USD₮"))]: true,
        [lower(celo.tokenAddress("USA₮"))]: false,
      });
      expect(data.contractStates!.items).toEqual([{ chainId: 42220, paused: false }]);
      const kinds = data.adminEvents!.items.map((e) => e.kind);
      expect(kinds.filter((k) => k === "Paused" || k === "Unpaused")).toEqual(["Paused", "Unpaused"]);
      expect(kinds.filter((k) => String(k).startsWith("Role")).slice(-2)).toEqual(["RoleGranted", "RoleRevoked"]);
      expect(kinds.filter((k) => k === "TokenAcceptanceSet")).toHaveLength(4);
      expect(data.withdrawals!.items).toEqual([
        { chainId: 42220, token: lower(celo.tokenAddress("USDC")), to: lower(treasurer.address), amount: u("2").toString() },
      ]);
      expect(data.spendingAllowanceChanges!.items.map((a) => [a.chainId, a.kind, a.orderId, a.payer, a.amount, a.allowanceAfter]).sort()).toEqual([
        [42220, "set", null, lower(alice.address), u("100").toString(), u("100").toString()],
        [42220, "set", null, lower(bob.address), u("50").toString(), u("50").toString()],
        [42220, "restore", ids.o2, lower(alice.address), u("15").toString(), u("85").toString()],
        [8453, "set", null, lower(alice.address), u("20").toString(), u("20").toString()],
      ].sort());
      const budget = stack.deployments.chains.CELO!.refundBudget;
      expect(data.refundBudgets!.items).toHaveLength(3);
      expect(data.refundBudgets!.items).toContainEqual({ token: lower(celo.tokenAddress("USDC")), limit: budget.limit, period: String(budget.periodSeconds) });
      expect(kinds.filter((k) => k === "RefundBudgetSet")).toHaveLength(3);
    });

    it("pages through payments in a time range with a cursor", async () => {
      const all = (await api(`/ledger/payments`)).body.payments as Row[];
      expect(all).toHaveLength(7);
      const seen: Row[] = [];
      let cursor: string | null = null;
      do {
        const page = (await api(`/ledger/payments?limit=3${cursor ? `&cursor=${cursor}` : ""}`)).body;
        seen.push(...(page.payments as Row[]));
        cursor = page.nextCursor as string | null;
      } while (cursor);
      expect(seen.map((p) => p.id)).toEqual(all.map((p) => p.id));
      const first = Number(all[0]!.timestamp);
      const last = Number(all[all.length - 1]!.timestamp);
      const none = (await api(`/ledger/payments?from=${last + 1}`)).body.payments as Row[];
      expect(none).toEqual([]);
      const range = (await api(`/ledger/payments?from=${first}&to=${last + 1}&payer=${carol.address}`)).body.payments as Row[];
      expect(range.map((p) => p.authorizationNonce)).toEqual([n1, n2]);
    });

    it("answers bad parameters with 400 problem+json naming the parameter", async () => {
      const cases: Array<[string, RegExp]> = [
        ["/ledger/wallets/0x1234", /address/],
        ["/ledger/orders/not-hex", /orderId/],
        ["/ledger/payments?limit=0", /limit/],
        ["/ledger/payments?limit=100000", /limit/],
        ["/ledger/payments?from=20&to=10", /from/],
        ["/ledger/payments?from=-1", /from/],
        ["/ledger/payments?cursor=@@@", /cursor/],
        ["/ledger/payments?colour=blue", /colour|unrecognized/i],
        ["/ledger/authorizations/x/0x1/0x2/0x3", /chainId/],
        [`/ledger/authorizations/3000000000/${alice.address}/${alice.address}/${toHex(1, { size: 32 })}`, /chainId/],
        ["/ledger/payments?chainId=3000000000", /chainId/],
        [`/ledger/payments?cursor=${Buffer.from("1:99999999999999999999999:1:1").toString("base64url")}`, /cursor/],
        [`/ledger/wallets/${alice.address}?limit=0`, /limit/],
        [`/ledger/payers/${alice.address}/records?orderIds=0x12`, /orderIds/],
        [`/ledger/payers/${alice.address}/records?nonces=${Array.from({ length: 101 }, (_, i) => toHex(i + 1, { size: 32 })).join(",")}`, /nonces/],
        [`/ledger/payers/${alice.address}/records?colour=blue`, /colour|unrecognized/i],
        [`/ledger/payers/${alice.address}/unbooked-inflows?token=${alice.address}`, /chainId/],
        [`/ledger/payers/${alice.address}/unbooked-inflows?chainId=42220&token=0x12`, /token/],
        [`/ledger/payers/${alice.address}/unbooked-inflows?chainId=42220&token=${alice.address}&limit=0`, /limit/],
        [`/ledger/payers/0x12/unbooked-inflows?chainId=42220&token=${alice.address}`, /address/],
        [`/ledger/payers/${alice.address}/unbooked-inflows?chainId=42220&token=${alice.address}&amount=1.5`, /amount/],
      ];
      for (const [path, detail] of cases) {
        const res = await api(path);
        expect(res.status, path).toBe(400);
        expect(res.type).toContain("application/problem+json");
        expect(res.body).toMatchObject({ status: 400, code: "INVALID_PARAMETER" });
        expect(String(res.body.detail)).toMatch(detail);
      }
    });

    it("serves SQL over HTTP to other processes", async () => {
      const { createClient, eq } = await import("@ponder/client");
      const schema = await import("../../ponder/ponder.schema.ts");
      const client = createClient(`${ledger.url}/sql`, { schema });
      const rows = await client.db.select().from(schema.refund).where(eq(schema.refund.chainId, 42220));
      expect(rows.map((r) => r.amount).sort()).toEqual([u("3"), u("15")].sort());
    });

    // Registered for PostgreSQL only: PGlite has no views schema (other processes read over HTTP).
    if (databaseUrl) it("exposes the ledger as views in a stable schema, readable by another process", async () => {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      try {
        const { rows } = await client.query(
          `select balance::text from "${ledgerOptions.viewsSchema}".treasury where chain_id = 42220 and token = $1`,
          [lower(celo.tokenAddress("USDC"))],
        );
        expect(rows).toEqual([{ balance: u("19").toString() }]);
      } finally {
        await client.end();
      }
    });

    it("passes the audit on honest data, from code and from `npm run audit`", async () => {
      const report = await runAudit({ ledgerUrl: ledger.url, deployments: stack.deployments });
      expect(report.discrepancies).toEqual([]);
      expect(report.refundsChecked).toBe(2);
      expect(report.pullsChecked).toBe(5);
      expect(report.treasury).toHaveLength(chainInfo("CELO").tokens.length + chainInfo("BASE").tokens.length);
      const cli = await runAuditCli({ LEDGER_URL: ledger.url, DEPLOYMENTS_FILE: stack.deploymentsFile });
      expect(cli.out).toContain("audit: no discrepancies");
      expect(cli.code).toBe(0);
    });

    it("resumes after a restart mid-stream without counting anything twice", async () => {
      const usdc = celo.tokenAddress("USDC");
      const o7 = orderId();
      const pending = celo.pull(o7, alice.address, "USDC", u("4"));
      const before = ledger.schema;
      await ledger.stop("SIGKILL"); // a crash, not a clean shutdown
      await pending;
      await celo.payByAuthorization(carol, "USDC", u("2"));
      const logTo = join(mkdtempSync(join(tmpdir(), "ledger-restart-")), "ponder.log");
      ledger = await startLedger({ ...ledgerOptions, logTo });
      await caughtUp();
      expect(ledger.schema).toBe(before);
      // The crash left the schema locked by a process that is gone: taken over at once, not
      // after Ponder's heartbeat timeout (patches/: the lock names its holder's pid).
      const log = readFileSync(logTo, "utf8");
      expect(log).toContain("Detected crash recovery");
      expect(log).not.toContain("Schema is locked by a different Ponder app");

      expect(await accountOf(alice.address, 42220, usdc)).toMatchObject({
        totalPaid: u("34").toString(),
        paymentCount: 4,
        spendingAllowance: u("81").toString(),
      });
      expect(await accountOf(carol.address, 42220, usdc)).toMatchObject({ totalPaid: u("9").toString(), paymentCount: 3 });
      expect(((await api(`/ledger/payments?chainId=42220`)).body.payments as Row[]).length).toBe(8);
      expect((await treasuryOf(42220, usdc))?.balance).toBe((await celo.balanceOf("USDC", celo.billPay)).toString());
      const after = await runAudit({ ledgerUrl: ledger.url, deployments: stack.deployments });
      expect(after.discrepancies).toEqual([]);
    });

    it("indexes a payer's periodic limit: set, used by pulls, given back by a refund in its period, removed", async () => {
      const usdc = base.tokenAddress("USDC");
      await base.approveAndAllow(bob, "USDC", u("50"));
      await base.setSpendingLimit(bob, "USDC", u("10"), 3_600n);
      const [kept, refunded] = [orderId(), orderId()];
      await base.pull(kept, bob.address, "USDC", u("4"));
      await base.pull(refunded, bob.address, "USDC", u("3"));
      await base.refund(refunded, u("3"));
      await caughtUp();
      const [, , periodStart, spent] = await base.publicClient.readContract({
        address: base.billPay,
        abi: billPayAbi,
        functionName: "spendingLimit",
        args: [bob.address, usdc],
      });
      expect(spent).toBe(u("4"));
      // Once the ledger's readable block is the head, the account row is there.
      await caughtUp();
      expect(await accountOf(bob.address, 8453, usdc)).toMatchObject({
        limitPerPeriod: u("10").toString(),
        limitPeriod: "3600",
        limitStart: periodStart.toString(),
        periodStart: periodStart.toString(),
        periodSpent: u("4").toString(),
        spendingAllowance: u("46").toString(),
      });
      await base.setSpendingLimit(bob, "USDC", 0n, 0n);
      await caughtUp();
      expect(await accountOf(bob.address, 8453, usdc)).toMatchObject({ limitPerPeriod: "0", limitPeriod: "0", periodSpent: "0" });
    });

    it("fails the audit on a refund without a payment", async () => {
      // The payer signs an authorization to BillPay, then cancels its nonce instead of paying.
      // The chain reads a cancelled nonce as used, so BillPay lets the operator refund it;
      // only the ledger can tell that no payment ever arrived.
      const signed = await celo.signAuthorization(carol, "USDC", u("1"));
      await celo.cancelAuthorization(carol, "USDC", signed.nonce);
      const o8 = orderId();
      await celo.refundAuthorization(o8, "USDC", signed, u("1"));
      const report = await runAudit({ ledgerUrl: ledger.url, deployments: stack.deployments });
      expect(report.discrepancies).toEqual([expect.stringContaining(`order ${o8}`)]);
      expect(report.discrepancies[0]).toContain("has no inbound payment");
      const cli = await runAuditCli({ LEDGER_URL: ledger.url, DEPLOYMENTS_FILE: stack.deploymentsFile });
      expect(cli.out).toContain("has no inbound payment");
      expect(cli.code).toBe(1);
      const json = await runAuditCli({ LEDGER_URL: ledger.url, DEPLOYMENTS_FILE: stack.deploymentsFile }, ["--json"]);
      expect(json.code).toBe(1);
      expect(JSON.parse(json.out)).toMatchObject({ ok: false, discrepancies: [expect.stringContaining("has no inbound payment")], orders: null });
    });

    it("fails the audit when BillPay's balance changes without a transfer the ledger can see", async () => {
      // Rewrite the token's balance slot for BillPay (OpenZeppelin ERC20: mapping at slot 0).
      const usdc = celo.tokenAddress("USDC");
      const slot = keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [celo.billPay, 0n]));
      const real = await celo.balanceOf("USDC", celo.billPay);
      const setBalance = (value: bigint) =>
        celo.publicClient.request({
          method: "hardhat_setStorageAt" as never,
          params: [usdc, slot, toHex(value, { size: 32 })] as never,
        });
      await setBalance(real + u("5"));
      try {
        const report = await runAudit({ ledgerUrl: ledger.url, deployments: stack.deployments });
        const line = report.treasury.find((l) => l.chain === "CELO" && l.symbol === "USDC")!;
        expect(line).toMatchObject({ ok: false, onChainBalance: real + u("5") });
        expect(report.discrepancies).toContainEqual(expect.stringContaining("CELO USDC: ledger balance"));
      } finally {
        await setBalance(real);
      }
    });
  });
}
