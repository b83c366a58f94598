/** NGN amounts as kobo (bigint): the catalogue compares prices exactly, never as floats. */
import { formatScaled, toScaled } from "../../pricing/decimal.ts";

/** A naira figure with at most 2 decimals ("1850.00", "1,000.00", 2110.5) in kobo, or undefined when it is not one. */
export const koboOrUndefined = (naira: number | string): bigint | undefined => toScaled(typeof naira === "string" ? naira.replace(/,/g, "") : naira, 2);

/** The same, for figures that must be one (a bill's validated nairaAmount); throws on anything else. */
export function kobo(naira: number | string): bigint {
  const k = koboOrUndefined(naira);
  if (k === undefined) throw new Error(`not a naira amount: ${naira}`);
  return k;
}

/** Kobo as a naira decimal ("1850", "2110.5"). */
export const formatKobo = (k: bigint): string => formatScaled(k, 2);

/** Kobo as a JSON number of naira, for answers. */
export const nairaNumber = (k: bigint): number => Number(formatScaled(k, 2));
