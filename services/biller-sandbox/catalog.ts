/**
 * The sandbox biller's catalogue and test numbers, taken from VTpass's published pages
 * (vtpass.com/documentation; each list names its page). Plan lists are subsets of the
 * documented ones, with their documented codes, names and prices, quirks included (MTN
 * data lists one code twice at two prices; bank plans are "fixed" at 0.00; JAMB's list
 * comes under `variations` only, the bank list under the misspelt `varations` only). Where
 * a page is silent the choice is marked "not documented" and is the safe one.
 */

export interface SandboxVariation {
  variation_code: string;
  name: string;
  variation_amount: string;
  fixedPrice: "Yes" | "No";
}

/** How a product's pay is outcome-decided and what it hands back. */
export type Vends = "airtime" | "data" | "electricity" | "cable" | "startimes" | "showmax" | "waec" | "jamb" | "bank" | "international";

export interface SandboxService {
  serviceID: string;
  name: string;
  /** The services page's identifier (category). */
  category: "airtime" | "data" | "electricity-bill" | "tv-subscription" | "education" | "bank-deposit";
  /** services page: `minimium_amount` (sic) and `maximum_amount`, in NGN. */
  minimum_amount: number;
  maximum_amount: number;
  vends: Vends;
  variations: SandboxVariation[];
  /** Which key the plans come under in service-variations (the pages differ; current ones send both). */
  variationsKey: "both" | "variations" | "varations";
  /** The transaction record's `type` and `product_name`, as the pay samples show them. */
  recordType: string;
  /** The commission rate (percent) the pay samples show. */
  commissionRate: string;
  /** A convenience fee the biller adds on each bill, in NGN (Showmax's sample adds 100). */
  convenienceFee?: number;
}

const fixed = (code: string, name: string, amount: number): SandboxVariation => ({ variation_code: code, name, variation_amount: amount.toFixed(2), fixedPrice: "Yes" });
const open = (code: string, name: string): SandboxVariation => ({ variation_code: code, name, variation_amount: "0.00", fixedPrice: "No" });

/** The service-categories page's answer (current version). */
export const SANDBOX_CATEGORIES = [
  { identifier: "airtime", name: "Airtime Recharge" },
  { identifier: "data", name: "Data Services" },
  { identifier: "tv-subscription", name: "TV Subscription" },
  { identifier: "electricity-bill", name: "Electricity Bill" },
  { identifier: "education", name: "Education" },
  { identifier: "bank-deposit", name: "Bank Deposit" },
  { identifier: "other-services", name: "Other Merchants/Services" },
  { identifier: "insurance", name: "Insurance" },
];

// Airtime pages (mtn-airtime-vtu-api, glo-, airtel, 9mobile): no plans; the limits are not documented.
const airtime = (serviceID: string, name: string): SandboxService => ({
  serviceID,
  name: `${name} Airtime VTU`,
  category: "airtime",
  minimum_amount: 50,
  maximum_amount: 50_000,
  vends: "airtime",
  variations: [],
  variationsKey: "both",
  recordType: "Airtime Recharge",
  commissionRate: "3.50",
});

/** mtn-data page (current): its documented codes and prices, including `mtn-xtratalk-300` listed twice at 300 and 200. */
const MTN_DATA = [
  fixed("mtn-10mb-100", "N100 100MB - 24 hrs", 100),
  fixed("mtn-50mb-200", "N200 200MB - 2 days", 200),
  fixed("mtn-100mb-1000", "N1000 1.5GB - 30 days", 1000),
  fixed("mtn-20hrs-1500", "N1500 6GB - 7 days", 1500),
  fixed("mtn-500mb-2000", "N2000 4.5GB - 30 days", 2000),
  fixed("mtn-3gb-2500", "N2500 6GB - 30 days", 2500),
  fixed("mtn-xtratalk-300", "MTN N300 Xtratalk Weekly Bundle", 300),
  fixed("mtn-xtratalk-300", "MTN N200 Xtratalk - 3 days", 200),
];
/** glo-data page: codes glo100, glo200, ... */
const GLO_DATA = [fixed("glo100", "Glo Data N100 - 105MB - 2 day", 100), fixed("glo200", "Glo Data N200 - 350MB - 4 days", 200), fixed("glo1000", "Glo Data N1000 - 2.5GB - 30 days", 1000)];

