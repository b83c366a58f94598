/**
 * Asking a contract wallet whether it accepts a signature (ERC-1271 `isValidSignature`), with
 * a gas cap: the wallet's code is anyone's, and without a cap one check could run the node's
 * whole eth_call allowance. A wallet that runs past the cap, reverts or answers anything but
 * the magic value does not accept it.
 */
import {
  encodeDeployData,
  encodeFunctionData,
  erc6492SignatureValidatorAbi,
  erc6492SignatureValidatorByteCode,
  hashMessage,
  hexToBool,
  isErc6492Signature,
  parseAbi,
  recoverMessageAddress,
  type Hex,
  type PublicClient,
} from "viem";

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

/**
 * Whether an ERC-6492 signature (a wallet not deployed yet, with the factory call that
 * deploys it) holds, asked of ERC-6492's own validator in one call that deploys nothing, as
 * viem's verifyHash asks it, within the same gas cap: the factory call is anyone's code too.
 */
export async function counterfactualAccepts(client: Pick<PublicClient, "call">, wallet: Hex, hash: Hex, signature: Hex, gas = CONTRACT_SIGNATURE_GAS): Promise<boolean> {
  try {
    const data = encodeDeployData({ abi: erc6492SignatureValidatorAbi, bytecode: erc6492SignatureValidatorByteCode, args: [wallet, hash, signature] });
    const answer = await client.call({ data, gas });
    return answer.data !== undefined && hexToBool(answer.data);
  } catch {
    return false;
  }
}

/**
 * Who signed `message` (EIP-191) for `address`: "wallet" when the signature recovers to it
 * (on any chain); "contract" when its code on `client`'s chain accepts it (ERC-1271), or, for
 * an ERC-6492 signature, when the wallet it would deploy would (each within the gas cap);
 * else null. `client` absent: ordinary wallets only.
 */
export async function messageSigner(
  client: Pick<PublicClient, "getCode" | "call"> | undefined,
  address: Hex,
  message: string,
  signature: Hex,
): Promise<"wallet" | "contract" | null> {
  const recovered = await recoverMessageAddress({ message, signature }).catch(() => undefined);
  if (recovered && recovered.toLowerCase() === address.toLowerCase()) return "wallet";
  if (!client) return null;
  if (isErc6492Signature(signature)) return (await counterfactualAccepts(client, address, hashMessage(message), signature)) ? "contract" : null;
  try {
    // No code and a signature that does not recover to it: nothing could accept it.
    const code = await client.getCode({ address });
    if (!code || code === "0x") return null;
    return (await contractAccepts(client, address, hashMessage(message), signature)) ? "contract" : null;
  } catch {
    return null;
  }
}
