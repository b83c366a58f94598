/**
 * Reading VTpass's answers, as vtpass.com/documentation publishes them. Pure functions of
 * the JSON, so the documented samples (test/fixtures/vtpass/) are replayed against them.
 *
 * Codes (response-codes page): 000 means "read content.transactions.status"; 099 and 089
 * are still processing; 016 failed; 040 reversed to the wallet; 014 our request id was used
 * before; 015 (requery) the id was never used. "Take any response that differs from the
 * guidelines provided here as pending", and no answer or a timeout "as pending": requery.
 *
 * A pay answer and a requery answer are read by different tables. On a pay, a refusal code
 * means this request was not processed. On a requery the code often describes the query
 * itself (bad credentials, malformed id), so only an answer that says the transaction
 * failed or was reversed counts as failed.
 */
import type { BillerCharge, BillerService, InternationalVariation, PurchasedCode, Variation, VendResult, VerifyResult } from "../upstream.ts";

type Json = Record<string, unknown>;

/**
 * Codes of a pay answer after which this request was not, and will not be, processed.
 * Not 019 ("likely duplicate": an earlier identical bill may have gone through; requery
 * decides), nor 014 (our own request id already arrived), nor 083 (system error: unclear).
 * The "verification" codes 011, 012 and 030 are listed because the page says "if any of the
 * below status code is gotten during product purchase, treat as failed"; 021 to 035 refuse
 * the account, product or quantity before anything is processed.
 */
const PAY_REFUSALS = new Set([
  "016", "040", "091", "010", "011", "012", "013", "017", "018", "021", "022", "023", "024", "025", "026", "027", "028",
  "030", "031", "032", "034", "035", "085", "087",
]);
/**
 * Of those, the codes that refuse the merchant's account or the biller's state rather than the
 * bill (https://www.vtpass.com/documentation/response-codes/): 018 LOW WALLET BALANCE, 021
 * ACCOUNT LOCKED, 022 ACCOUNT SUSPENDED, 023 API ACCESS NOT ENABLE FOR USER, 024 ACCOUNT
 * INACTIVE, 027 (the account's IP not allowed), 030 BILLER NOT REACHABLE AT THIS POINT, 034
 * and 035 (the service suspended or inactive), 085 (our request id, not the bill), 087 INVALID
 * CREDENTIALS, 091 TRANSACTION NOT PROCESSED. A payer is not held to them (orders/failing-payers.ts).
 */
const MERCHANT_SIDE = new Set(["018", "021", "022", "023", "024", "027", "030", "034", "035", "085", "087", "091"]);
/** Codes of a requery answer that say the transaction itself failed or was reversed. */
const REQUERY_FAILURES = new Set(["016", "040"]);
/** 085: "IMPROPER REQUEST ID" (the date rule): this id was refused, not the bill. */
export const REQUEST_ID_REFUSED = "085";
/** 040: "TRANSACTION REVERSAL": the biller put the money back in the merchant's wallet. */
const REVERSAL = "040";

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const text = (v: unknown): string | null => (typeof v === "string" && v.trim() !== "" ? v.trim() : typeof v === "number" && Number.isFinite(v) ? String(v) : null);

/**
 * An amount as VTpass writes it ("1850", "410.00", 1822.25, "1,000.00", a float such as
 * 6.1499999999999995) in kobo, rounded half up; null when it is no amount.
 */
export function koboOf(v: unknown): bigint | null {
  const s = typeof v === "number" ? (Number.isFinite(v) && v >= 0 ? v.toFixed(6) : null) : typeof v === "string" ? v.replace(/,/g, "").trim() : null;
  const m = s === null ? null : /^(\d+)(?:\.(\d*))?$/.exec(s);
  if (!m) return null;
  const fraction = (m[2] ?? "").padEnd(3, "0");
  const kobo = BigInt(m[1]!) * 100n + BigInt(fraction.slice(0, 2));
  return Number(fraction[2]) >= 5 ? kobo + 1n : kobo;
}

const transactionOf = (b: Json): Json => {
  const content = b.content;
  return isObject(content) && isObject(content.transactions) ? content.transactions : {};
};

const LABELS: Record<string, string> = { token: "Token", "bonus token": "Bonus Token", pin: "PIN", "serial no": "Serial", serial: "Serial", voucher: "Voucher" };
const label = (raw: string) => LABELS[raw.trim().toLowerCase()] ?? raw.trim();

/** A label before a colon: "Token", "Bonus Token", "Serial No", "pin". */
const LABELLED = /([A-Za-z][A-Za-z ]*?)\s*:\s*/g;

