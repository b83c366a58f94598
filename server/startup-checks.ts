/**
 * What the service checks before it serves, refusing to start with a clear message when any
 * check fails:
 *   - against each deployed chain: the RPC serves the deployment's chain id; BillPay has code
 *     at its address; each EIP-3009 token's EIP-712 name and version are the ones the 402
 *     advertises, and its DOMAIN_SEPARATOR is the one a payer signing them would compute (a
 *     mismatch makes every x402 payment fail at settlement, after the payer signed); where a
 *     token is paid through Permit2, Permit2 and x402's exact proxy have code at their
 *     canonical addresses (the proxy naming that Permit2) and BillPay can refund such a
 *     payment (a BillPay deployed before refundPermit2 would take payments it cannot
 *     refund); the operator and refunder keys hold their roles and have gas;
 *   - the deployment is the active network profile's: each chain it serves, on its chain id,
 *     with its tokens;
 *   - on a real network (any profile but `local`): no well-known Hardhat key signs (a missing
 *     OPERATOR_PRIVATE_KEY would otherwise fall back to a public one), no sandbox biller key
 *     is configured, no facilitator is on loopback unless declared self-hosted, PIN_PEPPER
 *     is set (the local stack's generated one lives beside the data; a real one must be a
 *     secret of its own), OPS_TOKEN is set (behind a proxy on the same host every caller
 *     looks local, so the operators' routes would be open to all), and the operator and
 *     refunder are two keys (each role bounds what its leaked key can do).
 */
import { domainSeparator, erc20Abi, keccak256, parseAbi, toBytes, type Address, type Hex } from "viem";
import { billPayAbi } from "../lib/generated/abis.ts";
import { isLocalRpcUrl, publicClientFor } from "../lib/chain-client.ts";
import { x402TransferOf, type ChainKey } from "../lib/chains.ts";
import { PERMIT2, PROXY_WITNESS_TYPEHASH, X402_EXACT_PROXY, x402ExactProxyAbi } from "../lib/permit2.ts";
import { deployedChains, rpcUrlFor, type Deployments } from "../lib/deployments.ts";
import type { NetworkProfile } from "../lib/networks.ts";
import { isWellKnownAddress } from "../lib/local-accounts.ts";
import type { Config } from "./config.ts";
import { errorText } from "./log-safety.ts";
import { formatScaled } from "./pricing/decimal.ts";
import { RATE_SCALE } from "./pricing/price.ts";

const ROLES = { operator: keccak256(toBytes("OPERATOR_ROLE")), refunder: keccak256(toBytes("REFUNDER_ROLE")) };
/** BillPay's DEFAULT_ADMIN_ROLE: roles, budgets, withdrawals. A hot key must never hold it. */
const ADMIN_ROLE = `0x${"00".repeat(32)}` as Hex;
const eip712Reads = parseAbi([
  "function version() view returns (string)",
  "function DOMAIN_SEPARATOR() view returns (bytes32)",
  "function eip712Domain() view returns (bytes1, string, string, uint256, address, bytes32, uint256[])",
]);
/** The sandbox biller's keys (server/config.ts defaults): never for a real biller. */
const SANDBOX_BILLER_KEYS = new Set(["sandbox-api-key", "sandbox-secret-key", "sandbox-public-key"]);

/**
 * The deployment against the active network profile: every chain the profile serves is
 * deployed, on the profile's chain id, and on a real network with the profile's tokens.
 */
export function deploymentFailures(network: NetworkProfile, deployments: Deployments): string[] {
  const out: string[] = [];
  for (const chain of Object.values(network.chains)) {
    const d = deployments.chains[chain.key];
    if (!d) {
      out.push(`${chain.key}: the network profile "${network.name}" serves it, but the deployments file has no deployment for it (npm run deploy -- --network <profile>)`);
      continue;
    }
    if (d.chainId !== chain.chainId) out.push(`${chain.key}: the deployment is on chain ${d.chainId}, the network profile "${network.name}" is on ${chain.chainId}`);
    for (const t of chain.tokens) {
      const deployed = d.tokens.find((x) => x.symbol === t.symbol);
      if (t.address && deployed && deployed.address.toLowerCase() !== t.address.toLowerCase()) {
        out.push(`${chain.key} ${t.symbol}: the deployment accepts ${deployed.address}, the network profile names ${t.address}`);
      }
    }
  }
  for (const key of deployedChains(deployments)) {
    if (!network.chains[key]) out.push(`${key}: deployed, but the network profile "${network.name}" does not serve it (set NETWORK)`);
  }
  return out;
}

