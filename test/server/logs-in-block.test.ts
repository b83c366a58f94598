/**
 * The ledger judges a transfer into BillPay by its transaction's logs (lib/payment-logs.ts).
 * Ponder's RPC cache keeps a receipt by the transaction's hash through a reorganisation, so a
 * receipt of another block than the transfer's gives way to that block's own logs (logsInBlock).
 */
import { describe, expect, it } from "vitest";
import { type Hex } from "viem";
import { logsInBlock, type BlockReceipt, type RawLog } from "../../lib/payment-logs.ts";

const block = (n: number) => `0x${n.toString(16).padStart(64, "0")}` as Hex;
const log = (logIndex: number): RawLog => ({ address: "0x01", topics: [], data: "0x", logIndex });
const receipt = (blockHash: Hex, logIndex: number): BlockReceipt => ({ blockHash, logs: [log(logIndex)] });

describe("logsInBlock", () => {
  it("takes the receipt of the event's block without reading the block's logs", async () => {
    let read = 0;
    const cached = receipt(block(1), 3);
    expect(await logsInBlock(block(1), async () => cached, async () => (read++, [log(3)]))).toBe(cached.logs);
    expect(read).toBe(0);
  });

  it("reads a receipt of another block (one a reorganisation replaced) from the event's own block instead", async () => {
    const own = [log(7)];
    expect(await logsInBlock(block(2), async () => receipt(block(1), 3), async () => own)).toBe(own);
  });

  it("fails when the event's block cannot be read, rather than judge the transfer by another block's logs", async () => {
    await expect(logsInBlock(block(2), async () => receipt(block(1), 3), async () => Promise.reject(new Error("unknown block")))).rejects.toThrow("unknown block");
  });
});
