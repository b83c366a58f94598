/**
 * Paying one bill with x402, whatever carried the payment: the REST route (x402/route.ts, a
 * payment header) and the agent tools (agent/x402-tools.ts: MCP's `_meta["x402/payment"]`,
 * A2A's task metadata) all come here, so the same exact-amount, ledger-bounded rules hold on
 * each: the price is the server's own (a signed offer or a live rate version), the payer must
 * be the bill's wallet, a payment seen before answers only to the very same payment for the
 * same bill, a payment id answers its first order, and the order is settled, confirmed and
 * vended by orders/x402-flow.ts.
 *
 * The answer is an outcome, not a response: each transport says it in its own words.
 */
import type { PaymentRequired, PaymentRequirements, SettleResponse } from "@x402/core/types";
import type { DiscoveryExtension } from "@x402/extensions/bazaar";
import { paymentTerms } from "./terms.ts";
import { OFFER_RECEIPT_KEY, type BillReceipt, type Receipts, type X402Receipt } from "../orders/receipts.ts";
import { chainInfo, x402TransferOf, type ChainKey } from "../../lib/chains.ts";
import { permit2ApprovalNeeded } from "../../lib/permit2.ts";
import type { Hex, PublicClient } from "viem";
import type { Deployments, TokenDeployment } from "../../lib/deployments.ts";
import { deployedClientFor } from "../../lib/chain-client.ts";
import type { Config } from "../config.ts";
import { ServiceError } from "../errors.ts";
import { RecentKeys, type LimitName, type Limits } from "../limits.ts";
import type { FlowDeps } from "../orders/fulfil.ts";
import { paidForItsBill, paymentConfirmed, type Order } from "../orders/store.ts";
import { replayOf, startX402Order, storedPayment } from "../orders/x402-flow.ts";
import { lateLandingRefund, spentAtIntake } from "../orders/late-landing.ts";
import { startStage } from "../stage-timing.ts";
import type { RefusedPayment } from "../orders/refused-payments.ts";
import { paymentAtIntake, tokenBalance } from "../chain/payment-state.ts";
import type { PriceOffers } from "../pricing/offers.ts";
import { acceptedQuote, billHash, quoteBill } from "../quote/quote.ts";
import type { RateVersions } from "../pricing/rate-versions.ts";
import { orderProof, type ProofDeps } from "./proof.ts";
import type { PaymentRequest } from "../schemas.ts";
import { buildChallenge, requirement, resolveOption, type Challenge, type ChallengeContext, type Option } from "./challenge.ts";
import { checkPayment, checkSignature, CLOCK_SKEW_SECONDS, PaymentRejected, type DecodedPayment, type PaymentProblem } from "../x402-protocol/payment.ts";
import { earlierUnderId, paymentIdOf, storedKey } from "../orders/payment-id.ts";
import { refuseFailingPayer } from "../orders/failing-payers.ts";
import { checkCallbackUrl } from "../orders/callbacks.ts";

/** The 402's description of a bill: x402 requires one, and the facilitator sees it, so it names nothing of the bill. */
export const BILL_DESCRIPTION = "Bill payment";

/** What pricing refuses from the biller's number check (biller/customer-check.ts checkUpfront). */
const CHECK_REFUSALS = new Set(["CUSTOMER_NOT_VERIFIED", "RENEWAL_AMOUNT_MISMATCH"]);

/** Said beside the first order's answer when a request repeats its payment id. */
const PAYMENT_NOT_USED = { payment_not_used: "this payment id already paid for this bill; this authorization was not used, and the first order's result is returned" };
const STILL_SETTLING = {
  payment_not_used: "an earlier payment for this same bill is still settling; this authorization was not used. Follow request_id, and pay again only if that order fails",
};

/** How many recently priced bills an instance remembers, so repeats are not counted as new. */
const NEW_BILL_MEMORY = 10_000;

export interface X402PayDeps {
  config: Config;
  deployments: Deployments;
  flow: FlowDeps;
  /** The rate versions prices are made under, shared with the agent hub. */
  versions: RateVersions;
  limits: Limits;
  /** Signs the price each 402 shows, so a payment is honoured at exactly the price its challenge showed. */
  offers: PriceOffers;
  /** What proves a replaying caller is the payer (x402/proof.ts). */
  proof: ProofDeps;
  /** Signs a paid bill's receipts (orders/receipts.ts). */
  receipts: Receipts;
}

