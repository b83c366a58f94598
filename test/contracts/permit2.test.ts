/**
 * x402 `exact` payments with assetTransferMethod "permit2" on the local chains: Uniswap's
 * Permit2 and the x402 exact proxy stand-in at their canonical addresses (lib/permit2-code.ts),
 * settlement through the proxy into BillPay, and BillPay's refundPermit2.
 */
import { network } from "hardhat";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  domainSeparator,
  encodeAbiParameters,
  getAddress,
  hexToBigInt,
  keccak256,
  maxUint256,
  parseAbi,
  parseEventLogs,
  publicActions,
  toEventSelector,
  zeroAddress,
  type Address,
  type Hex,
} from "viem";
import { permit2WitnessTypes, toClientEvmSigner, toFacilitatorEvmSigner, x402ExactPermit2ProxyABI } from "@x402/evm";
import { ExactEvmScheme as ExactEvmClient } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactEvmFacilitator } from "@x402/evm/exact/facilitator";
import { loadArtifact } from "../../lib/artifacts.ts";
import { publicClientFor } from "../../lib/chain-client.ts";
import { randomNonce } from "../../lib/eip3009.ts";
import { hardhatAccount } from "../../lib/local-accounts.ts";
import { permit2DomainSeparator, permit2RuntimeCode, placePermit2Contracts, x402ExactPermit2ProxyRuntimeCode } from "../../lib/permit2-code.ts";
import { PERMIT2, X402_EXACT_PROXY as X402_EXACT_PERMIT2_PROXY } from "../../lib/permit2.ts";
import { ensureLocalDeployment } from "../../stack/local-deploy.ts";
import { expectRevert } from "../support/revert.ts";
import { DAY, orderId, REFUND_BUDGET, units } from "./fixture.ts";

/** The parts of Permit2 the tests call, and the errors it reverts with. */
const permit2Abi = parseAbi([
  "function DOMAIN_SEPARATOR() view returns (bytes32)",
  "function nonceBitmap(address owner, uint256 wordPos) view returns (uint256)",
  "function invalidateUnorderedNonces(uint256 wordPos, uint256 mask)",
  "error InvalidNonce()",
  "error InvalidSigner()",
  "error InvalidSignature()",
  "error InvalidSignatureLength()",
  "error InvalidContractSignature()",
  "error SignatureExpired(uint256 signatureDeadline)",
  "error InvalidAmount(uint256 maxAmount)",
]);
/** The proxy as @x402/evm calls it, with Permit2's errors (they bubble up through it). */
const proxyAbi = [...x402ExactPermit2ProxyABI, ...permit2Abi.filter((x) => x.type === "error")] as const;
const SETTLED = toEventSelector("Settled()");
const TRANSFER = toEventSelector("Transfer(address,address,uint256)");

/** JSON with object keys sorted, so ABIs compare regardless of key order. */
const canonical = (value: unknown): string =>
  JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b))) : v,
  );

/**
 * BillPay on a fresh in-process chain with id 42220 (the local Celo chain's), as billPayFixture
 * builds it on the default chain, plus Permit2 and the proxy at their canonical addresses. Not on
 * the default chain (31337): Uniswap's precompiled Permit2 caches a domain separator for chain
 * 31337 at another address, so there it signs under the wrong domain (see the first tests).
 * Payers alice and bob hold USD₮-like plain tokens and have approved Permit2 for them.
 */
