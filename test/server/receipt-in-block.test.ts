/**
 * The ledger judges a transfer into BillPay by its transaction's receipt (lib/payment-logs.ts).
 * Ponder's RPC cache keeps a receipt by the transaction's hash through a reorganisation, so the
 * receipt is taken only from the block the transfer was read in (receiptInBlock).
 */
import { describe, expect, it } from "vitest";
import { type Hex } from "viem";
import { receiptInBlock, type BlockReceipt } from "../../lib/payment-logs.ts";

const block = (n: number) => `0x${n.toString(16).padStart(64, "0")}` as Hex;
const receipt = (blockHash: Hex, logIndex: number): BlockReceipt => ({ blockHash, logs: [{ address: "0x01", topics: [], data: "0x", logIndex }] });

describe("receiptInBlock", () => {
  it("takes the cached receipt of the event's block without asking the node", async () => {
    let asked = 0;
    const cached = receipt(block(1), 3);
    expect(await receiptInBlock(block(1), async () => cached, async () => (asked++, receipt(block(1), 3)))).toBe(cached);
    expect(asked).toBe(0);
  });

  it("reads a cached receipt of another block (one a reorganisation replaced) again from the node", async () => {
    const fresh = receipt(block(2), 7);
    expect(await receiptInBlock(block(2), async () => receipt(block(1), 3), async () => fresh)).toBe(fresh);
  });

  it("refuses a receipt the node still gives in another block, rather than judge the transfer by it", async () => {
    await expect(receiptInBlock(block(2), async () => receipt(block(1), 3), async () => receipt(block(1), 3))).rejects.toThrow(/not in 0x0+2/);
  });
});
