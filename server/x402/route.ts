/**
 * The x402 rail's routes: GET and POST /api/pay/x402 (the 402 challenge, then the paid
 * retry: the payment's amount is checked against what the server's own rate versions priced
 * the bill at, with the payer's signature; then settled, and the bill vended) and POST
 * /api/quote (the same price before paying). The challenge writes nothing. It is built in
 * challenge.ts, the payment checked in payment.ts, the price made in pricing/quote.ts, the
 * order run in orders/x402-flow.ts.
 */
import { encodePaymentResponseHeader } from "@x402/core/http";
import type { Context, Hono, MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import { z } from "zod";
import { publicClientFor } from "../../lib/chain-client.ts";
import { chainInfo } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import { checkCallbackUrl } from "../callbacks.ts";
import type { Config } from "../config.ts";
import { problemResponse, ServiceError, validationFailed } from "../errors.ts";
import { parseJsonBody } from "../http-body.ts";
import { clientAddress, RecentKeys, type LimitName, type Limits } from "../limits.ts";
import { orderResult, type FlowDeps } from "../orders/fulfil.ts";
import type { Order } from "../orders/store.ts";
import { replayOf, startX402Order } from "../orders/x402-flow.ts";
import { acceptedQuote, billHash, quoteBill } from "../pricing/quote.ts";
import { quoteView } from "../pricing/quote-view.ts";
import type { RateVersions } from "../pricing/rate-versions.ts";
import type { PriceOffers } from "../pricing/offers.ts";
import { orderProof, type ProofDeps } from "../orders/proof.ts";
import { paymentRequestSchema, type PaymentRequest } from "../schemas.ts";
import { buildChallenge, probeChallenge, requirement, resolveOption, type ChallengeContext } from "./challenge.ts";
import { checkPayment, checkSignature, CLOCK_SKEW_SECONDS, decodePayment, PaymentRejected, type DecodedPayment, type PaymentHeader } from "./payment.ts";
import { earlierUnderId, paymentIdOf, storedKey } from "./payment-id.ts";

/** Said beside the first order's answer when a request repeats its payment id. */
const PAYMENT_NOT_USED = { payment_not_used: "this payment id already paid for this bill; this authorization was not used, and the first order's result is returned" };

/** The 402's description of a bill: x402 requires one, and the facilitator sees it, so it names nothing of the bill. */
const BILL_DESCRIPTION = "Bill payment";

/** How many recently priced bills an instance remembers, so repeats are not counted as new. */
const NEW_BILL_MEMORY = 10_000;
const PAYMENT_HEADERS: PaymentHeader[] = ["X-PAYMENT", "PAYMENT-SIGNATURE"];
const EXPOSED_HEADERS = ["PAYMENT-REQUIRED", "PAYMENT-RESPONSE", "X-PAYMENT-RESPONSE", "X-Token-Fallback"];
// (a 402 for a payment that did not fit carries `code`: see server/x402/payment.ts, plus PAYMENT_NOT_SETTLED)

/** The fields a bill must have; a JSON object lacking any of them is a probe, not a bill. */
const REQUIRED_BILL_FIELDS = Object.entries(paymentRequestSchema.shape)
  .filter(([, schema]) => !schema.safeParse(undefined).success)
  .map(([name]) => name);

function isProbe(json: unknown): boolean {
  return typeof json === "object" && json !== null && !Array.isArray(json) && REQUIRED_BILL_FIELDS.some((f) => !(f in json));
}

function validationProblem(error: z.ZodError) {
  const e = validationFailed(error);
  return problemResponse(e.code, e.detail, e.extra);
}

export interface X402RouteDeps {
  config: Config;
  deployments: Deployments;
  flow: FlowDeps;
  /** The rate versions prices are made under, shared with the agent hub. */
  versions: RateVersions;
  limits: Limits;
  billBodyLimit: MiddlewareHandler;
  /** Signs the price each 402 shows, so a payment is honoured at exactly the price its challenge showed. */
  offers: PriceOffers;
  /** What proves a replaying caller is the payer (orders/proof.ts). */
  proof: ProofDeps;
}

export function mountX402Routes(app: Hono, deps: X402RouteDeps): void {
  const { config, versions, limits, billBodyLimit } = deps;
  const seenBills = new RecentKeys(NEW_BILL_MEMORY);

  /** The order this payment's (chain, token, payer, nonce) already locked, if the header decodes and one exists. */
  const orderOfPayment = async (payment: DecodedPayment | undefined, chain: string, tokenAddress: string) =>
    payment && (await deps.flow.orders.findByPayment(chain, tokenAddress, payment.authorization.from, payment.authorization.nonce));

  /** 200 with the order's result and, once settled, the settlement header of the payment's protocol. */
  const orderResponse = (c: Context, order: Order, header: PaymentHeader, extraHeaders: Record<string, string> = {}, secret?: string, showCode = true, note?: Record<string, string>) => {
    if (order.status === "PAYMENT_FAILED" || order.status === "REFUSED") {
      // The payer's own order, so its id is theirs to see: GET it to follow a late landing.
      // The order's fields beside the problem's own (its status stays the HTTP status, 402).
      const { status: _outcome, success: _success, ...fields } = orderResult(order);
      return problemResponse("PAYMENT_NOT_SETTLED", order.failureReason ?? "the payment did not settle; sign a new one", fields);
    }
    const headers: Record<string, string> = { ...extraHeaders, "cache-control": "no-store" };
    // The settlement header says "settled": not while a settlement is only reported pending.
    if (order.txHash && order.status !== "SETTLING") {
      headers[header === "X-PAYMENT" ? "X-PAYMENT-RESPONSE" : "PAYMENT-RESPONSE"] = encodePaymentResponseHeader({
        success: true,
        transaction: order.txHash,
        network: chainInfo(order.chain).caip2,
        payer: order.payer,
      });
    }
    // The paying response is the payer's: the code, and (the first time) the order's secret.
    // A replay shows the code only with a proof: a settled payment is public on chain.
    return c.json({ ...orderResult(order, { showCode }), ...(secret ? { order_secret: secret } : {}), ...note }, 200, headers);
  };

  const challengeContext = (c: Context): ChallengeContext => ({
    deployments: deps.deployments,
    catalogue: deps.flow.catalogue,
    versions,
    ttlSeconds: config.QUOTE_TTL_SECONDS,
    refundBudgets: deps.flow.refundBudgets,
    customerChecks: deps.flow.customerChecks,
    resourceUrl: `${config.PUBLIC_URL ?? new URL(c.req.url).origin}/api/pay/x402`,
  });

  /** The 402: the v1 body, and the v2 header unless the client asked for protocol 1 only (`?networks=v1`). */
  const challengeResponse = (c: Context, challenge: { v1Body: unknown; v2Header: string }, extraHeaders: Record<string, string> = {}, v1Only = false) =>
    c.body(JSON.stringify(challenge.v1Body), 402, {
      "content-type": "application/json",
      ...(v1Only ? {} : { "PAYMENT-REQUIRED": challenge.v2Header }),
      ...extraHeaders,
    });

  // The x402 route is public and probed from browsers: CORS open, x402 headers exposed.
  // hono's cors writes its headers to c.res before the handler runs, after which
  // @hono/node-server copies every answer through a web stream (profiled: about a quarter
  // of a 402's cost); so only the preflight goes through it, and every other answer gets
  // the same headers (and its request id, as hono's copy gave it) once it is made.
  const preflight = cors({
    origin: "*",
    allowMethods: ["GET", "POST", "OPTIONS"],
    allowHeaders: ["Content-Type", "Authorization", "X-Wallet-Signature", "X-Wallet-Timestamp", "Idempotency-Key", ...PAYMENT_HEADERS],
    exposeHeaders: EXPOSED_HEADERS,
    maxAge: 600,
  });
  app.use("/api/pay/x402", async (c, next) => {
    if (c.req.method === "OPTIONS") return preflight(c, next);
    await next();
    const headers = c.res.headers;
    headers.set("Access-Control-Allow-Origin", "*");
    headers.set("Access-Control-Expose-Headers", EXPOSED_HEADERS.join(","));
    if (!headers.has("X-Request-Id")) headers.set("X-Request-Id", String(c.get("requestId")));
  });

  const v1NetworkNames = (c: Context) => c.req.query("networks") === "v1";
  /** The bill's chain and token; UNSUPPORTED_CHAIN when this environment has no deployment for the chain. */
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
  const countNewBill = async (c: Context, hash: string) => {
    if (seenBills.add(hash)) await limits.take("challengeAddress", clientAddress(c));
  };

  /**
   * Paid calls that settled nothing cost the service a signature check, maybe a facilitator
   * call, and cost the caller nothing: counted per payer and per client address, and past
   * either budget (RATE_LIMIT_UNSETTLED_*) a paid call is 429 before its payment is checked.
   */
  const unsettledKeys = (c: Context, payment: DecodedPayment | undefined) =>
    [
      ["unsettledAddress", clientAddress(c)],
      ...(payment ? [["unsettledPayer", payment.authorization.from.toLowerCase()]] : []),
    ] as Array<[LimitName, string]>;
  const checkUnsettled = async (c: Context, payment: DecodedPayment | undefined) => {
    for (const [name, key] of unsettledKeys(c, payment)) await limits.check(name, key);
  };
  const countUnsettled = async (c: Context, payment: DecodedPayment | undefined) => {
    for (const [name, key] of unsettledKeys(c, payment)) await limits.count(name, key);
  };

  app.get("/api/pay/x402", (c) => challengeResponse(c, probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c)));

  app.post(
    "/api/pay/x402",
    billBodyLimit,
    async (c) => {
      const text = await c.req.text();
      // A probing POST without a bill gets the probe challenge, as a GET does.
      if (text.trim() === "") return challengeResponse(c, probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c));
      const json = parseJsonBody(c.req.header("content-type"), text);
      if (json instanceof Response) return json;
      // So is `{}` or a partial bill (one missing any of the bill's required fields): the
      // interface's probing POST. A complete bill with a bad field is refused with its 4xx.
      if (isProbe(json)) return challengeResponse(c, probeChallenge(challengeContext(c), v1NetworkNames(c)), {}, v1NetworkNames(c));
      const parsed = paymentRequestSchema.safeParse(json);
      if (!parsed.success) return validationProblem(parsed.error);
      const bill = parsed.data;
      checkCallbackUrl(bill.callback_url, config.CALLBACK_ALLOW_PRIVATE);
      const option = deployedOption(bill);

      const ctx = challengeContext(c);
      const d = deps.deployments.chains[option.chain]!;
      const tokenAddress = d.tokens.find((t) => t.symbol === option.token)!.address;
      const header = PAYMENT_HEADERS.find((h) => c.req.header(h) !== undefined) as PaymentHeader | undefined;

      const bodyHash = billHash(bill, option);
      let presented: DecodedPayment | undefined;
      try {
        presented = header ? decodePayment(header, c.req.header(header)!) : undefined;
      } catch (err) {
        if (!(err instanceof PaymentRejected)) throw err; // a malformed header is answered with the challenge below
      }
      // A payment seen before gets its order's result, whatever its quote or clock says now,
      // but only the very payment stored, signature included, for the same bill (replayOf).
      const seen = await orderOfPayment(presented, option.chain, tokenAddress);
      if (seen) {
        let replayed: Order;
        try {
          replayed = replayOf(seen, presented!, bodyHash);
        } catch (err) {
          // A payment copied from the chain with guessed bills: each wrong guess counts.
          await limits.take("challengeAddress", clientAddress(c));
          throw err;
        }
        return orderResponse(c, replayed, header!, {}, undefined, await orderProof((name) => c.req.header(name), replayed, deps.proof));
      }

      // Calls carrying a payment are not counted as new bills (it may be settling), but a
      // caller or payer whose payments keep failing to settle is held off before more work.
      if (!presented) await countNewBill(c, bodyHash);
      if (header) await checkUnsettled(c, presented);
      const { hash, quote: shown, vend } = await quoteBill(bill, ctx, option, bodyHash);
      // The description travels to the facilitator with the payment (x402 requires one): it
      // carries none of the bill's fields, which are the payer's to keep (a phone, a meter).
      const description = BILL_DESCRIPTION;
      const offer = deps.offers.sign({ billHash: bodyHash, chain: option.chain, token: option.token, amount: shown.amount }, shown.version.id, Math.floor(shown.expiresAt.getTime() / 1000));
      const challenge = buildChallenge(ctx, [{ ...option, amount: shown.amount, rateVersion: shown.version.id, offer }], description, v1NetworkNames(c));
      const extraHeaders: Record<string, string> = option.warning ? { "X-Token-Fallback": option.warning } : {};

      const v1Only = v1NetworkNames(c);
      if (!header) return challengeResponse(c, challenge, extraHeaders, v1Only);
      const rejected = async (code: string, detail: string, payment: DecodedPayment | undefined) => {
        await countUnsettled(c, payment);
        return challengeResponse(c, { v1Body: { ...challenge.v1Body, error: detail, code }, v2Header: challenge.v2Header }, extraHeaders, v1Only);
      };

      // A payment that does not fit this bill's price, or is not the payer's signature, is
      // answered like no payment: 402 with the challenge, plus the reason. Nothing is locked
      // or settled. Its amount must be the price shown now; or the price its own challenge
      // showed, under the version the signed offer it echoes names, until that offer expires
      // (so a price shown is honoured however the rate moves, and no other); or, for a
      // payment that echoes no offer (x402 v1), what a version live within
      // PRICE_GRACE_SECONDS gave. Always recomputed from the server's own versions.
      let payment: DecodedPayment;
      let quote = shown;
      try {
        payment = presented ?? decodePayment(header, c.req.header(header)!);
        const offered = payment.authorization.value;
        if (offered !== shown.amount) {
          const skew = Number(CLOCK_SKEW_SECONDS);
          const terms = { billHash: bodyHash, chain: option.chain, token: option.token, amount: offered };
          const offeredVersion = deps.offers.read(payment.offer, terms, Math.floor(Date.now() / 1000), skew);
          quote =
            (offeredVersion
              ? await acceptedQuote(bill, ctx, option, offered, config.QUOTE_TTL_SECONDS + skew, offeredVersion)
              : await acceptedQuote(bill, ctx, option, offered, config.PRICE_GRACE_SECONDS)) ?? shown;
        }
        checkPayment(payment, {
          chain: option.chain,
          asset: tokenAddress,
          payTo: d.billPay.address,
          amount: quote.amount,
          wallet: bill.wallet_address,
          maxTimeoutSeconds: config.QUOTE_TTL_SECONDS,
          nowSeconds: BigInt(Math.floor(Date.now() / 1000)),
        });
        const token = d.tokens.find((t) => t.symbol === option.token)!;
        await checkSignature(
          payment,
          { name: token.name, version: token.eip712Version ?? "", chainId: chainInfo(option.chain).chainId, address: token.address },
          publicClientFor(option.chain, rpcUrlFor(option.chain, d)),
        );
      } catch (err) {
        if (!(err instanceof PaymentRejected)) throw err;
        return rejected(err.code, err.detail, presented);
      }

      // A payment id the payer used before (payment-identifier, Idempotency-Key): the first
      // order's answer for the same bill, and this payment is not used (x402/payment-id.ts).
      const paymentId = paymentIdOf(payment, c.req.header("idempotency-key"));
      if (paymentId) {
        const [earlier] = await deps.flow.orders.findByIdempotencyKeys(payment.authorization.from, [storedKey(paymentId)]);
        if (earlier) {
          // Nothing settles on this call: it is counted as any paid call that settled nothing,
          // so retrying an id costs the payer its budget, not the service a signature check each.
          await countUnsettled(c, payment);
          return orderResponse(c, earlierUnderId(earlier, hash), header, extraHeaders, undefined, true, PAYMENT_NOT_USED);
        }
      }

      // The same bill from the same payer while its earlier payment is still settling (a
      // facilitator that gave no answer, say): the new payment is not used, and the payer is
      // pointed at the first order, so signing again after a timeout never charges twice.
      const settling = await deps.flow.orders.settlingForBill(payment.authorization.from, hash);
      if (settling) {
        return c.json(
          {
            ...orderResult(settling, { showCode: false }),
            payment_not_used: "an earlier payment for this same bill is still settling; this authorization was not used. Follow request_id, and pay again only if that order fails",
          },
          200,
          { "cache-control": "no-store" },
        );
      }

      const { description: _d, ...requirements } = requirement(ctx, { ...option, amount: quote.amount, rateVersion: quote.version.id }, description);
      const { order, secret, replay } = await startX402Order(deps.flow, {
        bill,
        vend,
        bodyHash: hash,
        chain: option.chain,
        token: option.token,
        tokenAddress,
        amount: quote.amount,
        payment,
        requirements,
        resourceUrl: ctx.resourceUrl,
        ...(paymentId ? { idempotencyKey: storedKey(paymentId) } : {}),
      });
      if (order.status === "PAYMENT_FAILED" || order.status === "REFUSED") await countUnsettled(c, payment);
      const showCode = replay ? await orderProof((name) => c.req.header(name), order, deps.proof) : true;
      return orderResponse(c, order, header, extraHeaders, secret, showCode);
    },
  );

  // A bill's price before paying it: the same checks and the same price as the 402.
  app.use("/api/quote", cors({ origin: "*", allowMethods: ["POST", "OPTIONS"], allowHeaders: ["Content-Type"], exposeHeaders: ["X-Token-Fallback"], maxAge: 600 }));
  app.post(
    "/api/quote",
    billBodyLimit,
    async (c) => {
      const json = parseJsonBody(c.req.header("content-type"), await c.req.text());
      if (json instanceof Response) return json;
      const parsed = paymentRequestSchema.safeParse(json);
      if (!parsed.success) return validationProblem(parsed.error);
      const bill = parsed.data;
      const option = deployedOption(bill);
      await countNewBill(c, billHash(bill, option));
      const ctx = challengeContext(c);
      const { quote } = await quoteBill(bill, ctx, option);
      const headers: Record<string, string> = { "cache-control": "no-store", ...(option.warning ? { "X-Token-Fallback": option.warning } : {}) };
      return c.json(
        { quotes: [quoteView(bill, quote)], pay_with: ctx.resourceUrl },
        200,
        headers,
      );
    },
  );

}
