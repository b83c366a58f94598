/**
 * An order's life in one table: every state, where an order starts, every move allowed, and
 * what each move means for the money. The order store refuses any move this table does not
 * list (`assertMove`), so a stage cannot invent one; docs/architecture.md's state diagram is
 * generated from it (`stateDiagram`) and a test keeps the two in step.
 *
 * A plain typed table rather than a state-machine library (XState and the like): the moves
 * are made by SQL updates guarded on the current state (`WHERE status = ANY(from)`), since
 * several instances and the worker race for the same order, and the database is what decides
 * which of them wins. What is needed here is the list the guard is checked against, not an
 * interpreter that holds the state in memory.
 */

export const ORDER_STATUSES = ["SETTLING", "PULLING", "REFUSED", "PAYMENT_FAILED", "NEEDS_REVIEW", "PAID", "PENDING", "SUCCESS", "REFUNDING", "REFUNDED"] as const;
export type OrderStatus = (typeof ORDER_STATUSES)[number];

/** Where an order is created, and why there. */
export const ORDER_STARTS: ReadonlyArray<{ at: OrderStatus; why: string }> = [
  { at: "SETTLING", why: "an x402 payment was offered; its authorization is being settled, nothing is charged yet" },
  { at: "PULLING", why: "an agent asked to pay from its allowance; the pull is being sent, nothing is charged yet" },
  { at: "REFUNDING", why: "a payment the service had refused landed later anyway: it is refunded, exactly it (less LATE_LANDING_FEE for its gas when the service never sent it)" },
];

export interface Move {
  from: OrderStatus;
  to: OrderStatus;
  /** When the move is made. */
  when: string;
  /** What it means for the money. */
  money: string;
}