/** x402's receipt, signed as the order became PAID, and the payment it was signed for. */
type EarlyReceipt = { txHash: string | null; receipt: Promise<X402Receipt | undefined> };

/** A settled order's signed receipts: the bill's own, and x402's (offer-receipt). */
export interface OrderReceipts {
  bill: BillReceipt;
  x402: X402Receipt;
}

/** One paid (or unpaid) request for one bill, as a transport read it. */
export interface PayRequest {
  bill: PaymentRequest;
  /** The resource the payment is for, as the challenge names it. */
  resourceUrl: string;
  /** Whether the caller presented a payment at all (a malformed one still counts). */
  presentedPayment: boolean;
  /** Decodes the presented payment; throws PaymentRejected when it is malformed. */
  decode?: () => DecodedPayment;
  /** The Idempotency-Key beside the payment, if the transport has one. */
  idempotencyKey?: string;
  /** The caller's network address, for the per-address budgets. */
  client: string;
  /** A request header by name, for the payer's proof on a replay (x402/proof.ts). */
  header: (name: string) => string | undefined;
  /** The v1 body names networks as legacy x402@1 clients do (`?networks=v1`). */
  v1NetworkNames?: boolean;
  /**
   * The wallet the challenge priced the bill for, when it is not the bill's own: an MCP call
   * naming none is challenged for no wallet, and its bill is then the signer's. The offer the
   * payment echoes is read under that bill's hash: the same product, priced for no one.
   */
  offerWallet?: string;
}

export type PayOutcome =
  /** Pay this: no payment was presented, or the one presented does not fit (`rejected` says why). Nothing was locked. */
  | { kind: "challenge"; challenge: Challenge; warning?: string; rejected?: { code: PaymentProblem | UsedPayment; detail: string; extra?: Record<string, unknown> } }
  /** The order this payment made or already had; `note` says when this payment was not used. */
  | { kind: "order"; order: Order; challenge?: Challenge; warning?: string; secret?: string; showCode: boolean; note?: Record<string, string>; receipts?: OrderReceipts }
  /** The same bill's earlier payment is still settling: this payment was not used. */
  | { kind: "settling"; order: Order; warning?: string; note: Record<string, string> };

/** A payment that can pay for no bill (spent already, or by another): the 402 again, to sign anew. */
const USED_PAYMENT = new Set(["PAYMENT_NONCE_SPENT", "PAYMENT_ALREADY_USED"] as const);
type UsedPayment = typeof USED_PAYMENT extends Set<infer C> ? C : never;
const isUsedPayment = (err: unknown): err is ServiceError & { code: UsedPayment } => err instanceof ServiceError && USED_PAYMENT.has(err.code as UsedPayment);
/** The bill's 402 again, saying why the payment presented pays for no bill. */
const usedPayment = (challenge: Challenge, err: ServiceError & { code: UsedPayment }, warning?: string): PayOutcome => ({
  kind: "challenge",
  challenge,
  warning,
  rejected: { code: err.code, detail: err.detail, extra: err.extra },
});

export interface X402Payments {
  deps: X402PayDeps;
  /** The challenge context for a resource. */
  context(resourceUrl: string): ChallengeContext;
  /** The bill's chain and token; UNSUPPORTED_CHAIN when this environment has no deployment for the chain. */
  deployedOption(bill: Pick<PaymentRequest, "blockchain" | "token">): ReturnType<typeof resolveOption>;
  /** Counts a bill this instance has not priced lately against the caller's budget of new bills. */
  countNewBill(client: string, hash: string): Promise<void>;
  pay(request: PayRequest): Promise<PayOutcome>;
  /** One challenge for the same bill in several chains and tokens; `discovery` is the bazaar declaration it carries (the REST route's by default). */
  challengeFor(bills: PaymentRequest[], resourceUrl: string, client: string, discovery?: Record<string, DiscoveryExtension>): Promise<Challenge>;
  /**
   * A payment that could not even be read (no payer to name): held off past the caller's
   * unsettled budget, then counted against it, as a malformed payment header is by `pay`.
   */
  unreadPayment(client: string): Promise<void>;
}

/** The EIP-712 domain a token's authorizations are signed under. */
type TokenDomain = { name: string; version: string; chainId: number; address: string };
const tokenDomain = (chain: ChainKey, token: TokenDeployment): TokenDomain => ({ name: token.name, version: token.eip712Version ?? "", chainId: chainInfo(chain).chainId, address: token.address });

