/**
 * A local stand-in for VTpass's API, written from vtpass.com/documentation (each rule names
 * its page) and never from the service's client: a client that passes here should pass
 * against sandbox.vtpass.com with real keys. Transactions are kept in memory.
 *
 * What it enforces, as the pages say:
 *   - authentication page: GET calls need `api-key` and `public-key`, POST calls `api-key`
 *     and `secret-key` (else 087 INVALID CREDENTIALS);
 *   - buying-services page, "Request ID Format": at least 12 characters, the first 12 numeric,
 *     today's date in Africa/Lagos time (else 085, with the response-codes page's texts; the
 *     hour and minute must be a time, but the pages check only the date); 014 for an id
 *     used before; 015 on a requery of one never used;
 *   - each product page's NEEDED PAYLOAD: its mandatory fields (else 011 INVALID ARGUMENTS),
 *     a known variation_code (else 010), `subscription_type` change|renew for DStv and GOtv,
 *     and for foreign-airtime operator_id, country_code, product_type_id and email, with
 *     `amount` in the destination's currency within the plan's bounds (013/017);
 *   - services page: each product's minimium_amount and maximum_amount (013/017);
 *   - response-codes page: 019 for the same product and number within 30 seconds, when
 *     `duplicateWindowMs` is set (whether VTpass's sandbox enforces it is not documented;
 *     off by default, so the examples can pay the one success number again and again).
 *
 * What it charges: a fixed-price plan its price ("this amount will be ignored"), except
 * DStv/GOtv's change, which tops the decoder up with the amount sent when one is ("If you
 * specify amount, we will topup decoder with the amount"), and a renewal, its amount (the
 * smartcard's Renewal_Amount when none is sent); an international flexible plan
 * amount x variation_rate, a fixed one its charged_amount (foreign-airtime pricing note).
 *
 * Outcomes follow each page's sandbox table (catalog.ts SANDBOX_NUMBERS): the success
 * numbers, 201000000000 pending, 500000000000 an unexpected answer, 400000000000 no
 * answer, 300000000000 a timeout, anything else failed. The pages show none of those
 * bodies; this sends 099 with a pending record, an HTML page, a closed connection, a late
 * answer, and 016. Nor do they say what a later requery of the unexpected, unanswered or
 * late pay shows: here the transaction was delivered (the client's "pending, ask again"
 * must find it). The client's other reading, 015 after a grace (never received: pay again),
 * is driven by the control route that hides a transaction. A pending transaction stays pending until "one of our staff" resolves it
 * (callback page): here, on its `pendingRequeries`+1th requery, or by the sandbox's own
 * control route, which then calls the webhook.
 *
 * Answers follow the current (2025) samples: the pay record with strings, the requery record
 * with numbers, `method` "api" then "wallet", `extras` on requery; per product the fields the
 * pages show (IKEDC's "Token : ..." in purchased_code and token with units "79.9 kWh"; Eko's
 * mainToken and bonusToken (an older sample); WAEC's `cards`; JAMB's `Pin`; Showmax's
 * `Voucher`; foreign-airtime's CountryCode and Amount).
 *
 * Webhooks (callback-api-integration, transaction-update-webhook-api): with `webhookUrl`, a
 * transaction resolved or reversed by "staff" is POSTed as {type: "transaction-update",
 * data: <requery answer>}, up to 5 times until the answer is {"response":"success"}. The
 * reversal's data carries code 040, status "reversed" and `wallet_credit_id`, with `amount`
 * the total put back (the page's reversal sample is cut short in the store; its shape comes
 * from copies of it, said so in test/fixtures/vtpass/).
 *
 * Sandbox-only routes (no VTpass counterpart, secret-key authenticated): POST
 * /sandbox/variations/{serviceID}/{code} {variation_amount} reprices a plan;
 * POST /sandbox/transactions/{request_id}/resolve {status: delivered|reversed} and
 * /reverse act as VTpass staff (`?notify=0`: no webhook); /hide keeps a pending request out of
 * requery's sight (015) until resolved; GET /sandbox/transactions/{request_id} shows what was sent.
 */