/** Every move an order may make. A move not listed here is refused by the order store. */
export const ORDER_MOVES: readonly Move[] = [
  { from: "SETTLING", to: "PAID", when: "the chain shows the order's payment under its key", money: "in: exactly the order's amount, from its payer, in its token" },
  { from: "SETTLING", to: "REFUSED", when: "the facilitator refused to settle", money: "none charged; should the authorization land later, it is refunded" },
  { from: "SETTLING", to: "PAYMENT_FAILED", when: "the authorization expired unsettled, or its nonce was spent with no payment to BillPay (for Permit2: and no transfer of its amount from the payer unaccounted for)", money: "none charged" },
  { from: "SETTLING", to: "NEEDS_REVIEW", when: "the chain shows another payment under the key (amount, payer or token), or a Permit2 nonce spent unseen by a payer who sent BillPay a transfer of its amount that no payment accounts for", money: "held: an operator refunds or serves what landed" },
  { from: "PULLING", to: "PAID", when: "the ledger shows the pull", money: "in: exactly the order's amount, pulled from the allowance" },
  { from: "PULLING", to: "PAYMENT_FAILED", when: "no pull was sent, or it did not land and its nonce is used (voided by the operator key if need be)", money: "none charged" },
  { from: "PULLING", to: "NEEDS_REVIEW", when: "the pull shows another amount, or another instance's key signed it and it may still land", money: "held for an operator" },
  { from: "REFUSED", to: "REFUNDING", when: "the refused authorization landed after all", money: "out: exactly what landed, back to the payer" },
  { from: "REFUSED", to: "PAYMENT_FAILED", when: "the refused authorization expired, or its nonce was spent elsewhere (for Permit2: with no transfer of its amount from the payer unaccounted for)", money: "none charged" },
  { from: "REFUSED", to: "NEEDS_REVIEW", when: "another payment landed under the key, or a Permit2 nonce was spent unseen by a payer who sent BillPay a transfer of its amount that no payment accounts for", money: "held for an operator" },
  { from: "PAYMENT_FAILED", to: "REFUNDING", when: "a payment landed later under the written-off key", money: "out: exactly what landed, back to the payer" },
  { from: "PAYMENT_FAILED", to: "NEEDS_REVIEW", when: "another payment landed later under the written-off key, or the payment of a bill vended before a reorganisation took it", money: "held for an operator" },
  { from: "PAID", to: "PENDING", when: "the biller holds the bill", money: "kept while the biller decides" },
  { from: "PAID", to: "SUCCESS", when: "the biller delivered", money: "kept: the bill was vended" },
  { from: "PAID", to: "REFUNDING", when: "the biller failed the bill (or the number check did)", money: "out: the payment, back to the payer" },
  { from: "PAID", to: "NEEDS_REVIEW", when: "the biller's answer needs a person, or a reorganisation took the payment (or left another under its key)", money: "held for an operator" },
  { from: "PENDING", to: "SUCCESS", when: "a requery or the biller's webhook shows it delivered", money: "kept: the bill was vended" },
  { from: "PENDING", to: "REFUNDING", when: "a requery or the biller's webhook shows it failed", money: "out: the payment, back to the payer" },
  { from: "PENDING", to: "NEEDS_REVIEW", when: "the biller's answer needs a person, or a reorganisation took the payment (or left another under its key)", money: "held for an operator" },
  { from: "SUCCESS", to: "REFUNDING", when: "the biller reversed a delivered bill, and no other delivery of it stands", money: "out: the payment, back to the payer, once" },
  { from: "SUCCESS", to: "NEEDS_REVIEW", when: "a reorganisation took the payment of a delivered bill (or left another under its key), or the biller reversed it while another attempt of it is still pending", money: "held: the bill was vended unpaid, or may yet be" },
  { from: "REFUNDING", to: "REFUNDED", when: "the refund's transaction was mined, or the refund BillPay already held was found on chain", money: "out: at most what the ledger shows paid under the key" },
  { from: "REFUNDING", to: "NEEDS_REVIEW", when: "the refund was held, refused by BillPay (its order ids taken, say), waited too long for the budget, was found given back by another amount, the biller delivered the bill before it was sent, or a reorganisation left another payment under its key, or took its payment while its refund stands", money: "held: nothing sent" },
  { from: "REFUNDING", to: "PAYMENT_FAILED", when: "a reorganisation took the payment before its refund stood", money: "none: there is nothing to refund" },
  { from: "REFUNDED", to: "PAYMENT_FAILED", when: "a reorganisation took the payment that was refunded, and its refund with it", money: "none: the payment and its refund both went" },
  { from: "REFUNDED", to: "NEEDS_REVIEW", when: "a reorganisation took the refund's transaction while its payment stands, left another payment under its key, or took its payment while its refund stands", money: "held: the payer is owed the refund again, or BillPay paid out a refund of nothing; an operator decides (BillPay refunds a key once)" },
  { from: "NEEDS_REVIEW", to: "PAID", when: "an operator serves it: the ledger shows exactly the order's payment", money: "in, as for any paid order" },
  { from: "NEEDS_REVIEW", to: "REFUNDING", when: "an operator refunds it (its budget wait and revert count start afresh, as on every move into REFUNDING)", money: "out: exactly what the ledger shows paid under the key" },
  { from: "NEEDS_REVIEW", to: "REFUNDED", when: "the ledger already shows the key refunded in full, or an operator closes a Permit2 order held for a refund by hand with the refund's transaction (checked on chain)", money: "none sent by the service; by hand, exactly the order's amount, once per payer transfer it gives back" },
  { from: "NEEDS_REVIEW", to: "PAYMENT_FAILED", when: "an operator closes it: the ledger shows no payment under its key (for a spent Permit2 nonce: nor any transfer of its amount from the payer unaccounted for)", money: "none charged" },
];

/**
 * States an order is in only before any payment of it was confirmed: no pay attempt of an
 * order in them was ever sent. A request records its order's first attempt while the payment
 * settles (orders/fulfil.ts recordFirstAttempt), but sends it only once the order is PAID; a
 * move out of these states to anything but PAID withdraws such an attempt in the same
 * statement (OrderStore), so that one a crash left behind is not read as a bill that may
 * have been vended (a payment landing later is then refunded, not held for a person). On
 * PostgreSQL a recording that commits while the move runs escapes it: the request withdraws
 * that one as it ends, and only a crash in that instant leaves it, which holds a late landing
 * for an operator (the safe side).
 */
