/**
 * Idempotent deployment of the local stack onto one chain: local tokens shaped like the
 * real ones, BillPay with its roles, accept-list and refund and pull budgets, Multicall3 at its
 * canonical address, Permit2 and the x402 exact Permit2 proxy at theirs (lib/permit2-code.ts),
 * and 10,000 of every token for each funded payer account.
 */
import {
  getAddress,
  createWalletClient,
  http,
  parseUnits,
  type Address,
  type Hex,
  type PublicClient,
} from "viem";
import { deploy, DeploymentResultType, type EIP1193Provider } from "@nomicfoundation/ignition-core";
import { billPayAbi } from "../lib/generated/abis.ts";
import { ignitionArtifacts, loadArtifact } from "../lib/artifacts.ts";
import { billPayModule, type BillPaySpec } from "../ignition/modules/BillPay.ts";
import { publicClientFor, RPC_TIMEOUT_MS } from "../lib/chain-client.ts";
import { chainInfo, MULTICALL3_ADDRESS, viemChain, type ChainKey } from "../lib/chains.ts";
import { pullBudgetFromEnv, refundBudgetFromEnv, type ChainDeployment, type TokenDeployment } from "../lib/deployments.ts";
import { deployerAccount, operatorAccount, facilitatorAccount, payerAccounts, refunderAccount } from "../lib/local-accounts.ts";
import { placePermit2Contracts } from "../lib/permit2-code.ts";

const FUNDING_PER_TOKEN = parseUnits("10000", 6);
const GAS_FUNDING = parseUnits("1000", 18);
/** A mint to a new holder costs about 70,000 gas (OpenZeppelin's ERC-20); room to spare, and 17 payers' mints of three tokens still fit one block. */
const MINT_GAS = 150_000n;

/**
 * Deploys the BillPay module (ignition/modules/BillPay.ts) through Ignition with an in-memory
 * journal, the deployer signing through the local node (impersonated when its key is not one
 * of the node's). Returns the address and a block at or before the deployment's.
 */
async function deployBillPayLocally(client: PublicClient, spec: BillPaySpec): Promise<{ address: string; block: number }> {
  const before = await client.getBlockNumber();
  const unlocked = (await client.request({ method: "eth_accounts" as never })) as string[];
  if (!unlocked.some((a) => a.toLowerCase() === spec.deployer.toLowerCase())) {
    await client.request({ method: "hardhat_impersonateAccount" as never, params: [spec.deployer] as never });
  }
  const result = await deploy({
    provider: client as unknown as EIP1193Provider,
    artifactResolver: ignitionArtifacts,
    ignitionModule: billPayModule(spec),
    deploymentParameters: {},
    accounts: [spec.deployer],
    defaultSender: spec.deployer,
    config: { requiredConfirmations: 1 },
  });
  if (result.type !== DeploymentResultType.SUCCESSFUL_DEPLOYMENT) {
    throw new Error(`deploying BillPay failed: ${JSON.stringify(result, (_k, v) => (typeof v === "bigint" ? v.toString() : v))}`);
  }
  return { address: getAddress(result.contracts["BillPay#BillPay"]!.address), block: Number(before) + 1 };
}

/**
 * Mints 10,000 of every token in `tokens` to each of `payers` from the deployer (sent with
 * explicit nonces, awaited together), as the local deployment funds Hardhat's payer accounts.
 * With `gas`, each also gets 1,000 of the native coin first: the node's genesis funds only
 * its own well-known accounts, and a key made elsewhere (a test's fresh wallet) holds none.
 */
