/**
 * HTTP client for the upstream biller's (VTpass-style) API. Every call has a timeout; any
 * answer the API does not define (a timeout, no answer, an unlisted code, a body that is
 * not JSON) is reported as `pending`, to be settled by requery, never guessed.
 *
 * A pay answer and a requery answer are read by different tables. On a pay, a refusal code
 * (not processed, limits, bad plan, ...) means the bill was not delivered. On a requery the
 * code often describes the query itself (bad credentials, malformed request id), so only an
 * answer that says the transaction failed or was reversed counts as failed; anything else
 * stays pending and is asked again.
 */
import { randomBytes } from "node:crypto";
import { INTERNATIONAL_SERVICE_ID, type Country, type InternationalVariation, type Operator, type ProductType } from "./international.ts";

export interface BillerConfig {
  baseUrl: string;
  apiKey: string;
  secretKey: string;
  publicKey: string;
  timeoutMs: number;
  /** Told of every call: its operation (the path's last part), its time and whether a JSON answer came. */
  observe?: (operation: string, seconds: number, ok: boolean) => void;
}

export type VendResult =
  | {
      state: "delivered";
      transactionId: string | null;
      purchasedCode: string | null;
      units: string | null;
      /** What the biller says it charged, in NGN as it wrote it; null when it did not say. */
      amount: string | null;
    }
  | { state: "pending"; reason: string; /** requery found no such request: it may never have arrived, or not yet. */ unknownRequest?: boolean }
  | { state: "failed"; code: string; reason: string };

export type VerifyResult = { ok: true; customerName: string | null } | { ok: false; reason: string };

export interface BillerService {
  serviceID: string;
  name: string;
  /** The least and most one bill may be, in NGN, as the biller states them (null: not stated). */
  minimumAmount: number | null;
  maximumAmount: number | null;
}

export interface Variation {
  variation_code: string;
  name: string;
  variation_amount: string;
  fixedPrice: string;
}

/**
 * Codes of a pay answer after which the bill was not, and will not be, delivered. Not 019
 * ("likely duplicate": an earlier identical bill may have gone through; requery decides),
 * nor 014 (our own request id already arrived).
 */
const PAY_FAILED_CODES = new Set(["016", "040", "091", "018", "013", "017", "010", "011", "012", "030", "085", "087"]);
/** Codes of a requery answer that say the transaction itself failed or was reversed. */
const REQUERY_FAILED_CODES = new Set(["016", "040"]);

/** request_id: 12 digits of Lagos time (YYYYMMDDHHII, GMT+1, no DST) then random alphanumerics. */
export function newBillerRequestId(now = new Date()): string {
  const lagos = new Date(now.getTime() + 60 * 60 * 1000);
  const p = (n: number) => String(n).padStart(2, "0");
  const stamp = `${lagos.getUTCFullYear()}${p(lagos.getUTCMonth() + 1)}${p(lagos.getUTCDate())}${p(lagos.getUTCHours())}${p(lagos.getUTCMinutes())}`;
  return `${stamp}${randomBytes(10).toString("hex")}`;
}

/** Strips a label such as "Token : " or "Pin : " from a purchased code. */
function cleanCode(value: unknown): string | null {
  if (typeof value !== "string" || value.trim() === "") return null;
  const m = /^\s*[A-Za-z ]+:\s*(.+)$/.exec(value);
  return (m ? m[1]! : value).trim();
}

function amountOf(b: Record<string, unknown>, tx: Record<string, unknown>): string | null {
  for (const v of [tx.amount, b.amount]) if (typeof v === "number" || (typeof v === "string" && v.trim() !== "")) return String(v);
  return null;
}