const BEFORE_PAYMENT: ReadonlySet<OrderStatus> = new Set(["SETTLING", "PULLING", "REFUSED"]);

/** The states in which an order's payment is on its way (settling, or its pull being mined): a first attempt is recorded ahead only in them. */
export const PAYMENT_ON_ITS_WAY: readonly OrderStatus[] = ["SETTLING", "PULLING"];

/**
 * Whether a move from `from` to `to` withdraws the order's pay attempts (BEFORE_PAYMENT): one
 * that leaves those states for good. Not a step that stays put (a settlement's transaction
 * noted while it is still SETTLING), which may yet become PAID and send its attempt.
 */
export function withdrawsUnsentAttempts(from: readonly OrderStatus[], to: OrderStatus): boolean {
  return to !== "PAID" && from.length > 0 && from.every((f) => BEFORE_PAYMENT.has(f) && f !== to);
}

/** States an order is still on its way out of, by itself: NEEDS_REVIEW waits for a person, and the rest are final. */
export const UNFINISHED_STATUSES: readonly OrderStatus[] = ["SETTLING", "PULLING", "PAID", "PENDING", "REFUNDING", "REFUSED"];

/**
 * Since when an unfinished order has stood: since it last became unfinished (when it was made,
 * or when it left a final state or review: a served bill the biller reversed days later),
 * however often it moved on the way (a requery keeps a bill PENDING, each retry of a refund
 * moves it to REFUNDING again), so an order retried for ever still grows old. The order store
 * keeps that moment (`unfinished_since`). A refusal is the exception: it is unfinished until
 * its authorization expires, and counts from then. Milliseconds; Infinity for an
 * authorization that never expires. The stuck gauge reads the same rule in SQL (`stoodSql`);
 * the audit reads it here.
 */
export function unfinishedSince(o: { status: string; unfinishedSinceMs: number; authValidBefore: bigint | null }): number {
  if (o.status === "REFUSED" && o.authValidBefore !== null) return Number(o.authValidBefore) * 1000;
  return o.unfinishedSinceMs;
}

/**
 * `unfinishedSince` as a SQL condition on bill_order: the order has stood longer than the
 * seconds in parameter `seconds` (a placeholder such as "$2"). The expiry is compared as a
 * number, since an authorization may be valid until 2^256 - 1, which no timestamp holds.
 */
export function stoodSql(seconds: string): string {
  return `(CASE WHEN status = 'REFUSED' AND auth_valid_before IS NOT NULL
            THEN auth_valid_before::float8 < extract(epoch from now())::float8 - ${seconds}::float8
            ELSE coalesce(unfinished_since, created_at) < now() - make_interval(secs => ${seconds}::float8) END)`;
}

const allowed = new Set(ORDER_MOVES.map((m) => `${m.from}>${m.to}`));

/** Whether an order may move from `from` to `to`. Staying put (updating only its fields) is not a move. */
export function mayMove(from: OrderStatus, to: OrderStatus): boolean {
  return from === to || allowed.has(`${from}>${to}`);
}

export class IllegalMove extends Error {
  constructor(from: OrderStatus, to: OrderStatus) {
    super(`an order may not move from ${from} to ${to} (server/orders/lifecycle.ts)`);
  }
}

/** Throws unless every state in `from` may move to `to`: a caller asking for an unlisted move is a bug. */
export function assertMove(from: readonly OrderStatus[], to: OrderStatus): void {
  for (const f of from) if (!mayMove(f, to)) throw new IllegalMove(f, to);
}

/** The order's life as a Mermaid state diagram, for docs/architecture.md. */
export function stateDiagram(): string {
  const lines = ["stateDiagram-v2"];
  for (const s of ORDER_STARTS) lines.push(`    [*] --> ${s.at}`);
  for (const m of ORDER_MOVES) lines.push(`    ${m.from} --> ${m.to}`);
  return lines.join("\n");
}