async function fixture() {
  const connection = await network.connect({ network: "celoLocal" });
  const { viem } = connection;
  const publicClient = await viem.getPublicClient();
  const testClient = await viem.getTestClient();
  const [admin, operator, refunder, pauser, alice, bob, stranger] = await viem.getWalletClients();
  if (!admin || !operator || !refunder || !pauser || !alice || !bob || !stranger) throw new Error("not enough accounts");
  await placePermit2Contracts(publicClient);
  const chainId = await publicClient.getChainId();

  const usdc = await viem.getContractAt(
    "EIP3009Token",
    getAddress((await viem.deployContract("EIP3009Token", ["USDC", "USDC", "2", admin.account.address])).address),
  );
  const plain = await viem.getContractAt(
    "PlainToken",
    getAddress((await viem.deployContract("PlainToken", ["Tether USD", "USD₮", admin.account.address])).address),
  );
  const noReturn = await viem.getContractAt("NoReturnToken", getAddress((await viem.deployContract("NoReturnToken")).address));
  const deployed = await viem.deployContract("BillPay", [
    admin.account.address,
    operator.account.address,
    refunder.account.address,
    pauser.account.address,
    [usdc.address],
  ]);
  const billPay = await viem.getContractAt("BillPay", getAddress(deployed.address));
  await billPay.write.setRefundBudget([plain.address, REFUND_BUDGET, DAY]);
  await billPay.write.setPullBudget([usdc.address, units("100"), DAY]);
  for (const payer of [alice, bob]) {
    await usdc.write.mint([payer.account.address, units("1000")]);
    await usdc.write.approve([billPay.address, maxUint256], { account: payer.account });
    await plain.write.mint([payer.account.address, units("1000")]);
    await plain.write.approve([PERMIT2, maxUint256], { account: payer.account });
    await noReturn.write.mint([payer.account.address, units("1000")]);
  }

  /** Waits for a transaction and returns its decoded BillPay events. */
  async function logsOf(hash: Hex) {
    const receipt = await publicClient.waitForTransactionReceipt({ hash });
    return parseEventLogs({ abi: billPay.abi, logs: receipt.logs });
  }
  const addr = {
    alice: getAddress(alice.account.address),
    bob: getAddress(bob.account.address),
    refunder: getAddress(refunder.account.address),
    stranger: getAddress(stranger.account.address),
  };
  return { connection, viem, publicClient, testClient, chainId, addr, admin, operator, refunder, pauser, alice, bob, stranger, usdc, plain, noReturn, billPay, logsOf };
}
type Fixture = Awaited<ReturnType<typeof fixture>>;
type Payer = Fixture["alice"];

let f: Fixture;

interface PermitOptions {
  token?: Address;
  amount?: bigint;
  nonce?: bigint;
  deadline?: bigint;
  to?: Address;
  validAfter?: bigint;
  spender?: Address;
}

/** `payer` signs an x402 Permit2 payment, as @x402/evm's client does (its types, Permit2's domain). */
async function signPermit(payer: Payer, o: PermitOptions = {}) {
  const now = (await f.publicClient.getBlock()).timestamp;
  const message = {
    permitted: { token: o.token ?? f.plain.address, amount: o.amount ?? units("7") },
    spender: o.spender ?? X402_EXACT_PERMIT2_PROXY,
    nonce: o.nonce ?? hexToBigInt(randomNonce()),
    deadline: o.deadline ?? now + 3600n,
    witness: { to: o.to ?? f.billPay.address, validAfter: o.validAfter ?? 0n },
  };
  const signature = await payer.signTypedData({
    account: payer.account,
    domain: { name: "Permit2", chainId: f.chainId, verifyingContract: PERMIT2 },
    types: permit2WitnessTypes,
    primaryType: "PermitWitnessTransferFrom",
    message,
  });
  return { message, owner: getAddress(payer.account.address), signature };
}
type SignedPermit = Awaited<ReturnType<typeof signPermit>>;

/** A facilitator (a stranger to the payment) submits the permit to the proxy. */
function settle(
  s: SignedPermit,
  override: { owner?: Address; to?: Address; validAfter?: bigint; amount?: bigint; signature?: Hex } = {},
) {
  const { permitted, nonce, deadline, witness } = s.message;
  return f.stranger.writeContract({
    address: X402_EXACT_PERMIT2_PROXY,
    abi: proxyAbi,
    functionName: "settle",
    args: [
      { permitted: { token: permitted.token, amount: override.amount ?? permitted.amount }, nonce, deadline },
      override.owner ?? s.owner,
      { to: override.to ?? witness.to, validAfter: override.validAfter ?? witness.validAfter },
      override.signature ?? s.signature,
    ],
    account: f.stranger.account,
  });
}

/** BillPay's Permit2Payment for a signed permit. */
function payment(s: SignedPermit) {
  return {
    token: s.message.permitted.token,
    amount: s.message.permitted.amount,
    nonce: s.message.nonce,
    deadline: s.message.deadline,
    owner: s.owner,
    to: s.message.witness.to,
    validAfter: s.message.witness.validAfter,
    signature: s.signature,
  };
}
type Permit2Payment = ReturnType<typeof payment>;

