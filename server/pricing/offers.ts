/**
 * Signed price offers. Each option of a bill's 402 carries, in `extra.offer`, the price shown
 * for this very bill (its hash binds the wallet, chain and token), the rate version that
 * made it and until when it stands, with an HMAC under a key only the service holds. x402 v2
 * payments echo the requirements they accepted, `extra` included, so a payment made after
 * the rate moved is honoured at the price its own challenge showed, until that offer
 * expires, and at no other: not at the cheapest price any version gave during the day.
 * The client's `extra.rateVersion` is never read; the version comes from the signed offer,
 * and the amount is recomputed from the stored version.
 *
 * The key is derived from the PIN pepper (one server secret, already required on every real
 * profile and shared by every instance), under its own label.
 */
import { createHmac } from "node:crypto";
import { sameSecret } from "../../lib/same-secret.ts";

/** What an offer binds: the bill, where it is paid, the amount, and the version that priced it. */
export interface OfferTerms {
  billHash: string;
  chain: string;
  token: string;
  amount: bigint;
}

export class PriceOffers {
  private readonly key: Buffer;

  constructor(secret: Buffer) {
    this.key = createHmac("sha256", secret).update("billpay/price-offer/v1").digest();
  }

  /** The offer token: `<rate version>.<expires at, unix seconds>.<mac>`. */
  sign(terms: OfferTerms, rateVersion: string, expiresAt: number): string {
    return `${rateVersion}.${expiresAt}.${this.mac(terms, rateVersion, expiresAt)}`;
  }

  /**
   * The rate version an echoed offer names, when it is one this service signed for exactly
   * these terms and it has not expired (`nowSeconds`, allowing `skewSeconds`); else undefined.
   */
  read(offer: unknown, terms: OfferTerms, nowSeconds: number, skewSeconds: number): string | undefined {
    if (typeof offer !== "string" || offer.length > 200) return undefined;
    const m = /^(\d{1,18})\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(offer);
    if (!m) return undefined;
    const [, version, expires, mac] = m as unknown as [string, string, string, string];
    if (Number(expires) + skewSeconds < nowSeconds) return undefined;
    return sameSecret(mac, this.mac(terms, version, Number(expires))) ? version : undefined;
  }

  private mac(terms: OfferTerms, rateVersion: string, expiresAt: number): string {
    return createHmac("sha256", this.key)
      .update([terms.billHash, terms.chain, terms.token, terms.amount.toString(), rateVersion, String(expiresAt)].join("|"))
      .digest("base64url");
  }
}