export async function fundPayers(chainKey: ChainKey, rpcUrl: string, tokens: TokenDeployment[], payers: Address[], options: { gas: boolean }): Promise<{ blocks: bigint[] }> {
  // Reads and balance settings are retried: one that resets on a keep-alive socket the node
  // closed a moment before is safe to send again. A transaction is sent once.
  const client = publicClientFor(chainKey, rpcUrl, 2);
  const deployer = deployerAccount();
  const wallet = createWalletClient({ account: deployer, chain: viemChain(chainKey, rpcUrl), transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 0 }) });
  if (options.gas) {
    for (const who of payers) await client.request({ method: "hardhat_setBalance" as never, params: [who, `0x${GAS_FUNDING.toString(16)}`] as never });
  }
  const eip3009 = loadArtifact("tokens/EIP3009Token.sol", "EIP3009Token");
  const plain = loadArtifact("tokens/PlainToken.sol", "PlainToken");
  // One block for all the mints on an automining node (a block each would move its clock a
  // second ahead per mint, past the validity windows of payments signed by wall-clock time);
  // a node mining on an interval is left to it. The gas and fees are set once, not estimated
  // per mint, so that each send is one request.
  const automine = (await client.request({ method: "hardhat_getAutomine" as never })) as boolean;
  const fees = await client.estimateFeesPerGas();
  const priced = { gas: MINT_GAS, maxFeePerGas: fees.maxFeePerGas * 2n, maxPriorityFeePerGas: fees.maxPriorityFeePerGas };
  const txs: Hex[] = [];
  if (automine) await client.request({ method: "evm_setAutomine" as never, params: [false] as never });
  try {
    let nonce = await client.getTransactionCount({ address: deployer.address, blockTag: "pending" });
    for (const token of tokens) {
      const abi = token.eip712Version !== null ? eip3009.abi : plain.abi;
      for (const payer of payers) {
        txs.push(await wallet.writeContract({ address: token.address as Address, abi, functionName: "mint", args: [payer, FUNDING_PER_TOKEN], nonce: nonce++, ...priced }));
      }
    }
    // Mined until the last is in: a block whose gas runs out leaves the rest for the next.
    const last = txs.at(-1);
    if (automine && last) {
      for (let blocks = 0; blocks < txs.length; blocks++) {
        await client.request({ method: "evm_mine" as never });
        if (await client.getTransactionReceipt({ hash: last }).catch(() => null)) break;
      }
    }
  } finally {
    if (automine) await client.request({ method: "evm_setAutomine" as never, params: [true] as never });
  }
  const receipts = await Promise.all(txs.map((hash) => client.waitForTransactionReceipt({ hash })));
  const failed = receipts.filter((r) => r.status !== "success");
  if (failed.length > 0) throw new Error(`${failed.length} funding transactions failed on ${chainKey}`);
  return { blocks: [...new Set(receipts.map((r) => r.blockNumber))] };
}

export interface DeployResult {
  deployment: ChainDeployment;
  reused: boolean;
}

async function hasCode(client: PublicClient, address: Address): Promise<boolean> {
  const code = await client.getCode({ address });
  return code !== undefined && code !== "0x";
}

/**
 * True when `existing` is still on this chain and fits the configured keys: same genesis,
 * code at every address, and the configured operator and refunder hold their roles (an
 * older BillPay without the refunder role does not fit, nor one recorded without a pull
 * budget: it was deployed before BillPay had pull budgets).
 */
async function stillDeployed(client: PublicClient, existing: ChainDeployment, genesisHash: Hex): Promise<boolean> {
  if (existing.genesisHash !== genesisHash || !existing.pullBudget) return false;
  const addresses = [existing.billPay.address, existing.multicall3, ...existing.tokens.map((t) => t.address)];
  const present = await Promise.all(addresses.map((a) => hasCode(client, a as Address)));
  if (!present.every(Boolean)) return false;
  // A BillPay built by an older checkout (before refundPermit2, say) is deployed afresh: the
  // service would refuse to start on it. BillPay has no immutables, so its code is the artifact's.
  const code = await client.getCode({ address: existing.billPay.address as Address });
  if (code?.toLowerCase() !== loadArtifact("BillPay.sol", "BillPay").deployedBytecode.toLowerCase()) return false;
  const billPay = existing.billPay.address as Address;
  const holds = async (role: "OPERATOR_ROLE" | "REFUNDER_ROLE", account: Address) =>
    client.readContract({
      address: billPay,
      abi: billPayAbi,
      functionName: "hasRole",
      args: [await client.readContract({ address: billPay, abi: billPayAbi, functionName: role }), account],
    });
  try {
    return (await holds("OPERATOR_ROLE", operatorAccount().address)) && (await holds("REFUNDER_ROLE", refunderAccount().address));
  } catch {
    return false;
  }
}

/** Whether the node at `rpcUrl` holds `existing` (its genesis, its code, its roles): the chain is this checkout's. */
export async function holdsDeployment(chainKey: ChainKey, rpcUrl: string, existing: ChainDeployment | undefined): Promise<boolean> {
  if (!existing) return false;
  const client = publicClientFor(chainKey, rpcUrl);
  const genesis = await client.getBlock({ blockNumber: 0n });
  return stillDeployed(client, existing, genesis.hash);
}