import { randomInt } from "node:crypto";
import { Hono, type Context } from "hono";
import {
  INTERNATIONAL,
  INTERNATIONAL_PRODUCT_TYPES,
  internationalPlans,
  outcomeFor,
  SANDBOX_CATEGORIES,
  SANDBOX_NUMBERS,
  SANDBOX_SERVICES,
  type SandboxInternationalVariation,
  type SandboxOutcome,
  type SandboxService,
  type SandboxVariation,
} from "./catalog.ts";

export interface SandboxOptions {
  apiKey: string;
  secretKey: string;
  publicKey: string;
  /** How long a "timeout" pay takes to answer; longer than the client's timeout. */
  slowAnswerMs?: number;
  /** Requeries a pending transaction answers "pending" to before it resolves (delivered). */
  pendingRequeries?: number;
  /** The response-codes page's 019 window (same product, same number), e.g. 30_000; 0 (the default) turns it off. */
  duplicateWindowMs?: number;
  /** Where transaction updates are POSTed, as the merchant sets it on VTpass's dashboard (read when one is sent). */
  webhookUrl?: string | (() => string | undefined);
  /** The sandbox's clock (request ids are checked against today's date in Lagos). */
  now?: () => Date;
}

interface Transaction {
  requestId: string;
  service: SandboxService;
  request: Record<string, unknown>;
  billersCode: string;
  phone: string;
  variation: SandboxVariation | undefined;
  /** What the merchant is charged, NGN. */
  amount: number;
  /** International: the amount in the destination's currency, and the country. */
  foreign?: { amount: number; country: string };
  outcome: SandboxOutcome;
  status: "delivered" | "pending" | "reversed" | "failed";
  requeries: number;
  transactionId: string;
  createdAt: Date;
  codes: { token: string; bonus: string; serial: string; pin: string; voucher: string };
  walletCreditId?: string;
  /** Sandbox-only: not yet recorded where requery looks (015), as a request VTpass has queued but not processed. */
  hidden?: boolean;
}

const LAGOS_OFFSET_MS = 60 * 60 * 1000;
const lagosDate = (d: Date) => new Date(d.getTime() + LAGOS_OFFSET_MS).toISOString().slice(0, 10).replace(/-/g, "");
const digits = (n: number) => Array.from({ length: n }, () => randomInt(10)).join("");

/** The response-codes page's 085 texts, for each way an id breaks the rule. */
function requestIdProblem(id: string, now: Date): string | undefined {
  if (id.length < 12 || !/^\d{12}/.test(id)) return "IMPROPER REQUEST ID: DOES NOT CONTAIN DATE";
  const [y, m, d, hh, mm] = [id.slice(0, 4), id.slice(4, 6), id.slice(6, 8), id.slice(8, 10), id.slice(10, 12)].map(Number);
  const date = new Date(Date.UTC(y!, m! - 1, d!));
  if (date.getUTCMonth() !== m! - 1 || date.getUTCDate() !== d! || hh! > 23 || mm! > 59) {
    return "IMPROPER REQUEST ID: NOT PROPER DATE FORMAT - FIRST 8 CHARACTERS MUST BE DATE (TODAY'S DATE - YYYYMMDD)";
  }
  if (id.slice(0, 8) !== lagosDate(now)) return "IMPROPER REQUEST ID: DATE NOT TODAY'S DATE - FIRST 8 CHARACTERS MUST BE TODAY'S DATE IN THIS FORMAT: YYYYMMDD";
  return undefined;
}

const present = (v: unknown) => (typeof v === "string" && v.trim() !== "") || (typeof v === "number" && Number.isFinite(v));
const round2 = (n: number) => Math.round(n * 100) / 100;

