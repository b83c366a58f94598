/**
 * The ledger. Event tables record each movement of money once (keyed by chain, transaction
 * and log index); aggregate tables answer per payer, per token and per treasury without a
 * scan. Amounts are raw token units (numeric(78,0)); addresses and hashes lower-case hex.
 */
// `ponder/onchain`, an entry this project patches in (docs/ledger.md, Ponder and its patches): the
// table builders alone, so the service and the audit load the schema without Ponder's servers.
import { index, onchainEnum, onchainTable, primaryKey, uniqueIndex } from "ponder/onchain";

/** How a payment reached BillPay: pulled, an EIP-3009 authorization (x402), or a Permit2 permit through x402's exact proxy. */
export const rail = onchainEnum("rail", ["pull", "authorization", "permit2"]);

/** Every inbound payment: an agent-hub pull, or an x402 payment into BillPay (EIP-3009 or Permit2). */
export const payment = onchainTable(
  "payment",
  (t) => ({
    id: t.text().primaryKey(), // chainId-txHash-logIndex of the payment's own event
    chainId: t.integer().notNull(),
    rail: rail().notNull(),
    /** BillPay order id (pulls); null for x402 payments, which BillPay never sees. */
    orderId: t.hex(),
    /** The signed payment's nonce (x402): EIP-3009's, or Permit2's as 32 bytes (rail permit2); null for pulls. */
    authorizationNonce: t.hex(),
    payer: t.hex().notNull(),
    token: t.hex().notNull(),
    amount: t.bigint().notNull(),
    /** Spending allowance left after a pull, as BillPay reported it; null for x402 payments. */
    allowanceLeft: t.bigint(),
    txHash: t.hex().notNull(),
    blockNumber: t.bigint().notNull(),
    logIndex: t.integer().notNull(),
    timestamp: t.bigint().notNull(),
  }),
  (p) => ({
    byPayer: index().on(p.payer, p.timestamp),
    byTime: index().on(p.timestamp, p.chainId, p.blockNumber, p.logIndex),
    byOrder: index().on(p.chainId, p.orderId),
    // EIP-3009 and Permit2 nonces are separate spaces: the rail is part of the key.
    byAuthorization: uniqueIndex().on(p.chainId, p.rail, p.token, p.payer, p.authorizationNonce),
  }),
);

/** Every refund BillPay paid out (Refunded events). */
export const refund = onchainTable(
  "refund",
  (t) => ({
    id: t.text().primaryKey(),
    chainId: t.integer().notNull(),
    rail: rail().notNull(),
    orderId: t.hex().notNull(),
    /** The refunded x402 payment's nonce (EIP-3009's, or Permit2's: rail permit2); null for a refund of a pull. */
    authorizationNonce: t.hex(),
    payer: t.hex().notNull(),
    token: t.hex().notNull(),
    amount: t.bigint().notNull(),
    txHash: t.hex().notNull(),
    blockNumber: t.bigint().notNull(),
    logIndex: t.integer().notNull(),
    timestamp: t.bigint().notNull(),
  }),
  (r) => ({
    byOrder: index().on(r.chainId, r.orderId),
    byPayer: index().on(r.payer, r.timestamp),
  }),
);

/** Every admin withdrawal out of the treasury. */
export const withdrawal = onchainTable("withdrawal", (t) => ({
  id: t.text().primaryKey(),
  chainId: t.integer().notNull(),
  token: t.hex().notNull(),
  to: t.hex().notNull(),
  amount: t.bigint().notNull(),
  txHash: t.hex().notNull(),
  blockNumber: t.bigint().notNull(),
  timestamp: t.bigint().notNull(),
}));

/** Every token Transfer into or out of BillPay: the raw movements the balance is summed from. */
export const treasuryTransfer = onchainTable(
  "treasury_transfer",
  (t) => ({
    id: t.text().primaryKey(),
    chainId: t.integer().notNull(),
    token: t.hex().notNull(),
    from: t.hex().notNull(),
    to: t.hex().notNull(),
    amount: t.bigint().notNull(),
    inbound: t.boolean().notNull(),
    /** Set when this inbound transfer is an x402 payment (its EIP-3009 or Permit2 nonce). */
    authorizationNonce: t.hex(),
    txHash: t.hex().notNull(),
    blockNumber: t.bigint().notNull(),
    logIndex: t.integer().notNull(),
    timestamp: t.bigint().notNull(),
  }),
  (x) => ({
    byToken: index().on(x.chainId, x.token, x.blockNumber),
    // A payer's transfers in (/ledger/payers/{address}/unbooked-inflows).
    bySender: index().on(x.chainId, x.token, x.from, x.blockNumber),
  }),
);

/**
 * History of spending allowances: set by payers (SpendingAllowanceSet, `kind` "set",
 * `amount` the new figure) and given back by refunded pulls (SpendingAllowanceRestored,
 * `kind` "restore", `amount` what was added, `orderId` the refunded pull).
 */
