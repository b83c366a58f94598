/** BillPay's events: payments by pull, refunds, withdrawals, allowances and periodic limits, refund budgets and administration. */
import { ponder } from "ponder:registry";
import {
  acceptedToken,
  adminEvent,
  contractState,
  payment,
  refund,
  refundBudget,
  roleMember,
  spendingAllowanceChange,
  withdrawal,
} from "ponder:schema";
import { updateAccount, updateTreasury } from "./accounts.ts";
import { logId } from "./ids.ts";
import { refundOf, type ChainRefund } from "../../lib/refund-logs.ts";

ponder.on("BillPay:SpendingAllowanceSet", async ({ event, context }) => {
  const chainId = context.chain.id;
  const { payer, token, amount } = event.args;
  await context.db.insert(spendingAllowanceChange).values({
    id: logId(chainId, event.transaction.hash, event.log.logIndex),
    chainId,
    kind: "set",
    orderId: null,
    payer,
    token,
    amount,
    allowanceAfter: amount,
    txHash: event.transaction.hash,
    blockNumber: event.block.number,
    logIndex: event.log.logIndex,
    timestamp: event.block.timestamp,
  });
  await updateAccount(context.db, { chainId, token, payer }, event.block.timestamp, () => ({
    spendingAllowance: amount,
  }));
});

// The payer's periodic limit: set (or removed, period 0) by the payer, used by pulls and given back by refunds.
ponder.on("BillPay:SpendingLimitSet", async ({ event, context }) => {
  const { payer, token, amountPerPeriod, period, start, spent } = event.args;
  await updateAccount(context.db, { chainId: context.chain.id, token, payer }, event.block.timestamp, () => ({
    limitPerPeriod: amountPerPeriod,
    limitPeriod: period,
    limitStart: start,
    periodStart: start,
    periodSpent: spent,
  }));
});

ponder.on("BillPay:SpendingLimitUsed", async ({ event, context }) => {
  const { payer, token, periodStart, spent } = event.args;
  await updateAccount(context.db, { chainId: context.chain.id, token, payer }, event.block.timestamp, () => ({
    periodStart,
    periodSpent: spent,
  }));
});

ponder.on("BillPay:Pulled", async ({ event, context }) => {
  const chainId = context.chain.id;
  const { orderId, payer, token, amount, allowanceLeft } = event.args;
  await context.db.insert(payment).values({
    id: logId(chainId, event.transaction.hash, event.log.logIndex),
    chainId,
    rail: "pull",
    orderId,
    authorizationNonce: null,
    payer,
    token,
    amount,
    allowanceLeft,
    txHash: event.transaction.hash,
    blockNumber: event.block.number,
    logIndex: event.log.logIndex,
    timestamp: event.block.timestamp,
  });
  await updateAccount(context.db, { chainId, token, payer }, event.block.timestamp, (row) => ({
    spendingAllowance: allowanceLeft,
    // A pull spends the ERC-20 allowance without an Approval event. Tokens differ on whether
    // an "infinite" approval is spent; the ledger always subtracts (no RPC per pull), so an
    // infinite approval reads as slightly less than 2^256 - 1. The chain has the exact figure.
    tokenAllowance: row.tokenAllowance > amount ? row.tokenAllowance - amount : 0n,
    totalPaid: row.totalPaid + amount,
    net: row.net + amount,
    paymentCount: row.paymentCount + 1,
  }));
  await updateTreasury(context.db, { chainId, token }, event.block.timestamp, (row) => ({
    pullInflow: row.pullInflow + amount,
  }));
});

/** One refund out of BillPay, whichever way the payment it returns had arrived. */
async function bookRefund(
  { event, context }: { event: { transaction: { hash: `0x${string}` }; log: { logIndex: number }; block: { number: bigint; timestamp: bigint } }; context: { chain: { id: number }; db: Parameters<typeof updateAccount>[0] } },
  r: ChainRefund,
) {
  const chainId = context.chain.id;
  await context.db.insert(refund).values({
    id: logId(chainId, event.transaction.hash, event.log.logIndex),
    chainId,
    rail: r.rail,
    orderId: r.orderId,
    authorizationNonce: r.authorizationNonce,
    payer: r.payer,
    token: r.token,
    amount: r.amount,
    txHash: event.transaction.hash,
    blockNumber: event.block.number,
    logIndex: event.log.logIndex,
    timestamp: event.block.timestamp,
  });
  await updateAccount(context.db, { chainId, token: r.token, payer: r.payer }, event.block.timestamp, (row) => ({
    totalRefunded: row.totalRefunded + r.amount,
    net: row.net - r.amount,
    refundCount: row.refundCount + 1,
  }));
  await updateTreasury(context.db, { chainId, token: r.token }, event.block.timestamp, (row) => ({
    refunds: row.refunds + r.amount,
  }));
}