/** Reads a pay answer (`kind` "pay") or a requery answer ("requery"); see the file's comment. */
function vendResult(body: unknown, kind: "pay" | "requery"): VendResult {
  if (typeof body !== "object" || body === null) return { state: "pending", reason: "unexpected answer" };
  const b = body as Record<string, unknown>;
  const code = typeof b.code === "string" ? b.code : "";
  const description = typeof b.response_description === "string" ? b.response_description : code;
  const tx = ((b.content as Record<string, unknown> | undefined)?.transactions ?? {}) as Record<string, unknown>;
  if (code === "000") {
    switch (tx.status) {
      case "delivered":
        return {
          state: "delivered",
          transactionId: typeof tx.transactionId === "string" ? tx.transactionId : null,
          purchasedCode: cleanCode(b.purchased_code) ?? cleanCode(b.token) ?? cleanCode(b.mainToken),
          units: cleanCode(b.units) ?? cleanCode(b.mainTokenUnits),
          amount: amountOf(b, tx),
        };
      case "failed":
      case "reversed":
        return { state: "failed", code, reason: `transaction ${tx.status}` };
      default:
        return { state: "pending", reason: `transaction ${String(tx.status ?? "status unknown")}` };
    }
  }
  if (code === "099") return { state: "pending", reason: description };
  // 014: this request id was already sent (our own retry): only requery can tell its fate.
  if (code === "014") return { state: "pending", reason: "request id already used; requery decides" };
  const failed = kind === "pay" ? PAY_FAILED_CODES : REQUERY_FAILED_CODES;
  if (failed.has(code)) return { state: "failed", code, reason: description };
  return { state: "pending", reason: `${kind} answered ${code || "(no code)"}: ${description}; asked again later` };
}

export class VtpassClient {
  constructor(private readonly config: BillerConfig) {}