const refundPermit2 = (id: Hex, p: Permit2Payment, amount: bigint, account = f.refunder.account) =>
  f.billPay.write.refundPermit2([id, p, amount], { account });

/** Alice pays BillPay `amount` through Permit2; the facilitator settles it. */
async function paid(amount = units("7"), payer: Payer = f.alice) {
  const s = await signPermit(payer, { amount });
  await f.publicClient.waitForTransactionReceipt({ hash: await settle(s) });
  return s;
}

const nonceUsed = async (owner: Address, nonce: bigint) => {
  const word = await f.publicClient.readContract({ address: PERMIT2, abi: permit2Abi, functionName: "nonceBitmap", args: [owner, nonce >> 8n] });
  return ((word >> (nonce & 0xffn)) & 1n) === 1n;
};

describe("Permit2 and the x402 exact proxy on the local chains", () => {
  it("sit at their canonical addresses on chain ids 42220 and 8453, with Permit2 signing under that chain's domain", async () => {
    for (const [name, chainId] of [["celoLocal", 42220], ["baseLocal", 8453]] as const) {
      const connection = await network.connect({ network: name });
      const client = await connection.viem.getPublicClient();
      expect(await client.getChainId()).toBe(chainId);
      await placePermit2Contracts(client);
      expect(await client.getCode({ address: PERMIT2 })).toBe(permit2RuntimeCode());
      expect(await client.getCode({ address: X402_EXACT_PERMIT2_PROXY })).toBe(x402ExactPermit2ProxyRuntimeCode());
      // Uniswap's bytes cache mainnet's separator; at the canonical address on this chain they recompute it.
      const separator = await client.readContract({ address: PERMIT2, abi: permit2Abi, functionName: "DOMAIN_SEPARATOR" });
      expect(separator).toBe(domainSeparator({ domain: { name: "Permit2", chainId, verifyingContract: PERMIT2 } }));
      expect(separator).toBe(permit2DomainSeparator(chainId));
      const proxy = { address: X402_EXACT_PERMIT2_PROXY, abi: x402ExactPermit2ProxyABI } as const;
      expect(await client.readContract({ ...proxy, functionName: "PERMIT2" })).toBe(PERMIT2);
      expect(await client.readContract({ ...proxy, functionName: "WITNESS_TYPEHASH" })).toBe(
        keccak256(new TextEncoder().encode("Witness(address to,uint256 validAfter)")),
      );
      expect(await client.readContract({ ...proxy, functionName: "WITNESS_TYPE_STRING" })).toBe(
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)",
      );
      // Placing again changes nothing.
      await placePermit2Contracts(client);
      expect(await client.getCode({ address: PERMIT2 })).toBe(permit2RuntimeCode());
      await connection.close();
    }
  });

  it("are placed by the local stack's deployment (stack/local-deploy.ts)", async () => {
    const server = await network.createServer({ network: "baseLocal" }, "127.0.0.1", 0);
    const { address, port } = await server.listen();
    try {
      const url = `http://${address}:${port}`;
      const { deployment } = await ensureLocalDeployment("BASE", url);
      const client = publicClientFor("BASE", url);
      expect(await client.getCode({ address: PERMIT2 })).toBe(permit2RuntimeCode());
      expect(await client.getCode({ address: X402_EXACT_PERMIT2_PROXY })).toBe(x402ExactPermit2ProxyRuntimeCode());
      const separator = await client.readContract({ address: PERMIT2, abi: permit2Abi, functionName: "DOMAIN_SEPARATOR" });
      expect(separator).toBe(permit2DomainSeparator(8453));
      // Reusing the deployment on the same node keeps them (and places them again where missing).
      await client.request({ method: "hardhat_setCode" as never, params: [X402_EXACT_PERMIT2_PROXY, "0x"] as never });
      expect((await ensureLocalDeployment("BASE", url, deployment)).reused).toBe(true);
      expect(await client.getCode({ address: X402_EXACT_PERMIT2_PROXY })).toBe(x402ExactPermit2ProxyRuntimeCode());
    } finally {
      await server.close();
    }
  });

  it("but not on Hardhat's default chain id 31337, whose separator (for another address) Uniswap's bytes cache", async () => {
    // Uniswap built this bytecode on a Foundry test chain (31337): there Permit2 returns that
    // cached separator instead of recomputing it, so payments signed for the canonical domain fail.
    const connection = await network.connect();
    try {
      const client = await connection.viem.getPublicClient();
      expect(await client.getChainId()).toBe(31337);
      await expect(placePermit2Contracts(client)).rejects.toThrow(/chain id 31337/);
      const separator = await client.readContract({ address: PERMIT2, abi: permit2Abi, functionName: "DOMAIN_SEPARATOR" });
      expect(separator).not.toBe(domainSeparator({ domain: { name: "Permit2", chainId: 31337, verifyingContract: PERMIT2 } }));
      expect(permit2RuntimeCode()).toContain(separator.slice(2));
    } finally {
      await connection.close();
    }
  });

  it("the stand-in's ABI is exactly the one @x402/evm calls", () => {
    const ours = loadArtifact("local/X402ExactPermit2Proxy.sol", "x402ExactPermit2Proxy").abi;
    const sorted = (abi: readonly unknown[]) => abi.map(canonical).sort();
    expect(sorted(ours)).toEqual(sorted(x402ExactPermit2ProxyABI));
  });

  it("@x402/evm's own client signs and its facilitator verifies and settles a permit2 payment into BillPay on chain 42220", async () => {
    const connection = await network.connect({ network: "celoLocal" });
    const { viem } = connection;
    const client = await viem.getPublicClient();
    const [admin, facilitatorWallet, , , payerWallet] = await viem.getWalletClients();
    await placePermit2Contracts(client);
    const token = await viem.deployContract("PlainToken", ["Tether USD", "USD₮", admin!.account.address]);
    const billPay = await viem.deployContract("BillPay", [admin!.account.address, zeroAddress, zeroAddress, zeroAddress, []]);
    const payer = hardhatAccount(4);
    expect(getAddress(payerWallet!.account.address)).toBe(payer.address);
    await token.write.mint([payer.address, units("100")]);
    await token.write.approve([PERMIT2, maxUint256], { account: payerWallet!.account });

    const requirements = {
      scheme: "exact",
      network: "eip155:42220" as const,
      amount: units("3").toString(),
      asset: getAddress(token.address),
      payTo: getAddress(billPay.address),
      maxTimeoutSeconds: 120,
      extra: { assetTransferMethod: "permit2" },
    };
    const partial = await new ExactEvmClient(toClientEvmSigner(payer as Parameters<typeof toClientEvmSigner>[0], client as never)).createPaymentPayload(2, requirements);
    const payload = { ...partial, accepted: requirements, resource: { url: "http://localhost/bill", description: "", mimeType: "" } };
    const signer = toFacilitatorEvmSigner({
      ...facilitatorWallet!.extend(publicActions),
      address: facilitatorWallet!.account.address,
    } as never);
    const facilitator = new ExactEvmFacilitator(signer);
    const verified = await facilitator.verify(payload as never, requirements);
    expect(verified).toMatchObject({ isValid: true, payer: payer.address });
    const settled = await facilitator.settle(payload as never, requirements);
    expect(settled).toMatchObject({ success: true, payer: payer.address, network: "eip155:42220" });
    expect(await token.read.balanceOf([billPay.address])).toBe(units("3"));
    const receipt = await client.getTransactionReceipt({ hash: settled.transaction as Hex });
    expect(getAddress(receipt.to!)).toBe(X402_EXACT_PERMIT2_PROXY);
    expect(receipt.logs.map((l) => l.topics[0])).toEqual([TRANSFER, SETTLED]);
    await connection.close();
  });
});