/** Refusals that leave a good payment able to land later: only its time window was wrong. */
const LANDABLE = new Set<PaymentProblem>(["AUTHORIZATION_NOT_YET_VALID", "AUTHORIZATION_TOO_LONG", "AUTHORIZATION_EXPIRES_TOO_SOON"]);

/** A refused payment as the service keeps it for a late landing (orders/refused-payments.ts). */
function refusalOf(
  payment: DecodedPayment,
  bill: PaymentRequest,
  option: { chain: ChainKey; token: string },
  token: { address: string },
  amount: bigint,
  bodyHash: string,
  requirements: PaymentRequirements,
  resourceUrl: string,
  reason: string,
): RefusedPayment {
  return {
    chain: option.chain,
    rail: payment.method === "permit2" ? "permit2" : "authorization",
    token: option.token,
    tokenAddress: token.address,
    payer: payment.authorization.from,
    nonce: payment.authorization.nonce,
    amount,
    validBefore: payment.authorization.validBefore,
    bill: bill as unknown as Record<string, unknown>,
    bodyHash,
    payment: storedPayment(payment, requirements, resourceUrl) as unknown as Record<string, unknown>,
    requirements: requirements as unknown as Record<string, unknown>,
    reason,
  };
}

export function x402Payments(deps: X402PayDeps): X402Payments {
  const { config, versions, limits } = deps;
  const seenBills = new RecentKeys(NEW_BILL_MEMORY);

  const terms = paymentTerms(config);
  const context = (resourceUrl: string): ChallengeContext => ({
    deployments: deps.deployments,
    catalogue: deps.flow.catalogue,
    versions,
    ttlSeconds: config.QUOTE_TTL_SECONDS,
    refundBudgets: deps.flow.refundBudgets,
    customerChecks: deps.flow.customerChecks,
    resourceUrl,
    terms,
  });

  const deployedOption = (bill: Pick<PaymentRequest, "blockchain" | "token">) => {
    const option = resolveOption(bill);
    if (!deps.deployments.chains[option.chain]) throw new ServiceError("UNSUPPORTED_CHAIN", `${option.chain} has no deployment in this environment`);
    return option;
  };

  /**
   * New bills are counted per caller (repeats of a bill this instance priced lately are not).
   * Nothing is stored for a bill, so this bounds only the work a caller can ask of this
   * instance: kept in memory, it costs no write either.
   */
  const countNewBill = async (client: string, hash: string) => {
    if (seenBills.add(hash)) await limits.take("challengeAddress", client);
  };

  /**
   * Paid calls that settled nothing cost the service a signature check, maybe a facilitator
   * call, and cost the caller nothing: counted per payer and per client address, and past
   * either budget (RATE_LIMIT_UNSETTLED_*) a paid call is refused before its payment is checked.
   * The payer is counted only for a payment to BillPay that his own signature holds, offered
   * while its nonce was unspent: anyone can name any payer in junk, or replay a payment he
   * signed for someone else (or landed himself) from the chain's calldata, and would
   * otherwise spend an honest payer's budget, refusing his payments. The sender's address
   * is counted always.
   */
  const unsettledKeys = (client: string, payment: DecodedPayment | undefined) =>
    [["unsettledAddress", client], ...(payment ? [["unsettledPayer", payment.authorization.from.toLowerCase()]] : [])] as Array<[LimitName, string]>;
  const checkUnsettled = async (client: string, payment: DecodedPayment | undefined) => {
    for (const [name, key] of unsettledKeys(client, payment)) await limits.check(name, key);
  };
  const countUnsettled = async (client: string, payment: DecodedPayment | undefined) => {
    for (const [name, key] of unsettledKeys(client, payment)) await limits.count(name, key);
  };

  /** Whether the payment's signature is its payer's (a refused payment's, checked only once the caller's budget allowed the call). */
  async function signedByPayer(payment: DecodedPayment, domain: TokenDomain, node: PublicClient): Promise<boolean> {
    return checkSignature(payment, domain, node).then(
      () => true,
      () => false,
    );
  }

  /**
   * Keeps a payment refused only for its time window, whose signature the caller found the
   * payer's (so junk is never kept), when the payer holds the amount, within the bounds
   * (orders/refused-payments.ts). Answers what the payer is told of a landing of it.
   */
  async function keepRefusal(
    payment: DecodedPayment,
    bill: PaymentRequest,
    option: ReturnType<typeof resolveOption>,
    token: TokenDeployment,
    quote: { amount: bigint; version: { id: string } },
    hash: string,
    ctx: ChallengeContext,
    code: PaymentProblem,
    node: PublicClient,
  ): Promise<string> {
    // Only a payer who holds the amount now could land it: wallets of no funds sign for free,
    // and would otherwise fill the kept refusals, leaving others' landings to an operator.
    const balance = await tokenBalance(node, token.address, payment.authorization.from).catch(() => undefined);
    if (balance === undefined) return "The payer's balance could not be read, so it is not kept: should it be submitted anyway, an operator must refund it";
    if (balance < quote.amount) return "The payer does not hold the amount now, so it is not kept: should it be funded and submitted anyway, an operator must refund it";
    const refund = lateLandingRefund(deps.flow, option.chain, token.symbol, quote.amount);
    if (!refund) return "It is worth no more than a refund's gas, so it is not kept: should it be submitted anyway, an operator must refund it";
    const { description: _d, ...requirements } = requirement(ctx, { ...option, amount: quote.amount, rateVersion: quote.version.id }, BILL_DESCRIPTION);
    const keptUntil = await deps.flow.refused.record(refusalOf(payment, bill, option, token, quote.amount, hash, requirements, ctx.resourceUrl, `refused: ${code}`), BigInt(Math.floor(Date.now() / 1000)));
    if (keptUntil === null) return "Too many refused payments of this payer are kept already: should this one be submitted anyway, an operator must refund it";
    // A window longer than the record's life (orders/refused-payments.ts): a landing after it is an operator's.
    return keptUntil < payment.authorization.validBefore
      ? `Should this authorization be submitted anyway before ${new Date(Number(keptUntil) * 1000).toISOString()}, it is refunded to the payer on chain, ${refund.terms}; after that, an operator must refund it`
      : `Should this authorization be submitted anyway, it is refunded to the payer on chain, ${refund.terms}`;
  }

  /** The bill's price now, and the option the challenge shows for it, with the signed offer of that price. */
  async function price(bill: PaymentRequest, ctx: ChallengeContext, option: ReturnType<typeof resolveOption>, bodyHash: string) {
    const { hash, quote, vend } = await quoteBill(bill, ctx, option, bodyHash);
    const offer = deps.offers.sign({ billHash: bodyHash, chain: option.chain, token: option.token, amount: quote.amount }, quote.version.id, Math.floor(quote.expiresAt.getTime() / 1000));
    const priced: Option = { chain: option.chain, token: option.token, amount: quote.amount, rateVersion: quote.version.id, offer };
    return { hash, quote, vend, priced };
  }

  /**
   * One challenge offering the same bill in several chains and tokens (each `bills[i]` names
   * its own), each priced and offered as a bill's 402 is; counted as one new bill.
   */
  async function challengeFor(bills: PaymentRequest[], resourceUrl: string, client: string, discovery?: Record<string, DiscoveryExtension>): Promise<Challenge> {
    const ctx = context(resourceUrl);
    const options: Option[] = [];
    for (const bill of bills) {
      const option = deployedOption(bill);
      const bodyHash = billHash(bill, option);
      if (options.length === 0) await countNewBill(client, bodyHash);
      options.push((await price(bill, ctx, option, bodyHash)).priced);
    }
    return buildChallenge(ctx, options, BILL_DESCRIPTION, false, discovery);
  }

  /**
   * The order's answer, with its signed receipts once its payment is settled. `early`: x402's
   * receipt, signed while the bill vended; it covers the payment only, so it is the very one
   * signed now (its signature is deterministic) for as long as the payment is the same.
   */
  async function answered(outcome: Extract<PayOutcome, { kind: "order" }>, resourceUrl: string, early?: EarlyReceipt): Promise<PayOutcome> {
    const { order } = outcome;
    if (!settlementOf(order)) return outcome;
    const signed = startStage("receipts");
    const x402 = early && early.txHash === order.txHash ? early.receipt : deps.receipts.x402Receipt(order, resourceUrl);
    const [bill, x402Receipt] = await Promise.all([deps.receipts.billReceipt(order), x402]);
    signed();
    return bill && x402Receipt ? { ...outcome, receipts: { bill, x402: x402Receipt } } : outcome;
  }

  /**
   * The chain's part of a payment, read at once: the Permit2 allowance (for a permit), and
   * the nonce and the payer's balance (chain/payment-state.ts). A read that fails is
   * `"unread"`: the caller makes nothing of the payment then (CHAIN_UNAVAILABLE).
   */
  function readChain(payment: DecodedPayment, node: PublicClient, option: ReturnType<typeof resolveOption>, token: TokenDeployment, amount: bigint) {
    const unread = () => "unread" as const;
    return Promise.all([
      payment.method === "permit2" ? permit2ApprovalNeeded(node, token.address as Hex, payment.authorization.from, amount).catch(unread) : undefined,
      paymentAtIntake(deps.flow, { chain: option.chain, tokenAddress: token.address, payer: payment.authorization.from, authNonce: payment.authorization.nonce, payment: { method: payment.method } }).catch(unread),
    ]);
  }

  async function pay(request: PayRequest): Promise<PayOutcome> {
    const { bill, client } = request;
    const option = deployedOption(bill);
    const warning = option.warning;
    const ctx = context(request.resourceUrl);
    const d = deps.deployments.chains[option.chain]!;
    const token = d.tokens.find((t) => t.symbol === option.token)!;
    // The service's own node for the chain (deployedOption refused one with no deployment), and the token's signing domain.
    const node = deployedClientFor(deps.deployments, option.chain)!;
    const domain = tokenDomain(option.chain, token);
    const bodyHash = billHash(bill, option);

    let presented: DecodedPayment | undefined;
    try {
      presented = request.presentedPayment ? request.decode?.() : undefined;
    } catch (err) {
      if (!(err instanceof PaymentRejected)) throw err; // a malformed payment is answered with the challenge below
    }
    // A payment seen before gets its order's result, whatever its quote or clock says now,
    // but only the very payment stored, signature included, for the same bill (replayOf).
    const lookedUp = startStage("replay lookup");
    const seen = presented && (await deps.flow.orders.findByPayment(option.chain, token.address, presented.authorization.from, presented.authorization.nonce));
    lookedUp();
    if (seen) {
      // A replay is a look at its order, as GET /api/orders is: it signs receipts, and may ask
      // a contract wallet's code for a proof, so it shares that route's budget per address.
      await limits.take("orderAddress", client);
      // A 402 is the bill's challenge, to sign anew: for a payment that paid another bill, and
      // for one whose order settled nothing. The bill priced now may be refused (the biller
      // down, a plan gone): the answer is then the replay's own, with no challenge.
      const challengeNow = () =>
        price(bill, ctx, option, bodyHash).then(
          (p) => buildChallenge(ctx, [p.priced], BILL_DESCRIPTION, request.v1NetworkNames),
          (err: unknown) => {
            if (err instanceof ServiceError) return undefined; // refused now: no challenge to give
            throw err;
          },
        );
      let replayed: Order;
      try {
        replayed = replayOf(seen, presented!, bodyHash);
      } catch (err) {
        // A payment copied from the chain with guessed bills: each wrong guess counts.
        await limits.take("challengeAddress", client);
        if (!isUsedPayment(err)) throw err;
        const challenge = await challengeNow();
        if (!challenge) throw err;
        return usedPayment(challenge, err, warning);
      }
      const unsettled = replayed.status === "PAYMENT_FAILED" || replayed.status === "REFUSED";
      const challenge = unsettled ? await challengeNow() : undefined;
      return answered({ kind: "order", order: replayed, warning, showCode: await orderProof(request.header, replayed, deps.proof), ...(challenge ? { challenge } : {}) }, request.resourceUrl);
    }

    // Past the look-up of a payment seen before (its order answers as it stands, whatever its
    // bill says): a callback_url this service would not call is refused before anything else.
    checkCallbackUrl(bill.callback_url, config.CALLBACK_ALLOW_PRIVATE);

    // Calls carrying a payment are not counted as new bills (it may be settling), but a
    // caller or payer whose payments keep failing to settle is held off before more work.
    if (!presented) await countNewBill(client, bodyHash);
    if (request.presentedPayment) await checkUnsettled(client, presented);
    // Pricing a bill this instance has not priced lately may ask the biller to check its
    // number (customer-check.ts checkUpfront); a wrong one counts against the caller's new
    // bills below: once they are spent, it is not asked. A bill priced here (its 402) goes on.
    if (presented && !seenBills.has(bodyHash)) await limits.check("challengeAddress", client);
    // A malformed payment id is refused before any check of the payment or read of the chain.
    const paymentId = presented && paymentIdOf(presented, request.idempotencyKey);
    const pricing = startStage("price");
    const { hash, quote: shown, vend, priced } = await price(bill, ctx, option, bodyHash).catch(async (err: unknown) => {
      // A number the biller was asked about and says is wrong, or a plan its answer refuses (a
      // renewal's amount): a call with a payment is not counted as a new bill, so each such
      // guess counts here, as a wrong replay's does.
      if (presented && err instanceof ServiceError && CHECK_REFUSALS.has(err.code)) await limits.take("challengeAddress", client);
      throw err;
    });
    const challenge = buildChallenge(ctx, [priced], BILL_DESCRIPTION, request.v1NetworkNames);
    pricing();
    if (!request.presentedPayment) return { kind: "challenge", challenge, warning };
    // A payment that can pay for no bill: the bill's challenge, with why (x402 answers an
    // unusable payment with its 402, and the interface names no other refusal of one).
    const payAgain = (err: ServiceError & { code: UsedPayment }): PayOutcome => usedPayment(challenge, err, warning);

    // A payment that does not fit this bill's price, or is not the payer's signature, is
    // answered like no payment: the challenge, plus the reason. Nothing is locked or settled.
    // Its amount must be the price shown now; or the price its own challenge showed, under
    // the version the signed offer it echoes names, until that offer expires (so a price
    // shown is honoured however the rate moves, and no other); or, for a payment that echoes
    // no offer (x402 v1), what a version live within PRICE_GRACE_SECONDS gave. Always
    // recomputed from the server's own versions.
    let payment: DecodedPayment;
    let quote = shown;
    let chainRead: ReturnType<typeof readChain> | undefined;
    try {
      if (!presented) request.decode?.(); // throws the malformed payment's reason
      if (!presented) throw new PaymentRejected("INVALID_PAYMENT_HEADER", "no payment could be read");
      payment = presented;
      const offered = payment.authorization.value;
      if (offered !== shown.amount) {
        const skew = Number(CLOCK_SKEW_SECONDS);
        // The offer of this bill's own challenge (every challenge answered to a paid call prices
        // the signer's bill), or of the walletless one an MCP call naming no wallet was first shown:
        // the same product either way.
        const offerOf = (hashed: string) =>
          deps.offers.read(payment.offer, { billHash: hashed, chain: option.chain, token: option.token, amount: offered }, Math.floor(Date.now() / 1000), skew);
        const offeredVersion = offerOf(bodyHash) ?? (request.offerWallet === undefined ? undefined : offerOf(billHash({ ...bill, wallet_address: request.offerWallet }, option)));
        // The grace is for a payment that cannot echo an offer: x402 v1's. A v2 payment echoes
        // its challenge's requirements, offer included: one without a good offer was not made
        // from a challenge of this price, and is held to the price shown now.
        quote =
          (offeredVersion
            ? await acceptedQuote(bill, ctx, option, offered, config.QUOTE_TTL_SECONDS + skew, offeredVersion)
            : payment.x402Version === 1
              ? await acceptedQuote(bill, ctx, option, offered, config.PRICE_GRACE_SECONDS)
              : undefined) ?? shown;
      }
      const checking = startStage("payment checks");
      checkPayment(payment, {
        chain: option.chain,
        method: x402TransferOf(token),
        asset: token.address,
        payTo: d.billPay.address,
        amount: quote.amount,
        wallet: bill.wallet_address,
        maxTimeoutSeconds: config.QUOTE_TTL_SECONDS,
        nowSeconds: BigInt(Math.floor(Date.now() / 1000)),
      });
      // The chain's part of the payment, read from here on beside the signature check and
      // the order lookups, and awaited where it decides something (below).
      chainRead = readChain(payment, node, option, token, quote.amount);
      await checkSignature(payment, domain, node);
      checking();
    } catch (err) {
      if (!(err instanceof PaymentRejected)) throw err;
      // The signature was not reached, or did not hold: checked now, for whom to count (only a
      // payment to BillPay: his payments to others are public, on chain, for anyone to replay).
      const toUs = presented !== undefined && presented.authorization.to.toLowerCase() === d.billPay.address.toLowerCase();
      const signed = toUs && err.code !== "SIGNATURE_INVALID" && (await signedByPayer(presented!, domain, node));
      await countUnsettled(client, signed ? presented : undefined);
      // Refused only for its time window, it may still land (the payer, a relayer, anyone holding
      // it can submit it): kept, when its signature is the payer's and he holds the amount, so a
      // landing is refunded.
      const kept = LANDABLE.has(err.code) && signed ? await keepRefusal(presented!, bill, option, token, quote, hash, ctx, err.code, node) : undefined;
      return { kind: "challenge", challenge, warning, rejected: { code: err.code, detail: kept === undefined ? err.detail : `${err.detail}. ${kept}` } };
    }

    // A payment id the payer used before (payment-identifier, Idempotency-Key): the first
    // order's answer for the same bill, and this payment is not used (orders/payment-id.ts).
    const answerUnderId = async (earlier: Order) => {
      // Nothing settles on this call: it is counted as any paid call that settled nothing,
      // so retrying an id costs the payer its budget, not the service a signature check each.
      await countUnsettled(client, payment);
      return answered({ kind: "order", order: earlierUnderId(earlier, hash), challenge, warning, showCode: true, note: PAYMENT_NOT_USED }, request.resourceUrl);
    };
    if (paymentId) {
      const lookingUp = startStage("order lookups");
      const [earlier] = await deps.flow.orders.findByIdempotencyKeys(payment.authorization.from, [storedKey(paymentId)]);
      lookingUp();
      if (earlier) return answerUnderId(earlier);
    }

    // The same bill from the same payer while its earlier payment is still settling (a
    // facilitator that gave no answer, say): the new payment is not used, and the payer is
    // pointed at the first order, so signing again after a timeout never charges twice.
    const lookingUp = startStage("order lookups");
    const [settling, failing] = await Promise.all([
      deps.flow.orders.settlingForBill(payment.authorization.from, hash),
      // A payer whose bills keep failing at the biller pays for no new one a while (RATE_LIMITED, below).
      // Only its refusal is held for below; any other error (the database) is thrown as it is.
      refuseFailingPayer(deps.flow.orders, payment.authorization.from, config.RATE_LIMIT_FAILED_VENDS_PAYER).then(
        () => undefined,
        (err: unknown) => {
          if (err instanceof ServiceError && err.code === "RATE_LIMITED") return err;
          throw err;
        },
      ),
    ]);
    lookingUp();
    // The first request under this very id, written between the two lookups (two requests
    // under one id at once): answered as under that id, in flight (PAYMENT_ID_IN_FLIGHT).
    if (settling && paymentId && settling.idempotencyKey === storedKey(paymentId)) return answerUnderId(settling);
    if (settling) {
      // This payment settles nothing: counted as any such call, so a flood of fresh
      // authorizations behind one settling bill costs the payer his budget, not the service.
      await countUnsettled(client, payment);
      return { kind: "settling", order: settling, warning, note: STILL_SETTLING };
    }
    if (failing) {
      // Refused unsettled: counted as any paid call that settled nothing, so resending it costs his budget.
      await countUnsettled(client, payment);
      throw failing;
    }

    // Read from the chain before any order or facilitator (started with the checks above): a
    // Permit2 payment cannot settle before the payer has approved Permit2 (said with the call
    // to make); a nonce the chain already shows spent pays for no bill, and is refused here
    // (orders/late-landing.ts), costing the payer his budget of payments that settle
    // nothing. So an order is made only for a nonce the service's own node showed unspent:
    // a chain that cannot be read makes none (CHAIN_UNAVAILABLE; the payment is not used),
    // as a payment landed before it was offered would otherwise be served to whoever
    // offered it.
    const reading = startStage("chain reads");
    const [approval, onChain] = await chainRead!;
    reading();
    if (onChain === "unread" || approval === "unread") {
      throw new ServiceError("CHAIN_UNAVAILABLE", `${option.chain} could not be read to check this payment's nonce, the payer's balance and allowance: this authorization was not used; send it again`, { charged: false });
    }
    if (approval) {
      await countUnsettled(client, payment);
      throw new ServiceError("PERMIT2_ALLOWANCE_REQUIRED", `${payment.authorization.from} has not approved Permit2 (${approval.spender}) to move ${quote.amount} of ${token.symbol}; approve it once, then sign a new permit`, { approval, chain: option.chain });
    }
    const { description: _d, ...requirements } = requirement(ctx, { ...option, amount: quote.amount, rateVersion: quote.version.id }, BILL_DESCRIPTION);
    if (onChain.used) {
      const { refusal, cancelled } = await spentAtIntake(deps.flow, refusalOf(payment, bill, option, token, quote.amount, hash, requirements, ctx.resourceUrl, "its nonce was already spent on chain when it was offered"), onChain);
      // A payment that landed is public calldata anyone may replay: the payer is counted only
      // for a nonce he spent himself (cancelled: the authorization was never on chain).
      await countUnsettled(client, cancelled ? payment : undefined);
      if (isUsedPayment(refusal)) return payAgain(refusal);
      throw refusal;
    }
    // x402's receipt needs only the payment: signed while the bill vends, not after it. The
    // signature is CPU work of a millisecond or two that runs to its end once begun: begun on
    // the event loop's next turn, it no longer stands between PAID and the biller's request
    // (measured: the pay was asked for 1.4 ms sooner after PAID, at the median).
    let early: EarlyReceipt | undefined;
    const signEarly = (paid: Order) => {
      early = { txHash: paid.txHash, receipt: new Promise<void>((r) => setImmediate(r)).then(() => deps.receipts.x402Receipt(paid, request.resourceUrl)) };
      early.receipt.catch(() => {}); // awaited by the answer, which throws its failure there
    };
    const started = await startX402Order(deps.flow, {
      bill,
      vend,
      bodyHash: hash,
      chain: option.chain,
      token: option.token,
      tokenAddress: token.address,
      amount: quote.amount,
      payment,
      requirements,
      resourceUrl: ctx.resourceUrl,
      ...(paymentId ? { idempotencyKey: storedKey(paymentId) } : {}),
      // Settle alone when this read shows the payer holding the amount: every other check of
      // the facilitator's verify was made above. A payer short of it is verified first, so the
      // facilitator refuses it, naming why, and nothing is broadcast that would revert
      // (docs/money.md, "One call to the facilitator").
      verifyFirst: onChain.balance < quote.amount,
    }, signEarly).catch(async (err: unknown) => {
      // The facilitator found no allowance for Permit2 (the order is REFUSED): the payer's
      // doing, so it counts as any paid call that settled nothing.
      if (err instanceof ServiceError && err.code === "PERMIT2_ALLOWANCE_REQUIRED") await countUnsettled(client, payment);
      if (isUsedPayment(err)) return err;
      throw err;
    });
    if (started instanceof ServiceError) return payAgain(started);
    const { order, secret, replay } = started;
    // Every call whose payment the chain has not shown settled by its answer counts, SETTLING
    // included: a payer who spends the nonce himself between the intake's read and the
    // settlement (EIP-3009's cancelAuthorization, Permit2's invalidateUnorderedNonces) leaves
    // an order the worker must close, or, for Permit2, one held for an operator. Not one whose
    // settlement the facilitator reported under a transaction (a congested chain, a slow
    // ledger): that payer did nothing wrong.
    const settlingUnderTx = order.status === "SETTLING" && order.txHash !== null;
    if (!paymentConfirmed(order) && !settlingUnderTx) await countUnsettled(client, payment);
    // A copy that met its order already made (two sent at once) is a replay too, on the same budget.
    if (replay) await limits.take("orderAddress", client);
    const showCode = replay ? await orderProof(request.header, order, deps.proof) : true;
    return answered({ kind: "order", order, challenge, warning, secret, showCode }, request.resourceUrl, early);
  }

  const unreadPayment = async (client: string) => {
    await checkUnsettled(client, undefined);
    await countUnsettled(client, undefined);
  };

  return { deps, context, deployedOption, countNewBill, pay, challengeFor, unreadPayment };
}

/**
 * What a settled order's payment-response says (x402 SettleResponse), with x402's signed
 * receipt where the offer-receipt extension's client helper reads it; none while its
 * settlement is only reported pending, or the order is held for review, nor for a late
 * landing's refund (paidForItsBill).
 */
export function settlementOf(order: Order, receipts?: OrderReceipts): SettleResponse | undefined {
  if (!paidForItsBill(order)) return undefined;
  return {
    success: true,
    transaction: order.txHash,
    network: chainInfo(order.chain as ChainKey).caip2,
    payer: order.payer,
    ...(receipts ? { extensions: { [OFFER_RECEIPT_KEY]: { info: { receipt: receipts.x402 } } } } : {}),
  };
}

/** The v2 PaymentRequired a challenge carries, as transports other than HTTP headers send it. */
export function paymentRequiredOf(challenge: Challenge, error?: string): PaymentRequired {
  return error === undefined ? challenge.v2 : { ...challenge.v2, error };
}