const data = (serviceID: string, name: string, variations: SandboxVariation[], maximum: number): SandboxService => ({
  serviceID,
  name: `${name} Data`,
  category: "data",
  minimum_amount: 1, // services page: "minimium_amount": "1"
  maximum_amount: maximum,
  vends: "data",
  variations,
  variationsKey: "both",
  recordType: "Data Services",
  commissionRate: "4.00",
});

/** IKEDC page (the other discos' pages share its structure): meter types as plans; limits not documented. */
const disco = (serviceID: string, name: string): SandboxService => ({
  serviceID,
  name,
  category: "electricity-bill",
  minimum_amount: 500,
  maximum_amount: 200_000,
  vends: "electricity",
  variations: [open("prepaid", "Prepaid"), open("postpaid", "Postpaid")],
  variationsKey: "both",
  recordType: "Electricity Bill",
  commissionRate: "1.50",
});

/** A TV product (its page's bouquets; limits not documented). */
const tv = (serviceID: string, name: string, vends: Vends, commissionRate: string, variations: SandboxVariation[]): SandboxService => ({
  serviceID,
  name,
  category: "tv-subscription",
  minimum_amount: 1,
  maximum_amount: 1_000_000,
  vends,
  variations,
  variationsKey: "both",
  recordType: "TV Subscription",
  commissionRate,
});

