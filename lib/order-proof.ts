/**
 * A payer's proof that an order is theirs, signed by the paying wallet: what the order route
 * and a replayed payment accept, beside the order's secret and the agent api_key, so a payer
 * whose paying response was lost can still read the purchased code. The wallet signs
 * (EIP-191 personal_sign) this message with the current time in milliseconds, and sends the
 * signature and the time in X-Wallet-Signature and X-Wallet-Timestamp.
 */
export const orderProofMessage = (requestId: string, timestampMs: string) => `BillPay: show order ${requestId} to its payer at ${timestampMs}`;