describe("settling through the proxy", () => {
  beforeEach(async () => {
    f = await fixture();
  });
  afterEach(async () => {
    await f.connection.close();
  });

  it("moves exactly the permitted amount from the payer into BillPay, Settled() right after the token's Transfer", async () => {
    const before = await f.plain.read.balanceOf([f.addr.alice]);
    const s = await signPermit(f.alice, { amount: units("7") });
    const receipt = await f.publicClient.waitForTransactionReceipt({ hash: await settle(s) });
    expect(receipt.status).toBe("success");
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(units("7"));
    expect(await f.plain.read.balanceOf([f.addr.alice])).toBe(before - units("7"));
    expect(await f.plain.read.balanceOf([f.addr.stranger])).toBe(0n);

    expect(receipt.logs).toHaveLength(2);
    const [transfer, settled] = receipt.logs;
    expect(getAddress(transfer!.address)).toBe(f.plain.address);
    const [decoded] = parseEventLogs({ abi: f.plain.abi, logs: [transfer!] });
    expect(decoded).toMatchObject({ eventName: "Transfer", args: { from: f.addr.alice, to: f.billPay.address, value: units("7") } });
    expect(getAddress(settled!.address)).toBe(X402_EXACT_PERMIT2_PROXY);
    expect(settled!.topics).toEqual([SETTLED]);
    expect(settled!.logIndex).toBe(transfer!.logIndex + 1);
    expect(await nonceUsed(f.addr.alice, s.message.nonce)).toBe(true);
  });

  it("refuses a replay of the same signature", async () => {
    const s = await paid(units("7"));
    await expectRevert(settle(s), "InvalidNonce");
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(units("7"));
  });

  it("refuses a facilitator's redirect of the payee, or a changed amount or owner", async () => {
    const s = await signPermit(f.alice, { amount: units("7") });
    await expectRevert(settle(s, { to: f.addr.stranger }), "InvalidSigner");
    await expectRevert(settle(s, { amount: units("8") }), "InvalidSigner");
    await expectRevert(settle(s, { owner: f.addr.bob }), "InvalidSigner");
    // A permit naming another spender cannot be spent by the proxy.
    const elsewhere = await signPermit(f.alice, { spender: f.addr.stranger });
    await expectRevert(settle(elsewhere), "InvalidSigner");
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(0n);
    expect(await f.plain.read.balanceOf([f.addr.stranger])).toBe(0n);
    // The untouched permit still settles.
    await settle(s);
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(units("7"));
  });

  it("checks the proxy's own rules: amount, owner, destination, validAfter, and Permit2's deadline", async () => {
    const s = await signPermit(f.alice);
    await expectRevert(settle(s, { amount: 0n }), "InvalidAmount");
    await expectRevert(settle(s, { owner: zeroAddress }), "InvalidOwner");
    await expectRevert(settle(s, { to: zeroAddress }), "InvalidDestination");
    const now = (await f.publicClient.getBlock()).timestamp;
    const early = await signPermit(f.alice, { validAfter: now + 1000n });
    await expectRevert(settle(early), "PaymentTooEarly");
    const expired = await signPermit(f.alice, { deadline: now - 1n });
    await expectRevert(settle(expired), "SignatureExpired");
  });

  it("settleWithPermit: refuses an EIP-2612 value below the amount, and a permit the token refuses reverts the settlement, as the spec's reference does", async () => {
    const s = await signPermit(f.alice, { amount: units("7") });
    const { permitted, nonce, deadline, witness } = s.message;
    const settleWithPermit = (value: bigint) =>
      f.stranger.writeContract({
        address: X402_EXACT_PERMIT2_PROXY,
        abi: proxyAbi,
        functionName: "settleWithPermit",
        args: [
          { value, deadline, r: `0x${"11".repeat(32)}`, s: `0x${"22".repeat(32)}`, v: 27 },
          { permitted, nonce, deadline },
          s.owner,
          witness,
          s.signature,
        ],
        account: f.stranger.account,
      });
    await expectRevert(settleWithPermit(units("7") - 1n), "Permit2612AmountMismatch");
    // The plain token has no permit(): the call reverts, and nothing moves.
    await expect(settleWithPermit(units("7"))).rejects.toThrow();
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(0n);
  });
});