/**
 * Codes written as text: "Token : 2636...", "Token : X Bonus Token : Y" (Eko),
 * "Serial No:WRN123, pin: 0987" (WAEC), several joined with "||", or a bare code. A value
 * runs to the next label, so a token written in groups ("1234 5678 ...") stays whole.
 */
export function codesFromText(value: string): PurchasedCode[] {
  const out: PurchasedCode[] = [];
  for (const part of value.split("||").map((p) => p.trim()).filter(Boolean)) {
    const labels = [...part.matchAll(LABELLED)];
    if (labels.length === 0) out.push({ label: null, value: part });
    labels.forEach((m, i) => {
      const code = part.slice(m.index + m[0].length, labels[i + 1]?.index ?? part.length).replace(/[\s,;]+$/, "");
      if (code !== "") out.push({ label: label(m[1]!), value: code });
    });
  }
  return out;
}

/**
 * Every code a delivered answer carries, from its structured fields first (WAEC `cards`,
 * WAEC registration `tokens`, Showmax `Voucher`, Eko's `mainToken` and `bonusToken`), else
 * its text fields (JAMB `Pin`, IKEDC `token`, `purchased_code`, a requery's `extras`).
 */
export function readCodes(b: Json): PurchasedCode[] {
  if (Array.isArray(b.cards) && b.cards.length > 0) {
    return b.cards.filter(isObject).flatMap((card) => [
      ...(text(card.Serial) ? [{ label: "Serial", value: text(card.Serial)! }] : []),
      ...(text(card.Pin) ? [{ label: "PIN", value: text(card.Pin)! }] : []),
    ]);
  }
  for (const [field, name] of [["tokens", "Token"], ["Voucher", "Voucher"]] as const) {
    const list = b[field];
    if (Array.isArray(list) && list.some((v) => text(v))) return list.filter((v) => text(v)).map((v) => ({ label: name, value: text(v)! }));
  }
  if (text(b.mainToken)) {
    return [{ label: "Token", value: text(b.mainToken)! }, ...(text(b.bonusToken) ? [{ label: "Bonus Token", value: text(b.bonusToken)! }] : [])];
  }
  for (const v of [b.Pin, b.token, b.purchased_code, transactionOf(b).extras]) {
    const t = text(v);
    if (t && t !== "N/A") return codesFromText(t);
  }
  return [];
}

function readUnits(b: Json): string | null {
  for (const v of [b.units, b.mainTokenUnits, b.Units]) {
    const t = text(v);
    if (t && t !== "N/A") return t;
  }
  return null;
}

/** The face amount, what the wallet was debited and any convenience fee, from the transaction record. */
export function readCharge(b: Json): BillerCharge {
  const tx = transactionOf(b);
  const fee = koboOf(tx.convinience_fee);
  return { amountKobo: koboOf(tx.amount ?? b.amount), totalKobo: koboOf(tx.total_amount), feeKobo: fee };
}

const description = (b: Json, code: string) => text(b.response_description) ?? code;

/** Reads a pay answer (`kind` "pay") or a requery answer ("requery"); see the file's comment. */
export function readTransactionAnswer(body: unknown, kind: "pay" | "requery"): VendResult {
  if (!isObject(body)) return { state: "pending", reason: "unexpected answer" };
  const code = typeof body.code === "string" ? body.code : typeof body.code === "number" ? String(body.code).padStart(3, "0") : "";
  const tx = transactionOf(body);
  if (code === "000") {
    switch (tx.status) {
      case "delivered":
        return {
          state: "delivered",
          transactionId: text(tx.transactionId) ?? text(body.transactionId),
          codes: readCodes(body),
          units: readUnits(body),
          charge: readCharge(body),
        };
      case "reversed":
        return { state: "failed", code, reason: "transaction reversed", reversed: true };
      default:
        // initiated, pending, resolved ("contact us"), or a status the page does not list
        // ("failed" among them): "Take any response that differs from the guidelines provided
        // here as pending, and initiate a transaction requery" (vtpass.com/documentation/
        // response-codes/). A failure is refunded on 016, 040 or a reversal only, never on a
        // word the biller may yet follow with a delivery.
        return { state: "pending", reason: `transaction ${String(tx.status ?? "status unknown")}` };
    }
  }
  if (code === "015" && kind === "requery") return { state: "pending", reason: "the biller has no record of the request", unknownRequest: true };
  if (code === "014") return { state: "pending", reason: "request id already used; requery decides" };
  if (code === REVERSAL) return { state: "failed", code, reason: description(body, code), reversed: true };
  const failures = kind === "pay" ? PAY_REFUSALS : REQUERY_FAILURES;
  if (failures.has(code)) {
    return {
      state: "failed",
      code,
      reason: description(body, code),
      ...(code === REQUEST_ID_REFUSED ? { requestIdRefused: true } : {}),
      ...(MERCHANT_SIDE.has(code) ? { merchantSide: true } : {}),
    };
  }
  return { state: "pending", reason: `${kind} answered ${code || "(no code)"}: ${description(body, code)}; asked again later` };
}

