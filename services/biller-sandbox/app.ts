/**
 * A local biller sandbox speaking the upstream's (VTpass-style) HTTP API: POST /api/pay,
 * /api/merchant-verify and /api/requery; GET /api/service-categories, /api/services and
 * /api/service-variations; and the international airtime API (countries, product types,
 * operators, and foreign-airtime plans per operator with their rate). It keeps transactions in
 * memory and follows the sandbox conventions in catalog.ts, including answers that a
 * client must treat as pending: an unexpected body, no answer at all, and a late answer.
 * As the upstream does, a fixed-price plan is charged at its own price whatever amount is
 * sent, and the answer reports the amount charged.
 *
 * Sandbox only (no upstream counterpart): POST /sandbox/variations/{serviceID}/{code} with
 * `{variation_amount}` and the secret key changes a plan's price, as a biller's price
 * change does.
 */
import { randomInt } from "node:crypto";
import { Hono, type Context } from "hono";
import {
  INTERNATIONAL,
  INTERNATIONAL_PRODUCT_TYPES,
  internationalPlans,
  outcomeFor,
  SANDBOX_CATEGORIES,
  SANDBOX_SERVICES,
  VERIFIABLE,
  type SandboxOutcome,
  type SandboxService,
} from "./catalog.ts";

export interface SandboxOptions {
  apiKey: string;
  secretKey: string;
  publicKey: string;
  /** How long a "timeout" vend takes to answer; longer than the client's timeout. */
  slowAnswerMs?: number;
  /** Requeries a pending transaction answers "pending" before it resolves. */
  pendingRequeries?: number;
}

interface Transaction {
  requestId: string;
  service: SandboxService;
  billersCode: string;
  variationCode: string | undefined;
  amount: number;
  phone: string;
  outcome: SandboxOutcome;
  status: "delivered" | "pending" | "failed" | "reversed";
  requeries: number;
  transactionId: string;
  purchasedCode: string;
  units: string | null;
}

const REQUEST_ID = /^\d{12}[A-Za-z0-9_-]{1,88}$/;
const INTERNATIONAL_SERVICE = "foreign-airtime";

