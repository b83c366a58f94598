/**
 * The service's own state (orders, links, schedules, rate versions) in
 * PostgreSQL: embedded PGlite by default, a PostgreSQL server when SERVER_DATABASE_URL is
 * set. One small interface over both, and forward-only migrations keyed by version.
 */
import { discardPgliteImage, loadPgliteImage, pgliteInDirectory } from "../lib/pglite-image.ts";
import { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { refuseOtherPostgresMajor } from "../lib/pglite-dir.ts";

export interface Db {
  query<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  /** Runs `work` in one transaction on one connection: committed when it resolves, rolled back when it throws. */
  transaction<T>(work: (tx: Pick<Db, "query">) => Promise<T>): Promise<T>;
  close(): Promise<void>;
  /** The PostgreSQL server's pool (absent on PGlite), for libraries that take one. */
  pool?: pg.Pool;
}

const MIGRATIONS: string[] = [
  `CREATE TABLE quote (
     body_hash   text        NOT NULL,
     chain       text        NOT NULL,
     token       text        NOT NULL,
     amount      numeric(78) NOT NULL,
     rate_milli  numeric(78) NOT NULL,
     created_at  timestamptz NOT NULL DEFAULT now(),
     expires_at  timestamptz NOT NULL,
     PRIMARY KEY (body_hash, chain, token, expires_at)
   );
   CREATE INDEX quote_live ON quote (body_hash, expires_at);`,
  // One row per order. The unique (chain, token, payer, nonce) is the once-only lock on
  // an x402 payment: taken before anything is settled, never released.
  `CREATE TABLE bill_order (
     request_id        text        PRIMARY KEY,
     biller_request_id text        NOT NULL UNIQUE,
     body_hash         text        NOT NULL,
     bill              jsonb       NOT NULL,
     chain             text        NOT NULL,
     token             text        NOT NULL,
     token_address     text        NOT NULL,
     payer             text        NOT NULL,
     amount            numeric(78) NOT NULL,
     auth_nonce        text        NOT NULL,
     payment           jsonb       NOT NULL,
     requirements      jsonb       NOT NULL,
     status            text        NOT NULL,
     tx_hash           text,
     purchased_code    text,
     units             text,
     failure_reason    text,
     refund_tx_hash    text,
     lease_until       timestamptz,
     created_at        timestamptz NOT NULL DEFAULT now(),
     updated_at        timestamptz NOT NULL DEFAULT now(),
     UNIQUE (chain, token_address, payer, auth_nonce)
   );
   CREATE INDEX bill_order_open ON bill_order (status, lease_until);`,
  // The agent hub. Orders gain a rail: an x402 order is keyed by its authorization, a pulled
  // one by its on-chain order id, and an agent's retry by its idempotency key.
  `ALTER TABLE bill_order ADD COLUMN rail text NOT NULL DEFAULT 'x402';
   ALTER TABLE bill_order ALTER COLUMN auth_nonce DROP NOT NULL;
   ALTER TABLE bill_order ALTER COLUMN payment DROP NOT NULL;
   ALTER TABLE bill_order ALTER COLUMN requirements DROP NOT NULL;
   ALTER TABLE bill_order ADD COLUMN onchain_order_id text UNIQUE;
   ALTER TABLE bill_order ADD COLUMN batch_id text;
   ALTER TABLE bill_order ADD COLUMN schedule_id text;
   ALTER TABLE bill_order ADD COLUMN idempotency_key text;
   CREATE UNIQUE INDEX bill_order_idempotency ON bill_order (payer, idempotency_key) WHERE idempotency_key IS NOT NULL;
   CREATE INDEX bill_order_history ON bill_order (payer, created_at DESC, request_id DESC);
   -- One row per linked wallet; the key and PIN only as hashes. A new link retires the old key.
   CREATE TABLE agent_link (
     wallet         text        PRIMARY KEY,
     api_key_hash   text        NOT NULL UNIQUE,
     pin_hash       text        NOT NULL,
     channel        text        NOT NULL,
     approved_chain text        NOT NULL,
     approved_token text        NOT NULL,
     pin_failures   integer     NOT NULL DEFAULT 0,
     locked_until   timestamptz,
     linked_at      timestamptz NOT NULL DEFAULT now()
   );
   CREATE TABLE retired_api_key (
     api_key_hash text        PRIMARY KEY,
     wallet       text        NOT NULL,
     retired_at   timestamptz NOT NULL DEFAULT now()
   );
   -- Each link signature once ever (by its hash).
   CREATE TABLE link_signature (
     signature_hash text        PRIMARY KEY,
     wallet         text        NOT NULL,
     used_at        timestamptz NOT NULL DEFAULT now()
   );
   CREATE TABLE bill_schedule (
     id           text        PRIMARY KEY,
     wallet       text        NOT NULL,
     bill         jsonb       NOT NULL,
     chain        text        NOT NULL,
     token        text        NOT NULL,
     run_at       timestamptz,
     cron         text,
     next_run_at  timestamptz,
     status       text        NOT NULL,
     runs         integer     NOT NULL DEFAULT 0,
     max_runs     integer,
     created_at   timestamptz NOT NULL DEFAULT now(),
     cancelled_at timestamptz
   );
   CREATE INDEX bill_schedule_due ON bill_schedule (status, next_run_at);
   CREATE INDEX bill_schedule_wallet ON bill_schedule (wallet, created_at DESC);
   -- The once-only key of a schedule's run: (schedule, due time).
   CREATE TABLE schedule_run (
     schedule_id text        NOT NULL REFERENCES bill_schedule (id),
     due_at      timestamptz NOT NULL,
     request_id  text,
     outcome     text,
     error       text,
     started_at  timestamptz NOT NULL DEFAULT now(),
     PRIMARY KEY (schedule_id, due_at)
   );
   -- Pulls the ledger shows that no live order accounts for: refunded once, by (chain, order id).
   CREATE TABLE orphan_pull (
     chain          text        NOT NULL,
     order_id       text        NOT NULL,
     payer          text        NOT NULL,
     token_address  text        NOT NULL,
     amount         numeric(78) NOT NULL,
     pull_tx_hash   text        NOT NULL,
     status         text        NOT NULL,
     refund_tx_hash text,
     created_at     timestamptz NOT NULL DEFAULT now(),
     PRIMARY KEY (chain, order_id)
   );
   CREATE TABLE reconciler_cursor (
     name       text        PRIMARY KEY,
     position   text        NOT NULL,
     updated_at timestamptz NOT NULL DEFAULT now()
   );`,
  // A lease names its holder, so a holder whose lease ran out cannot release its successor's.
  `ALTER TABLE bill_order ADD COLUMN lease_token text;`,
  // PIN checks in flight count against the attempts left, so parallel guesses cannot outrun
  // the limit; a count older than a minute is from a process that died mid-check.
  `ALTER TABLE agent_link ADD COLUMN pin_pending integer NOT NULL DEFAULT 0;
   ALTER TABLE agent_link ADD COLUMN pin_attempt_at timestamptz;`,
  // Money safety. An x402 order keeps its authorization's expiry (a refused one is watched
  // until then), the hash of its secret (the proof that shows its purchased code), and what
  // the biller said it charged, with a flag when that differs from the bill.
  `ALTER TABLE bill_order ADD COLUMN auth_valid_before numeric(78);
   UPDATE bill_order SET auth_valid_before = (payment->'authorization'->>'validBefore')::numeric WHERE rail = 'x402';
   ALTER TABLE bill_order ADD COLUMN secret_hash text;
   ALTER TABLE bill_order ADD COLUMN biller_amount text;
   ALTER TABLE bill_order ADD COLUMN flag text;
   CREATE INDEX bill_order_refused ON bill_order (auth_valid_before) WHERE status = 'REFUSED';
   -- x402 payments the ledger shows that no order of this service accounts for: kept for an
   -- operator (the service never saw the authorization, so it cannot refund it itself).
   CREATE TABLE orphan_payment (
     chain         text        NOT NULL,
     token_address text        NOT NULL,
     payer         text        NOT NULL,
     auth_nonce    text        NOT NULL,
     amount        numeric(78) NOT NULL,
     tx_hash       text        NOT NULL,
     status        text        NOT NULL,
     created_at    timestamptz NOT NULL DEFAULT now(),
     PRIMARY KEY (chain, token_address, payer, auth_nonce)
   );
   -- The last good NGN/USD readings: quotes are made only from a rate within the band of the last good one.
   CREATE TABLE fx_rate (
     rate_milli  numeric(78) NOT NULL,
     source      text        NOT NULL,
     read_at     timestamptz NOT NULL DEFAULT now()
   );
   CREATE INDEX fx_rate_latest ON fx_rate (source, read_at DESC);`,
  // Abuse resistance. rate_limit is rate-limiter-flexible's PostgreSQL table (its own
  // layout), shared by every instance; purged of expired keys on the worker's schedule.
  `CREATE TABLE rate_limit (
     key    varchar(255) PRIMARY KEY,
     points integer NOT NULL DEFAULT 0,
     expire bigint
   );
   -- How many PIN lockouts a link has had since it last proved its PIN: lockouts escalate,
   -- and past PIN_MAX_LOCKOUTS the key is retired.
   ALTER TABLE agent_link ADD COLUMN pin_lockouts integer NOT NULL DEFAULT 0;
   -- A key linked by a contract wallet pays only on the chain its signature was checked on.
   ALTER TABLE agent_link ADD COLUMN scope_chain text;
   -- Server-issued nonces for Sign-In with Ethereum links: each used once, while fresh.
   CREATE TABLE link_nonce (
     nonce      text        PRIMARY KEY,
     created_at timestamptz NOT NULL DEFAULT now(),
     used_at    timestamptz
   );
   CREATE INDEX link_nonce_age ON link_nonce (created_at);
   CREATE INDEX quote_expired ON quote (expires_at);
   CREATE INDEX link_signature_age ON link_signature (used_at);`,
  // Callbacks: one delivery per order that named a callback_url, queued in the statement
  // that makes the order final, retried with backoff by the worker.
  `CREATE TABLE callback_delivery (
     request_id      text        PRIMARY KEY REFERENCES bill_order (request_id),
     url             text        NOT NULL,
     status          text        NOT NULL,
     attempts        integer     NOT NULL DEFAULT 0,
     next_attempt_at timestamptz NOT NULL DEFAULT now(),
     last_status     integer,
     last_error      text,
     delivered_at    timestamptz,
     created_at      timestamptz NOT NULL DEFAULT now()
   );
   CREATE INDEX callback_due ON callback_delivery (next_attempt_at) WHERE status = 'PENDING';`,
  // Speed: the 402 writes nothing. Instead of a quote row per bill, one row per change of
  // the rate (and fee schedule) the service prices with, live from live_from until superseded
  // (live_until); a payment is checked against the versions live within its window
  // (server/pricing/rate-versions.ts). Quotes still live at the upgrade become versions
  // spanning the time they were shown, priced with the configured fees (fees NULL), so
  // challenges answered before it are honoured after it; then the quote table goes.
  `CREATE TABLE rate_version (
     id          bigserial   PRIMARY KEY,
     fingerprint text        NOT NULL,
     rate_milli  numeric(78) NOT NULL,
     fees        jsonb,
     source      text        NOT NULL,
     live_from   timestamptz NOT NULL DEFAULT now(),
     live_until  timestamptz
   );
   CREATE UNIQUE INDEX rate_version_open ON rate_version (fingerprint) WHERE live_until IS NULL;
   CREATE INDEX rate_version_until ON rate_version (live_until);
   INSERT INTO rate_version (fingerprint, rate_milli, fees, source, live_from, live_until)
   SELECT 'migrated:' || rate_milli::text, rate_milli, NULL, 'quote (before rate versions)', min(created_at), max(created_at)
     FROM quote WHERE expires_at > now() GROUP BY rate_milli;
   DROP TABLE quote;`,
  // Real upstreams. A bill keeps its vend plan (how it vends, decided when it was priced) and
  // every code the biller handed over. Each pay to the biller is an attempt with its own
  // request id, made when it is sent (the biller refuses an id not dated today): the order's
  // old fixed id becomes its first attempt wherever a pay may have been sent.
  `ALTER TABLE bill_order ALTER COLUMN biller_request_id DROP NOT NULL;
   ALTER TABLE bill_order ADD COLUMN vend jsonb;
   ALTER TABLE bill_order ADD COLUMN purchased_codes jsonb;
   CREATE TABLE biller_attempt (
     biller_request_id text        PRIMARY KEY,
     request_id        text        NOT NULL REFERENCES bill_order (request_id),
     attempt           integer     NOT NULL,
     pay               jsonb,
     sent_at           timestamptz NOT NULL DEFAULT now(),
     UNIQUE (request_id, attempt)
   );
   INSERT INTO biller_attempt (biller_request_id, request_id, attempt, sent_at)
   SELECT biller_request_id, request_id, 1, updated_at FROM bill_order
    WHERE biller_request_id IS NOT NULL AND status IN ('PAID', 'PENDING', 'SUCCESS', 'REFUNDING', 'REFUNDED', 'NEEDS_REVIEW');`,
  // Abuse costs the abuser. A refund the budget (or the payer's share of it) cannot take now
  // waits until a set time instead of being tried on every pass; since when it has waited
  // decides when it goes to an operator.
  `ALTER TABLE bill_order ADD COLUMN not_before timestamptz;
   ALTER TABLE bill_order ADD COLUMN refund_waiting_since timestamptz;`,
  // A payer's payment for a bill still settling answers a second payment for the same bill.
  `CREATE INDEX bill_order_settling ON bill_order (payer, body_hash) WHERE status = 'SETTLING';`,
  // Reorganisations. Every payment the ledger confirmed is watched until it is as deep as the
  // ledger follows reorganisations; one the chain drops is collected again or goes to an
  // operator (orders/payment-watch.ts). A row outlives its watch only when the payment was
  // lost, as the record of what became of it.
  `CREATE TABLE payment_watch (
     request_id        text        PRIMARY KEY,
     chain             text        NOT NULL,
     -- The chain's genesis hash and BillPay's address: a local chain started afresh is
     -- another chain, and a payment of the old one is never looked for (or collected) on it.
     deployment        text        NOT NULL,
     rail              text        NOT NULL,
     payment_key       text        NOT NULL,
     block_number      numeric(78) NOT NULL,
     block_time        numeric(78) NOT NULL,
     tx_hash           text        NOT NULL,
     final             boolean     NOT NULL DEFAULT false,
     lost_at           timestamptz,
     outcome           text,
     detail            text,
     recollect_tx_hash text,
     attempted_at      timestamptz,
     created_at        timestamptz NOT NULL DEFAULT now(),
     updated_at        timestamptz NOT NULL DEFAULT now()
   );
   CREATE INDEX payment_watch_open ON payment_watch (chain, deployment, block_number) WHERE NOT final;
   CREATE INDEX payment_watch_lost ON payment_watch (lost_at) WHERE lost_at IS NOT NULL;`,
  // One key, one instance: the instance signing with each hot key, and its heartbeat (chain/key-lease.ts).
  `CREATE TABLE key_lease (
     address      text        PRIMARY KEY,
     role         text        NOT NULL,
     instance_id  text        NOT NULL,
     host         text        NOT NULL,
     pid          integer     NOT NULL,
     heartbeat_at timestamptz NOT NULL DEFAULT now(),
     started_at   timestamptz NOT NULL DEFAULT now()
   );`,
  // x402 payments through Permit2 (lib/permit2.ts): an orphan payment names its rail, since
  // EIP-3009 and Permit2 nonces are separate spaces. Its key stays (chain, token, payer,
  // nonce): the service takes each token by one method only, so only a payer paying outside
  // the service in both ways under one nonce could meet another's row; the audit then lists
  // the second payment as one with no record.
  `ALTER TABLE orphan_payment ADD COLUMN rail text NOT NULL DEFAULT 'authorization';`,
  // Operators' decisions on what is held for them (orders/review.ts): an order in NEEDS_REVIEW
  // refunded, served or closed, an x402 payment no order accounts for closed. Who, when, why,
  // what it moved and what came of it; refusals too. No foreign key: the record outlives an
  // order purged as unpaid. A refund's amount is what the ledger showed under the order's key,
  // and it is the only figure an order whose payment is not exactly its own is refunded by.
  `CREATE TABLE review_action (
     id            bigserial   PRIMARY KEY,
     request_id    text,
     orphan_key    text,
     action        text        NOT NULL,
     operator      text        NOT NULL,
     reason        text        NOT NULL,
     amount        numeric(78),
     tx_hash       text,
     outcome       text        NOT NULL,
     detail        text,
     status_before text,
     status_after  text,
     created_at    timestamptz NOT NULL DEFAULT now(),
     updated_at    timestamptz NOT NULL DEFAULT now(),
     CHECK ((request_id IS NULL) <> (orphan_key IS NULL))
   );
   CREATE INDEX review_action_order ON review_action (request_id, id) WHERE request_id IS NOT NULL;
   CREATE INDEX review_action_orphan ON review_action (orphan_key, id) WHERE orphan_key IS NOT NULL;
   -- A transaction that refunded one orphan payment by hand closes no other.
   CREATE UNIQUE INDEX review_action_hand_refund ON review_action (lower(tx_hash)) WHERE orphan_key IS NOT NULL AND outcome = 'DONE' AND tx_hash IS NOT NULL;`,
  // Money safety, third round (docs/money.md).
  // - A refund is cleared against the payer's share of the refund budget, and a late landing's
  //   against the late slice, when it is let go (orders/refund-share.ts): refund_cleared_at.
  //   A refund the payer brought on himself (a payment landed after its refusal) is late_refund.
  // - refused_payment: x402 payments refused though their signature was good (not yet valid, a
  //   spent nonce, ...), kept (bounded) with the signed authorization so that one landing later
  //   anyway is refunded on chain by the service, not left for an operator (orders/late-landing.ts).
  // - biller_attempt.outcome: what a requery of that very attempt said last, so a delivery by an
  //   earlier attempt is recorded beside the one that served or failed the order.
  `ALTER TABLE bill_order ADD COLUMN late_refund boolean NOT NULL DEFAULT false;
   ALTER TABLE bill_order ADD COLUMN refund_cleared_at timestamptz;
   ALTER TABLE bill_order ADD COLUMN refund_cleared_amount numeric(78);
   UPDATE bill_order SET refund_cleared_at = updated_at, refund_cleared_amount = amount WHERE status = 'REFUNDED';
   CREATE INDEX bill_order_refund_cleared ON bill_order (chain, token_address, refund_cleared_at) WHERE refund_cleared_at IS NOT NULL;
   CREATE TABLE refused_payment (
     chain         text        NOT NULL,
     rail          text        NOT NULL,
     token_address text        NOT NULL,
     payer         text        NOT NULL,
     auth_nonce    text        NOT NULL,
     amount        numeric(78) NOT NULL,
     valid_before  numeric(78) NOT NULL,
     token         text        NOT NULL,
     bill          jsonb       NOT NULL,
     body_hash     text        NOT NULL,
     payment       jsonb       NOT NULL,
     requirements  jsonb       NOT NULL,
     reason        text        NOT NULL,
     created_at    timestamptz NOT NULL DEFAULT now(),
     PRIMARY KEY (chain, rail, token_address, payer, auth_nonce)
   );
   CREATE INDEX refused_payment_payer ON refused_payment (payer, valid_before);
   ALTER TABLE biller_attempt ADD COLUMN outcome text;
   ALTER TABLE biller_attempt ADD COLUMN outcome_detail jsonb;
   ALTER TABLE biller_attempt ADD COLUMN outcome_at timestamptz;`,
  // A2A tasks, so any instance continues a task another started (agent/a2a-tasks.ts).
  `CREATE SEQUENCE a2a_task_seq;
   CREATE TABLE a2a_task (
     id         text        PRIMARY KEY,
     state      integer     NOT NULL,
     task       jsonb       NOT NULL,
     updated_at timestamptz NOT NULL,
     seq        bigint      NOT NULL DEFAULT nextval('a2a_task_seq')
   );
   CREATE INDEX a2a_task_seq_order ON a2a_task (seq);
   CREATE INDEX a2a_task_updated ON a2a_task (updated_at);`,
  // Readings taken in the same instant (PGlite's clock counts milliseconds) are told apart by
  // the order they were recorded in, so the first and the last good rate are never a toss-up.
  `ALTER TABLE fx_rate ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
   DROP INDEX fx_rate_latest;
   CREATE INDEX fx_rate_latest ON fx_rate (source, read_at DESC, seq DESC);`,
  // Every wrong PIN a key has met, never cleared by a right one: a guesser who stops short of
  // each lockout while the key's own agent keeps paying is still stopped at the key's bound.
  `ALTER TABLE agent_link ADD COLUMN pin_wrong_total integer NOT NULL DEFAULT 0;`,
  // The key a schedule was made under: a run pays only while it is still the wallet's, so a
  // schedule written while a re-link retired its key (which cancels the schedules it sees)
  // never pays. Older schedules have none, and are guarded as before.
  `ALTER TABLE bill_schedule ADD COLUMN api_key_hash text;`,
  // A Permit2 order held because its payer sent BillPay a transfer of its amount that no
  // payment accounts for is held for a refund by hand before anything is sent, then closed with
  // the refund (orders/review.ts). The hold takes the transfer it gives back (the ledger's row
  // id): one transfer is taken once, by one hold, and an order is held once. A hand refund's
  // transaction closes one thing, orphan payment or order (a DONE close of an order names one
  // only as refunded by hand).
  `ALTER TABLE review_action ADD COLUMN hand_refund_inflow text;
   CREATE UNIQUE INDEX review_action_hand_refund_inflow ON review_action (hand_refund_inflow) WHERE hand_refund_inflow IS NOT NULL;
   CREATE UNIQUE INDEX review_action_one_hold ON review_action (request_id) WHERE hand_refund_inflow IS NOT NULL;
   DROP INDEX review_action_hand_refund;
   CREATE UNIQUE INDEX review_action_hand_refund ON review_action (lower(tx_hash))
     WHERE tx_hash IS NOT NULL AND outcome = 'DONE' AND (orphan_key IS NOT NULL OR action = 'close');`,
  // Refunds the service sent, watched for reorganisations until past the ledger's depth
  // (orders/refund-watch.ts): one lost holds its order for an operator (lost_at), who may
  // refund it again but not serve it (the lost refund may still land).
  `CREATE TABLE refund_watch (
     request_id   text        PRIMARY KEY,
     chain        text        NOT NULL,
     deployment   text        NOT NULL,
     tx_hash      text        NOT NULL,
     block_number numeric(78) NOT NULL,
     lost_at      timestamptz,
     created_at   timestamptz NOT NULL DEFAULT now(),
     updated_at   timestamptz NOT NULL DEFAULT now()
   );
   CREATE INDEX refund_watch_open ON refund_watch (chain, block_number) WHERE lost_at IS NULL;`,
  // The block of an orphan pull's refund, so the ledger pass watches it as deep as the
  // ledger follows a reorganisation (orders/ledger-pass.ts): one lost is sent again.
  `ALTER TABLE orphan_pull ADD COLUMN refund_block numeric(78);`,
  // A payer's pulls held across instances (chain/payer-holds.ts): the operator key whose
  // transaction carries a pull of his, until it is mined or has failed.
  `CREATE TABLE payer_pull_hold (
     chain  text        NOT NULL,
     payer  text        NOT NULL,
     holder text        NOT NULL,
     until  timestamptz NOT NULL,
     PRIMARY KEY (chain, payer)
   );`,
  // A delivered bill asked again on a schedule (orders/reversal-checks.ts), so that a reversal
  // its webhooks never brought is still refunded: how many times so far, and when next. NULL
  // checks: an order made before the schedule existed, never asked by it (no burst of asks at
  // the upgrade). The indexes: delivered bills never asked (the window bounds their scan), and
  // asks to come.
  `ALTER TABLE bill_order ADD COLUMN reversal_checks integer;
   ALTER TABLE bill_order ALTER COLUMN reversal_checks SET DEFAULT 0;
   ALTER TABLE bill_order ADD COLUMN reversal_due_at timestamptz;
   CREATE INDEX bill_order_reversal_first ON bill_order (created_at) WHERE status = 'SUCCESS' AND reversal_checks = 0;
   CREATE INDEX bill_order_reversal_due ON bill_order (reversal_due_at) WHERE status = 'SUCCESS' AND reversal_due_at IS NOT NULL;`,
  // A payer's bills the biller failed (orders/failing-payers.ts), read before each of his
  // payments: only those rows, so a payer of many good bills is not scanned.
  `CREATE INDEX bill_order_failed_vend ON bill_order (payer, created_at) WHERE failure_reason LIKE 'biller: %';`,
  // Schedule runs left unfinished (agent/schedules.ts unfinishedRuns), read every worker pass:
  // only those rows, not every run a schedule ever made.
  `CREATE INDEX schedule_run_unfinished ON schedule_run (started_at) WHERE outcome IS NULL;`,
  // Callbacks due, first attempts first (orders/callbacks.ts claim).
  `CREATE INDEX callback_due_first ON callback_delivery (attempts, next_attempt_at) WHERE status = 'PENDING';`,
  // Read by no query since the claim takes first attempts first; every write kept it up to date.
  `DROP INDEX callback_due;`,
  // Every refund transaction signed for an order, recorded before it is sent (orders/fulfil.ts
  // sendRefund): the payment watch waits while one may still land.
  `ALTER TABLE bill_order ADD COLUMN refund_signed text[];`,
  // Why an order was first refunded, when it is counted against its payer (orders/store.ts
  // RefundCause): read from the reason text before, which later steps write again. Orders
  // refunded before take it from their reason as it stands. One index serves both counts.
  `ALTER TABLE bill_order ADD COLUMN refund_cause text;
   UPDATE bill_order SET refund_cause = CASE WHEN failure_reason LIKE 'biller: %' THEN 'biller' ELSE 'verification' END
     WHERE failure_reason LIKE 'biller: %' OR failure_reason LIKE 'verification failed%';
   CREATE INDEX bill_order_refund_cause ON bill_order (payer, created_at) WHERE refund_cause IS NOT NULL;
   DROP INDEX bill_order_failed_vend;`,
  // Since when an order has been unfinished without a stop in a final state or in review
  // (orders/lifecycle.ts unfinishedSince): a served bill reversed days later starts again.
  // Orders made before read their making (coalesce in orders/store.ts).
  `ALTER TABLE bill_order ADD COLUMN unfinished_since timestamptz;
   ALTER TABLE bill_order ALTER COLUMN unfinished_since SET DEFAULT now();`,
  // A bill delivered after all (a held refund, then served) is no failed bill of its payer's:
  // the move to SUCCESS clears its cause, but the orders filled in from their reason above
  // were served before that rule.
  `UPDATE bill_order SET refund_cause = NULL WHERE status = 'SUCCESS' AND refund_cause IS NOT NULL;`,
  // How many of an order's refunds were mined and reverted, each at the refunder key's gas
  // (orders/fulfil.ts refundReverted): bounded, then an operator decides.
  `ALTER TABLE bill_order ADD COLUMN refund_reverts integer NOT NULL DEFAULT 0;`,
  // The agent hub's quotes, locked to their rate version until they expire (quote/quote-locks.ts).
  `CREATE TABLE quote_lock (
     body_hash  text        PRIMARY KEY,
     version_id bigint      NOT NULL REFERENCES rate_version (id),
     expires_at timestamptz NOT NULL
   );
   CREATE INDEX quote_lock_expired ON quote_lock (expires_at);`,
  // A schedule's once-only key, the agent's or one made for a blind retry (agent/hub.ts
  // scheduleBill), and the hash of what it asked for, so a key reused for another is told apart.
  `ALTER TABLE bill_schedule ADD COLUMN idempotency_key text;
   ALTER TABLE bill_schedule ADD COLUMN request_hash text;
   CREATE UNIQUE INDEX bill_schedule_idempotency ON bill_schedule (wallet, idempotency_key) WHERE idempotency_key IS NOT NULL;`,
  // Every pull transaction signed for an order, recorded before it is sent (orders/store.ts
  // setTxHash, replaceTxHash): the order names only the newest, and one it replaced may land.
  `ALTER TABLE bill_order ADD COLUMN pull_signed text[];`,
  // The signer's nonce of every refund transaction signed for an order (orders/store.ts
  // refundSigned): one the node's pool dropped may still be sent by anyone who saw it, until
  // that nonce is used (chain/refund-on-node.ts refundInSight). Orders signed before have none.
  // With the highest fees signed under it: a void of it must outbid them.
  `CREATE TABLE refund_nonce (
     request_id               text    NOT NULL REFERENCES bill_order (request_id),
     signer                   text    NOT NULL,
     nonce                    bigint  NOT NULL,
     max_fee_per_gas          numeric NOT NULL,
     max_priority_fee_per_gas numeric NOT NULL,
     PRIMARY KEY (request_id, signer, nonce)
   );`,
  // The operator key's nonce the newest pull transaction of an order was signed under, with the
  // highest fees signed under it (orders/store.ts setTxHash, replaceTxHash): a pull the node's
  // pool dropped may still be sent by anyone who saw it until that nonce is used, so the order
  // is not written off before (orders/pull-reconciler.ts). Orders signed before have none.
  `ALTER TABLE bill_order ADD COLUMN pull_signer text;
   ALTER TABLE bill_order ADD COLUMN pull_nonce bigint;
   ALTER TABLE bill_order ADD COLUMN pull_max_fee numeric;
   ALTER TABLE bill_order ADD COLUMN pull_max_priority_fee numeric;`,
  // What a refund keeps back to pay for its own gas: a refusal kept at intake that its payer (or
  // anyone) landed anyway (orders/late-landing.ts); 0 for every other order.
  `ALTER TABLE bill_order ADD COLUMN refund_fee numeric NOT NULL DEFAULT 0;`,
];

/** Applies what is missing, each migration with its version row in one transaction. `db` must be one connection. */
async function migrate(db: Db): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS schema_migration (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
  const done = new Set((await db.query<{ version: number }>(`SELECT version FROM schema_migration`)).map((r) => r.version));
  for (const [i, sql] of MIGRATIONS.entries()) {
    if (done.has(i + 1)) continue;
    await db.query("BEGIN");
    try {
      await db.query(sql);
      await db.query(`INSERT INTO schema_migration (version) VALUES ($1)`, [i + 1]);
      await db.query("COMMIT");
    } catch (err) {
      await db.query("ROLLBACK");
      throw err;
    }
  }
}

/**
 * The cluster PGlite's initdb makes, before any migration: loaded from the image kept on disk
 * (lib/pglite-image.ts) instead of running initdb again, 0.5 s against 3 s (docs/development.md,
 * Tests). Without one (a cache that cannot be written, an image that would not load), the
 * process's first database runs initdb and its cluster serves the process's next ones. Held for
 * the process's life (40 MB); each database still runs every migration itself.
 */
let initdbImage: Promise<Blob | undefined> | undefined;
const clusterImage = () => (initdbImage ??= loadPgliteImage());

async function inMemoryPglite(): Promise<PGlite> {
  const image = await clusterImage();
  const loaded = image && (await PGlite.create({ loadDataDir: image }).catch(() => undefined));
  if (loaded) return loaded;
  // An image that would not load is not offered again, here or to the next process.
  if (image) await discardPgliteImage();
  const lite = await PGlite.create();
  // Taken before the caller writes anything: this instance is still exactly what initdb left.
  const dump = lite.dumpDataDir("none").catch(() => undefined);
  initdbImage = dump;
  await dump;
  return lite;
}

/** Instances starting together take turns migrating (a session-level advisory lock). */
const MIGRATION_LOCK = 7_402_402;

export async function openDb(options: { url?: string; pgliteDir?: string; poolSize?: number }): Promise<Db> {
  let db: Db;
  if (options.url) {
    const pool = new pg.Pool({ connectionString: options.url, max: options.poolSize ?? 10, connectionTimeoutMillis: 5_000, statement_timeout: 10_000 });
    // An idle connection the server drops (a restart, a terminated backend) is an 'error'
    // event on the pool; unheard, it would crash the process. The pool replaces the client.
    pool.on("error", (err) => console.error(JSON.stringify({ level: "warn", msg: "database connection lost; the pool will reconnect", error: err.message })));
    db = {
      query: async (text, params) => (await pool.query(text, params)).rows,
      async transaction(work) {
        const client = await pool.connect();
        try {
          await client.query("BEGIN");
          const result = await work({ query: async (text, params) => (await client.query(text, params)).rows });
          await client.query("COMMIT");
          return result;
        } catch (err) {
          await client.query("ROLLBACK").catch(() => {});
          throw err;
        } finally {
          client.release();
        }
      },
      close: () => pool.end(),
      pool,
    };
    const client = await pool.connect();
    try {
      // Waiting for another instance's migration, or building an index, may take a while.
      await client.query("SET statement_timeout = 0");
      await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
      await migrate({ query: async (text, params) => (await client.query(text, params)).rows, transaction: () => Promise.reject(new Error("no transactions while migrating")), close: async () => {} });
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]).catch(() => {});
      await client.query("RESET statement_timeout").catch(() => {});
      client.release();
    }
    return db;
  } else {
    if (options.pgliteDir) refuseOlderServiceDir(options.pgliteDir);
    const lite = options.pgliteDir ? await pgliteInDirectory(options.pgliteDir, clusterImage) : await inMemoryPglite();
    db = {
      // PGlite runs one statement list per exec; parameterised queries go through query().
      query: async <T>(text: string, params?: unknown[]) =>
        params && params.length > 0 ? ((await lite.query(text, params)).rows as T[]) : ((await lite.exec(text)).at(-1)?.rows as T[]) ?? [],
      // PGlite has one connection: its transaction holds it, and other queries wait their turn.
      transaction: (work) => lite.transaction((tx) => work({ query: async <T>(text: string, params?: unknown[]) => (await tx.query(text, params ?? [])).rows as T[] })),
      close: () => lite.close(),
    };
  }
  await migrate(db);
  return db;
}

/** A state directory another PGlite wrote (an older one, in practice) cannot be opened: say so, and what to do. */
export function refuseOlderServiceDir(dir: string): void {
  refuseOtherPostgresMajor(
    dir,
    "Move the directory aside (or set SERVER_PGLITE_DIR to a new one) and start again; the old orders stay in it, readable by the release that wrote them.",
  );
}
