/**
 * Where the NGN/USD rate comes from: a configured figure (the local default), or an HTTP
 * source answering JSON, cached for a while and fetched with a timeout.
 */
import { RATE_SCALE } from "./price.ts";
import { toScaled } from "./decimal.ts";

export interface RateSource {
  /** NGN per USD, in thousandths. */
  ngnPerUsdMilli(): Promise<bigint>;
}

export class ConfiguredRate implements RateSource {
  constructor(private readonly rateMilli: bigint) {}
  async ngnPerUsdMilli() {
    return this.rateMilli;
  }
}

/** GET `url`, read the decimal at `field` (a string or number) of the JSON answer. */
export class HttpRateSource implements RateSource {
  private cached: { rate: bigint; at: number } | undefined;
  private inFlight: Promise<bigint> | undefined;

  constructor(
    private readonly url: string,
    private readonly field: string,
    private readonly timeoutMs: number,
    private readonly cacheMs: number,
  ) {}

  async ngnPerUsdMilli(): Promise<bigint> {
    if (this.cached && Date.now() - this.cached.at < this.cacheMs) return this.cached.rate;
    // One fetch at a time: concurrent quotes share it.
    this.inFlight ??= this.fetchRate().finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  private async fetchRate(): Promise<bigint> {
    const res = await fetch(this.url, { signal: AbortSignal.timeout(this.timeoutMs) });
    if (!res.ok) throw new Error(`rate source answered ${res.status}`);
    const body = (await res.json()) as Record<string, unknown>;
    const raw = body[this.field];
    const rate = typeof raw === "string" || typeof raw === "number" ? toScaled(raw, RATE_SCALE) : undefined;
    if (rate === undefined || rate === 0n) throw new Error(`rate source gave no usable "${this.field}"`);
    this.cached = { rate, at: Date.now() };
    return rate;
  }
}

/** The rate source the configuration names: the HTTP source when RATE_SOURCE_URL is set, else the configured figure. */
export function rateSourceFor(config: {
  RATE_SOURCE_URL?: string;
  RATE_SOURCE_FIELD: string;
  RATE_TIMEOUT_MS: number;
  RATE_CACHE_MS: number;
  NGN_PER_USD: bigint;
}): RateSource {
  return config.RATE_SOURCE_URL
    ? new HttpRateSource(config.RATE_SOURCE_URL, config.RATE_SOURCE_FIELD, config.RATE_TIMEOUT_MS, config.RATE_CACHE_MS)
    : new ConfiguredRate(config.NGN_PER_USD);
}