/**
 * A merchant-verify answer. The documented success is code 000 (020 "BILLER CONFIRMED" on
 * the verification table) with the customer's details in `content`. A wrong number is not
 * documented; VTpass answers 000 with `content.WrongBillersCode: true` and/or
 * `content.error`, and either one is a refusal. An answer naming no customer and no error
 * says nothing: it is treated as no answer (thrown), never as verified.
 */
export function readVerifyAnswer(body: unknown): VerifyResult {
  if (!isObject(body)) throw new Error("merchant-verify gave no readable answer");
  const code = text(body.code) ?? "";
  if (code !== "000" && code !== "020") throw new Error(`merchant-verify answered ${code || "nothing"}: ${text(body.response_description) ?? ""}`);
  const c = isObject(body.content) ? body.content : {};
  const error = text(c.error);
  if (c.WrongBillersCode === true || error) return { ok: false, reason: error ?? "the biller reports the number as wrong" };
  const customerName = text(c.Customer_Name) ?? text(c.account_name);
  if (!customerName) throw new Error("merchant-verify named no customer and no error");
  const meter = text(c.Meter_Type)?.toLowerCase();
  return {
    ok: true,
    customerName,
    meterType: meter === "prepaid" || meter === "postpaid" ? meter : null,
    renewalKobo: koboOf(c.Renewal_Amount),
    currentBouquet: text(c.Current_Bouquet_Code) ?? text(c.Current_Bouquet),
  };
}

/**
 * A service-variations answer's plans. Pages send them under `variations`, under the
 * misspelt `varations`, or both (identical); whichever is present is read.
 */
export function readVariations(body: unknown): Json[] | undefined {
  const content = isObject(body) && isObject(body.content) ? body.content : undefined;
  const list = content && (Array.isArray(content.variations) ? content.variations : Array.isArray(content.varations) ? content.varations : undefined);
  return list?.filter(isObject);
}

export const toVariation = (v: Json): Variation => ({
  variation_code: String(v.variation_code),
  name: String(v.name),
  // Missing, it is no price: a fixed plan without one cannot be sold (catalogue/plans.ts).
  variation_amount: String(v.variation_amount ?? ""),
  // VTpass lists fixedPrice with every plan (vtpass.com/documentation/variation-codes/). One
  // that does not say it is open is held to its listed price: the safe reading.
  fixedPrice: String(v.fixedPrice ?? "Yes"),
});

export const toInternationalVariation = (v: Json): InternationalVariation => ({
  ...toVariation(v),
  variation_rate: text(v.variation_rate),
  charged_amount: text(v.charged_amount),
  charged_currency: text(v.charged_currency),
  variation_amount_min: text(v.variation_amount_min),
  variation_amount_max: text(v.variation_amount_max),
});

/** A services answer (`minimium_amount`, sic, as the page spells it; the plain spelling too). */
export function readServices(body: unknown): BillerService[] | undefined {
  if (!isObject(body) || !Array.isArray(body.content)) return undefined;
  const limit = (v: unknown) => (v === undefined || v === null || v === "" || !Number.isFinite(Number(v)) ? null : Number(v));
  return body.content.filter(isObject).map((x) => ({
    serviceID: String(x.serviceID),
    name: String(x.name),
    minimumAmount: limit(x.minimium_amount ?? x.minimum_amount),
    maximumAmount: limit(x.maximum_amount),
  }));
}

/**
 * A transaction-update webhook (transaction-update-webhook-api): `{type, data}` where data
 * is requery-shaped. The request id is a pointer: what happened is read from a requery,
 * never from the body. What the body says (`says`) is only what the requery is expected to
 * confirm: until it does, the biller is asked to send the webhook again.
 */
export function webhookRequestId(body: unknown): { type: string | null; requestId: string | null; says: VendResult } {
  if (!isObject(body)) return { type: null, requestId: null, says: { state: "pending", reason: "unexpected answer" } };
  const data = isObject(body.data) ? body.data : {};
  return { type: text(body.type), requestId: text(data.requestId) ?? text(data.request_id), says: readTransactionAnswer(data, "requery") };
}
