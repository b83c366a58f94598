/** Waits until `check` holds, outside a test body (where expect.poll cannot run): in beforeAll. */
export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
