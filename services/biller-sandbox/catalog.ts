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
