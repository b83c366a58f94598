/**
 * The server's hot keys at work on BillPay: the operator key pulls (agent hub), the
 * refunder key refunds (both rails); BillPay gives each only its own role, so a leaked
 * pulling key moves nothing out and a leaked refunding key is held to the refund budget.
 * Transactions are sent one at a time per chain and key, so each key's nonces stay in
 * order; receipts are awaited outside that queue, with a timeout, so one slow receipt does
 * not hold up the next send. One process per key: instances each sign with their own. A
 * contract refusal is reported by its error name, so callers can tell "already done" (a
 * retry after a crash) from a real failure.
 *
 * A transaction not mined within `replaceAfterMs` is replaced: the same call, the same
 * nonce, each fee raised by a quarter (nodes ask for at least a tenth), up to
 * `maxReplacements` times. One nonce can be mined once, so the original and its
 * replacements together move money at most once; whichever is mined is the answer. A refund
 * still unmined after them is waited for by its next try (refundOnce), not signed again.
 */
import {
  BaseError,
  ContractFunctionRevertedError,
  createWalletClient,
  encodeFunctionData,
  erc20Abi,
  http,
  keccak256,
  type Account,
  type Hex,
  type Chain,
  type TransactionReceipt,
  type Transport,
  type WalletClient,
} from "viem";
import type { ChainHeads } from "../../lib/chain-heads.ts";
import { billPayAbi, eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { POLLING_INTERVAL_MS, RPC_TIMEOUT_MS, sharedClientFor } from "../../lib/chain-client.ts";
import { viemChain, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { onChainOrderId } from "./order-id.ts";
import type { Authorization } from "../x402-protocol/payment.ts";
import type { ProxySettlement as Permit2Refund } from "../../lib/permit2.ts";
import { asSigned, transactionOnNode, type SignedNonce } from "./node-transactions.ts";
import { whileHeld, type PayerHolds } from "./payer-holds.ts";

const RECEIPT_TIMEOUT_MS = 60_000;
/** Receipts kept for the caller that reads its payment from one (orders/pull-flow.ts). */
const KEPT_RECEIPTS = 256;


export interface ReplacementPolicy {
  /** How long a sent transaction may stay unmined before it is replaced at a higher fee. */
  replaceAfterMs: number;
  maxReplacements: number;
  /** How long the last of them is waited for before the send fails as not mined (default a minute). */
  lastWaitMs?: number;
}
const DEFAULT_REPLACEMENT: ReplacementPolicy = { replaceAfterMs: 60_000, maxReplacements: 3 };
/**
 * A refund transaction as signed: its hash, and the signer's nonce it is under. A signed
 * transaction can be sent by anyone who saw it until its signer's nonce is used by another, so
 * one the node's pool dropped may still land (chain/refund-on-node.ts refundInSight).
 */
export interface SignedRefund extends SignedNonce {
  hash: Hex;
}
/** The refund (or pull) transactions signed for an order, as its store keeps them (orders/store.ts signedRefundRecord, signedPullRecord). */
export interface SignedTransactions {
  hashes: Hex[];
  /** The signer's nonces they were signed under, each once, with the highest fees signed under it (replacements share their first's nonce). */
  nonces: SignedNonce[];
}
/** Told a refund transaction's hash, and what it was signed under, before it is sent (the order records it: the payment watch and review wait while it may land). */
export type RefundSigned = (hash: Hex, signed: SignedRefund) => Promise<void>;
/** Thrown by a RefundRecord's `onSigned` when the order no longer asks for the refund: the transaction is not sent (a replacement's original is waited for as it is). */
export class RefundWithdrawn extends Error {}
/** What a refund's order records of it: `onSigned` is told each transaction (a replacement's too) before it is sent; `signedBefore`, those recorded already. */
export interface RefundRecord {
  onSigned?: RefundSigned;
  signedBefore?: readonly Hex[];
}
/** Refunds sent and not mined in time, remembered so the next try waits for them (refundOnce). */
const KEPT_UNMINED = 1_024;

/** A transaction signed and sent, waited for: its hashes so far (the first, then replacements), and the request last signed. */
interface Sent {
  hashes: Hex[];
  /** The hash the caller holds recorded (the last whose replacement it allowed). */
  recorded: Hex;
  request: Awaited<ReturnType<WalletClient<Transport, Chain, Account>["prepareTransactionRequest"]>>;
  /** The last transaction signed and sent, as sent: broadcast again should the pool have dropped it. */
  serialized: Hex;
  wallet: WalletClient<Transport, Chain, Account>;
}

/** A transaction neither mined nor replaced in time: what was sent, for a later try to wait for rather than sign another. */
class NotMinedInTime extends Error {
  declare readonly sent: Sent;
  constructor(sent: Sent, cause?: unknown) {
    super(`transaction ${sent.hashes[0]} (and ${sent.hashes.length - 1} replacement(s)) not mined in time${cause ? `: sending it failed (${(cause as Error).message?.split("\n")[0]})` : ""}`, { cause });
    // Not enumerable: an error logged or serialized carries its message, not the signer's wallet client.
    Object.defineProperty(this, "sent", { value: sent, enumerable: false });
  }
}

/** Each fee up by a quarter, rounded up. */
const bump = (fee: bigint | undefined) => (fee === undefined ? undefined : (fee * 125n + 99n) / 100n);
/** BillPay's ABI plus the token's errors, so a refusal from inside the token is named too. */
const abi = [...billPayAbi, ...eip3009TokenAbi.filter((item) => item.type === "error")];
// OrderExists: the refund's order id is taken, by this payment's own refund (a run that died
// after sending it) or by someone else's; the caller tells which (orders/refund-watch.ts refundFound).
const ALREADY_REFUNDED = new Set(["AuthorizationAlreadyRefunded", "Permit2AlreadyRefunded", "OrderExists", "AlreadyRefunded"]);

export { onChainOrderId };

/** ContractRefused's name for a transaction mined and reverted, its gas spent, for no reason read (an estimate's refusal without a reason is "Reverted"). */
export const REVERTED_ON_CHAIN = "RevertedOnChain";
/** ContractRefused's name for a pull mined and reverted because its payer moved his allowance or funds after the estimate (blame). */
export const REVERTED_BY_PAYER = "RevertedByPayer";
/** BillPay's and the token's refusals of a pull that only its payer's own transactions bring about. */
const PAYER_REFUSALS = new Set(["SpendingAllowanceExceeded", "SpendingLimitExceeded", "ERC20InsufficientAllowance", "ERC20InsufficientBalance"]);

/**
 * The gas a transaction is sent with: its estimate, run at the latest block, and a quarter more.
 * The block it is mined in may ask more of it than the estimate's did (a payer's spending-limit
 * period rolling over writes the new period: `test/server/gathered-pulls.test.ts`); sent at the
 * estimate alone it ran out of gas, reverted at BillPay's cost, and, passing when estimated
 * again, was blamed on its payer. Only the gas used is paid.
 */
const withGasMargin = (estimate: bigint) => estimate + estimate / 4n;

/** A refusal that names no error: a text reason (`require(…, "…")`), a panic, or nothing at all (refusal). */
const UNNAMED_REFUSALS = new Set(["Error", "Panic", "Reverted"]);

type Pulled = { payer: Hex; token: Hex; amount: bigint };
/** What a pull or pullBatch takes of each token from each payer, summed. */
function pulledByPayer(call: Write): Pulled[] {
  const items: Pulled[] =
    call.functionName === "pull"
      ? [{ payer: call.args[1] as Hex, token: call.args[2] as Hex, amount: call.args[3] as bigint }]
      : call.functionName === "pullBatch"
        ? (call.args[0] as Pulled[])
        : [];
  const pulled = new Map<string, Pulled>();
  for (const i of items) {
    const k = `${i.payer.toLowerCase()}:${i.token.toLowerCase()}`;
    pulled.set(k, { payer: i.payer, token: i.token, amount: (pulled.get(k)?.amount ?? 0n) + i.amount });
  }
  return [...pulled.values()];
}

/** BillPay (or the token) refused the call: nothing was sent, or the transaction reverted. */
export class ContractRefused extends Error {
  constructor(
    readonly errorName: string,
    readonly args: readonly unknown[],
    message: string,
  ) {
    super(message);
  }
}

/**
 * A transaction mined and reverted (REVERTED_ON_CHAIN). `outOfGas` when it used all its gas but
 * the 1/64 the EVM keeps back from a call it makes: it ran out, whatever it called, so the
 * service's own estimate fell short and nobody else's doing is read into it. A revert by a
 * check uses at most what the estimate ran, a quarter under the limit (withGasMargin).
 */
export class RevertedOnChain extends ContractRefused {
  constructor(
    txHash: Hex,
    readonly outOfGas: boolean,
    gasUsed: bigint,
    gas: bigint,
  ) {
    super(REVERTED_ON_CHAIN, [], outOfGas ? `transaction ${txHash} reverted: it ran out of gas (${gasUsed} of ${gas}), the service's estimate fell short` : `transaction ${txHash} reverted`);
  }
}

/** A refund sent and mined (its hash, the gas it cost the refunder key in wei, its block); or BillPay's answer, by name, that it holds the key (or the order id) refunded already. */
export type RefundOutcome = { txHash: Hex; gasWei: bigint; block: bigint } | { alreadyRefunded: true; errorName: string };

export interface PullItem {
  requestId: string;
  payer: Hex;
  token: Hex;
  amount: bigint;
}

type Write = { functionName: "pull" | "pullBatch" | "refund" | "refundAuthorization" | "refundPermit2"; args: readonly unknown[] };

/** BillPay's pull of one item, keyed by its order's id. */
const pullCall = (item: PullItem): Write => ({ functionName: "pull", args: [onChainOrderId(item.requestId), item.payer, item.token, item.amount] });
/** BillPay's pullBatch of many items, all or nothing. */
const batchCall = (items: readonly PullItem[]): Write => ({
  functionName: "pullBatch",
  args: [items.map((i) => ({ orderId: onChainOrderId(i.requestId), payer: i.payer, token: i.token, amount: i.amount }))],
});

/**
 * The hot keys, as viem Accounts: a local key (lib/local-accounts.ts, or *_PRIVATE_KEY), or
 * any remote or KMS signer built with viem's `toAccount` (an address and async signing
 * calls; test/server/remote-signer.test.ts). Each instance has its own pair, and the
 * transactions of one key are sent one at a time from one instance.
 */
export interface HotKeys {
  /** Holds OPERATOR_ROLE: pulls. */
  operator: Account;
  /** Holds REFUNDER_ROLE: refunds, within the refund budget. */
  refunder: Account;
}

/** A pull waiting to go out with others (pull): its caller's hooks and promise. */
interface GatheredPull {
  item: PullItem;
  onSigned?: Signed;
  onReplaced?: Replaced;
  resolve(hash: Hex): void;
  reject(err: unknown): void;
  /** The hash this member's caller last recorded, once it has recorded one. */
  recordedAs?: Hex;
  /** Since when another instance holds its payer (holds), once it has found so. */
  heldElsewhereSince?: number;
}

/** A member withdrew at signing: the group is signed again without it. */
class GroupChanged extends Error {}

export class ChainOperator {
  private queues = new Map<string, Promise<unknown>>();
  /** One wallet client per (chain, signer), built once rather than for every transaction. */
  private wallets = new Map<string, WalletClient<Transport, Chain, Account>>();
  /** Per chain, the pulls waiting for the operator key's current send to finish. */
  private gathering = new Map<ChainKey, GatheredPull[]>();
  /** The latest receipts this key's transactions were mined with, by hash, as its own node gave them. */
  private receipts = new Map<string, TransactionReceipt>();
  /** Per chain and payer with a transaction of his in flight: settles once every one is mined or has failed (holdPayers). */
  private inFlight = new Map<string, Promise<void>>();
  /** Per chain, a closed group taking its payers' holds: settles once its transaction is in the key's queue (sendWhereHeld). */
  private queuing = new Map<ChainKey, Promise<void>>();
  /** Per chain and payer in a gathered batch that reverted on chain and would pass now: until when his pulls go apart from others' (sendGathered). */
  private apartUntil = new Map<string, number>();
  /** Refunds sent and not mined in time, by chain and call: a later try of the same refund waits for its transaction, raising its fee, instead of signing another. */
  private unminedRefunds = new Map<string, Sent>();
  /** The fees of the voids sent, by chain, key and nonce: one stuck below a rising market is sent again above it (voidNonce). */
  private voids = new Map<string, { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }>();

  constructor(
    private readonly deployments: Deployments,
    private readonly keys: HotKeys,
    private readonly replacement: ReplacementPolicy = DEFAULT_REPLACEMENT,
    /** New blocks: a receipt is looked for again as each arrives (lib/chain-heads.ts). */
    private readonly heads?: ChainHeads,
    /** Called right before each signature and each send with the signing key: throws when this instance may no longer sign with it (chain/key-lease.ts confirm). */
    private readonly fence: (address: string) => Promise<void> = async () => {},
    /** Payers' holds shared with other instances (chain/payer-holds.ts); none where this instance is the only one. */
    private readonly holds?: PayerHolds,
    /**
     * How long the payers of a gathered batch that reverted, and would pass now, have their
     * pulls sent apart from other payers' (sendGathered): the window of the revert budget
     * (RATE_LIMIT_REVERTED_PAYER), in which a revert of his own pulls then counts.
     */
    private readonly apartMs = 60 * 60 * 1000,
  ) {}

  private nextBlock(chain: ChainKey): NextBlock {
    const heads = this.heads;
    if (!heads) return () => ({ seen: 0n, wait: () => new Promise((r) => setTimeout(r, POLLING_INTERVAL_MS)) });
    return () => {
      const seen = heads.latest(chain);
      return { seen, wait: () => heads.after(chain, seen, POLLING_INTERVAL_MS) };
    };
  }

  /** The receipt a transaction of these keys was just mined with (read from the service's own node), if still kept. */
  minedReceipt(hash: string): TransactionReceipt | undefined {
    return this.receipts.get(hash.toLowerCase());
  }

  /** The hot keys' addresses (their gas is watched). */
  get addresses() {
    return { operator: this.keys.operator.address, refunder: this.keys.refunder.address };
  }

  /**
   * One pull; resolves once mined, with its transaction hash. `onSigned` learns the hash of
   * each transaction that carries it, before it is sent (with the hash it replaces, when the
   * pull is signed again in another transaction); `onReplaced` learns a replacement's (the
   * same transaction at a higher fee), or the mined one's, hash in place of the one it last learnt.
   *
   * Pulls gather: one that arrives while this key is sending the previous transaction waits
   * for that send to finish (a few milliseconds, well inside a block) and goes out with every
   * other pull that arrived meanwhile, as one pullBatch. A lone pull goes out at once, alone.
   * A payer with a transaction of his in flight, from this instance or another, is held out
   * of the group until it is mined (inFlight, holds).
   */
  pull(chain: ChainKey, item: PullItem, onSigned?: Signed, onReplaced?: Replaced): Promise<Hex> {
    return new Promise<Hex>((resolve, reject) => this.gather(chain, { item, onSigned, onReplaced, resolve, reject }));
  }

  private gather(chain: ChainKey, entry: GatheredPull): void {
    const open = this.gathering.get(chain);
    if (open) {
      open.push(entry);
      return;
    }
    const group = [entry];
    this.gathering.set(chain, group);
    const key = `${chain}:${this.keys.operator.address}`;
    // A group still taking its holds has not queued its send yet: this one waits for that send too.
    const queuing = this.queuing.get(chain);
    const previous = queuing ? queuing.then(() => this.queues.get(key)) : (this.queues.get(key) ?? Promise.resolve());
    let ready: GatheredPull[] = [];
    void previous
      .catch(() => {})
      .then(() => {
        // The group closes as this key's previous send ends; later pulls open the next one.
        this.gathering.delete(chain);
        ready = group.filter((m) => !this.inFlight.has(this.payerKey(chain, m.item.payer)));
        // The others gather again once their payer's transaction is mined.
        for (const m of group) if (!ready.includes(m)) void this.inFlight.get(this.payerKey(chain, m.item.payer))!.then(() => this.gather(chain, m));
        if (ready.length === 0) return;
        // Held here before anything is awaited, so that the next group cannot take these payers meanwhile.
        let onQueued!: () => void;
        const queued = new Promise<void>((resolve) => (onQueued = resolve));
        this.queuing.set(chain, queued);
        void queued.then(() => {
          if (this.queuing.get(chain) === queued) this.queuing.delete(chain);
        });
        const sending = this.sendWhereHeld(chain, ready, onQueued);
        this.holdPayers(chain, ready.map((m) => m.item.payer), sending);
        return sending;
      })
      // sendGathered answers every member itself; this is only for a fault before it could.
      .catch((err: unknown) => {
        for (const m of ready) m.reject(err);
      });
  }

  private payerKey(chain: ChainKey, payer: string): string {
    return `${chain}:${payer.toLowerCase()}`;
  }

  /**
   * Sends the members whose payers this instance now holds against other instances (holds),
   * and gives the holds back once the transaction is mined or has failed. A member whose
   * payer another instance holds gathers again after the next block: his pull is estimated
   * once that instance's transaction is mined. `queued` is called once the send is in the
   * key's queue (or there is none), so that pulls arriving meanwhile gather behind it.
   */
  private async sendWhereHeld(chain: ChainKey, members: GatheredPull[], queued: () => void): Promise<void> {
    let sending: Promise<void> | undefined;
    try {
      const held = await this.takeHolds(chain, members.map((m) => m.item.payer));
      const going = members.filter((m) => held.has(m.item.payer.toLowerCase()));
      for (const m of members) if (!going.includes(m)) this.waitElsewhere(chain, m);
      // The send takes its place in the key's queue before its first await (send).
      if (going.length > 0) sending = whileHeld(this.holds, chain, held, () => this.sendGathered(chain, going));
    } finally {
      queued();
    }
    await sending;
  }

  /** The payers (lower case) this instance holds now: all of them where no other instance shares the database. */
  private async takeHolds(chain: ChainKey, payers: readonly string[]): Promise<Set<string>> {
    if (!this.holds) return new Set(payers.map((p) => p.toLowerCase()));
    return this.holds.take(chain, payers);
  }

  /** A member whose payer another instance holds gathers again after the next block; past the hold's length, it fails, unsent. */
  private waitElsewhere(chain: ChainKey, m: GatheredPull): void {
    m.heldElsewhereSince ??= Date.now();
    if (Date.now() - m.heldElsewhereSince > this.holds!.seconds * 1000) {
      m.reject(new PayerHeldElsewhere(m.item.payer, this.holds!.seconds));
      return;
    }
    void this.heldElsewhere(chain).then(() => this.gather(chain, m));
  }

  /**
   * Until the next block, at most a polling interval, and at least a twentieth of a second
   * (once the heads are closed at shutdown they answer at once): another instance's
   * transaction may be mined by then.
   */
  private heldElsewhere(chain: ChainKey): Promise<void> {
    return Promise.all([this.nextBlock(chain)().wait(), new Promise((r) => setTimeout(r, 50))]).then(() => {});
  }

  /**
   * Marks `payers` as having a transaction in flight until `sending` settles (mined, or
   * failed). The gas estimate runs at the latest block: a pull of a payer estimated while
   * another transaction carrying a pull of his is unmined would pass it against the same
   * allowance, and revert on chain at BillPay's gas, costing him nothing (he sends no
   * transaction). So his next pulls are held back until then: they go one block later,
   * together; pulls of his that arrive together still go in one transaction, whose estimate
   * covers them all, and other payers' do not wait. Held per payer, whatever the token (a
   * payer's pulls in another token wait a block too: rare, and safe). This map holds them
   * within this instance; `holds` between instances on one database (sendWhereHeld).
   */
  private holdPayers(chain: ChainKey, payers: readonly string[], sending: Promise<unknown>): void {
    const done = sending.then(
      () => {},
      () => {},
    );
    // Only a payer with nothing in flight is sent (gather, pullBatch): one transaction each at a time.
    for (const k of new Set(payers.map((p) => this.payerKey(chain, p)))) {
      this.inFlight.set(k, done);
      void done.then(() => {
        if (this.inFlight.get(k) === done) this.inFlight.delete(k);
      });
    }
  }

  /**
   * Sends a gathered group: its payers set apart (setApart) each in a transaction of his own
   * pulls, everyone else's together (sendTogether).
   */
  private async sendGathered(chain: ChainKey, group: GatheredPull[]): Promise<void> {
    // A payer whose pulls were in a gathered batch that reverted, and would pass now, goes
    // apart for a while, in a transaction of his own pulls only. A revert he brings about there is his alone, and is
    // named (blame); in a batch with others it could not be (sendTogether).
    const apart = new Map<string, GatheredPull[]>();
    const together: GatheredPull[] = [];
    for (const m of group) {
      const k = this.payerKey(chain, m.item.payer);
      if ((this.apartUntil.get(k) ?? 0) > Date.now()) apart.set(k, [...(apart.get(k) ?? []), m]);
      else together.push(m);
    }
    await Promise.all([...apart.values(), together].filter((g) => g.length > 0).map((g) => this.sendTogether(chain, g)));
  }

  /** Each payer of a gathered batch that reverted on chain and would pass now: his pulls go apart for `apartMs`, in this instance. */
  private setApart(chain: ChainKey, members: readonly GatheredPull[]): void {
    const now = Date.now();
    for (const [k, until] of this.apartUntil) if (until <= now) this.apartUntil.delete(k);
    for (const m of members) this.apartUntil.set(this.payerKey(chain, m.item.payer), now + this.apartMs);
  }

  /**
   * Sends pulls alone as `pull`, or together as `pullBatch`. BillPay's pullBatch is all or
   * nothing, so when it refuses (one payer's allowance or balance moved since the service
   * checked), each pull goes again by itself and only the refused ones fail. An item whose
   * caller withdraws at signing (its guard no longer holds) is dropped and the rest are
   * signed again. None of this can charge an order twice: BillPay keys every pull by its
   * order id and refuses a second (OrderExists).
   */
  private async sendTogether(chain: ChainKey, group: GatheredPull[]): Promise<void> {
    if (group.length === 1) {
      const [only] = group;
      const call = pullCall(only!.item);
      await this.write(chain, this.keys.operator, call, only!.onSigned, only!.onReplaced).then(only!.resolve, async (e: unknown) => only!.reject(await this.blame(chain, call, e)));
      return;
    }
    let members = group;
    for (;;) {
      const withdrawn = new Set<GatheredPull>();
      // Each member records the hash before it is sent, a re-signing with the hash it takes
      // the place of: another transaction (another group), so it is signed under its
      // caller's guard again. All at once, so that the store can write them as one statement.
      const onSigned = async (hash: Hex, _previous?: Hex, under?: SignedNonce) => {
        // An async wrapper turns a callback's synchronous throw into that member's rejection.
        const recorded = await Promise.allSettled(members.map(async (m) => m.onSigned?.(hash, m.recordedAs, under)));
        for (const [i, outcome] of recorded.entries()) {
          const m = members[i]!;
          if (outcome.status === "fulfilled") m.recordedAs = hash;
          else {
            withdrawn.add(m);
            m.reject(outcome.reason);
          }
        }
        if (withdrawn.size > 0) throw new GroupChanged();
      };
      // A replacement goes out for all members or none: one that refuses it (its order was
      // written off), or fails to record it, puts the others back on the transaction already sent.
      const onReplaced = async (previous: Hex, next: Hex, how?: "mined" | "restored", fees?: Fees) => {
        const recorded = await Promise.allSettled(members.map(async (m) => m.onReplaced?.(previous, next, how, fees)));
        const failed = recorded.find((r): r is PromiseRejectedResult => r.status === "rejected");
        if (failed && how === undefined) {
          await Promise.allSettled(members.map(async (m, i) => (recorded[i]!.status === "fulfilled" ? m.onReplaced?.(next, previous, "restored") : undefined)));
          throw failed.reason;
        }
        for (const [i, m] of members.entries()) if (recorded[i]!.status === "fulfilled") m.recordedAs = next;
        if (failed) throw failed.reason;
      };
      const batch = batchCall(members.map((m) => m.item));
      try {
        const hash = await this.write(chain, this.keys.operator, batch, onSigned, onReplaced);
        for (const m of members) m.resolve(hash);
        return;
      } catch (err) {
        if (err instanceof GroupChanged) {
          members = members.filter((m) => !withdrawn.has(m));
          if (members.length === 0) return;
          continue;
        }
        if (err instanceof ContractRefused) {
          // A batch mined and reverted: a pull its payer's own doing refuses alone now is
          // what made it revert (his allowance or funds moved after the estimate), told so.
          const reverted = err.errorName === REVERTED_ON_CHAIN;
          const blamed = (e: unknown) => (reverted ? payerDoing(e, "the pulls sent with it reverted on chain") : e);
          // A batch that would pass now: a payer moved his allowance or funds and moved them
          // back within the block, which no pull sent again alone can name (it passes). Not
          // one that ran out of gas: the service's estimate fell short (blame).
          const outOfGas = err instanceof RevertedOnChain && err.outOfGas;
          if (reverted && !outOfGas && (await this.estimateAgain(chain, batch)) === "passes") {
            // One payer's pulls alone: his, each of them counted against him as a lone pull's revert is.
            if (new Set(members.map((m) => m.item.payer.toLowerCase())).size === 1) {
              const answer = passesNow(err);
              for (const m of members) m.reject(answer);
              return;
            }
            // Several: which of them did it cannot be told. Each goes apart for a while, so a second time is named.
            this.setApart(chain, members);
          }
          // Nothing moved: each pull by itself, so a refusal is its own payer's alone. Payers
          // go at once: the key's queue sends their pulls one after another, and none waits
          // for another payer's to be mined (one payer's refusal must not hold the others up
          // a block each). One payer's own pulls go in turn, each estimated once the one
          // before is mined: sent together, two that his allowance covers only one of would
          // each pass the estimate, and the second revert on chain, at BillPay's gas.
          const byPayer = new Map<string, GatheredPull[]>();
          for (const m of members) byPayer.set(m.item.payer.toLowerCase(), [...(byPayer.get(m.item.payer.toLowerCase()) ?? []), m]);
          await Promise.all(
            [...byPayer.values()].map(async (own) => {
              for (const m of own) {
                const call = pullCall(m.item);
                await this.write(
                  chain,
                  this.keys.operator,
                  call,
                  // A pull of its own after the batch: another transaction, signed under its guard.
                  async (hash, _previous, under) => m.onSigned?.(hash, m.recordedAs, under),
                  m.onReplaced,
                ).then(m.resolve, async (e: unknown) => m.reject(blamed(await this.blame(chain, call, e))));
              }
            }),
          );
          return;
        }
        for (const m of members) m.reject(err);
        return;
      }
    }
  }

  /** Many pulls in one transaction, all or nothing; sent once no transaction of its payers is in flight, here or on another instance (holdPayers, holds). */
  pullBatch(chain: ChainKey, items: PullItem[], onSigned?: Signed, onReplaced?: Replaced): Promise<Hex> {
    const payers = items.map((i) => i.payer);
    const earlier = [...new Set(payers.flatMap((p) => this.inFlight.get(this.payerKey(chain, p)) ?? []))];
    if (earlier.length > 0) return Promise.all(earlier).then(() => this.pullBatch(chain, items, onSigned, onReplaced));
    const call = batchCall(items);
    const sending = (async () => {
      const since = Date.now();
      // All of its payers or none: a hold taken while another instance keeps one of them is given back at once.
      for (;;) {
        const held = await this.takeHolds(chain, payers);
        const send = () => this.write(chain, this.keys.operator, call, onSigned, onReplaced).catch(async (e: unknown) => Promise.reject(await this.blame(chain, call, e)));
        if (payers.every((p) => held.has(p.toLowerCase()))) return whileHeld(this.holds, chain, held, send);
        await this.holds!.release(chain, [...held]).catch(() => {});
        const busy = payers.find((p) => !held.has(p.toLowerCase()))!;
        if (Date.now() - since > this.holds!.seconds * 1000) throw new PayerHeldElsewhere(busy, this.holds!.seconds);
        await this.heldElsewhere(chain);
      }
    })();
    this.holdPayers(chain, payers, sending);
    return sending;
  }

  /**
   * A pull mined and reverted, explained: the same call estimated again on the chain as it now
   * stands names what refused it. Its payer's own doing (his allowance or funds moved after
   * the service's estimate) is REVERTED_BY_PAYER, and so is a call that would pass now: only
   * its payers move their allowances and funds back and forth, while the service's own
   * bounds (its pull budget, a pause) would still refuse it by name. One that ran out of gas
   * is the service's estimate falling short (a token's transfer grown dearer since), never
   * the payer's: his allowance and funds cannot make a transfer dearer than the margin.
   * Anything else as it is.
   */
  private async blame(chain: ChainKey, call: Write, err: unknown): Promise<unknown> {
    if (!(err instanceof ContractRefused)) return err;
    if (err.errorName !== REVERTED_ON_CHAIN) return this.tokenShortfall(chain, call, err);
    if (err instanceof RevertedOnChain && err.outOfGas) return err;
    const now = await this.estimateAgain(chain, call);
    // The node did not answer, or refused with no name: nothing is said of the payer.
    if (now === "unread") return err;
    if (now === "passes") return passesNow(err);
    return payerDoing(await this.tokenShortfall(chain, call, now), err.message);
  }

  /**
   * A pull the token refused in words, not by name, named from the chain: the real stablecoins
   * refuse a short balance or allowance with a text reason (Circle's FiatToken, USDC on both
   * chains: "ERC20: transfer amount exceeds balance" / "... allowance", circlefin/stablecoin-evm
   * contracts/v1/FiatTokenV1.sol), some with none at all, where the local tokens (OpenZeppelin
   * 5) name ERC20InsufficientBalance and ERC20InsufficientAllowance. Words differ from token to
   * token, so they are not read: the payer's balance and his allowance to BillPay, read now,
   * against what the call pulls of each token from him, name the refusal as those errors do.
   * Anything else (a balance and allowance that cover the pull, a read that fails) as it is.
   */
  private async tokenShortfall(chain: ChainKey, call: Write, err: ContractRefused): Promise<ContractRefused> {
    if (!UNNAMED_REFUSALS.has(err.errorName)) return err;
    const pulled = pulledByPayer(call);
    if (pulled.length === 0) return err;
    const d = this.deployments.chains[chain]!;
    const client = sharedClientFor(chain, rpcUrlFor(chain, d));
    const billPay = d.billPay.address as Hex;
    const said = `the token refused the pull (${err.message})`;
    try {
      for (const { payer, token, amount } of pulled) {
        const [balance, allowance] = await Promise.all([
          client.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [payer] }),
          client.readContract({ address: token, abi: erc20Abi, functionName: "allowance", args: [payer, billPay] }),
        ]);
        // The allowance first, as the tokens check it (transferFrom before the move itself).
        if (allowance < amount) return new ContractRefused("ERC20InsufficientAllowance", [billPay, allowance, amount], `${said}: ${payer} allows BillPay ${allowance} of the ${amount} pulled`);
        if (balance < amount) return new ContractRefused("ERC20InsufficientBalance", [payer, balance, amount], `${said}: ${payer} holds ${balance} of the ${amount} pulled`);
      }
    } catch {
      return err; // unread: nothing is said of the payer
    }
    return err;
  }

  /** The call estimated again on the chain as it now stands: it passes, is refused by name, or could not be read. */
  private async estimateAgain(chain: ChainKey, call: Write): Promise<"passes" | "unread" | ContractRefused> {
    const d = this.deployments.chains[chain]!;
    return estimateAtLatest(sharedClientFor(chain, rpcUrlFor(chain, d)), d.billPay.address as Hex, call, this.keys.operator).then(
      () => "passes" as const,
      (e: unknown) => refusal(e) ?? ("unread" as const),
    );
  }

  /**
   * Refunds a pulled order (by BillPay's order id) to its payer. Each refund method takes the
   * order's record of its refunds (RefundRecord): `onSigned` is told each transaction, a
   * replacement's too, with its nonce and fees, before it is sent; `signedBefore` are those
   * recorded already, one of which the node holds unmined is waited for, not signed again.
   */
  refund(args: { chain: ChainKey; orderId: Hex; amount: bigint } & RefundRecord): Promise<RefundOutcome> {
    return this.refundOnce(args.chain, { functionName: "refund", args: [args.orderId, args.amount] }, args);
  }

  /** Refunds an x402 order with the payer's own signed authorization, under its order id (or `orderId`, when that is taken). */
  refundAuthorization(args: {
    chain: ChainKey;
    requestId: string;
    orderId?: Hex;
    token: Hex;
    authorization: Authorization;
    signature: Hex;
    amount: bigint;
  } & RefundRecord): Promise<RefundOutcome> {
    return this.refundOnce(
      args.chain,
      {
        functionName: "refundAuthorization",
        args: [args.orderId ?? onChainOrderId(args.requestId), args.token, { ...args.authorization, signature: args.signature }, args.amount],
      },
      args,
    );
  }

  /**
   * The refund of an x402 payment made through Permit2: BillPay checks the payer's signed
   * permit (payee BillPay, spender x402's proxy), that Permit2 spent its nonce, and refunds at
   * most its amount, once per (owner, nonce).
   */
  refundPermit2(args: { chain: ChainKey; requestId: string; orderId?: Hex; permit: Permit2Refund; amount: bigint } & RefundRecord): Promise<RefundOutcome> {
    return this.refundOnce(args.chain, { functionName: "refundPermit2", args: [args.orderId ?? onChainOrderId(args.requestId), args.permit, args.amount] }, args);
  }

  private walletFor(key: string, chain: ChainKey, signer: Account, rpcUrl: string): WalletClient<Transport, Chain, Account> {
    let wallet = this.wallets.get(key);
    if (!wallet) {
      wallet = createWalletClient({ account: signer, chain: viemChain(chain, rpcUrl), transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS }) });
      this.wallets.set(key, wallet);
    }
    return wallet;
  }

  /**
   * Sends a refund, once. A refund not mined in time (fees rose past its replacements) is
   * remembered: the next try of the same refund waits for that transaction, raising its fee
   * again, rather than sign another under the next nonce, which would queue behind it and,
   * once both were mined, revert at the refunder's gas (BillPay refunds a key once). So is
   * one of `signedBefore` (the order's record) that the node holds unmined, the same call
   * signed by a run that died or another instance: this instance has no memory of it.
   */
  private async refundOnce(chain: ChainKey, call: Write, { onSigned, signedBefore = [] }: RefundRecord): Promise<RefundOutcome> {
    const key = `${chain}:${JSON.stringify(call, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v))}`;
    const signer = this.keys.refunder.address;
    // Replacements are signed under the first's nonce, and told before they are sent, as the first is.
    let nonce: number | undefined;
    const signed = async (hash: Hex, request: { nonce: number } & Fees) => {
      nonce = request.nonce;
      await onSigned?.(hash, { hash, ...signedNonce(signer, request) });
    };
    const replaced: Replaced = async (_previous, next, how, fees) => {
      if (how !== undefined) return;
      await signed(next, { ...fees, nonce: nonce! }).catch((err: unknown) => {
        throw err instanceof RefundWithdrawn ? new ReplacementRefused(err.message) : err;
      });
    };
    try {
      const earlier = this.unminedRefunds.get(key) ?? (await this.unminedOnNode(chain, call, signedBefore));
      const live = earlier && (await this.stillPending(chain, this.keys.refunder, earlier));
      if (live) nonce = earlier.request.nonce;
      // Waited for again, its fee follows the market, never compounding try after try.
      const { hash, gasWei, block } = live ? await this.waitMined(chain, earlier, replaced, true) : await this.send(chain, this.keys.refunder, call, signed, replaced, true);
      this.unminedRefunds.delete(key);
      return { txHash: hash, gasWei, block };
    } catch (err) {
      if (err instanceof NotMinedInTime) {
        this.unminedRefunds.delete(key);
        this.unminedRefunds.set(key, err.sent);
        if (this.unminedRefunds.size > KEPT_UNMINED) this.unminedRefunds.delete(this.unminedRefunds.keys().next().value!);
      } else if (err instanceof ContractRefused) {
        // Mined (reverted, or refused at its estimate): nothing of it is left to wait for. Any
        // other error (the node unreachable) keeps what was sent for the next try.
        this.unminedRefunds.delete(key);
      }
      if (err instanceof ContractRefused && ALREADY_REFUNDED.has(err.errorName)) return { alreadyRefunded: true, errorName: err.errorName };
      throw err;
    }
  }

  /**
   * Makes a transaction signed under one of this instance's keys (a refund under the
   * refunder's nonce, a pull under the operator's), which no pool of the node's holds any more
   * and no block has mined, unable ever to land: the key sends itself nothing under that
   * nonce, and the chain takes one transaction per nonce. Priced above the highest fee signed
   * under it (a pool keeps the better paid of two under one nonce, and anyone may send the
   * dropped transaction again elsewhere), at least at the market's, and above this instance's
   * last void under it when the market has passed that. Sent, not waited for: the caller looks
   * again on its next pass. Answers:
   * - "sent": the void went out (again), or the node holds it already;
   * - "used": the nonce is used already, nothing sent;
   * - "held": the node's pool holds another transaction of the key's under it (another
   *   order's, signed after the pool dropped this one): nothing sent, it uses the nonce;
   * - "unsent": the node refused the void (no gas, a nonce gap below it, unreachable);
   * - "not ours": `signed.signer` is neither of this instance's keys (each instance has its
   *   own): nothing here can use its nonce.
   */
  async voidNonce(chain: ChainKey, signed: SignedNonce): Promise<"sent" | "used" | "held" | "unsent" | "not ours"> {
    const key = [this.keys.refunder, this.keys.operator].find((k) => k.address.toLowerCase() === signed.signer.toLowerCase());
    if (!key) return "not ours";
    const d = this.deployments.chains[chain];
    if (!d) throw new Error(`${chain} has no deployment`);
    const rpcUrl = rpcUrlFor(chain, d);
    const client = sharedClientFor(chain, rpcUrl);
    const queue = `${chain}:${key.address}`;
    const voidKey = `${chain}:${key.address}:${signed.nonce}`;
    const sent = (this.queues.get(queue) ?? Promise.resolve())
      .catch(() => {})
      .then(async () => {
        const [latest, pending] = await Promise.all([
          client.getTransactionCount({ address: key.address, blockTag: "latest" }),
          client.getTransactionCount({ address: key.address, blockTag: "pending" }),
        ]);
        if (latest > signed.nonce) {
          this.voids.delete(voidKey);
          return "used" as const;
        }
        const earlier = this.voids.get(voidKey);
        if (pending > signed.nonce && !earlier) return "held" as const;
        // Sent before: raised as a stuck transaction is (both fees, a quarter and to the market)
        // once the market has passed it, else sent again as it was. First: above every refund
        // signed under the nonce, and at least at the market's.
        const fees = earlier ? ((await marketRaise(client, earlier)) ?? earlier) : await firstVoidFees(client, signed);
        const { maxFeePerGas, maxPriorityFeePerGas } = fees as { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };
        const wallet = this.walletFor(queue, chain, key, rpcUrl);
        const request = await wallet.prepareTransactionRequest({ to: key.address, value: 0n, gas: 21_000n, nonce: signed.nonce, maxFeePerGas, maxPriorityFeePerGas });
        await this.fence(key.address);
        const serialized = await wallet.signTransaction(request);
        await this.fence(key.address);
        // Remembered before it is sent: a send that times out may still have reached the pool,
        // and the next pass then raises it rather than take it for another's ("held").
        this.voids.set(voidKey, { maxFeePerGas, maxPriorityFeePerGas });
        if (this.voids.size > KEPT_UNMINED) this.voids.delete(this.voids.keys().next().value!);
        // A node that holds this very transaction says so in its own words (geth "already
        // known", Hardhat and Besu "known transaction", Nethermind "AlreadyKnown").
        const accepted = await wallet.sendRawTransaction({ serializedTransaction: serialized }).then(
          () => true,
          (err: unknown) => /already known|known transaction|alreadyknown/i.test(err instanceof Error ? err.message : String(err)),
        );
        return accepted ? ("sent" as const) : ("unsent" as const);
      });
    this.queues.set(queue, sent);
    return sent;
  }

  /**
   * The first of `hashes` the node holds unmined that is `call` from the refunder to BillPay,
   * as sent: waited for (its fee following the market) as if this instance had sent it.
   */
  private async unminedOnNode(chain: ChainKey, call: Write, hashes: readonly Hex[]): Promise<Sent | undefined> {
    if (hashes.length === 0) return undefined;
    const d = this.deployments.chains[chain];
    if (!d) throw new Error(`${chain} has no deployment`);
    const rpcUrl = rpcUrlFor(chain, d);
    const signer = this.keys.refunder;
    const data = encodeFunctionData({ abi, ...call } as Parameters<typeof encodeFunctionData>[0]);
    for (const hash of hashes) {
      // A failed read throws: the refund is tried again, never signed anew on a guess.
      const tx = await transactionOnNode({ deployments: this.deployments }, chain, hash);
      if (!tx || tx.blockNumber !== null || tx.type !== "eip1559") continue;
      if (tx.to?.toLowerCase() !== d.billPay.address.toLowerCase() || tx.input.toLowerCase() !== data.toLowerCase()) continue;
      // Another instance's (each has its own refunder key): only it can raise its fee; this one waits for it.
      if (tx.from.toLowerCase() !== signer.address.toLowerCase()) throw new RefundSentElsewhere(hash, tx.from);
      const { request, serialized } = asSigned(tx);
      if (keccak256(serialized) !== hash) continue; // not read back as it was signed: not adopted
      const wallet = this.walletFor(`${chain}:${signer.address}`, chain, signer, rpcUrl);
      return { hashes: [hash], recorded: hash, request: { ...request, from: signer.address } as unknown as Sent["request"], serialized, wallet };
    }
    return undefined;
  }

  /**
   * Whether a transaction sent earlier is still to be waited for: one of its hashes was mined,
   * or, its nonce still free, the node holds one of them. One the node holds none of (it
   * refused the send, or its pool dropped them) is signed afresh, under the same free nonce.
   */
  private async stillPending(chain: ChainKey, signer: Account, sent: Sent): Promise<boolean> {
    const d = this.deployments.chains[chain]!;
    const client = sharedClientFor(chain, rpcUrlFor(chain, d));
    const mined = await client.getTransactionCount({ address: signer.address, blockTag: "latest" });
    if (mined <= sent.request.nonce) {
      // A failed read throws (the refund is tried again): only the node's "none" is "not held".
      const held = await Promise.all(sent.hashes.map(async (hash) => (await transactionOnNode({ deployments: this.deployments }, chain, hash))?.blockNumber === null));
      return held.some(Boolean);
    }
    const receipts = await Promise.all(sent.hashes.map((hash) => client.getTransactionReceipt({ hash }).catch(() => null)));
    return receipts.some((r) => r !== null);
  }

  /**
   * Estimates the call's gas (a refusal surfaces there, named, before anything is signed), signs
   * it, hands the hash to `onSigned` (callers record it: the chain can never hold a
   * transaction they do not know of), sends it, and waits for its own receipt.
   */
  private async write(chain: ChainKey, signer: Account, call: Write, onSigned?: Signed, onReplaced?: Replaced): Promise<Hex> {
    return (await this.send(chain, signer, call, onSigned && ((hash, request) => onSigned(hash, undefined, signedNonce(signer.address, request))), onReplaced)).hash;
  }

  /**
   * write, answering the mined transaction's hash, what its gas cost in wei, and its block.
   * `keepSigned` (refunds): a transaction signed whose sending failed is NotMinedInTime with
   * what was signed, so the next try waits for its nonce rather than sign another (the node
   * may have taken it before the error).
   */
  private async send(
    chain: ChainKey,
    signer: Account,
    call: Write,
    onSigned?: (hash: Hex, request: { nonce: number } & Fees) => Promise<void>,
    onReplaced?: Replaced,
    keepSigned = false,
  ): Promise<{ hash: Hex; gasWei: bigint; block: bigint }> {
    const d = this.deployments.chains[chain];
    if (!d) throw new Error(`${chain} has no deployment`);
    const rpcUrl = rpcUrlFor(chain, d);
    const client = sharedClientFor(chain, rpcUrl);
    const queue = `${chain}:${signer.address}`;
    const previous = this.queues.get(queue) ?? Promise.resolve();
    const sent = previous
      .catch(() => {})
      .then(async () => {
        const wallet = this.walletFor(queue, chain, signer, rpcUrl);
        const target = { address: d.billPay.address as Hex, abi, ...call } as Parameters<typeof client.estimateContractGas>[0];
        // The gas estimate runs the call: a refusal surfaces here, named, and the estimate is
        // the transaction's gas (one call to the node instead of a simulation and an estimate).
        // The nonce and fees are read meanwhile (neither depends on the estimate), so the
        // request is complete without another call; nothing is signed unless the estimate succeeds.
        // `prepare: false`: for a local account viem would otherwise fill the nonce and fees
        // itself first, three round trips in a row before the estimate. The three go out as one
        // JSON-RPC batch through the shared client.
        const [estimate, nonce, fees] = await Promise.allSettled([
          estimateAtLatest(client, d.billPay.address as Hex, call, signer),
          client.getTransactionCount({ address: signer.address, blockTag: "pending" }),
          client.estimateFeesPerGas(),
        ]);
        if (estimate.status === "rejected") throw refusal(estimate.reason) ?? estimate.reason;
        if (nonce.status === "rejected") throw nonce.reason;
        if (fees.status === "rejected") throw fees.reason;
        const request = await wallet.prepareTransactionRequest({
          to: d.billPay.address as Hex,
          data: encodeFunctionData(target as Parameters<typeof encodeFunctionData>[0]),
          chainId: wallet.chain.id,
          gas: withGasMargin(estimate.value),
          nonce: nonce.value,
          ...fees.value,
        });
        await this.fence(signer.address);
        const serialized = await wallet.signTransaction(request);
        const hash = keccak256(serialized);
        await onSigned?.(hash, request);
        // The record may have waited on the database: the lease is confirmed again, right before it goes.
        await this.fence(signer.address);
        await wallet.sendRawTransaction({ serializedTransaction: serialized }).catch((err: unknown) => {
          throw keepSigned ? new NotMinedInTime({ hashes: [hash], recorded: hash, request, serialized, wallet }, err) : err;
        });
        return { hash, request, serialized, wallet };
      });
    this.queues.set(queue, sent);
    const { hash, request, serialized, wallet } = await sent;
    return this.waitMined(chain, { hashes: [hash], recorded: hash, request, serialized, wallet }, onReplaced);
  }

  /**
   * Waits for a sent transaction; replaces it at a higher fee when it sits unmined. As with the
   * first, the caller records a replacement before it is sent (`recorded` is what it holds).
   * NotMinedInTime, with what was sent, when none of them is mined in time. `followMarket`
   * (a transaction waited for again): replaced only when the chain's fees have risen past its
   * own, at the higher of the two, so its fee never compounds over the tries of a day.
   */
  private async waitMined(chain: ChainKey, sent: Sent, onReplaced?: Replaced, followMarket = false): Promise<{ hash: Hex; gasWei: bigint; block: bigint }> {
    const d = this.deployments.chains[chain]!;
    const client = sharedClientFor(chain, rpcUrlFor(chain, d));
    const { wallet } = sent;
    const signer = wallet.account;
    const hashes: Hex[] = [...sent.hashes];
    let recorded = sent.recorded;
    let current = sent.request;
    let lastSent = sent.serialized;
    let receipt: TransactionReceipt | null = null;
    // Cleared when the caller refuses a replacement: what was sent is then waited for as it is.
    let bumping = true;
    for (let replacements = 0; ; replacements++) {
      const last = !bumping || replacements >= this.replacement.maxReplacements;
      receipt = await firstReceipt(client, hashes, last ? (this.replacement.lastWaitMs ?? RECEIPT_TIMEOUT_MS) : this.replacement.replaceAfterMs, this.nextBlock(chain));
      if (receipt || last) break;
      const raised = followMarket ? await marketRaise(client, current) : { maxFeePerGas: bump(current.maxFeePerGas), maxPriorityFeePerGas: bump(current.maxPriorityFeePerGas), gasPrice: bump(current.gasPrice) };
      if (!raised) {
        // The market is not above it: waited for as it is, sent again in case the pool dropped
        // it (a node restarted, a provider evicted it); a node that holds it says so, unharmed.
        await this.fence(signer.address);
        await wallet.sendRawTransaction({ serializedTransaction: lastSent }).catch(() => {});
        continue;
      }
      current = { ...current, ...raised } as typeof current;
      await this.fence(signer.address);
      const serialized = await wallet.signTransaction(current);
      const replacement = keccak256(serialized);
      try {
        await onReplaced?.(recorded, replacement, undefined, current);
      } catch (err) {
        if (!(err instanceof ReplacementRefused)) throw err;
        bumping = false;
        continue;
      }
      recorded = replacement;
      await this.fence(signer.address);
      try {
        await wallet.sendRawTransaction({ serializedTransaction: serialized });
        hashes.push(replacement);
        lastSent = serialized;
      } catch {
        // The nonce was taken meanwhile (most likely by what we sent before): keep waiting for it.
      }
    }
    if (!receipt) throw new NotMinedInTime({ hashes, recorded, request: current, serialized: lastSent, wallet });
    const mined = receipt.transactionHash;
    this.receipts.set(mined.toLowerCase(), receipt);
    if (this.receipts.size > KEPT_RECEIPTS) this.receipts.delete(this.receipts.keys().next().value!);
    // An earlier transaction can still win the race against its replacement: the caller learns which.
    if (mined !== recorded) await onReplaced?.(recorded, mined, "mined");
    if (receipt.status !== "success") {
      const gas = current.gas ?? receipt.gasUsed; // (replacements keep their first's gas)
      throw new RevertedOnChain(mined, current.gas !== undefined && receipt.gasUsed * 64n >= gas * 63n, receipt.gasUsed, gas);
    }
    return { hash: mined, gasWei: receipt.gasUsed * receipt.effectiveGasPrice, block: receipt.blockNumber };
  }
}

