/**
 * The ledger's reading when Ponder's cached receipt is of another block than the transfer's
 * (lib/payment-logs.ts logsInBlock): the transaction's logs read from its own block, by the
 * block's hash. Against a real node they are the logs its receipt holds of those addresses,
 * and the ledger's predicate finds the payment in them; a block without the transfer's own log
 * is an error.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toEventSelector, type Hex } from "viem";
import { authorizationNonceOf, transactionLogsInBlock, type GetLogsRequest } from "../../lib/payment-logs.ts";
import { chainActors, type ChainActors } from "../support/actors.ts";
import { freshAccounts, leaseSharedChains, type SharedChains } from "../support/stack.ts";

const TRANSFER = toEventSelector("Transfer(address,address,uint256)");

describe("transactionLogsInBlock", () => {
  const accounts = freshAccounts();
  let stack: SharedChains;
  let celo: ChainActors;

  beforeAll(async () => {
    stack = await leaseSharedChains();
    await accounts.fund(stack.deployments);
    celo = chainActors(stack.deployments, "CELO");
  });
  afterAll(() => stack?.close());

  it("reads a payment's logs from its block as its receipt holds them, and the predicate finds its nonce in them", async () => {
    const payer = accounts(3);
    const token = celo.tokenAddress("USDC");
    const { receipt, nonce } = await celo.payByAuthorization(payer, "USDC", 1_000_000n);
    const request: GetLogsRequest = (args) => celo.publicClient.request(args);
    const transfer = receipt.logs.find((l) => l.topics[0] === TRANSFER)!;
    const logs = await transactionLogsInBlock(request, receipt.blockHash, receipt.transactionHash, { token, logIndex: transfer.logIndex });
    const lower = (l: { address: string; topics: readonly Hex[]; data: Hex; logIndex: number | null }) => ({ address: l.address.toLowerCase(), topics: l.topics, data: l.data, logIndex: l.logIndex });
    expect(logs.map(lower)).toEqual(receipt.logs.filter((l) => l.address.toLowerCase() === token.toLowerCase()).map(lower));
    expect(authorizationNonceOf(logs, { token, from: payer.address, logIndex: transfer.logIndex })).toBe(nonce);

    // Another block holds none of them: that is an error, never a transfer judged by no logs.
    const other = await celo.publicClient.getBlock({ blockNumber: receipt.blockNumber - 1n });
    await expect(transactionLogsInBlock(request, other.hash, receipt.transactionHash, { token, logIndex: transfer.logIndex })).rejects.toThrow(/gave no log/);
  });
});