export const SANDBOX_SERVICES: SandboxService[] = [
  airtime("mtn", "MTN"),
  airtime("glo", "GLO"),
  airtime("airtel", "Airtel"),
  airtime("etisalat", "9mobile"),
  // foreign-airtime page: plans come per operator and product type (INTERNATIONAL below); limits not documented.
  {
    serviceID: "foreign-airtime",
    name: "International Airtime",
    category: "airtime",
    minimum_amount: 1,
    maximum_amount: 500_000,
    vends: "international",
    variations: [],
    variationsKey: "variations",
    recordType: "Airtime Recharge",
    commissionRate: "4.00",
  },
  data("mtn-data", "MTN", MTN_DATA, 1_000_000),
  data("glo-data", "GLO", GLO_DATA, 200_000),
  disco("ikeja-electric", "Ikeja Electric Payment - IKEDC"),
  disco("eko-electric", "Eko Electric Payment - EKEDC"),
  disco("abuja-electric", "Abuja Electricity Distribution Company- AEDC"),
  // dstv-subscription-api page (current): a subset of its 67 bouquets, ties of price included.
  tv("dstv", "DSTV Subscription", "cable", "1.50", [
    fixed("dstv-padi", "DStv Padi N1,850", 1850),
    fixed("dstv-yanga", "DStv Yanga N2,565", 2565),
    fixed("dstv-confam", "Dstv Confam N4,615", 4615),
    fixed("dstv79", "DStv  Compact N7900", 7900),
    fixed("dstv6", "DStv Asia N6,200", 6200),
    fixed("asia-addon", "Asian Add-on N6,200", 6200),
    fixed("dstv7", "DStv Compact Plus N12,400", 12400),
    fixed("dstv80", "DStv Compact Plus N12,400", 12400),
    fixed("dstv3", "DStv Premium N18,400", 18400),
    fixed("dstv-mobile-1", "DStv Mobile N790", 790),
  ]),
  // gotv-subscription-api page (current): its 7 bouquets.
  tv("gotv", "Gotv Payment", "cable", "1.50", [
    fixed("gotv-lite", "GOtv Lite N410", 410),
    fixed("gotv-max", "GOtv Max N3,600", 3600),
    fixed("gotv-jolli", "GOtv Jolli N2,460", 2460),
    fixed("gotv-jinja", "GOtv Jinja N1,640", 1640),
    fixed("gotv-lite-3months", "GOtv Lite (3 Months) N1,080", 1080),
    fixed("gotv-lite-1year", "GOtv Lite (1 Year) N3,180", 3180),
    fixed("gotv-supa-plus", "GOtv Supa Plus - monthly N15,700", 15700),
  ]),
  // startimes-subscription-api page: no change/renew, no subscription_type.
  tv("startimes", "Startimes Subscription", "startimes", "2.50", [
    fixed("nova", "Nova - 900 Naira - 1 Month", 900),
    fixed("basic", "Basic - 1,700 Naira - 1 Month", 1700),
    fixed("smart", "Smart - 2,200 Naira - 1 Month", 2200),
    fixed("nova-weekly", "Nova - 300 Naira - 1 Week", 300),
  ]),
  // showmax-subscription-api page: no verify, billersCode is the phone, a voucher comes back, and a 100 NGN fee is added.
  {
    ...tv("showmax", "ShowMax", "showmax", "1.00", [
      fixed("full_3", "Full - N8,400 - 3 Months", 8400),
      fixed("mobile_only_3", "Mobile Only - N3,800 - 3 Months", 3800),
      fixed("full", "Full", 2900),
      fixed("mobile_only", "Mobile Only", 1450),
    ]),
    convenienceFee: 100,
  },
  // waec-result-checker-api page: no billersCode, no verify, a card (serial and PIN) comes back.
  {
    serviceID: "waec",
    name: "WAEC Result Checker PIN",
    category: "education",
    minimum_amount: 1,
    maximum_amount: 1_000_000,
    vends: "waec",
    variations: [fixed("waecdirect", "WASSCE", 900)],
    variationsKey: "variations",
    recordType: "Education",
    commissionRate: "1.50",
  },
  // jamb-pin-vending-api page (current list, under `variations` only): the profile id is verified with `type`.
  {
    serviceID: "jamb",
    name: "JAMB PIN VENDING (UTME & Direct Entry)",
    category: "education",
    minimum_amount: 1,
    maximum_amount: 1_000_000,
    vends: "jamb",
    variations: [fixed("utme-mock", "UTME PIN (with mock)", 7700), fixed("utme-no-mock", "UTME PIN (without mock)", 6200)],
    variationsKey: "variations",
    recordType: "Education",
    commissionRate: "1.50",
  },
  // bank-transfer-api page: banks as plans under `varations` only, "fixed" at 0.00 (the amount is open).
  // The page's verify and pay sections are not in the store: they are modelled on the other pages.
  {
    serviceID: "bank-deposit",
    name: "Bank Deposit",
    category: "bank-deposit",
    minimum_amount: 100,
    maximum_amount: 1_000_000,
    vends: "bank",
    variations: [
      { variation_code: "providus", name: "Providus Bank", variation_amount: "0.00", fixedPrice: "Yes" },
      { variation_code: "gtb", name: "GTBANK PLC", variation_amount: "0.00", fixedPrice: "Yes" },
      { variation_code: "access", name: "Access Bank", variation_amount: "0.00", fixedPrice: "Yes" },
      { variation_code: "zenith", name: "Zenith Bank", variation_amount: "0.00", fixedPrice: "Yes" },
    ],
    variationsKey: "varations",
    recordType: "Bank Deposit",
    commissionRate: "0.00",
  },
];

/**
 * The pages' sandbox numbers. The scenario table (airtime, data, TV, Showmax, international,
 * and the IKEDC pay table for meters): success numbers per product, then
 *   201000000000 pending, 500000000000 an unexpected answer, 400000000000 no answer,
 *   300000000000 a timeout; "any random ... number other than the above": failed.
 * The bodies of those answers are not documented; app.ts says what it sends.
 */
