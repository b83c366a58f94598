/**
 * What the service needs of an upstream biller, in the service's own terms: one interface
 * (BillerApi) and the shapes that cross it. The VTpass wire client (vtpass/client.ts)
 * implements it; the catalogue (catalogue/) and the order flow (orders/) use it. Nothing
 * here knows an upstream's field names, codes or URLs, so another upstream can be added
 * behind the same interface.
 */

/** One code the biller handed over for a vended bill: a meter token, an exam PIN and its serial, a voucher. */
export interface PurchasedCode {
  /** What it is ("Token", "Bonus Token", "PIN", "Serial", "Voucher"), or null when the biller did not say. */
  label: string | null;
  value: string;
}

/** What the biller charged for a bill, as it reported it (NGN, in kobo); null where it did not say. */
export interface BillerCharge {
  /** The bill's face amount. */
  amountKobo: bigint | null;
  /** What the merchant's wallet was debited: face amount less commission plus any fee. */
  totalKobo: bigint | null;
  /** A convenience fee the biller added. */
  feeKobo: bigint | null;
}

export type VendResult =
  | {
      state: "delivered";
      transactionId: string | null;
      /** Every code handed over, in the biller's order; empty for bills that have none (airtime, postpaid). */
      codes: PurchasedCode[];
      units: string | null;
      charge: BillerCharge;
    }
  | {
      state: "pending";
      reason: string;
      /** The biller has no record of this request id: it never arrived, or has not been recorded yet. */
      unknownRequest?: boolean;
    }
  | {
      state: "failed";
      code: string;
      reason: string;
      /** Delivered, then reversed by the biller (its money is back in the merchant's wallet). */
      reversed?: boolean;
      /** The biller refused the request id itself (its date rule): nothing was processed, and a new id may be tried. */
      requestIdRefused?: boolean;
      /** Refused for the merchant's account or the biller's state (a wallet run dry, a suspension), not for anything in the bill. */
      merchantSide?: boolean;
    };

/** What a number check found, beyond whether it is valid: what some products' bills need next. */
export interface VerifiedAccount {
  customerName: string | null;
  /** Electricity: the meter's type as the biller reports it. */
  meterType: "prepaid" | "postpaid" | null;
  /** Cable: what renewing the current bouquet costs, in kobo, and that bouquet's code(s). */
  renewalKobo: bigint | null;
  currentBouquet: string | null;
}

export type VerifyResult = ({ ok: true } & VerifiedAccount) | { ok: false; reason: string };

/** The pay call's fields, in the service's terms. `amount` is in the currency the product is priced in (NGN, or the destination's for international). */
export interface PayRequest {
  requestId: string;
  serviceID: string;
  billersCode: string;
  variationCode?: string;
  amount?: number;
  phone: string;
  /** Cable (DStv, GOtv): change to the bouquet in variationCode, or renew the current one. */
  subscriptionType?: "change" | "renew";
  international?: { country_code: string; operator_id: string; product_type_id: string; email: string };
}

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

export interface Country {
  code: string;
  name: string;
  currency: string;
  prefix: string;
}
export interface ProductType {
  product_type_id: string;
  name: string;
}
export interface Operator {
  operator_id: string;
  name: string;
}

/** An international plan. Amounts in the destination's currency except `charged_amount`, in `charged_currency`. */
export interface InternationalVariation extends Variation {
  /** NGN charged per unit of the destination's currency (flexible plans). */
  variation_rate: string | null;
  /** What a fixed-price plan costs the merchant, in charged_currency. */
  charged_amount: string | null;
  charged_currency: string | null;
  /** The least and most a flexible plan takes, in the destination's currency. */
  variation_amount_min: string | null;
  variation_amount_max: string | null;
}

/** The biller has no such product (its answer to a product id it does not know). */
export class UnknownProduct extends Error {}

export interface BillerApi {
  /** A request id for a new pay attempt, made at send time (the upstream may date it). */
  newRequestId(now?: Date): string;
  /** Pays a bill. Any failure to get a defined answer is `pending`: requery decides. */
  pay(req: PayRequest): Promise<VendResult>;
  /** How the request sent under `requestId` stands. Never throws: no answer is `pending`. */
  requery(requestId: string): Promise<VendResult>;
  /** Checks a meter, smartcard, profile or account number. Throws when the biller cannot answer. */
  verify(req: { serviceID: string; billersCode: string; type?: string }): Promise<VerifyResult>;
  /** The products of one of the biller's categories (its identifiers: airtime, data, electricity-bill, ...). */
  services(identifier: string): Promise<BillerService[]>;
  /** A product's plans; throws UnknownProduct when the biller has no such product, another error when it cannot answer. */
  variations(serviceID: string): Promise<Variation[]>;
  internationalCountries(): Promise<Country[]>;
  internationalProductTypes(countryCode: string): Promise<ProductType[]>;
  internationalOperators(countryCode: string, productTypeId: string): Promise<Operator[]>;
  internationalVariations(operatorId: string, productTypeId: string): Promise<{ currency: string | null; plans: InternationalVariation[] }>;
  /** Whether the biller answers an authenticated read; throws otherwise. */
  ping(): Promise<void>;
}

/** The service's product id for international airtime and data (as the upstream names it). */
export const INTERNATIONAL_SERVICE_ID = "foreign-airtime";

/**
 * What a payer sees of a vend's codes: the one code alone, or every code with its label
 * ("Serial: WRN123, PIN: 0987"), so that nothing the biller handed over is lost.
 */
export function purchasedCodeText(codes: PurchasedCode[]): string | null {
  if (codes.length === 0) return null;
  if (codes.length === 1) return codes[0]!.value;
  return codes.map((c) => (c.label ? `${c.label}: ${c.value}` : c.value)).join(", ");
}
