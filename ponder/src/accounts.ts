/** Upserts of the aggregate rows (account, treasury): one place for their defaults. */
import type { Context } from "ponder:registry";
import { account, treasury } from "ponder:schema";

type AccountRow = typeof account.$inferSelect;
type TreasuryRow = typeof treasury.$inferSelect;
type Db = Context["db"];

export async function updateAccount(
  db: Db,
  key: { chainId: number; token: `0x${string}`; payer: `0x${string}` },
  timestamp: bigint,
  change: (row: AccountRow) => Partial<AccountRow>,
): Promise<void> {
  const fresh: AccountRow = {
    ...key,
    tokenAllowance: 0n,
    spendingAllowance: 0n,
    limitPerPeriod: 0n,
    limitPeriod: 0n,
    limitStart: 0n,
    periodStart: 0n,
    periodSpent: 0n,
    totalPaid: 0n,
    totalRefunded: 0n,
    net: 0n,
    paymentCount: 0,
    refundCount: 0,
    updatedAt: timestamp,
  };
  await db
    .insert(account)
    .values({ ...fresh, ...change(fresh) })
    .onConflictDoUpdate((row) => ({ ...change(row), updatedAt: timestamp }));
}

export async function updateTreasury(
  db: Db,
  key: { chainId: number; token: `0x${string}` },
  timestamp: bigint,
  change: (row: TreasuryRow) => Partial<TreasuryRow>,
): Promise<void> {
  const fresh: TreasuryRow = {
    ...key,
    pullInflow: 0n,
    authorizationInflow: 0n,
    totalInflow: 0n,
    refunds: 0n,
    withdrawals: 0n,
    totalOutflow: 0n,
    balance: 0n,
    updatedAt: timestamp,
  };
  await db
    .insert(treasury)
    .values({ ...fresh, ...change(fresh) })
    .onConflictDoUpdate((row) => ({ ...change(row), updatedAt: timestamp }));
}
