/**
 * VTpass's HTTP API as vtpass.com/documentation publishes it, behind the service's
 * BillerApi. Authentication (authentication page): GET calls send `api-key` and
 * `public-key`, POST calls `api-key` and `secret-key`. Every call has a timeout; any answer
 * the API does not define (a timeout, no answer, an unlisted code, a body that is not JSON)
 * is reported as `pending`, to be settled by requery, never guessed. The answers are read
 * in answers.ts.
 */
import type { BillerApi, Country, Operator, PayRequest, ProductType, VendResult, VerifyResult } from "../upstream.ts";
import { INTERNATIONAL_SERVICE_ID, UnknownProduct } from "../upstream.ts";
import { readServices, readTransactionAnswer, readVariations, readVerifyAnswer, toInternationalVariation, toVariation } from "./answers.ts";
import { newRequestId } from "./request-id.ts";

export interface VtpassConfig {
  baseUrl: string;
  apiKey: string;
  secretKey: string;
  publicKey: string;
  timeoutMs: number;
  /** Told of every call: its operation (the path's last part), its time and whether a JSON answer came. */
  observe?: (operation: string, seconds: number, ok: boolean) => void;
}

export class VtpassClient implements BillerApi {
  constructor(private readonly config: VtpassConfig) {}

  newRequestId(now?: Date): string {
    return newRequestId(now);
  }

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

  async pay(req: PayRequest): Promise<VendResult> {
    try {
      return readTransactionAnswer(
        await this.call("POST", "/api/pay", {
          request_id: req.requestId,
          serviceID: req.serviceID,
          billersCode: req.billersCode,
          variation_code: req.variationCode,
          amount: req.amount,
          phone: req.phone,
          subscription_type: req.subscriptionType,
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
      return readTransactionAnswer(await this.call("POST", "/api/requery", { request_id: requestId }), "requery");
    } catch (err) {
      return { state: "pending", reason: `no answer: ${(err as Error).message}` };
    }
  }

  async verify(req: { serviceID: string; billersCode: string; type?: string }): Promise<VerifyResult> {
    return readVerifyAnswer(await this.call("POST", "/api/merchant-verify", req));
  }

  async variations(serviceID: string) {
    const body = await this.call("GET", `/api/service-variations?serviceID=${encodeURIComponent(serviceID)}`);
    const list = readVariations(body);
    if (!list) {
      // 012: "PRODUCT DOES NOT EXIST" (response-codes page).
      if ((body as { code?: unknown } | undefined)?.code === "012") throw new UnknownProduct(`the biller has no product "${serviceID}"`);
      throw new Error(`no variations for ${serviceID}`);
    }
    return list.map(toVariation);
  }

  async services(identifier: string) {
    const services = readServices(await this.call("GET", `/api/services?identifier=${encodeURIComponent(identifier)}`));
    if (!services) throw new Error(`no services for ${identifier}`);
    return services;
  }

  /** The catalogue endpoints answer "000" in response_description (there is no `code`). */
  async ping(): Promise<void> {
    const body = (await this.call("GET", "/api/service-categories")) as { response_description?: string } | undefined;
    if (body?.response_description !== "000") throw new Error(`the biller answered ${body?.response_description ?? "nothing readable"}`);
  }

  async internationalCountries(): Promise<Country[]> {
    const body = (await this.call("GET", "/api/get-international-airtime-countries")) as { content?: { countries?: Array<Record<string, unknown>> } } | undefined;
    if (!Array.isArray(body?.content?.countries)) throw new Error("no international countries");
    return body.content.countries.map((c) => ({ code: String(c.code), name: String(c.name), currency: String(c.currency), prefix: String(c.prefix) }));
  }

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

  async internationalVariations(operatorId: string, productTypeId: string) {
    const query = `serviceID=${INTERNATIONAL_SERVICE_ID}&operator_id=${encodeURIComponent(operatorId)}&product_type_id=${encodeURIComponent(productTypeId)}`;
    const body = await this.call("GET", `/api/service-variations?${query}`);
    const list = readVariations(body);
    if (!list) throw new Error(`no plans for operator ${operatorId}`);
    const currency = (body as { content?: { currency?: unknown } }).content?.currency;
    return { currency: typeof currency === "string" && currency !== "" ? currency : null, plans: list.map(toInternationalVariation) };
  }
}