export function billerSandboxApp(options: SandboxOptions) {
  const app = new Hono();
  const transactions = new Map<string, Transaction>();
  // Each sandbox has its own copy of the catalogue, so a price change stays in it.
  const services: SandboxService[] = structuredClone(SANDBOX_SERVICES);
  const pendingRequeries = options.pendingRequeries ?? 1;
  const slowAnswerMs = options.slowAnswerMs ?? 5_000;

  const answer = (c: Context, code: string, description: string, extra: Record<string, unknown> = {}) =>
    c.json({ code, response_description: description, ...extra });

  const authorised = (c: Context, write: boolean) =>
    c.req.header("api-key") === options.apiKey &&
    (write ? c.req.header("secret-key") === options.secretKey : c.req.header("public-key") === options.publicKey);

  function transactionBody(t: Transaction) {
    const base = {
      code: t.status === "failed" ? "016" : t.status === "reversed" ? "040" : "000",
      response_description:
        t.status === "delivered"
          ? "TRANSACTION SUCCESSFUL"
          : t.status === "pending"
            ? "TRANSACTION PROCESSING"
            : t.status === "reversed"
              ? "REVERSAL"
              : "TRANSACTION FAILED",
      requestId: t.requestId,
      amount: t.amount.toFixed(2),
      content: {
        transactions: {
          status: t.status,
          product_name: t.service.name,
          unique_element: t.billersCode,
          amount: t.amount,
          transactionId: t.transactionId,
          type: t.service.category,
        },
      },
    };
    if (t.status !== "delivered" || !t.service.issues) return base;
    if (t.service.issues === "electricity-token") {
      // Discos disagree on the field: Ikeja sends purchased_code, Eko mainToken, others token.
      if (t.service.serviceID === "eko-electric") return { ...base, mainToken: t.purchasedCode, mainTokenUnits: t.units };
      if (t.service.serviceID === "ikeja-electric") return { ...base, purchased_code: `Token : ${t.purchasedCode}`, units: t.units };
      return { ...base, token: t.purchasedCode, units: t.units };
    }
    return { ...base, purchased_code: `Pin : ${t.purchasedCode}` };
  }

  function verifies(service: SandboxService, billersCode: string, type?: string): boolean {
    switch (service.category) {
      case "electricity-bill":
        return type === "postpaid" ? billersCode === VERIFIABLE.postpaidMeter : billersCode === VERIFIABLE.prepaidMeter;
      case "tv-subscription":
        return billersCode === VERIFIABLE.smartcard;
      case "education":
        return billersCode === VERIFIABLE.jambProfile;
      case "bank-deposit":
        return billersCode === VERIFIABLE.bankAccount;
      default:
        return true;
    }
  }

  app.post("/api/merchant-verify", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const body = (await c.req.json().catch(() => ({}))) as Record<string, string>;
    const service = services.find((s) => s.serviceID === body.serviceID);
    if (!service) return answer(c, "012", "PRODUCT DOES NOT EXIST");
    if (!body.billersCode) return answer(c, "011", "INVALID ARGUMENTS");
    if (!service.verifies || !verifies(service, body.billersCode, body.type)) {
      return c.json({ code: "000", content: { error: `This number is not a valid ${service.name} account. Please check and try again` } });
    }
    return c.json({
      code: "000",
      content: { Customer_Name: "TEST CUSTOMER", Address: "1 Sandbox Road", Meter_Number: body.billersCode, Can_Vend: "yes" },
    });
  });

  app.post("/api/pay", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const body = (await c.req.json().catch(() => ({}))) as Record<string, unknown>;
    const requestId = String(body.request_id ?? "");
    if (!REQUEST_ID.test(requestId)) return answer(c, "085", "IMPROPER REQUEST ID");
    if (transactions.has(requestId)) return answer(c, "014", "REQUEST ID ALREADY EXIST");
    const service = services.find((s) => s.serviceID === body.serviceID);
    if (!service) return answer(c, "012", "PRODUCT DOES NOT EXIST");
    const billersCode = String(body.billersCode ?? "");
    const phone = String(body.phone ?? "");
    if (!billersCode || !phone || !Number.isFinite(Number(body.amount))) return answer(c, "011", "INVALID ARGUMENTS");
    const variationCode = body.variation_code === undefined ? undefined : String(body.variation_code);
    let amount = Number(body.amount);
    if (service.serviceID === INTERNATIONAL_SERVICE) {
      // The upstream's international fields: the operator must be offered in that country for that product type.
      const found = internationalPlans(String(body.operator_id ?? ""), Number(body.product_type_id));
      if (!found || found.country.code !== body.country_code || typeof body.email !== "string" || !body.email.includes("@")) {
        return answer(c, "011", "INVALID ARGUMENTS");
      }
      const variation = found.operator.variations.find((v) => v.variation_code === variationCode);
      if (!variation) return answer(c, "010", "VARIATION CODE DOES NOT EXIST");
      if (variation.fixedPrice === "Yes") amount = Number(variation.variation_amount);
    } else if (service.variations.length > 0) {
      const variation = service.variations.find((v) => v.variation_code === variationCode);
      if (!variation) return answer(c, "010", "VARIATION CODE DOES NOT EXIST");
      if (variation.fixedPrice === "Yes") amount = Number(variation.variation_amount);
    }
    if (amount < service.minimum_amount) return answer(c, "013", "BELOW MINIMUM AMOUNT ALLOWED");
    if (amount > service.maximum_amount) return answer(c, "017", "ABOVE MAXIMUM AMOUNT ALLOWED");

    // Services without an account to verify follow the phone-number conventions; the
    // others deliver once their number verifies.
    const outcome: SandboxOutcome = !service.verifies
        ? outcomeFor(phone)
        : verifies(service, billersCode, variationCode)
          ? "success"
          : "fail";
    const t: Transaction = {
      requestId,
      service,
      billersCode,
      variationCode,
      amount,
      phone,
      outcome,
      status: outcome === "fail" ? "failed" : outcome.startsWith("pending") ? "pending" : "delivered",
      requeries: 0,
      transactionId: `${Date.now()}${randomInt(1_000_000)}`,
      purchasedCode: String(randomInt(10 ** 9, 10 ** 10 - 1)) + String(randomInt(10 ** 9, 10 ** 10 - 1)),
      units: service.issues === "electricity-token" ? (amount / 100).toFixed(1) : null,
    };
    transactions.set(requestId, t);

    switch (outcome) {
      case "pending":
      case "pending-then-reversed":
        return c.json({ ...transactionBody(t), code: "099", response_description: "TRANSACTION IS PROCESSING" });
      case "unexpected":
        return c.text("<html><body>Bad Gateway</body></html>", 200);
      case "no-answer": {
        // Close the connection without answering.
        const incoming = (c.env as { incoming?: { socket?: { destroy(): void } } } | undefined)?.incoming;
        incoming?.socket?.destroy();
        return new Response(null, { status: 204 });
      }
      case "timeout":
        await new Promise((r) => setTimeout(r, slowAnswerMs));
        return c.json(transactionBody(t));
      default:
        return c.json(transactionBody(t));
    }
  });

  app.post("/api/requery", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const body = (await c.req.json().catch(() => ({}))) as Record<string, unknown>;
    const t = transactions.get(String(body.request_id ?? ""));
    if (!t) return answer(c, "015", "INVALID REQUEST ID");
    if (t.status === "pending") {
      t.requeries += 1;
      if (t.requeries > pendingRequeries) t.status = t.outcome === "pending-then-reversed" ? "reversed" : "delivered";
    }
    return c.json(transactionBody(t));
  });

  app.get("/api/service-categories", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    return c.json({ response_description: "000", content: SANDBOX_CATEGORIES });
  });

  app.get("/api/services", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const identifier = c.req.query("identifier");
    const content = services.filter((s) => s.category === identifier).map((s) => ({
      serviceID: s.serviceID,
      name: s.name,
      minimium_amount: String(s.minimum_amount),
      maximum_amount: s.maximum_amount,
    }));
    return c.json({ response_description: "000", content });
  });

  app.get("/api/service-variations", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    if (c.req.query("serviceID") === INTERNATIONAL_SERVICE) {
      // International plans are per operator and product type.
      const found = internationalPlans(c.req.query("operator_id") ?? "", Number(c.req.query("product_type_id")));
      if (!found) return answer(c, "011", "INVALID ARGUMENTS");
      return c.json({
        response_description: "000",
        content: { ServiceName: found.operator.name, serviceID: INTERNATIONAL_SERVICE, convinience_fee: "0 %", currency: found.country.currency, variations: found.operator.variations },
      });
    }
    const service = services.find((s) => s.serviceID === c.req.query("serviceID"));
    if (!service) return answer(c, "012", "PRODUCT DOES NOT EXIST");
    return c.json({
      response_description: "000",
      content: { ServiceName: service.name, serviceID: service.serviceID, convinience_fee: "0 %", variations: service.variations },
    });
  });

  app.post("/sandbox/variations/:serviceID/:code", async (c) => {
    if (!authorised(c, true)) return answer(c, "087", "INVALID CREDENTIALS");
    const variation = services.find((s) => s.serviceID === c.req.param("serviceID"))?.variations.find((v) => v.variation_code === c.req.param("code"));
    const price = Number(((await c.req.json().catch(() => ({}))) as { variation_amount?: unknown }).variation_amount);
    if (!variation || !Number.isFinite(price) || price <= 0) return answer(c, "011", "INVALID ARGUMENTS");
    variation.variation_amount = price.toFixed(2);
    return c.json({ code: "000", content: variation });
  });

  app.get("/api/get-international-airtime-countries", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const countries = INTERNATIONAL.map(({ code, name, currency, prefix }) => ({ code, flag: `${new URL(c.req.url).origin}/flags/${code}.png`, name, currency, prefix }));
    return c.json({ response_description: "000", content: { countries } });
  });

  app.get("/api/get-international-airtime-product-types", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const country = INTERNATIONAL.find((x) => x.code === c.req.query("code"));
    if (!country) return answer(c, "011", "INVALID ARGUMENTS");
    const content = Object.keys(country.products).map((id) => ({ product_type_id: Number(id), name: INTERNATIONAL_PRODUCT_TYPES[Number(id)] }));
    return c.json({ response_description: "000", content });
  });

  app.get("/api/get-international-airtime-operators", (c) => {
    if (!authorised(c, false)) return answer(c, "087", "INVALID CREDENTIALS");
    const operators = INTERNATIONAL.find((x) => x.code === c.req.query("code"))?.products[Number(c.req.query("product_type_id"))];
    if (!operators) return answer(c, "011", "INVALID ARGUMENTS");
    return c.json({ response_description: "000", content: operators.map(({ operator_id, name }) => ({ operator_id, name, operator_image: "" })) });
  });

  return app;
}
