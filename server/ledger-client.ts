/**
 * The service's reader of the ledger (the Ponder app's HTTP API, ponder/src/api). The
 * service decides an order's money from here, never from its own memory: a pull is paid
 * when the ledger shows its Pulled event, an x402 payment when it shows the transfer.
 */
import { CHAINS, type ChainKey } from "../lib/chains.ts";

const LEDGER_TIMEOUT_MS = 5_000;

export interface LedgerPayment {
  id: string;
  chainId: number;
  rail: "pull" | "authorization";
  orderId: string | null;
  authorizationNonce: string | null;
  payer: string;
  token: string;
  amount: string;
  txHash: string;
  blockNumber: string;
  timestamp: string;
}

export interface LedgerRefund {
  id: string;
  chainId: number;
  orderId: string;
  payer: string;
  token: string;
  amount: string;
  txHash: string;
  timestamp: string;
}

export interface LedgerAccount {
  chainId: number;
  token: string;
  payer: string;
  [figure: string]: unknown;
}

export class LedgerClient {
  constructor(readonly url: string) {}

  private async get<T>(path: string): Promise<T> {
    const res = await fetch(`${this.url}${path}`, { signal: AbortSignal.timeout(LEDGER_TIMEOUT_MS) });
    if (!res.ok) throw new Error(`ledger answered ${res.status} for ${path.split("?")[0]}`);
    return (await res.json()) as T;
  }

  /** A BillPay order's pull and refunds. */
  order(onchainOrderId: string): Promise<{ payments: LedgerPayment[]; refunds: LedgerRefund[] }> {
    return this.get(`/ledger/orders/${onchainOrderId}`);
  }

  /** An x402 payment by (chain, token, payer, nonce), and its refunds. */
  authorization(chain: ChainKey, token: string, payer: string, nonce: string): Promise<{ payment: LedgerPayment | null; refunds: LedgerRefund[] }> {
    return this.get(`/ledger/authorizations/${CHAINS[chain].chainId}/${token}/${payer}/${nonce}`);
  }

  /** One chain's pulls in ledger order (time, block, log), from `from` (unix seconds) or after `cursor`. */
  pulls(q: { chainId: number; from?: bigint; cursor?: string; limit: number }): Promise<{ payments: LedgerPayment[]; nextCursor: string | null }> {
    const params = new URLSearchParams({ rail: "pull", chainId: String(q.chainId), limit: String(q.limit) });
    if (q.cursor) params.set("cursor", q.cursor);
    else if (q.from !== undefined) params.set("from", q.from.toString());
    return this.get(`/ledger/payments?${params}`);
  }

  /** A wallet's per-chain, per-token totals. */
  async accounts(wallet: string): Promise<LedgerAccount[]> {
    return (await this.get<{ accounts: LedgerAccount[] }>(`/ledger/wallets/${wallet.toLowerCase()}?limit=1`)).accounts;
  }
}