// Booked by the one refund predicate (lib/refund-logs.ts), which the service finds refunds on its own node by too.
ponder.on("BillPay:Refunded", async (args) => {
  await bookRefund(args, refundOf({ eventName: "Refunded", args: args.event.args }));
});

// The refund of an x402 payment made through Permit2, keyed by its Permit2 nonce.
ponder.on("BillPay:Permit2Refunded", async (args) => {
  await bookRefund(args, refundOf({ eventName: "Permit2Refunded", args: args.event.args }));
});

// A refunded pull gave back the allowance it used (unless the payer set a new figure since).
ponder.on("BillPay:SpendingAllowanceRestored", async ({ event, context }) => {
  const chainId = context.chain.id;
  const { orderId, payer, token, amount, allowanceLeft } = event.args;
  await context.db.insert(spendingAllowanceChange).values({
    id: logId(chainId, event.transaction.hash, event.log.logIndex),
    chainId,
    kind: "restore",
    orderId,
    payer,
    token,
    amount,
    allowanceAfter: allowanceLeft,
    txHash: event.transaction.hash,
    blockNumber: event.block.number,
    logIndex: event.log.logIndex,
    timestamp: event.block.timestamp,
  });
  await updateAccount(context.db, { chainId, token, payer }, event.block.timestamp, () => ({
    spendingAllowance: allowanceLeft,
  }));
});

ponder.on("BillPay:Withdrawn", async ({ event, context }) => {
  const chainId = context.chain.id;
  const { token, to, amount } = event.args;
  await context.db.insert(withdrawal).values({
    id: logId(chainId, event.transaction.hash, event.log.logIndex),
    chainId,
    token,
    to,
    amount,
    txHash: event.transaction.hash,
    blockNumber: event.block.number,
    timestamp: event.block.timestamp,
  });
  await updateTreasury(context.db, { chainId, token }, event.block.timestamp, (row) => ({
    withdrawals: row.withdrawals + amount,
  }));
});

// ------------------------------------------------------------------ administration

type AdminFields = { kind: string; account?: `0x${string}`; role?: `0x${string}`; token?: `0x${string}`; accepted?: boolean; sender?: `0x${string}` };

async function recordAdminEvent(
  context: { chain: { id: number }; db: import("ponder:registry").Context["db"] },
  event: { transaction: { hash: `0x${string}` }; log: { logIndex: number }; block: { number: bigint; timestamp: bigint } },
  fields: AdminFields,
) {
  const chainId = context.chain.id;
  await context.db.insert(adminEvent).values({
    id: logId(chainId, event.transaction.hash, event.log.logIndex),
    chainId,
    account: null,
    role: null,
    token: null,
    accepted: null,
    sender: null,
    ...fields,
    txHash: event.transaction.hash,
    blockNumber: event.block.number,
    timestamp: event.block.timestamp,
  });
}

ponder.on("BillPay:RefundBudgetSet", async ({ event, context }) => {
  const { token, limit, period } = event.args;
  const updatedAt = event.block.timestamp;
  await context.db
    .insert(refundBudget)
    .values({ chainId: context.chain.id, token, limit, period, updatedAt })
    .onConflictDoUpdate({ limit, period, updatedAt });
  await recordAdminEvent(context, event, { kind: "RefundBudgetSet", token });
});

ponder.on("BillPay:TokenAcceptanceSet", async ({ event, context }) => {
  const { token, accepted } = event.args;
  const updatedAt = event.block.timestamp;
  await context.db
    .insert(acceptedToken)
    .values({ chainId: context.chain.id, token, accepted, updatedAt })
    .onConflictDoUpdate({ accepted, updatedAt });
  await recordAdminEvent(context, event, { kind: "TokenAcceptanceSet", token, accepted });
});

for (const [name, paused] of [["Paused", true], ["Unpaused", false]] as const) {
  ponder.on(`BillPay:${name}`, async ({ event, context }) => {
    const updatedAt = event.block.timestamp;
    await context.db
      .insert(contractState)
      .values({ chainId: context.chain.id, paused, updatedAt })
      .onConflictDoUpdate({ paused, updatedAt });
    await recordAdminEvent(context, event, { kind: name, account: event.args.account });
  });
}

for (const [name, active] of [["RoleGranted", true], ["RoleRevoked", false]] as const) {
  ponder.on(`BillPay:${name}`, async ({ event, context }) => {
    const { role, account, sender } = event.args;
    const updatedAt = event.block.timestamp;
    await context.db
      .insert(roleMember)
      .values({ chainId: context.chain.id, role, account, active, updatedAt })
      .onConflictDoUpdate({ active, updatedAt });
    await recordAdminEvent(context, event, { kind: name, role, account, sender });
  });
}

ponder.on("BillPay:RoleAdminChanged", async ({ event, context }) => {
  await recordAdminEvent(context, event, { kind: "RoleAdminChanged", role: event.args.role });
});