export async function ensureLocalDeployment(
  chainKey: ChainKey,
  rpcUrl: string,
  existing?: ChainDeployment,
): Promise<DeployResult> {
  const chain = chainInfo(chainKey);
  const client = publicClientFor(chainKey, rpcUrl);
  const chainId = await client.getChainId();
  if (chainId !== chain.chainId) {
    throw new Error(`${rpcUrl} serves chain id ${chainId}, expected ${chain.chainId} for ${chainKey}`);
  }
  const genesis = await client.getBlock({ blockNumber: 0n });
  // Uniswap's Permit2 and the x402 exact proxy at their canonical addresses, and Multicall3 at
  // its (hardhat_setCode), for x402 payments with assetTransferMethod "permit2" and the
  // facilitator's reads. Placed before the reuse check, where the code is not already this
  // checkout's, so a running node deployed by an older checkout gets them too; no transaction
  // is sent. Why Uniswap's bytes sign under this chain's id: lib/permit2-code.ts.
  await placePermit2Contracts(client);
  const multicall = loadArtifact("local/Multicall3.sol", "Multicall3").deployedBytecode;
  if ((await client.getCode({ address: MULTICALL3_ADDRESS }))?.toLowerCase() !== multicall.toLowerCase()) {
    await client.request({ method: "hardhat_setCode" as never, params: [MULTICALL3_ADDRESS, multicall] as never });
  }
  if (existing && (await stillDeployed(client, existing, genesis.hash))) {
    return { deployment: { ...existing, rpcUrl }, reused: true };
  }

  const deployer = deployerAccount();
  const operator = operatorAccount().address;
  const refunder = refunderAccount().address;
  const facilitator = facilitatorAccount().address;
  const refundBudget = refundBudgetFromEnv();
  const pullBudget = pullBudgetFromEnv();
  const wallet = createWalletClient({
    account: deployer,
    chain: viemChain(chainKey, rpcUrl),
    transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS, retryCount: 0 }),
  });

  // Role keys given by env may hold no gas on a fresh local chain.
  for (const who of [deployer.address, operator, refunder, facilitator]) {
    if ((await client.getBalance({ address: who })) === 0n) {
      await client.request({ method: "hardhat_setBalance" as never, params: [who, `0x${GAS_FUNDING.toString(16)}`] as never });
    }
  }

  // Explicit nonces, receipts awaited once at the end.
  let nonce = await client.getTransactionCount({ address: deployer.address, blockTag: "pending" });
  const eip3009 = loadArtifact("tokens/EIP3009Token.sol", "EIP3009Token");
  const plain = loadArtifact("tokens/PlainToken.sol", "PlainToken");

  // Sent one at a time: an automining node refuses a nonce that arrives ahead of its turn.
  const tokenTxs: Hex[] = [];
  for (const t of chain.tokens) {
    tokenTxs.push(
      t.eip712Version !== null
        ? await wallet.deployContract({
            abi: eip3009.abi,
            bytecode: eip3009.bytecode,
            args: [t.name, t.symbol, t.eip712Version, deployer.address],
            nonce: nonce++,
          })
        : await wallet.deployContract({
            abi: plain.abi,
            bytecode: plain.bytecode,
            args: [t.name, t.symbol, deployer.address],
            nonce: nonce++,
          }),
    );
  }
  const tokenReceipts = await Promise.all(tokenTxs.map((hash) => client.waitForTransactionReceipt({ hash })));
  const tokens: TokenDeployment[] = chain.tokens.map((t, i) => {
    const receipt = tokenReceipts[i]!;
    if (!receipt.contractAddress) throw new Error(`deploying ${t.symbol} on ${chainKey} produced no contract`);
    return {
      symbol: t.symbol,
      name: t.name,
      decimals: t.decimals,
      eip712Version: t.eip712Version,
      address: getAddress(receipt.contractAddress),
      block: Number(receipt.blockNumber),
    };
  });

  // BillPay, its budgets and roles: the same Ignition module a real deploy uses, journaled in memory (a local chain is thrown away).
  const accepted = tokens.filter((_, i) => chain.tokens[i]!.acceptedForPulls).map((t) => t.address as Address);
  const spec: BillPaySpec = {
    deployer: deployer.address,
    admin: deployer.address,
    operator,
    refunder,
    pauser: deployer.address,
    tokens: accepted,
    refundBudget: { limit: BigInt(refundBudget.limit), periodSeconds: BigInt(refundBudget.periodSeconds) },
    pullBudget: { limit: BigInt(pullBudget.limit), periodSeconds: BigInt(pullBudget.periodSeconds) },
  };
  const billPay = await deployBillPayLocally(client, spec);
  await fundPayers(chainKey, rpcUrl, tokens, payerAccounts().map((a) => a.address), { gas: false });

  return {
    reused: false,
    deployment: {
      chainId,
      rpcUrl,
      genesisHash: genesis.hash,
      billPay,
      multicall3: MULTICALL3_ADDRESS,
      roles: { admin: deployer.address, operator, refunder, pauser: deployer.address },
      refundBudget,
      pullBudget,
      tokens,
    },
  };
}
