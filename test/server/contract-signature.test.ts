/**
 * Who signed a message (lib/contract-signature.ts), against a node that records what it is
 * asked: every question put to a wallet's code, or to ERC-6492's validator for a wallet not yet
 * deployed, runs within the gas cap, as anyone may write that code; and a wallet with no code
 * whose signature does not recover costs no call at all.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { concat, encodeAbiParameters, encodeErrorResult, parseAbi, type Hex, type PublicClient } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { publicClientFor, sharedClientFor } from "../../lib/chain-client.ts";
import { CONTRACT_SIGNATURE_GAS, contractAccepts, messageSigner } from "../../lib/contract-signature.ts";

const ERC6492_SUFFIX = `0x${"6492".repeat(16)}` as Hex;
const MAGIC = `0x1626ba7e${"0".repeat(56)}` as Hex;

/** A node whose wallets have `code`, answering every call with `answer`, recording each call's gas. */
function node(code: Hex | undefined, answer: Hex) {
  const calls: Array<{ to?: string; gas?: bigint }> = [];
  return {
    calls,
    client: {
      getCode: async () => code,
      call: async (args: { to?: Hex; data?: Hex; gas?: bigint }) => (calls.push({ to: args.to, gas: args.gas }), { data: answer }),
      // viem's own check, which runs a 6492 factory call with no gas cap: never to be asked.
      verifyMessage: async () => (calls.push({ to: "verifyMessage" }), true),
    } as unknown as Pick<PublicClient, "getCode" | "call">,
  };
}

/** An ERC-6492 wrapper: (factory, its calldata, the inner signature), then the suffix. */
const wrapped = (inner: Hex): Hex =>
  concat([encodeAbiParameters([{ type: "address" }, { type: "bytes" }, { type: "bytes" }], ["0x00000000000000000000000000000000000000f1", "0xdeadbeef", inner]), ERC6492_SUFFIX]);

describe("who signed a message", () => {
  const wallet = "0x00000000000000000000000000000000000000aa" as Hex;
  const junk = `0x${"11".repeat(65)}` as Hex;

  it("an ordinary wallet's own signature, with no call to the node", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { client, calls } = node(undefined, "0x");
    expect(await messageSigner(client, account.address, "hello", await account.signMessage({ message: "hello" }))).toBe("wallet");
    expect(calls).toEqual([]);
  });

  it("a wallet with no code whose signature does not recover: refused, with no call to run", async () => {
    const { client, calls } = node("0x", `0x${"00".repeat(31)}01`);
    expect(await messageSigner(client, wallet, "hello", junk)).toBeNull();
    expect(calls).toEqual([]);
  });

  it("a deployed contract wallet is asked by ERC-1271 within the gas cap", async () => {
    const { client, calls } = node("0x6080", MAGIC);
    expect(await messageSigner(client, wallet, "hello", junk)).toBe("contract");
    expect(calls).toEqual([{ to: wallet, gas: CONTRACT_SIGNATURE_GAS }]);
  });

  it("an ERC-6492 signature is asked of the validator in one call with no target and within the gas cap: refused when it says no, accepted when it says yes", async () => {
    const no = node("0x", `0x${"00".repeat(32)}`);
    expect(await messageSigner(no.client, wallet, "hello", wrapped(junk))).toBeNull();
    expect(no.calls).toEqual([{ to: undefined, gas: CONTRACT_SIGNATURE_GAS }]);
    const yes = node("0x", "0x01");
    expect(await messageSigner(yes.client, wallet, "hello", wrapped(junk))).toBe("contract");
    expect(yes.calls).toEqual([{ to: undefined, gas: CONTRACT_SIGNATURE_GAS }]);
  });

  it("never fetches a URL a wallet's code names (EIP-3668 OffchainLookup): the service's clients read nothing off chain", async () => {
    let fetched = 0;
    const server = createServer((req, res) => {
      if (req.method !== "POST") {
        fetched++;
        return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ data: "0x" }));
      }
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        const { id, method } = JSON.parse(body) as { id: number; method: string };
        res.setHeader("content-type", "application/json");
        if (method !== "eth_call") return void res.end(JSON.stringify({ jsonrpc: "2.0", id, result: "0x6080" }));
        // The wallet reverts with OffchainLookup(sender, urls, callData, callback, extraData), naming this server.
        const lookup = encodeErrorResult({
          abi: parseAbi(["error OffchainLookup(address sender, string[] urls, bytes callData, bytes4 callbackFunction, bytes extraData)"]),
          errorName: "OffchainLookup",
          args: [wallet, [`${url}/lookup/{sender}/{data}`], "0x", "0x12345678", "0x"],
        });
        res.end(JSON.stringify({ jsonrpc: "2.0", id, error: { code: 3, message: "execution reverted", data: lookup } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      for (const client of [sharedClientFor("CELO", url), publicClientFor("CELO", url)]) {
        expect(await contractAccepts(client, wallet, `0x${"ab".repeat(32)}`, junk)).toBe(false);
      }
      expect(fetched).toBe(0);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});