export const SANDBOX_NUMBERS = {
  /** Airtime, data, Showmax and international pages: the phone that succeeds. */
  phone: "08011111111",
  /** IKEDC page: the meters that verify and vend, one of each type. */
  prepaidMeter: "1111111111111",
  postpaidMeter: "1010101010101",
  /** DStv, GOtv and Startimes pages: the smartcard. */
  smartcard: "1212121212",
  /** JAMB page: the profile id ("Smartcard number (billerscode) on sandbox: 0123456789", sic). */
  jambProfile: "0123456789",
  /** Not documented (the bank page's verify section is not in the store): the account that verifies, at any bank. */
  bankAccount: "0123456789",
};

export type SandboxOutcome = "success" | "pending" | "unexpected" | "no-answer" | "timeout" | "fail";

const SCENARIOS: Record<string, SandboxOutcome> = {
  "201000000000": "pending",
  "500000000000": "unexpected",
  "400000000000": "no-answer",
  "300000000000": "timeout",
};

/** The outcome of a pay keyed on `number` (phone, meter, smartcard or account), given the numbers that succeed. */
export function outcomeFor(number: string, succeeding: string[]): SandboxOutcome {
  return SCENARIOS[number] ?? (succeeding.includes(number) ? "success" : "fail");
}

/** An international plan, with the fields the foreign-airtime page's pricing note names. */
export interface SandboxInternationalVariation extends SandboxVariation {
  variation_rate: string;
  charged_amount: string | null;
  charged_currency: string;
  variation_amount_min: string | null;
  variation_amount_max: string | null;
}

export interface SandboxCountry {
  code: string;
  name: string;
  currency: string;
  prefix: string;
  /** product_type_id => operators, each with its plans. */
  products: Record<number, Array<{ operator_id: string; name: string; variations: SandboxInternationalVariation[] }>>;
}

/** foreign-airtime page: product types 1 Mobile Top Up and 4 Mobile Data. */
export const INTERNATIONAL_PRODUCT_TYPES: Record<number, string> = { 1: "Mobile Top Up", 4: "Mobile Data" };

/** A flexible top-up: the pay's amount in the destination's currency, charged at the rate. */
const topUp = (code: string, rate: number, min: number, max: number): SandboxInternationalVariation => ({
  variation_code: code,
  name: "Enter flexible amount",
  variation_amount: "0.00",
  fixedPrice: "No",
  variation_rate: rate.toFixed(2),
  charged_amount: null,
  charged_currency: "NGN",
  variation_amount_min: String(min),
  variation_amount_max: String(max),
});
/** A fixed bundle: the page's sample shows variation_amount "0.00"; its charge is charged_amount (NGN). */
const bundle = (code: string, name: string, local: number, rate: number): SandboxInternationalVariation => ({
  variation_code: code,
  name,
  variation_amount: "0.00",
  fixedPrice: "Yes",
  variation_rate: rate.toFixed(2),
  charged_amount: (local * rate).toFixed(2),
  charged_currency: "NGN",
  variation_amount_min: null,
  variation_amount_max: null,
});

/** Countries from the page's sample (GH, CM, ...); operators and rates are the sandbox's own. */
export const INTERNATIONAL: SandboxCountry[] = [
  {
    code: "GH",
    name: "Ghana",
    currency: "GHS",
    prefix: "233",
    products: {
      1: [
        { operator_id: "5", name: "Ghana MTN", variations: [topUp("5-topup", 105.5, 1, 500)] },
        { operator_id: "6", name: "Ghana AirtelTigo", variations: [topUp("6-topup", 105.5, 1, 500)] },
      ],
      4: [{ operator_id: "5", name: "Ghana MTN", variations: [bundle("13056", "Gaga Time - 5GB Mobile Data", 10, 105.5), bundle("13062", "Freedom Bundle - 1.5GB Mobile Data", 40, 105.5)] }],
    },
  },
  {
    code: "CM",
    name: "Cameroon",
    currency: "XAF",
    prefix: "237",
    products: { 1: [{ operator_id: "21", name: "Cameroon Orange", variations: [topUp("21-topup", 2.6, 100, 50_000)] }] },
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