/**
 * Learns that the transaction it knew as `previous` is now `next`: a replacement at a higher
 * fee, about to be sent (throwing ReplacementRefused keeps it unsent and the fee where it is;
 * any other error stops the send), or, recorded whatever the state, the one the chain took
 * ("mined") or the one already sent, put back when a gathered batch's replacement was
 * refused by another member ("restored").
 */
export type Replaced = (previous: Hex, next: Hex, how?: "mined" | "restored", fees?: Fees) => Promise<void>;

/** A transaction's fees as signed: EIP-1559's, or a legacy gas price. */
type Fees = { maxFeePerGas?: bigint; maxPriorityFeePerGas?: bigint; gasPrice?: bigint };

/** The same refund, signed by another instance's refunder key, is unmined on the node: tried again once it is mined or gone. */
export class RefundSentElsewhere extends Error {
  constructor(hash: Hex, signer: string) {
    super(`the same refund, transaction ${hash} from another instance's refunder key ${signer}, is waiting to be mined; tried again once it is mined or gone`);
    this.name = "RefundSentElsewhere";
  }
}

/** A caller will not have a transaction replaced at a higher fee (its order was written off): the one sent is waited for as it is. */
export class ReplacementRefused extends Error {}

/** Another instance kept a transaction carrying the payer's pull in flight for longer than a hold lasts: this pull was never sent. */
export class PayerHeldElsewhere extends Error {
  constructor(payer: string, seconds: number) {
    super(`another instance has had a pull of payer ${payer} in flight for over ${seconds} s; this pull was not sent`);
  }
}

