/** The bills the suites pay: airtime to the sandbox's success number, 1550 NGN (1 USD at the default rate). */
export const airtimeBill = (extra: Record<string, unknown> = {}) => ({
  serviceID: "mtn",
  serviceCategory: "AIRTIME",
  network: "MTN",
  billersCode: "08011111111",
  nairaAmount: 1550,
  ...extra,
});

/** The same bill as the x402 route takes it: paid in USDC on CELO by `wallet`. */
export const x402Bill = (wallet: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  ...airtimeBill(),
  token: "USDC",
  blockchain: "CELO",
  wallet_address: wallet,
  ...extra,
});

/** The number VTpass's sandbox table keeps pending (until the test resolves it through the sandbox's staff routes). */
export const PENDING_NUMBER = "201000000000";