describe("refundPermit2", () => {
  beforeEach(async () => {
    f = await fixture();
  });
  afterEach(async () => {
    await f.connection.close();
  });

  it("pays the payer back once per (owner, nonce), records the order and emits Permit2Refunded", async () => {
    const s = await paid(units("7"));
    const id = orderId();
    const before = await f.plain.read.balanceOf([f.addr.alice]);
    const hash = await refundPermit2(id, payment(s), units("7"));
    const logs = await f.logsOf(hash);
    expect(logs.map((l) => l.eventName)).toEqual(["Permit2Refunded"]);
    expect(logs[0]?.args).toEqual({ orderId: id, payer: f.addr.alice, token: f.plain.address, amount: units("7"), nonce: s.message.nonce });
    expect(await f.plain.read.balanceOf([f.addr.alice])).toBe(before + units("7"));
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(0n);
    expect(await f.billPay.read.orderOf([id])).toEqual({ payer: f.addr.alice, paid: 0n, token: f.plain.address, refunded: true, pulledAt: 0n });
    const key = keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [f.addr.alice, s.message.nonce]));
    expect(await f.billPay.read.permit2Refunded([key])).toBe(true);

    await expectRevert(refundPermit2(orderId(), payment(s), 1n), "Permit2AlreadyRefunded");
    // Permit2 nonces are per owner across tokens: the same nonce signed for another token is the same payment slot.
    const other = await signPermit(f.alice, { token: f.usdc.address, nonce: s.message.nonce });
    await expectRevert(refundPermit2(orderId(), payment(other), 1n), "Permit2AlreadyRefunded");
  });

  it("pays back at most the permitted amount, and part of it if asked", async () => {
    const s = await paid(units("7"));
    await expectRevert(refundPermit2(orderId(), payment(s), units("7") + 1n), "RefundExceedsPayment");
    const before = await f.plain.read.balanceOf([f.addr.alice]);
    await refundPermit2(orderId(), payment(s), units("2"));
    expect(await f.plain.read.balanceOf([f.addr.alice])).toBe(before + units("2"));
    expect(await f.plain.read.balanceOf([f.billPay.address])).toBe(units("5"));
  });

  it("refuses a permit that was never settled (its nonce is unused)", async () => {
    await paid(units("7")); // BillPay holds funds to refund from.
    const unsettled = await signPermit(f.alice, { amount: units("7") });
    await expectRevert(refundPermit2(orderId(), payment(unsettled), units("7")), "Permit2NonceNotUsed");
  });

  it("refuses a forged or altered payment: only the owner's signature under Permit2's domain and the proxy as spender", async () => {
    const s = await paid(units("7"));
    const p = payment(s);
    await expectRevert(refundPermit2(orderId(), { ...p, amount: units("700") }, units("700")), "InvalidPermit2Signature");
    await expectRevert(refundPermit2(orderId(), { ...p, owner: f.addr.bob }, 1n), "InvalidPermit2Signature");
    await expectRevert(refundPermit2(orderId(), { ...p, token: f.usdc.address }, 1n), "InvalidPermit2Signature");
    await expectRevert(refundPermit2(orderId(), { ...p, deadline: p.deadline + 1n }, 1n), "InvalidPermit2Signature");
    await expectRevert(refundPermit2(orderId(), { ...p, validAfter: 1n }, 1n), "InvalidPermit2Signature");
    // Bob signs Alice's payment: not Alice's signature.
    const forged = await signPermit(f.bob, { nonce: s.message.nonce, amount: units("7") });
    await expectRevert(refundPermit2(orderId(), { ...p, signature: forged.signature }, 1n), "InvalidPermit2Signature");
    // Alice's signature, but to another spender than the x402 proxy.
    const otherSpender = await signPermit(f.alice, { nonce: s.message.nonce, amount: units("7"), spender: f.addr.stranger });
    await expectRevert(refundPermit2(orderId(), { ...p, signature: otherSpender.signature }, 1n), "InvalidPermit2Signature");
    await refundPermit2(orderId(), p, units("7"));
  });

  it("refuses a payment whose payee is not BillPay", async () => {
    await paid(units("7")); // BillPay holds funds to refund from.
    const s = await signPermit(f.alice, { to: f.addr.stranger });
    await settle(s);
    await expectRevert(refundPermit2(orderId(), payment(s), 1n), "AuthorizationNotToThisContract");
  });

  it("is the refunder's alone, stops while paused, refuses a zero amount or owner, and shares the order-id space", async () => {
    const s = await paid(units("7"));
    for (const caller of [f.admin, f.operator, f.alice, f.stranger]) {
      await expectRevert(refundPermit2(orderId(), payment(s), 1n, caller.account), "AccessControlUnauthorizedAccount");
    }
    await expectRevert(refundPermit2(orderId(), payment(s), 0n), "ZeroAmount");
    await expectRevert(refundPermit2(orderId(), { ...payment(s), owner: zeroAddress }, 1n), "ZeroAddress");
    await f.billPay.write.setSpendingAllowance([f.usdc.address, units("1")], { account: f.alice.account });
    const pulledId = orderId();
    await f.billPay.write.pull([pulledId, f.addr.alice, f.usdc.address, units("1")], { account: f.operator.account });
    await expectRevert(refundPermit2(pulledId, payment(s), 1n), "OrderExists");
    await f.billPay.write.pause({ account: f.pauser.account });
    await expectRevert(refundPermit2(orderId(), payment(s), 1n), "EnforcedPause");
    await f.billPay.write.unpause({ account: f.pauser.account });
    const id = orderId();
    await refundPermit2(id, payment(s), units("7"));
    await expectRevert(f.billPay.write.refund([id, 1n], { account: f.refunder.account }), "AlreadyRefunded");
  });

  it("draws on the token's refund budget, and refuses a token without one", async () => {
    await f.billPay.write.setRefundBudget([f.plain.address, units("10"), DAY]);
    const a = await paid(units("8"));
    const b = await paid(units("8"), f.bob);
    await refundPermit2(orderId(), payment(a), units("8"));
    await expectRevert(refundPermit2(orderId(), payment(b), units("8")), "RefundBudgetExceeded");
    expect((await f.billPay.read.refundBudget([f.plain.address]))[2]).toBeLessThan(units("8"));
    // USDC paid through Permit2 has a budget; the no-return token has none.
    await f.noReturn.write.approve([PERMIT2, maxUint256], { account: f.alice.account });
    const noBudget = await signPermit(f.alice, { token: f.noReturn.address, amount: units("1") });
    await settle(noBudget);
    await expectRevert(refundPermit2(orderId(), payment(noBudget), units("1")), "RefundBudgetExceeded");
  });

  it("accepts an ERC-1271 wallet's signature", async () => {
    await paid(units("7")); // BillPay holds funds to refund from.
    const wallet = await f.viem.deployContract("OwnedWallet", [f.addr.alice]);
    const walletAddress = getAddress(wallet.address);
    await f.plain.write.mint([walletAddress, units("5")]);
    await f.testClient.impersonateAccount({ address: walletAddress });
    await f.testClient.setBalance({ address: walletAddress, value: 10n ** 18n });
    await f.plain.write.approve([PERMIT2, maxUint256], { account: walletAddress });
    await f.testClient.stopImpersonatingAccount({ address: walletAddress });
    // Alice, the wallet's owner, signs the Permit2 digest; Permit2 and BillPay ask the wallet.
    const s = await signPermit(f.alice, { amount: units("5") });
    const fromWallet = { ...s, owner: walletAddress };
    const hash = await settle(fromWallet);
    expect((await f.publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");
    expect(await f.plain.read.balanceOf([walletAddress])).toBe(0n);
    await refundPermit2(orderId(), payment(fromWallet), units("5"));
    expect(await f.plain.read.balanceOf([walletAddress])).toBe(units("5"));
  });

  it("reverts Permit2Missing on a chain without Permit2", async () => {
    const s = await paid(units("7"));
    await f.testClient.setCode({ address: PERMIT2, bytecode: "0x" });
    await expectRevert(refundPermit2(orderId(), payment(s), units("7")), "Permit2Missing");
  });

  it("a leaked refunder key: a permit from its own wallet with the nonce invalidated takes at most the budget", async () => {
    // What the chain cannot tell: a used nonce may have been invalidated rather than paid.
    await f.plain.write.mint([f.billPay.address, units("2000")]);
    const thief = f.refunder;
    const drain = async (amount: bigint) => {
      const nonce = hexToBigInt(randomNonce());
      const s = await signPermit(thief, { amount, nonce });
      await thief.writeContract({
        address: PERMIT2,
        abi: permit2Abi,
        functionName: "invalidateUnorderedNonces",
        args: [nonce >> 8n, 1n << (nonce & 0xffn)],
        account: thief.account,
      });
      expect(await nonceUsed(f.addr.refunder, nonce)).toBe(true);
      return refundPermit2(orderId(), payment(s), amount);
    };
    await expectRevert(drain(units("2000")), "RefundBudgetExceeded");
    await drain(REFUND_BUDGET);
    // (The budget refills at 500 a day, a few thousandths of a unit per second of this chain.)
    await expectRevert(drain(units("1")), "RefundBudgetExceeded");
    expect(await f.plain.read.balanceOf([f.addr.refunder])).toBe(REFUND_BUDGET);
  });
});