  private async call(method: "GET" | "POST", path: string, body?: unknown): Promise<unknown> {
    const headers: Record<string, string> = { "api-key": this.config.apiKey };
    if (method === "POST") {
      headers["secret-key"] = this.config.secretKey;
      headers["content-type"] = "application/json";
    } else {
      headers["public-key"] = this.config.publicKey;
    }
    const started = performance.now();
    const operation = path.split("?")[0]!.replace(/^\/api\//, "");
    let ok = false;
    try {
      const res = await fetch(`${this.config.baseUrl}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.config.timeoutMs),
      });
      const text = await res.text();
      try {
        const parsed: unknown = JSON.parse(text);
        ok = res.ok;
        return parsed;
      } catch {
        return undefined;
      }
    } finally {
      this.config.observe?.(operation, (performance.now() - started) / 1000, ok);
    }
  }

  /** Pays a bill. Any failure to get a defined answer is `pending`: requery decides. */
  async pay(req: {
    requestId: string;
    serviceID: string;
    billersCode: string;
    variationCode?: string;
    amount: number;
    phone: string;
    /** An international bill's fields, as the biller's pay call names them. */
    international?: { country_code: string; operator_id: string; product_type_id: string; email: string };
  }): Promise<VendResult> {
    try {
      return vendResult(
        await this.call("POST", "/api/pay", {
          request_id: req.requestId,
          serviceID: req.serviceID,
          billersCode: req.billersCode,
          variation_code: req.variationCode,
          amount: req.amount,
          phone: req.phone,
          ...req.international,
        }),
        "pay",
      );
    } catch (err) {
      return { state: "pending", reason: `no answer: ${(err as Error).message}` };
    }
  }

  async requery(requestId: string): Promise<VendResult> {
    try {
      const body = (await this.call("POST", "/api/requery", { request_id: requestId })) as { code?: string } | undefined;
      // 015: no record of the request. Not a failure: a pay that timed out may still land.
      // The caller sends the pay again with the same request id (014 if it did arrive).
      if (body?.code === "015") return { state: "pending", reason: "the biller has no record of the request", unknownRequest: true };
      return vendResult(body, "requery");
    } catch (err) {
      return { state: "pending", reason: `no answer: ${(err as Error).message}` };
    }
  }

  /** Checks a meter, smartcard, profile or account number. Throws when the biller cannot answer. */
  async verify(req: { serviceID: string; billersCode: string; type?: string }): Promise<VerifyResult> {
    const body = (await this.call("POST", "/api/merchant-verify", req)) as
      | { code?: string; response_description?: string; content?: { error?: string; Customer_Name?: string } }
      | undefined;
    if (body?.code !== "000") throw new Error(`merchant-verify answered ${body?.code ?? "nothing"}: ${body?.response_description ?? ""}`);
    if (body.content?.error) return { ok: false, reason: body.content.error };
    return { ok: true, customerName: body.content?.Customer_Name ?? null };
  }

  /** A product's plans; throws when the biller cannot answer or has no such product. */
  async variations(serviceID: string): Promise<Variation[]> {
    const body = (await this.call("GET", `/api/service-variations?serviceID=${encodeURIComponent(serviceID)}`)) as
      | { code?: string; content?: { variations?: Variation[] } }
      | undefined;
    if (body?.code === "012") throw new Error(`no variations for ${serviceID}: the biller has no such product`);
    if (!body?.content?.variations) throw new Error(`no variations for ${serviceID}`);
    return body.content.variations;
  }

  /** The biller's products in one of its categories (its identifiers: airtime, data, electricity-bill, ...), with their limits in NGN. */
  async services(identifier: string): Promise<BillerService[]> {
    const body = (await this.call("GET", `/api/services?identifier=${encodeURIComponent(identifier)}`)) as
      | { content?: Array<Record<string, unknown>> }
      | undefined;
    if (!Array.isArray(body?.content)) throw new Error(`no services for ${identifier}`);
    const limit = (v: unknown) => (v === undefined || v === null || v === "" || !Number.isFinite(Number(v)) ? null : Number(v));
    return body.content.map((x) => ({
      serviceID: String(x.serviceID),
      name: String(x.name),
      // The upstream spells it "minimium_amount"; accept the plain spelling too.
      minimumAmount: limit(x.minimium_amount ?? x.minimum_amount),
      maximumAmount: limit(x.maximum_amount),
    }));
  }

  /** Whether the biller answers an authenticated read (its category list); throws otherwise. */
  async ping(): Promise<void> {
    const body = (await this.call("GET", "/api/service-categories")) as { response_description?: string } | undefined;
    if (body?.response_description !== "000") throw new Error(`the biller answered ${body?.response_description ?? "nothing readable"}`);
  }

  async internationalCountries(): Promise<Country[]> {
    const body = (await this.call("GET", "/api/get-international-airtime-countries")) as { content?: { countries?: Array<Record<string, unknown>> } } | undefined;
    if (!Array.isArray(body?.content?.countries)) throw new Error("no international countries");
    return body.content.countries.map((c) => ({ code: String(c.code), name: String(c.name), currency: String(c.currency), prefix: String(c.prefix) }));
  }

  /** A country's international product types (1 Mobile Top Up, 4 Mobile Data, ...). */
  async internationalProductTypes(countryCode: string): Promise<ProductType[]> {
    const body = (await this.call("GET", `/api/get-international-airtime-product-types?code=${encodeURIComponent(countryCode)}`)) as { content?: Array<Record<string, unknown>> } | undefined;
    if (!Array.isArray(body?.content)) throw new Error(`no product types for ${countryCode}`);
    return body.content.map((t) => ({ product_type_id: String(t.product_type_id), name: String(t.name) }));
  }

  async internationalOperators(countryCode: string, productTypeId: string): Promise<Operator[]> {
    const query = `code=${encodeURIComponent(countryCode)}&product_type_id=${encodeURIComponent(productTypeId)}`;
    const body = (await this.call("GET", `/api/get-international-airtime-operators?${query}`)) as { content?: Array<Record<string, unknown>> } | undefined;
    if (!Array.isArray(body?.content)) throw new Error(`no operators for ${countryCode}`);
    return body.content.map((o) => ({ operator_id: String(o.operator_id), name: String(o.name) }));
  }

  /** An international operator's plans, each with its rate in NGN per unit of the local currency. */
  async internationalVariations(operatorId: string, productTypeId: string): Promise<InternationalVariation[]> {
    const query = `serviceID=${INTERNATIONAL_SERVICE_ID}&operator_id=${encodeURIComponent(operatorId)}&product_type_id=${encodeURIComponent(productTypeId)}`;
    const body = (await this.call("GET", `/api/service-variations?${query}`)) as { content?: { variations?: Array<Record<string, unknown>> } } | undefined;
    if (!Array.isArray(body?.content?.variations)) throw new Error(`no plans for operator ${operatorId}`);
    return body.content.variations.map((v) => ({
      variation_code: String(v.variation_code),
      name: String(v.name),
      variation_amount: String(v.variation_amount),
      fixedPrice: String(v.fixedPrice),
      variation_rate: String(v.variation_rate),
    }));
  }
}