/**
 * Learns a transaction's hash before it is sent (throwing stops it); `previous`, one it takes
 * the place of; `under`, the key's nonce and fees it was signed under (a pool may drop it, and
 * anyone who saw it may send it again until that nonce is used).
 */
export type Signed = (hash: Hex, previous?: Hex, under?: SignedNonce) => Promise<void>;

/** What a transaction was signed under, its fees as the highest a void of its nonce must outbid (a legacy gas price as both). */
function signedNonce(signer: Hex, request: { nonce: number } & Fees): SignedNonce {
  const cap = request.maxFeePerGas ?? request.gasPrice ?? 0n;
  return { signer, nonce: request.nonce, maxFeePerGas: cap, maxPriorityFeePerGas: request.maxPriorityFeePerGas ?? cap };
}

/** What a receipt wait sleeps on between looks: until the next block, at most a polling interval. */
type NextBlock = () => { seen: bigint; wait: () => Promise<void> };

/** The receipt of whichever of `hashes` is mined first, or null after `timeoutMs`: looked for again as each block arrives. */
async function firstReceipt(client: ReturnType<typeof sharedClientFor>, hashes: Hex[], timeoutMs: number, nextBlock: NextBlock): Promise<TransactionReceipt | null> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const block = nextBlock(); // taken before the look, so a block mined during it is not waited for
    for (const hash of hashes) {
      const receipt = await client.getTransactionReceipt({ hash }).catch(() => null);
      if (receipt) return receipt;
    }
    if (Date.now() >= deadline) return null;
    await block.wait();
  }
}