/** The refusals that need no chain: keys, biller credentials and facilitators on a real network. */
export function policyFailures(config: Config, network: NetworkProfile, keys: { operator: Address; refunder: Address }): string[] {
  if (network.local) return [];
  const out: string[] = [];
  for (const [role, address] of Object.entries(keys)) {
    if (isWellKnownAddress(address)) {
      out.push(`the ${role} key ${address} is one of Hardhat's public test keys: set ${role.toUpperCase()}_PRIVATE_KEY`);
    }
  }
  for (const name of ["BILLER_API_KEY", "BILLER_SECRET_KEY", "BILLER_PUBLIC_KEY"] as const) {
    if (SANDBOX_BILLER_KEYS.has(config[name])) out.push(`${name} is the sandbox biller's key: set the biller's real credentials`);
  }
  for (const chain of Object.keys(network.chains) as ChainKey[]) {
    const name = `FACILITATOR_URL_${chain}` as const;
    if (isLocalRpcUrl(config[name]) && !config.FACILITATOR_SELF_HOSTED) {
      out.push(`${name} (${config[name]}) is on this machine: name the chain's real facilitator (or set FACILITATOR_SELF_HOSTED=1 for one you run here)`);
    }
  }
  if (!config.RATE_SOURCE_URL && !config.RATE_FIXED) {
    out.push(`RATE_SOURCE_URL is not set: every bill would be priced at NGN_PER_USD (${formatScaled(config.NGN_PER_USD, RATE_SCALE)}) for ever, whatever the naira does; name a rate source, or set RATE_FIXED=1 to price at NGN_PER_USD on purpose`);
  }
  if (!config.PIN_PEPPER) out.push("PIN_PEPPER is not set: set a secret of at least 32 characters, kept outside the database, to hash agents' PINs under");
  if (!config.OPS_TOKEN) out.push("OPS_TOKEN is not set: /console, /ops/* and /metrics would answer anyone a proxy on this host forwards; set a secret of at least 16 characters");
  if (!config.BILLER_WEBHOOK_TOKEN) {
    out.push("BILLER_WEBHOOK_TOKEN is not set: the biller's webhook (VTpass does not sign it) would take posts from anyone; set a secret of at least 16 characters and register the webhook URL with ?token=<it>");
  }
  if (keys.operator.toLowerCase() === keys.refunder.toLowerCase()) {
    out.push(`the operator and refunder are one key (${keys.operator}): give each role its own, so a leaked key can only pull or only refund`);
  }
  return out;
}

/** The checks against each deployed chain (see the file's comment). */
export async function chainFailures(deployments: Deployments, keys: { operator: Address; refunder: Address }, minGasWei: bigint): Promise<string[]> {
  const out: string[] = [];
  for (const [chain, d] of Object.entries(deployments.chains) as Array<[ChainKey, NonNullable<Deployments["chains"][ChainKey]>]>) {
    const client = publicClientFor(chain, rpcUrlFor(chain, d));
    const billPay = d.billPay.address as Address;
    try {
      const chainId = await client.getChainId();
      if (chainId !== d.chainId) {
        out.push(`${chain}: the RPC serves chain ${chainId}, the deployment is on ${d.chainId}`);
        continue;
      }
      const code = await client.getCode({ address: billPay });
      if (!code || code === "0x") {
        out.push(`${chain}: no contract at BillPay's address ${billPay}`);
        continue;
      }
      for (const t of d.tokens.filter((x) => x.eip712Version !== null)) {
        const token = t.address as Address;
        const [name, separator, version] = await Promise.all([
          client.readContract({ address: token, abi: erc20Abi, functionName: "name" }),
          client.readContract({ address: token, abi: eip712Reads, functionName: "DOMAIN_SEPARATOR" }),
          client
            .readContract({ address: token, abi: eip712Reads, functionName: "version" })
            .catch(() => client.readContract({ address: token, abi: eip712Reads, functionName: "eip712Domain" }).then((domain) => domain[2])),
        ]);
        const advertised = { name: t.name, version: t.eip712Version!, chainId: d.chainId, verifyingContract: token };
        if (name !== t.name) out.push(`${chain} ${t.symbol}: the token's name is "${name}", the 402 advertises "${t.name}"`);
        if (version !== t.eip712Version) out.push(`${chain} ${t.symbol}: the token's EIP-712 version is "${version}", the 402 advertises "${t.eip712Version}"`);
        if ((separator as Hex).toLowerCase() !== domainSeparator({ domain: advertised }).toLowerCase()) {
          out.push(`${chain} ${t.symbol}: the token's DOMAIN_SEPARATOR is not the one for the advertised name, version, chain and address: payers' signatures would not verify`);
        }
      }
      if (d.tokens.some((t) => x402TransferOf(t) === "permit2")) out.push(...(await permit2Failures(chain, client, billPay)));
      for (const [role, address] of Object.entries(keys) as Array<["operator" | "refunder", Address]>) {
        const [holds, gas] = await Promise.all([
          client.readContract({ address: billPay, abi: billPayAbi, functionName: "hasRole", args: [ROLES[role], address] }),
          client.getBalance({ address }),
        ]);
        if (!holds) out.push(`${chain}: the ${role} key ${address} does not hold ${role.toUpperCase()}_ROLE on BillPay (npm run admin -- grant-role)`);
        if (gas < minGasWei) out.push(`${chain}: the ${role} key ${address} has ${gas} wei of gas, under the ${minGasWei} it needs (MIN_GAS_WEI)`);
        // A hot key with more than its own role would undo what each role bounds.
        const other = role === "operator" ? "refunder" : "operator";
        const [admin, both] = await Promise.all([
          client.readContract({ address: billPay, abi: billPayAbi, functionName: "hasRole", args: [ADMIN_ROLE, address] }),
          client.readContract({ address: billPay, abi: billPayAbi, functionName: "hasRole", args: [ROLES[other], address] }),
        ]);
        if (admin) out.push(`${chain}: the ${role} key ${address} is also BillPay's admin: a hot key must not manage roles, budgets or withdrawals (npm run admin -- revoke-role)`);
        if (both) out.push(`${chain}: the ${role} key ${address} also holds ${other.toUpperCase()}_ROLE: give each role its own key, so a leaked key can only pull or only refund`);
      }
    } catch (err) {
      out.push(`${chain}: could not be read: ${errorText(err).split("\n")[0]}`);
    }
  }
  return out;
}

