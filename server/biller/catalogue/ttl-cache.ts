/** A loader's results kept for a while per key: one load per key at a time, and a failure is not kept. */
export class TtlCache {
  private readonly entries = new Map<string, { value: Promise<unknown>; expiresAt: number }>();

  constructor(private readonly ttlMs: number) {}

  get<T>(key: string, load: () => Promise<T>): Promise<T> {
    const hit = this.entries.get(key);
    if (hit && hit.expiresAt > Date.now()) return hit.value as Promise<T>;
    const value = load();
    this.entries.set(key, { value, expiresAt: Date.now() + this.ttlMs });
    value.catch(() => {
      if (this.entries.get(key)?.value === value) this.entries.delete(key);
    });
    return value;
  }

  /** What a key holds now (a kept answer, or one on its way), without loading it. */
  peek<T>(key: string): Promise<T> | undefined {
    const hit = this.entries.get(key);
    return hit && hit.expiresAt > Date.now() ? (hit.value as Promise<T>) : undefined;
  }

  /** Drops a key, so the next get loads it afresh. */
  forget(key: string): void {
    this.entries.delete(key);
  }
}
