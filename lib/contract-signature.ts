/**
 * Asking a contract wallet whether it accepts a signature (ERC-1271 `isValidSignature`), with
 * a gas cap: the wallet's code is anyone's, and without a cap one check could run the node's
 * whole eth_call allowance. A wallet that runs past the cap, reverts or answers anything but
 * the magic value does not accept it.
 */
import { encodeFunctionData, parseAbi, type Hex, type PublicClient } from "viem";

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