/**
 * BillPay's `call` from `signer`, its gas estimated at the latest block, named: geth and the
 * op-geth nodes of Celo and Base estimate there by default, a local Hardhat node at the pending
 * block; so the local chains estimate as the real ones do (a pull sent but not yet mined is not
 * counted). `prepare: false`: viem would otherwise fill a local account's nonce and fees first.
 */
function estimateAtLatest(client: ReturnType<typeof sharedClientFor>, billPay: Hex, call: Write, signer: Account): Promise<bigint> {
  return client.estimateContractGas({ address: billPay, abi, ...call, account: signer, prepare: false, blockTag: "latest" } as Parameters<typeof client.estimateContractGas>[0]);
}

/** A void's first fees: a quarter above the highest signed under its nonce (pools replace for a tenth), and at least the market's. */
async function firstVoidFees(client: ReturnType<typeof sharedClientFor>, signed: Pick<SignedNonce, "maxFeePerGas" | "maxPriorityFeePerGas">) {
  const market = await client.estimateFeesPerGas();
  const atLeast = (a: bigint, b: bigint | undefined) => (b !== undefined && b > a ? b : a);
  const maxPriorityFeePerGas = atLeast(bump(signed.maxPriorityFeePerGas)!, market.maxPriorityFeePerGas);
  return { maxPriorityFeePerGas, maxFeePerGas: atLeast(atLeast(bump(signed.maxFeePerGas)!, market.maxFeePerGas), maxPriorityFeePerGas) };
}