export function billerSandboxApp(options: SandboxOptions) {
  const app = new Hono();
  const transactions = new Map<string, Transaction>();
  const lastPay = new Map<string, number>();
  // Each sandbox has its own copy of the catalogue, so a price change stays in it.
  const services: SandboxService[] = structuredClone(SANDBOX_SERVICES);
  const pendingRequeries = options.pendingRequeries ?? 1;
  const slowAnswerMs = options.slowAnswerMs ?? 5_000;
  const duplicateWindowMs = options.duplicateWindowMs ?? 0;
  const now = options.now ?? (() => new Date());

  const answer = (c: Context, code: string, description: string, extra: Record<string, unknown> = {}) => c.json({ code, response_description: description, ...extra });
  const authorised = (c: Context, write: boolean) =>
    c.req.header("api-key") === options.apiKey && (write ? c.req.header("secret-key") === options.secretKey : c.req.header("public-key") === options.publicKey);
  const body = async (c: Context) => (await c.req.json().catch(() => ({}))) as Record<string, unknown>;

  /** The transaction record, as the pay samples (strings, method "api") or the requery samples (numbers, "wallet", extras) show it. */
  function record(t: Transaction, kind: "pay" | "requery") {
    const amount = t.amount;
    const rate = Number(t.service.commissionRate);
    const commission = round2((amount * rate) / 100);
    const fee = t.service.convenienceFee ?? 0;
    return {
      status: t.status,
      product_name: t.service.name,
      unique_element: t.billersCode || t.phone,
      unit_price: kind === "pay" ? String(amount) : amount,
      quantity: 1,
      service_verification: null,
      channel: "api",
      commission: kind === "pay" ? commission : Math.round(commission),
      total_amount: round2(amount - commission + fee),
      discount: null,
      type: t.service.recordType,
      email: "sandbox@sandbox.vtpass.com",
      phone: "123450987623",
      name: null,
      ...(kind === "requery" ? { extras: extrasOf(t) } : {}),
      convinience_fee: fee,
      amount: kind === "pay" ? String(amount) : amount,
      platform: "api",
      method: kind === "pay" ? "api" : "wallet",
      transactionId: t.transactionId,
      ...(kind === "requery" ? { product_id: 1 + SANDBOX_SERVICES.findIndex((s) => s.serviceID === t.service.serviceID) } : {}),
      commission_details: { amount: commission, rate: t.service.commissionRate, rate_type: "percent", computation_type: "default" },
      ...(t.status === "reversed" ? { wallet_credit_id: t.walletCreditId } : {}),
    };
  }

  function extrasOf(t: Transaction): string | null {
    if (t.status !== "delivered") return null;
    if (t.service.vends === "electricity" && t.variation?.variation_code === "prepaid") return `Token : ${t.codes.token}`;
    if (t.service.vends === "showmax") return t.codes.voucher;
    return null;
  }

  /** The top-level fields a delivered bill of each product adds (its page's pay sample). */
  function vended(t: Transaction): Record<string, unknown> {
    if (t.status !== "delivered") return { purchased_code: "" };
    switch (t.service.vends) {
      case "electricity": {
        if (t.variation?.variation_code !== "prepaid") {
          return { purchased_code: "", customerName: "NP NGEMA", customerAddress: "6 ABIODUN ODESEYE Shomolu BU", meterNumber: null, exchangeReference: digits(16), balance: null };
        }
        const units = `${(t.amount / 25).toFixed(1)} kWh`;
        if (t.service.serviceID === "eko-electric") {
          // The older Eko sample: both tokens in purchased_code, each in a field of its own.
          return {
            purchased_code: `Token : ${t.codes.token} Bonus Token : ${t.codes.bonus}`,
            mainToken: t.codes.token,
            mainTokenDescription: "Normal Sale",
            mainTokenUnits: Number((t.amount / 25).toFixed(3)),
            bonusToken: t.codes.bonus,
            bonusTokenDescription: "FBE Token",
            bonusTokenUnits: 50,
          };
        }
        return { purchased_code: `Token : ${t.codes.token}`, customerName: "N/A", token: `Token : ${t.codes.token}`, tokenAmount: round2(t.amount / 1.075), units };
      }
      case "waec":
        return { purchased_code: `Serial No:${t.codes.serial}, pin: ${t.codes.pin}`, cards: [{ Serial: t.codes.serial, Pin: t.codes.pin }] };
      case "jamb":
        return { purchased_code: `Pin : ${t.codes.pin}`, Pin: `Pin : ${t.codes.pin}` };
      case "showmax":
        return { purchased_code: t.codes.voucher, Voucher: [t.codes.voucher] };
      case "international":
        return { purchased_code: "", cards: null, CountryName: "UNKNOWN", CountryCode: t.foreign?.country, OperatorAmount: "UNKNOWNUNKNOWN", Amount: `NGN${t.amount}` };
      default:
        return { purchased_code: "" };
    }
  }

  /** A pay or requery answer (requery: also the webhook's data, as sendWebhook adjusts it). */
  function transactionAnswer(t: Transaction, kind: "pay" | "requery") {
    const code = t.status === "failed" ? "016" : t.status === "reversed" ? "040" : t.status === "pending" && kind === "pay" ? "099" : "000";
    const description = {
      delivered: "TRANSACTION SUCCESSFUL",
      pending: kind === "pay" ? "TRANSACTION IS PROCESSING" : "TRANSACTION PROCESSING",
      failed: "TRANSACTION FAILED",
      reversed: "TRANSACTION REVERSAL TO WALLET",
    }[t.status];
    const tx = record(t, kind);
    return {
      ...(kind === "requery" ? { response_description: description } : {}),
      code,
      content: { transactions: tx },
      ...(kind === "pay" ? { response_description: description } : {}),
      requestId: t.requestId,
      // The reversal sample's top-level amount is what went back to the wallet.
      amount: t.status === "reversed" ? tx.total_amount : t.amount,
      transaction_date: t.createdAt.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z"),
      ...vended(t),
    };
  }

  async function sendWebhook(t: Transaction): Promise<void> {
    const url = typeof options.webhookUrl === "function" ? options.webhookUrl() : options.webhookUrl;
    if (!url) return;
    // The record as a requery gives it, with what the page's sample says otherwise
    // (transaction-update-webhook-api, test/fixtures/vtpass/webhook-delivered.json): a delivery
    // described "TRANSACTION DELIVERED", and no transaction_date.
    const data = { ...transactionAnswer(t, "requery"), ...(t.status === "delivered" ? { response_description: "TRANSACTION DELIVERED" } : {}), transaction_date: null };
    const payload = JSON.stringify({ type: "transaction-update", data });
    // Five tries: "this will be done 5 times before giving up" (vtpass.com/documentation/
    // callback-api-integration/). The page gives no intervals: these (100 ms, then 200, ...)
    // are this sandbox's own, short for tests; the service must not rely on their spacing.
    for (let attempt = 1; attempt <= 5; attempt++) {
      try {
        const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: payload, signal: AbortSignal.timeout(10_000) });
        const got = (await res.json().catch(() => undefined)) as { response?: unknown } | undefined;
        if (got?.response === "success") return;
      } catch {
        // sent again below
      }
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }

  /** The verify answer of a product's number, or why it does not verify (merchant-verify on each page). */
  function verification(service: SandboxService, billersCode: string, type: string | undefined): Record<string, unknown> | string {
    const wrong = `This is not a valid ${service.name} number; please check and try again`;
    switch (service.vends) {
      case "electricity": {
        // IKEDC page: type is mandatory; the answer names the meter's own type (whether the
        // upstream checks `type` against the meter is not documented).
        const meterType = billersCode === SANDBOX_NUMBERS.prepaidMeter ? "PREPAID" : billersCode === SANDBOX_NUMBERS.postpaidMeter ? "POSTPAID" : undefined;
        if (!meterType) return wrong;
        return { Customer_Name: "TESTMETER1", Address: "ABULE EGBA BU ABULE", Meter_Number: billersCode, Customer_Arrears: "", Minimum_Amount: "", Min_Purchase_Amount: "", Can_Vend: "yes", Business_Unit: "", Customer_Account_Type: "PRIME", Meter_Type: meterType, WrongBillersCode: false };
      }
      case "cable":
        // DStv/GOtv pages: "returns the customer name, current bouquet, subscription due date and
        // the renewal amount" (the current sample leaves the last two out; the text promises them).
        // Which bouquet the sandbox smartcard is on is not documented: the list's first, at its price.
        if (billersCode !== SANDBOX_NUMBERS.smartcard) return wrong;
        return {
          Customer_Name: "TEST METER",
          Status: "ACTIVE",
          Due_Date: "2025-02-06T00:00:00",
          Customer_Number: "8061522780",
          Customer_Type: service.serviceID.toUpperCase(),
          Current_Bouquet: service.variations[0]!.name,
          Current_Bouquet_Code: service.variations[0]!.variation_code,
          Renewal_Amount: Number(service.variations[0]!.variation_amount),
        };
      case "startimes":
        if (billersCode !== SANDBOX_NUMBERS.smartcard) return wrong;
        return { Customer_Name: "TestMan Decoder", Balance: 54.82, Smartcard_Number: billersCode, WrongBillersCode: false };
      case "jamb":
        if (!service.variations.some((v) => v.variation_code === type)) return "INVALID ARGUMENTS";
        return billersCode === SANDBOX_NUMBERS.jambProfile ? { Customer_Name: "Capital James" } : wrong;
      case "bank":
        // Not documented: the bank's code as `type`, as the electricity page's meter type.
        if (!service.variations.some((v) => v.variation_code === type)) return "INVALID ARGUMENTS";
        return billersCode === SANDBOX_NUMBERS.bankAccount ? { Customer_Name: "TESTIMETRY ADAMS", account_name: "TESTIMETRY ADAMS", WrongBillersCode: false } : wrong;
      default:
        return "INVALID ARGUMENTS";
    }
  }

  app.post("/api/merchant-verify", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const b = await body(c);
    const service = services.find((s) => s.serviceID === b.serviceID);
    if (!service) return answer(c, "012", "PRODUCT DOES NOT EXIST");
    if (!present(b.billersCode)) return answer(c, "011", "INVALID ARGUMENTS");
    const needsType = service.vends === "electricity" || service.vends === "jamb" || service.vends === "bank";
    if (needsType && !present(b.type)) return answer(c, "011", "INVALID ARGUMENTS");
    const found = verification(service, String(b.billersCode), b.type === undefined ? undefined : String(b.type));
    if (found === "INVALID ARGUMENTS") return answer(c, "011", "INVALID ARGUMENTS");
    // A wrong number: not documented; VTpass answers 000 with WrongBillersCode and an error text.
    if (typeof found === "string") return c.json({ code: "000", content: { error: found, WrongBillersCode: true } });
    return c.json({ code: "000", content: { ...found, commission_details: { amount: null, rate: service.commissionRate, rate_type: "percent", computation_type: "default" } } });
  });

  /** The fields each product's pay needs beyond request_id and serviceID (its NEEDED PAYLOAD table). */
  function missingFields(service: SandboxService, b: Record<string, unknown>): boolean {
    const need = (f: string) => present(b[f]);
    switch (service.vends) {
      case "airtime":
        return !need("amount") || !need("phone");
      case "showmax": // the Showmax table has no phone row
        return !need("billersCode") || !need("variation_code");
      case "waec":
        return !need("variation_code") || !need("phone");
      case "international":
        return !["billersCode", "variation_code", "phone", "operator_id", "country_code", "product_type_id", "email"].every(need);
      case "cable":
        return !need("billersCode") || !need("phone") || !["change", "renew"].includes(String(b.subscription_type)) || (b.subscription_type === "change" && !need("variation_code"));
      case "electricity":
      case "bank":
        return !need("billersCode") || !need("variation_code") || !need("amount") || !need("phone");
      default:
        return !need("billersCode") || !need("variation_code") || !need("phone");
    }
  }

  app.post("/api/pay", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const b = await body(c);
    const requestId = typeof b.request_id === "string" ? b.request_id : "";
    const idProblem = requestIdProblem(requestId, now());
    if (idProblem) return answer(c, "085", idProblem);
    if (transactions.has(requestId)) return answer(c, "014", "REQUEST ID ALREADY EXIST");
    const service = services.find((s) => s.serviceID === b.serviceID);
    if (!service) return answer(c, "012", "PRODUCT DOES NOT EXIST");
    if (missingFields(service, b)) return answer(c, "011", "INVALID ARGUMENTS");
    const billersCode = String(b.billersCode ?? "");
    const phone = String(b.phone ?? billersCode);
    const sent = present(b.amount) ? Number(b.amount) : undefined;
    if (sent !== undefined && !(sent > 0)) return answer(c, "011", "INVALID ARGUMENTS");

    let variation: SandboxVariation | undefined;
    let amount: number;
    let foreign: Transaction["foreign"];
    if (service.vends === "international") {
      const found = internationalPlans(String(b.operator_id), Number(b.product_type_id));
      if (!found || found.country.code !== b.country_code || !String(b.email).includes("@")) return answer(c, "011", "INVALID ARGUMENTS");
      const plan: SandboxInternationalVariation | undefined = found.operator.variations.find((v) => v.variation_code === b.variation_code);
      if (!plan) return answer(c, "010", "VARIATION CODE DOES NOT EXIST");
      variation = plan;
      if (plan.fixedPrice === "Yes") {
        amount = Number(plan.charged_amount);
      } else {
        if (sent === undefined) return answer(c, "011", "INVALID ARGUMENTS");
        if (plan.variation_amount_min !== null && sent < Number(plan.variation_amount_min)) return answer(c, "013", "BELOW MINIMUM AMOUNT ALLOWED");
        if (plan.variation_amount_max !== null && sent > Number(plan.variation_amount_max)) return answer(c, "017", "ABOVE MAXIMUM AMOUNT ALLOWED");
        amount = round2(sent * Number(plan.variation_rate));
      }
      foreign = { amount: sent ?? 0, country: found.country.code };
    } else if (service.vends === "cable" && b.subscription_type === "renew") {
      // Renewal: no variation_code; the amount sent, else the current bouquet's price.
      amount = sent ?? Number(service.variations[0]!.variation_amount);
    } else if (service.variations.length > 0) {
      variation = service.variations.find((v) => v.variation_code === b.variation_code);
      if (!variation) return answer(c, "010", "VARIATION CODE DOES NOT EXIST");
      const price = Number(variation.variation_amount);
      const openAmount = variation.fixedPrice !== "Yes" || price === 0;
      if (openAmount) {
        if (sent === undefined) return answer(c, "011", "INVALID ARGUMENTS");
        amount = sent;
      } else {
        amount = service.vends === "cable" && sent !== undefined ? sent : price;
      }
    } else {
      if (sent === undefined) return answer(c, "011", "INVALID ARGUMENTS");
      amount = sent;
    }
    if (service.vends !== "international" && amount < service.minimum_amount) return answer(c, "013", "BELOW MINIMUM AMOUNT ALLOWED");
    if (amount > service.maximum_amount) return answer(c, "017", "ABOVE MAXIMUM AMOUNT ALLOWED");

    // The number each page's sandbox table keys the outcome on, and the numbers that succeed.
    const keyed: Record<SandboxService["vends"], [string, string[]]> = {
      airtime: [phone, [SANDBOX_NUMBERS.phone]],
      data: [phone, [SANDBOX_NUMBERS.phone]],
      showmax: [billersCode, [SANDBOX_NUMBERS.phone]],
      international: [phone, [SANDBOX_NUMBERS.phone]],
      // IKEDC's pay table: each meter succeeds with its own type only.
      electricity: [billersCode, [variation?.variation_code === "postpaid" ? SANDBOX_NUMBERS.postpaidMeter : SANDBOX_NUMBERS.prepaidMeter]],
      cable: [billersCode, [SANDBOX_NUMBERS.smartcard]],
      startimes: [billersCode, [SANDBOX_NUMBERS.smartcard]],
      jamb: [billersCode, [SANDBOX_NUMBERS.jambProfile]],
      bank: [billersCode, [SANDBOX_NUMBERS.bankAccount]],
      waec: [phone, [phone]], // the WAEC page has no table: a PIN is always vended
    };
    const [number, succeeding] = keyed[service.vends];

    // 019: "the same service multiple times for the same biller_code within 30 seconds".
    const dupKey = `${service.serviceID}:${number}`;
    const at = now().getTime();
    if (duplicateWindowMs > 0 && at - (lastPay.get(dupKey) ?? -Infinity) < duplicateWindowMs) return answer(c, "019", "LIKELY DUPLICATE TRANSACTION");
    lastPay.set(dupKey, at);

    const outcome = outcomeFor(number, succeeding);
    const t: Transaction = {
      requestId,
      service,
      request: b,
      billersCode,
      phone,
      variation,
      amount,
      ...(foreign ? { foreign } : {}),
      outcome,
      status: outcome === "fail" ? "failed" : outcome === "pending" ? "pending" : "delivered",
      requeries: 0,
      transactionId: `${at}${digits(13)}`,
      createdAt: now(),
      codes: { token: digits(20), bonus: digits(20), serial: `WRN${digits(9)}`, pin: digits(12), voucher: `SHM${digits(12)}` },
    };
    transactions.set(requestId, t);

    switch (outcome) {
      case "unexpected":
        return c.text("<html><body>Bad Gateway</body></html>", 200);
      case "no-answer": {
        const incoming = (c.env as { incoming?: { socket?: { destroy(): void } } } | undefined)?.incoming;
        incoming?.socket?.destroy();
        return new Response(null, { status: 204 });
      }
      case "timeout":
        await new Promise((r) => setTimeout(r, slowAnswerMs));
        return c.json(transactionAnswer(t, "pay"));
      default:
        return c.json(transactionAnswer(t, "pay"));
    }
  });

  app.post("/api/requery", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const t = transactions.get(String((await body(c)).request_id ?? ""));
    if (!t || t.hidden) return answer(c, "015", "INVALID REQUEST ID");
    if (t.status === "pending" && ++t.requeries > pendingRequeries) t.status = "delivered";
    return c.json(transactionAnswer(t, "requery"));
  });

  app.get("/api/service-categories", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    return c.json({ response_description: "000", content: SANDBOX_CATEGORIES });
  });

  app.get("/api/services", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const content = services
      .filter((s) => s.category === c.req.query("identifier"))
      .map((s) => ({ serviceID: s.serviceID, name: s.name, minimium_amount: String(s.minimum_amount), maximum_amount: String(s.maximum_amount), convinience_fee: "0 %", product_type: s.variations.length > 0 ? "fix" : "flexible" }));
    return c.json({ response_description: "000", content });
  });

  app.get("/api/service-variations", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    if (c.req.query("serviceID") === "foreign-airtime") {
      const found = internationalPlans(c.req.query("operator_id") ?? "", Number(c.req.query("product_type_id")));
      if (!found) return answer(c, "011", "INVALID ARGUMENTS");
      return c.json({ response_description: "000", content: { ServiceName: "International Airtime", serviceID: "foreign-airtime", convinience_fee: "0 %", currency: found.country.currency, variations: found.operator.variations } });
    }
    const service = services.find((s) => s.serviceID === c.req.query("serviceID"));
    if (!service) return answer(c, "012", "PRODUCT DOES NOT EXIST");
    const lists = service.variationsKey === "both" ? { variations: service.variations, varations: service.variations } : { [service.variationsKey]: service.variations };
    return c.json({ response_description: "000", content: { ServiceName: service.name, serviceID: service.serviceID, convinience_fee: "0 %", ...lists } });
  });

  app.get("/api/get-international-airtime-countries", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const countries = INTERNATIONAL.map(({ code, name, currency, prefix }) => ({ code, flag: `${new URL(c.req.url).origin}/resources/images/flags/${code}.png`, name, currency, prefix }));
    return c.json({ response_description: "000", content: { countries } });
  });

  app.get("/api/get-international-airtime-product-types", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const country = INTERNATIONAL.find((x) => x.code === c.req.query("code"));
    if (!country) return answer(c, "011", "INVALID ARGUMENTS");
    return c.json({ response_description: "000", content: Object.keys(country.products).map((id) => ({ product_type_id: Number(id), name: INTERNATIONAL_PRODUCT_TYPES[Number(id)] })) });
  });

  app.get("/api/get-international-airtime-operators", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const operators = INTERNATIONAL.find((x) => x.code === c.req.query("code"))?.products[Number(c.req.query("product_type_id"))];
    if (!operators) return answer(c, "011", "INVALID ARGUMENTS");
    return c.json({ response_description: "000", content: operators.map(({ operator_id, name }) => ({ operator_id, name, operator_image: "" })) });
  });

  // Sandbox-only: a plan's price changes, as a biller's price change does.
  app.post("/sandbox/variations/:serviceID/:code", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const variation = services.find((s) => s.serviceID === c.req.param("serviceID"))?.variations.find((v) => v.variation_code === c.req.param("code"));
    const price = Number((await body(c)).variation_amount);
    if (!variation || !Number.isFinite(price) || price <= 0) return answer(c, "011", "INVALID ARGUMENTS");
    variation.variation_amount = price.toFixed(2);
    return c.json({ code: "000", content: variation });
  });

  // Sandbox-only: what VTpass staff do to a transaction, each followed by the webhook (unless
  // `?notify=0`: a callback that never arrives, which VTpass's callback page does not rule out).
  const staff = (to: (t: Transaction) => boolean) => async (c: Context) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const t = transactions.get(c.req.param("requestId") ?? "");
    if (!t) return answer(c, "015", "INVALID REQUEST ID");
    if (!to(t)) return answer(c, "011", "INVALID ARGUMENTS");
    t.hidden = false;
    if (c.req.query("notify") !== "0") await sendWebhook(t);
    return c.json(transactionAnswer(t, "requery"));
  };
  // Sandbox-only: a pending request VTpass has queued but not yet processed: requery answers
  // 015 ("invalid request id", the response-codes page's answer for an id it has no record of)
  // until staff resolve it. No VTpass page documents this; it is the case its requery advice
  // guards against (a request sent, no answer, no record yet), made reproducible.
  app.post("/sandbox/transactions/:requestId/hide", (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const t = transactions.get(c.req.param("requestId"));
    if (!t || t.status !== "pending") return answer(c, "011", "INVALID ARGUMENTS");
    t.hidden = true;
    return c.json({ code: "000", content: { request_id: t.requestId, hidden: true } });
  });
  const reverse = (t: Transaction) => {
    t.status = "reversed";
    t.walletCreditId = `${Date.now()}${digits(12)}`;
    return true;
  };
  app.post("/sandbox/transactions/:requestId/resolve", async (c) => {
    const status = (await c.req.json().catch(() => ({}))) as { status?: string };
    return staff((t) => {
      if (t.status !== "pending") return false;
      if (status.status === "reversed") return reverse(t);
      t.status = "delivered";
      return true;
    })(c);
  });
  app.post("/sandbox/transactions/:requestId/reverse", staff((t) => (t.status === "delivered" || t.status === "pending" ? reverse(t) : false)));
  app.get("/sandbox/transactions/:requestId", (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const t = transactions.get(c.req.param("requestId"));
    if (!t) return answer(c, "015", "INVALID REQUEST ID");
    return c.json({ request: t.request, charged: t.amount, status: t.status });
  });

  return app;
}
