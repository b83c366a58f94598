/**
 * Asking a contract wallet whether it accepts a signature (ERC-1271 `isValidSignature`), with
 * a gas cap: the wallet's code is anyone's, and without a cap one check could run the node's
 * whole eth_call allowance. A wallet that runs past the cap, reverts or answers anything but
 * the magic value does not accept it.
 */
import { encodeFunctionData, hashMessage, parseAbi, recoverMessageAddress, type Hex, type PublicClient } from "viem";

const ERC1271_ABI = parseAbi(["function isValidSignature(bytes32 hash, bytes signature) view returns (bytes4)"]);
const MAGIC_VALUE = "0x1626ba7e";

/** Gas one contract wallet's check may use: enough for multisig and passkey wallets. */
export const CONTRACT_SIGNATURE_GAS = 1_000_000n;

export async function contractAccepts(client: Pick<PublicClient, "call">, wallet: Hex, hash: Hex, signature: Hex, gas = CONTRACT_SIGNATURE_GAS): Promise<boolean> {
  try {
    const { data } = await client.call({ to: wallet, data: encodeFunctionData({ abi: ERC1271_ABI, functionName: "isValidSignature", args: [hash, signature] }), gas });
    return data !== undefined && data.slice(0, 10).toLowerCase() === MAGIC_VALUE;
  } catch {
    return false;
  }
}

/** ERC-6492's suffix: a signature wrapped for a contract wallet not deployed yet. */
const ERC6492_SUFFIX = "6492".repeat(16);

/**
 * Who signed `message` (EIP-191) for `address`: "wallet" when the signature recovers to it
 * (on any chain); "contract" when its code on `client`'s chain accepts it (ERC-1271 within
 * the gas cap; an ERC-6492 signature of a wallet not yet deployed is left to viem, which
 * deploys it in the call); else null. `client` absent: ordinary wallets only.
 */
export async function messageSigner(
  client: Pick<PublicClient, "getCode" | "call" | "verifyMessage"> | undefined,
  address: Hex,
  message: string,
  signature: Hex,
): Promise<"wallet" | "contract" | null> {
  const recovered = await recoverMessageAddress({ message, signature }).catch(() => undefined);
  if (recovered && recovered.toLowerCase() === address.toLowerCase()) return "wallet";
  if (!client) return null;
  try {
    const code = await client.getCode({ address });
    if (code && code !== "0x" && !signature.toLowerCase().endsWith(ERC6492_SUFFIX)) {
      return (await contractAccepts(client, address, hashMessage(message), signature)) ? "contract" : null;
    }
    return (await client.verifyMessage({ address, message, signature })) ? "contract" : null;
  } catch {
    return null;
  }
}
