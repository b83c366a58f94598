/**
 * Permit2 as x402's `exact` scheme moves a token that has no EIP-3009 (x402
 * specs/schemes/exact/scheme_exact_evm.md, "AssetTransferMethod: Permit2"): the payer approves
 * the canonical Permit2 once, then signs a PermitWitnessTransferFrom whose spender is the
 * canonical x402 exact proxy and whose witness names the payee; the facilitator calls the
 * proxy's `settle`, and the proxy has Permit2 move exactly the permitted amount to the witness's
 * payee, then logs `Settled()`. Permit2 spends each (owner, nonce) once, across all tokens.
 * The addresses, types and the proxy's ABI are @x402/evm's own, so the service, its
 * facilitator and its payers cannot disagree on them.
 */
import { PERMIT2_ADDRESS, permit2WitnessTypes, x402ExactPermit2ProxyABI, x402ExactPermit2ProxyAddress } from "@x402/evm";
import { decodeFunctionData, encodeFunctionData, erc20Abi, keccak256, parseAbi, toBytes, toEventSelector, toHex, type Hex } from "viem";

/** Permit2's canonical address, the same on every EVM chain. */
export const PERMIT2 = PERMIT2_ADDRESS as Hex;
/** The canonical x402ExactPermit2Proxy: the spender every x402 Permit2 signature names. */
export const X402_EXACT_PROXY = x402ExactPermit2ProxyAddress as Hex;
export const PERMIT2_WITNESS_TYPES = permit2WitnessTypes;
export const x402ExactProxyAbi = x402ExactPermit2ProxyABI;

/** The views of Permit2 the service reads: whether a nonce is spent, and its signing domain. */
export const permit2Abi = parseAbi([
  "function nonceBitmap(address owner, uint256 wordPosition) view returns (uint256)",
  "function DOMAIN_SEPARATOR() view returns (bytes32)",
]);

/** The witness every x402 exact permit signs (the spec's WITNESS_TYPEHASH), which BillPay's refunds hash by too. */
export const PROXY_WITNESS_TYPEHASH = keccak256(toBytes("Witness(address to,uint256 validAfter)"));

/** The proxy's logs after a settlement's transfer (its ABI's `Settled()`, `SettledWithPermit()`). */
export const PROXY_SETTLED = [toEventSelector("Settled()"), toEventSelector("SettledWithPermit()")];

export const permit2Domain = (chainId: number) => ({ name: "Permit2", chainId, verifyingContract: PERMIT2 }) as const;

/** A Permit2 nonce as the ledger and the orders key it: 32 bytes of hex, like an EIP-3009 nonce (told apart by rail). */
export const permit2NonceKey = (nonce: bigint): Hex => toHex(nonce, { size: 32 });

/** Where Permit2 keeps a nonce's bit: word `nonce >> 8`, bit `nonce & 0xff` (its unordered nonces). */
export const nonceBit = (nonce: bigint) => ({ word: nonce >> 8n, bit: nonce & 0xffn });

/** A Permit2 settlement as the proxy's calldata states it (x402's settle and settleWithPermit). */
export interface ProxySettlement {
  token: Hex;
  amount: bigint;
  nonce: bigint;
  deadline: bigint;
  owner: Hex;
  to: Hex;
  validAfter: bigint;
  signature: Hex;
}

/** The settlement a call to the proxy makes, or null for any other calldata. */
export function proxySettlementIn(input: Hex | undefined): ProxySettlement | null {
  if (!input) return null;
  try {
    const call = decodeFunctionData({ abi: x402ExactProxyAbi, data: input });
    if (call.functionName !== "settle" && call.functionName !== "settleWithPermit") return null;
    const [permit, owner, witness, signature] = (call.functionName === "settle" ? call.args : call.args.slice(1)) as [
      { permitted: { token: Hex; amount: bigint }; nonce: bigint; deadline: bigint },
      Hex,
      { to: Hex; validAfter: bigint },
      Hex,
    ];
    return { token: permit.permitted.token, amount: permit.permitted.amount, nonce: permit.nonce, deadline: permit.deadline, owner, to: witness.to, validAfter: witness.validAfter, signature };
  } catch {
    return null;
  }
}

/**
 * What the payer must approve before a Permit2 payment can settle, or null when Permit2 may
 * already move `amount` (x402 scheme_exact_evm.md, Permit2 verification step 2: without an
 * allowance to Permit2 the facilitator answers PERMIT2_ALLOWANCE_REQUIRED, 412). The one-time
 * approval is the payer's own transaction; nothing in x402 makes it for them here.
 */
export async function permit2ApprovalNeeded(
  client: { readContract(args: { address: Hex; abi: typeof erc20Abi; functionName: "allowance"; args: readonly [Hex, Hex] }): Promise<bigint> },
  token: Hex,
  owner: Hex,
  amount: bigint,
): Promise<Permit2Approval | null> {
  const allowance = await client.readContract({ address: token, abi: erc20Abi, functionName: "allowance", args: [owner, PERMIT2] });
  return allowance >= amount ? null : permit2Approval(token, amount, allowance);
}

/** The approval a payer needs, as the service tells it: which token, to whom, at least how much, and the call to make. */
export interface Permit2Approval {
  token: Hex;
  spender: Hex;
  at_least: string;
  current_allowance: string | null;
  /** approve(Permit2, at_least) on the token, ready to send from the payer's wallet. */
  calldata: Hex;
}

export function permit2Approval(token: Hex, amount: bigint, allowance: bigint | null): Permit2Approval {
  return {
    token,
    spender: PERMIT2,
    at_least: amount.toString(),
    current_allowance: allowance === null ? null : allowance.toString(),
    calldata: encodeFunctionData({ abi: erc20Abi, functionName: "approve", args: [PERMIT2, amount] }),
  };
}
