/**
 * Refunds through BillPay with the operator key. One transaction at a time per chain (the
 * operator's nonces stay in order), each receipt awaited with a timeout. A refund that the
 * contract says was already made is reported as such, so a retry after a crash is safe.
 */
import { BaseError, ContractFunctionRevertedError, createWalletClient, http, keccak256, toBytes, type Account, type Hex } from "viem";
import { billPayAbi } from "../../lib/abis.ts";
import { publicClientFor, RPC_TIMEOUT_MS } from "../../lib/chain-client.ts";
import { viemChain, type ChainKey } from "../../lib/chains.ts";
import { rpcUrlFor, type Deployments } from "../../lib/deployments.ts";
import type { Authorization } from "../x402/payment.ts";

const RECEIPT_TIMEOUT_MS = 60_000;
const ALREADY_DONE = new Set(["AuthorizationAlreadyRefunded", "OrderExists"]);

/** BillPay's 32-byte order id for a service request id. */
export const onChainOrderId = (requestId: string): Hex => keccak256(toBytes(requestId));

export type RefundOutcome = { txHash: Hex } | { alreadyRefunded: true };

export class Refunder {
  private queues = new Map<ChainKey, Promise<unknown>>();

  constructor(
    private readonly deployments: Deployments,
    private readonly operator: Account,
  ) {}

  async refundAuthorization(args: {
    chain: ChainKey;
    requestId: string;
    token: Hex;
    authorization: Authorization;
    signature: Hex;
    amount: bigint;
  }): Promise<RefundOutcome> {
    const previous = this.queues.get(args.chain) ?? Promise.resolve();
    const next = previous.catch(() => {}).then(() => this.send(args));
    this.queues.set(args.chain, next);
    return next;
  }

  private async send(args: Parameters<Refunder["refundAuthorization"]>[0]): Promise<RefundOutcome> {
    const d = this.deployments.chains[args.chain]!;
    const rpcUrl = rpcUrlFor(args.chain, d);
    const wallet = createWalletClient({
      account: this.operator,
      chain: viemChain(args.chain, rpcUrl),
      transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS }),
    });
    try {
      const hash = await wallet.writeContract({
        address: d.billPay.address as Hex,
        abi: billPayAbi,
        functionName: "refundAuthorization",
        args: [onChainOrderId(args.requestId), args.token, { ...args.authorization, signature: args.signature }, args.amount],
      });
      const receipt = await publicClientFor(args.chain, rpcUrl).waitForTransactionReceipt({ hash, timeout: RECEIPT_TIMEOUT_MS });
      if (receipt.status !== "success") throw new Error(`refund transaction ${hash} reverted`);
      return { txHash: hash };
    } catch (err) {
      const reverted = err instanceof BaseError ? err.walk((e) => e instanceof ContractFunctionRevertedError) : undefined;
      const name = reverted instanceof ContractFunctionRevertedError ? reverted.data?.errorName : undefined;
      if (name && ALREADY_DONE.has(name)) return { alreadyRefunded: true };
      throw err;
    }
  }
}
