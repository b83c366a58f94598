/** Exact decimal parsing into scaled integers: money never passes through a float. */

/** Parses a non-negative decimal (string or JSON number) with at most `scale` fraction digits into value * 10^scale. */
export function toScaled(value: string | number, scale: number): bigint | undefined {
  const text = typeof value === "number" ? numberToPlainString(value) : value.trim();
  if (text === undefined) return undefined;
  const m = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (!m) return undefined;
  const fraction = m[2] ?? "";
  if (fraction.length > scale) return undefined;
  return BigInt(m[1]!) * 10n ** BigInt(scale) + BigInt(fraction.padEnd(scale, "0") || "0");
}

/** A JSON number as written, without exponent: 100.5 -> "100.5"; 1e21 or NaN -> undefined. */
function numberToPlainString(n: number): string | undefined {
  if (!Number.isFinite(n) || n < 0) return undefined;
  const s = String(n);
  return /e/i.test(s) ? undefined : s;
}

export function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/** Formats value / 10^scale as a decimal string (for display only). */
export function formatScaled(value: bigint, scale: number): string {
  const unit = 10n ** BigInt(scale);
  const whole = value / unit;
  const fraction = (value % unit).toString().padStart(scale, "0").replace(/0+$/, "");
  return fraction ? `${whole}.${fraction}` : `${whole}`;
}