/** Why Permit2 payments could not settle or be refunded on this chain, if they could not. */
async function permit2Failures(chain: ChainKey, client: ReturnType<typeof publicClientFor>, billPay: Address): Promise<string[]> {
  const out: string[] = [];
  const [permit2Code, proxyCode] = await Promise.all([client.getCode({ address: PERMIT2 }), client.getCode({ address: X402_EXACT_PROXY })]);
  if (!permit2Code || permit2Code === "0x") out.push(`${chain}: no Permit2 at ${PERMIT2}: a token without EIP-3009 cannot be paid over x402`);
  if (!proxyCode || proxyCode === "0x") out.push(`${chain}: no x402 exact proxy at ${X402_EXACT_PROXY}: a token without EIP-3009 cannot be paid over x402`);
  else {
    const [named, witness] = await Promise.all([
      client.readContract({ address: X402_EXACT_PROXY, abi: x402ExactProxyAbi, functionName: "PERMIT2" }).catch(() => null),
      client.readContract({ address: X402_EXACT_PROXY, abi: x402ExactProxyAbi, functionName: "WITNESS_TYPEHASH" }).catch(() => null),
    ]);
    if (named?.toLowerCase() !== PERMIT2.toLowerCase()) out.push(`${chain}: the contract at ${X402_EXACT_PROXY} does not name Permit2 ${PERMIT2}: it is not x402's exact proxy`);
    // BillPay checks a refunded permit against this witness (its own constant): they must agree.
    else if (witness !== PROXY_WITNESS_TYPEHASH) out.push(`${chain}: x402's exact proxy signs another witness (${witness}) than BillPay refunds by: Permit2 payments could not be refunded`);
  }
  const [refunds, spender] = await Promise.all([
    client.readContract({ address: billPay, abi: billPayAbi, functionName: "PERMIT2" }).catch(() => null),
    client.readContract({ address: billPay, abi: billPayAbi, functionName: "X402_EXACT_PERMIT2_PROXY" }).catch(() => null),
  ]);
  if (refunds?.toLowerCase() !== PERMIT2.toLowerCase()) {
    out.push(`${chain}: BillPay at ${billPay} predates Permit2 refunds (it has no refundPermit2): deploy the current BillPay (npm run deploy) before offering a token without EIP-3009`);
  } else if (spender?.toLowerCase() !== X402_EXACT_PROXY.toLowerCase()) {
    out.push(`${chain}: BillPay refunds permits to the proxy ${spender}, but payers sign to ${X402_EXACT_PROXY}: Permit2 payments could not be refunded`);
  }
  return out;
}

export async function startupFailures(config: Config, network: NetworkProfile, deployments: Deployments, keys: { operator: Address; refunder: Address }): Promise<string[]> {
  const before = [...deploymentFailures(network, deployments), ...policyFailures(config, network, keys)];
  // Chain reads against a deployment on the wrong chain would only repeat the same news.
  if (before.some((f) => f.includes("the deployment is on chain"))) return before;
  return [...before, ...(await chainFailures(deployments, keys, config.MIN_GAS_WEI))];
}
