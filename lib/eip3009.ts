/** EIP-3009 typed data (one definition for the project) and signing with a token's own EIP-712 domain. */
import { parseSignature, toHex, type Address, type Hex, type WalletClient, type Account } from "viem";

export const TRANSFER_WITH_AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

export const RECEIVE_WITH_AUTHORIZATION_TYPES = {
  ReceiveWithAuthorization: TRANSFER_WITH_AUTHORIZATION_TYPES.TransferWithAuthorization,
} as const;

export const CANCEL_AUTHORIZATION_TYPES = {
  CancelAuthorization: [
    { name: "authorizer", type: "address" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

export function randomNonce(): Hex {
  return toHex(crypto.getRandomValues(new Uint8Array(32)));
}

interface DomainSource {
  address: Address;
  read: { eip712Domain: () => Promise<readonly [Hex, string, string, bigint, Address, Hex, readonly bigint[]]> };
}

export async function domainOf(token: DomainSource) {
  const [, name, version, chainId, verifyingContract] = await token.read.eip712Domain();
  return { name, version, chainId: Number(chainId), verifyingContract };
}

type Signer = WalletClient & { account: Account };

export interface AuthorizationInput {
  from: Address;
  to: Address;
  value: bigint;
  nonce?: Hex;
  validAfter?: bigint;
  validBefore?: bigint;
}

/**
 * Signs a TransferWithAuthorization (or ReceiveWithAuthorization) and returns the message,
 * the packed signature, and the argument list of the (v, r, s) form of the call.
 */
export async function signTransferAuthorization(
  signer: Signer,
  token: DomainSource,
  input: AuthorizationInput,
  primaryType: "TransferWithAuthorization" | "ReceiveWithAuthorization" = "TransferWithAuthorization",
) {
  const message = {
    from: input.from,
    to: input.to,
    value: input.value,
    validAfter: input.validAfter ?? 0n,
    validBefore: input.validBefore ?? BigInt(Math.floor(Date.now() / 1000) + 3600),
    nonce: input.nonce ?? randomNonce(),
  };
  const types = primaryType === "TransferWithAuthorization" ? TRANSFER_WITH_AUTHORIZATION_TYPES : RECEIVE_WITH_AUTHORIZATION_TYPES;
  const signature = await signer.signTypedData({
    account: signer.account,
    domain: await domainOf(token),
    types,
    primaryType,
    message,
  } as never);
  const { v, r, s } = parseSignature(signature);
  const args = [
    message.from,
    message.to,
    message.value,
    message.validAfter,
    message.validBefore,
    message.nonce,
    Number(v),
    r,
    s,
  ] as const;
  return { message, signature, args };
}
