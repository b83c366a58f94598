/**
 * The sandbox biller's catalogue: categories, services and variations in the upstream's
 * (VTpass-style) shape, and the sandbox conventions that decide each outcome.
 */

export interface SandboxVariation {
  variation_code: string;
  name: string;
  variation_amount: string;
  fixedPrice: "Yes" | "No";
}

export interface SandboxService {
  serviceID: string;
  name: string;
  category: "airtime" | "data" | "electricity-bill" | "tv-subscription" | "education" | "bank-deposit";
  minimum_amount: number;
  maximum_amount: number;
  /** Verified with merchant-verify before paying. */
  verifies: boolean;
  variations: SandboxVariation[];
  /** What a successful vend hands back (electricity token, exam PIN), if anything. */
  issues?: "electricity-token" | "exam-pin";
}

const fixed = (code: string, name: string, amount: number): SandboxVariation => ({
  variation_code: code,
  name,
  variation_amount: amount.toFixed(2),
  fixedPrice: "Yes",
});
const open = (code: string, name: string): SandboxVariation => ({
  variation_code: code,
  name,
  variation_amount: "0.00",
  fixedPrice: "No",
});

const airtime = (serviceID: string, name: string): SandboxService => ({
  serviceID,
  name: `${name} Airtime VTU`,
  category: "airtime",
  minimum_amount: 50,
  maximum_amount: 50_000,
  verifies: false,
  variations: [],
});
const data = (serviceID: string, name: string): SandboxService => ({
  serviceID,
  name: `${name} Data`,
  category: "data",
  minimum_amount: 50,
  maximum_amount: 100_000,
  verifies: false,
  variations: [fixed(`${serviceID}-100`, "100MB - 24 hrs", 100), fixed(`${serviceID}-1000`, "1.5GB - 30 days", 1000)],
});
const disco = (serviceID: string, name: string): SandboxService => ({
  serviceID,
  name,
  category: "electricity-bill",
  minimum_amount: 500,
  maximum_amount: 200_000,
  verifies: true,
  variations: [open("prepaid", "Prepaid"), open("postpaid", "Postpaid")],
  issues: "electricity-token",
});

export const SANDBOX_CATEGORIES = [
  { identifier: "airtime", name: "Airtime Recharge" },
  { identifier: "data", name: "Data Services" },
  { identifier: "electricity-bill", name: "Electricity Bill" },
  { identifier: "tv-subscription", name: "TV Subscription" },
  { identifier: "education", name: "Education" },
  { identifier: "bank-deposit", name: "Bank Deposit" },
];

export const SANDBOX_SERVICES: SandboxService[] = [
  // International airtime and data: plans come per operator and product type (INTERNATIONAL below).
  { serviceID: "foreign-airtime", name: "International Airtime/Data", category: "airtime", minimum_amount: 100, maximum_amount: 200_000, verifies: false, variations: [] },
  airtime("mtn", "MTN"),
  airtime("glo", "GLO"),
  airtime("airtel", "Airtel"),
  airtime("etisalat", "9mobile"),
  data("mtn-data", "MTN"),
  data("glo-data", "GLO"),
  data("airtel-data", "Airtel"),
  data("etisalat-data", "9mobile"),
  disco("ikeja-electric", "Ikeja Electric"),
  disco("eko-electric", "Eko Electric"),
  disco("abuja-electric", "Abuja Electric"),
  {
    serviceID: "dstv",
    name: "DSTV Subscription",
    category: "tv-subscription",
    minimum_amount: 1,
    maximum_amount: 500_000,
    verifies: true,
    variations: [fixed("dstv-padi", "DStv Padi", 4400), fixed("dstv-yanga", "DStv Yanga", 6000)],
  },
  {
    serviceID: "gotv",
    name: "GOtv Subscription",
    category: "tv-subscription",
    minimum_amount: 1,
    maximum_amount: 500_000,
    verifies: true,
    variations: [fixed("gotv-smallie", "GOtv Smallie", 1900)],
  },
  {
    serviceID: "showmax",
    name: "Showmax",
    category: "tv-subscription",
    minimum_amount: 1,
    maximum_amount: 500_000,
    verifies: false,
    variations: [fixed("showmax-mobile", "Showmax Mobile", 1600)],
  },
  {
    serviceID: "waec",
    name: "WAEC Result Checker PIN",
    category: "education",
    minimum_amount: 1,
    maximum_amount: 100_000,
    verifies: false,
    variations: [fixed("waecdirect", "WAEC Result Checker", 3500)],
    issues: "exam-pin",
  },
  {
    serviceID: "jamb",
    name: "JAMB PIN Vending",
    category: "education",
    minimum_amount: 1,
    maximum_amount: 100_000,
    verifies: true,
    variations: [fixed("utme", "UTME", 6200), fixed("de", "Direct Entry", 6200)],
    issues: "exam-pin",
  },
  {
    serviceID: "bank-deposit",
    name: "Bank Deposit",
    category: "bank-deposit",
    minimum_amount: 100,
    maximum_amount: 1_000_000,
    verifies: true,
    variations: [open("access", "Access Bank"), open("gtb", "Guaranty Trust Bank"), open("zenith", "Zenith Bank")],
  },
];

