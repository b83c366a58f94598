/**
 * The service's /metrics, as a test reads it: the sum of every sample whose line starts with
 * `prefix`, a metric's name or its name with its first labels (`name{chain="CELO"`), so one
 * figure covers the label sets a test does not care about.
 */
export async function metricSum(serviceUrl: string, prefix: string): Promise<number> {
  const text = await (await fetch(`${serviceUrl}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith(prefix))
    .reduce((sum, l) => sum + Number(l.split(" ").pop()), 0);
}