export const spendingAllowanceChange = onchainTable(
  "spending_allowance_change",
  (t) => ({
    id: t.text().primaryKey(),
    chainId: t.integer().notNull(),
    kind: t.text().notNull(),
    orderId: t.hex(),
    payer: t.hex().notNull(),
    token: t.hex().notNull(),
    amount: t.bigint().notNull(),
    /** The spending allowance after this change. */
    allowanceAfter: t.bigint().notNull(),
    txHash: t.hex().notNull(),
    blockNumber: t.bigint().notNull(),
    logIndex: t.integer().notNull(),
    timestamp: t.bigint().notNull(),
  }),
  (s) => ({ byPayer: index().on(s.chainId, s.payer, s.token, s.blockNumber) }),
);

/** Per chain, token and payer: both allowances and the payer's running totals. */
export const account = onchainTable(
  "account",
  (t) => ({
    chainId: t.integer().notNull(),
    token: t.hex().notNull(),
    payer: t.hex().notNull(),
    /** ERC-20 allowance to BillPay: the last Approval, less pulls since (tokens emit no Approval on spend). */
    tokenAllowance: t.bigint().notNull(),
    /** BillPay spending allowance left. */
    spendingAllowance: t.bigint().notNull(),
    /** The payer's periodic limit (SpendingLimitSet): the amount per period, 0 with no limit. */
    limitPerPeriod: t.bigint().notNull(),
    /** Its period in seconds (0: no periodic limit), and when its first period began. */
    limitPeriod: t.bigint().notNull(),
    limitStart: t.bigint().notNull(),
    /** The period of the last change (SpendingLimitSet or SpendingLimitUsed) and what it had used then. */
    periodStart: t.bigint().notNull(),
    periodSpent: t.bigint().notNull(),
    totalPaid: t.bigint().notNull(),
    totalRefunded: t.bigint().notNull(),
    net: t.bigint().notNull(),
    paymentCount: t.integer().notNull(),
    refundCount: t.integer().notNull(),
    updatedAt: t.bigint().notNull(),
  }),
  (a) => ({
    pk: primaryKey({ columns: [a.chainId, a.token, a.payer] }),
    byPayer: index().on(a.payer),
  }),
);

/**
 * Per chain and token: what the treasury (BillPay) took in and paid out, and its balance.
 * Pulls, refunds and withdrawals are booked from BillPay's own events, x402 payments from
 * the token's AuthorizationUsed, and the totals and balance from the token's Transfers;
 * whatever the totals hold beyond the named kinds is "other" (a plain transfer in, say).
 */
export const treasury = onchainTable(
  "treasury",
  (t) => ({
    chainId: t.integer().notNull(),
    token: t.hex().notNull(),
    pullInflow: t.bigint().notNull(),
    /** x402 payments: EIP-3009 and Permit2 alike (the payment table tells them apart by rail). */
    authorizationInflow: t.bigint().notNull(),
    totalInflow: t.bigint().notNull(),
    refunds: t.bigint().notNull(),
    withdrawals: t.bigint().notNull(),
    totalOutflow: t.bigint().notNull(),
    balance: t.bigint().notNull(),
    updatedAt: t.bigint().notNull(),
  }),
  (t) => ({ pk: primaryKey({ columns: [t.chainId, t.token] }) }),
);

/** Per chain and token: the refund budget the admin set (RefundBudgetSet): `limit` raw units per `period` seconds, refilling. */
export const refundBudget = onchainTable(
  "refund_budget",
  (t) => ({
    chainId: t.integer().notNull(),
    token: t.hex().notNull(),
    limit: t.bigint().notNull(),
    period: t.bigint().notNull(),
    updatedAt: t.bigint().notNull(),
  }),
  (b) => ({ pk: primaryKey({ columns: [b.chainId, b.token] }) }),
);

/** Current role holders of BillPay (RoleGranted / RoleRevoked). */
export const roleMember = onchainTable(
  "role_member",
  (t) => ({
    chainId: t.integer().notNull(),
    role: t.hex().notNull(),
    account: t.hex().notNull(),
    active: t.boolean().notNull(),
    updatedAt: t.bigint().notNull(),
  }),
  (r) => ({ pk: primaryKey({ columns: [r.chainId, r.role, r.account] }) }),
);

/** BillPay's token accept-list (TokenAcceptanceSet). */
export const acceptedToken = onchainTable(
  "accepted_token",
  (t) => ({
    chainId: t.integer().notNull(),
    token: t.hex().notNull(),
    accepted: t.boolean().notNull(),
    updatedAt: t.bigint().notNull(),
  }),
  (a) => ({ pk: primaryKey({ columns: [a.chainId, a.token] }) }),
);

/** Per chain: whether BillPay's pulls are paused. */
export const contractState = onchainTable("contract_state", (t) => ({
  chainId: t.integer().primaryKey(),
  paused: t.boolean().notNull(),
  updatedAt: t.bigint().notNull(),
}));

/** History of administrative events: pause, unpause, role changes, accept-list changes. */
export const adminEvent = onchainTable("admin_event", (t) => ({
  id: t.text().primaryKey(),
  chainId: t.integer().notNull(),
  kind: t.text().notNull(),
  account: t.hex(),
  role: t.hex(),
  token: t.hex(),
  accepted: t.boolean(),
  sender: t.hex(),
  txHash: t.hex().notNull(),
  blockNumber: t.bigint().notNull(),
  timestamp: t.bigint().notNull(),
}));