/** Numbers that pass merchant-verify, per kind of account. */
export const VERIFIABLE = {
  prepaidMeter: "1111111111111",
  postpaidMeter: "1010101010101",
  smartcard: "1212121212",
  jambProfile: "0123456789",
  bankAccount: "0123456789",
};

/**
 * Outcome of a vend, decided by the phone number (airtime and data) as the upstream's
 * sandbox does; other services deliver once their number has verified.
 */
export type SandboxOutcome = "success" | "pending" | "pending-then-reversed" | "unexpected" | "no-answer" | "timeout" | "fail";

export const SANDBOX_PHONES: Record<string, SandboxOutcome> = {
  "08011111111": "success",
  "201000000000": "pending",
  "202000000000": "pending-then-reversed",
  "500000000000": "unexpected",
  "400000000000": "no-answer",
  "300000000000": "timeout",
};

export function outcomeFor(phone: string): SandboxOutcome {
  return SANDBOX_PHONES[phone] ?? "fail";
}

/** An international operator's plan: the upstream's variation plus its rate, NGN per unit of the local currency. */
export interface SandboxInternationalVariation extends SandboxVariation {
  variation_rate: string;
}

export interface SandboxCountry {
  code: string;
  name: string;
  currency: string;
  prefix: string;
  /** NGN per unit of the currency. */
  rate: number;
  /** product_type_id => operators, each with its plans. */
  products: Record<number, Array<{ operator_id: string; name: string; variations: SandboxInternationalVariation[] }>>;
}

export const INTERNATIONAL_PRODUCT_TYPES: Record<number, string> = { 1: "Mobile Top Up", 4: "Mobile Data" };

/** An open-amount top-up: the caller names the local amount. */
const topUp = (operatorId: string, rate: number): SandboxInternationalVariation => ({
  variation_code: `${operatorId}-topup`,
  name: "Top up (any amount)",
  variation_amount: "0.00",
  fixedPrice: "No",
  variation_rate: rate.toFixed(2),
});
/** A data bundle at a fixed local price; its NGN price is that at the rate. */
const bundle = (operatorId: string, name: string, local: number, rate: number): SandboxInternationalVariation => ({
  variation_code: `${operatorId}-${name.toLowerCase().replace(/[^a-z0-9]+/g, "")}`,
  name: `${name} (${local} local)`,
  variation_amount: (local * rate).toFixed(2),
  fixedPrice: "Yes",
  variation_rate: rate.toFixed(2),
});

export const INTERNATIONAL: SandboxCountry[] = [
  {
    code: "GH",
    name: "Ghana",
    currency: "GHS",
    prefix: "233",
    rate: 105.5,
    products: {
      1: [
        { operator_id: "1", name: "MTN Ghana", variations: [topUp("1", 105.5)] },
        { operator_id: "2", name: "AirtelTigo Ghana", variations: [topUp("2", 105.5)] },
      ],
      4: [{ operator_id: "1", name: "MTN Ghana", variations: [bundle("1", "1GB 30 days", 10, 105.5), bundle("1", "5GB 30 days", 40, 105.5)] }],
    },
  },
  {
    code: "KE",
    name: "Kenya",
    currency: "KES",
    prefix: "254",
    rate: 11.8,
    products: { 1: [{ operator_id: "5", name: "Safaricom Kenya", variations: [topUp("5", 11.8)] }] },
  },
  {
    code: "US",
    name: "United States",
    currency: "USD",
    prefix: "1",
    rate: 1550,
    products: { 1: [{ operator_id: "9", name: "AT&T United States", variations: [topUp("9", 1550)] }] },
  },
];

/** An operator's plans for a product type, wherever it is offered. */
export function internationalPlans(operatorId: string, productTypeId: number) {
  for (const country of INTERNATIONAL) {
    const operator = country.products[productTypeId]?.find((o) => o.operator_id === operatorId);
    if (operator) return { country, operator };
  }
  return undefined;
}