/**
 * The fees a transaction waited for again is replaced at: the chain's own estimate, at least a
 * quarter above what it carries (a node takes a replacement only so), when the estimate is
 * above its fee; undefined when it is not (the transaction is waited for as it is).
 */
async function marketRaise(client: ReturnType<typeof sharedClientFor>, current: { maxFeePerGas?: bigint; maxPriorityFeePerGas?: bigint; gasPrice?: bigint }) {
  const market = await client.estimateFeesPerGas().catch(() => undefined);
  if (!market) return undefined;
  const above = (now: bigint | undefined, was: bigint | undefined) => (now !== undefined && was !== undefined ? now > was : false);
  // Either fee: a tip the market has outbid leaves it behind as surely as a base fee it has.
  if (!above(market.maxFeePerGas, current.maxFeePerGas) && !above(market.maxPriorityFeePerGas, current.maxPriorityFeePerGas) && !above(market.gasPrice, current.gasPrice)) return undefined;
  const higher = (now: bigint | undefined, was: bigint | undefined) => (was === undefined ? undefined : [now ?? 0n, bump(was)!].reduce((a, b) => (a > b ? a : b)));
  return {
    maxFeePerGas: higher(market.maxFeePerGas, current.maxFeePerGas),
    maxPriorityFeePerGas: higher(market.maxPriorityFeePerGas, current.maxPriorityFeePerGas),
    gasPrice: higher(market.gasPrice, current.gasPrice),
  };
}

/** A revert whose call would pass now: only its payers move their allowances and funds back and forth (blame). */
const passesNow = (err: ContractRefused) => new ContractRefused(REVERTED_BY_PAYER, [], `${err.message}; it would pass now: its payer's allowance or funds moved, and moved back`);

/** A refusal its payer brought about (PAYER_REFUSALS) as REVERTED_BY_PAYER, saying what reverted; any other error as it is. */
function payerDoing(e: unknown, what: string): unknown {
  return e instanceof ContractRefused && PAYER_REFUSALS.has(e.errorName) ? new ContractRefused(REVERTED_BY_PAYER, e.args, `${what}; its payer's doing: ${e.errorName}`) : e;
}

/** The contract's (or token's) reason for refusing, when the error carries one. */
function refusal(err: unknown): ContractRefused | undefined {
  if (!(err instanceof BaseError)) return undefined;
  const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError);
  if (!(reverted instanceof ContractFunctionRevertedError)) return undefined;
  const name = reverted.data?.errorName ?? (reverted.reason ? "Error" : "Reverted");
  return new ContractRefused(name, reverted.data?.args ?? [], reverted.reason ?? reverted.shortMessage);
}
