/** Row ids of event tables: one per log, so a replayed event can never count twice. */
export function logId(chainId: number, txHash: string, logIndex: number): string {
  return `${chainId}-${txHash}-${logIndex}`;
}
