/**
 * Keys for local chains. Hardhat's well-known test mnemonic: these keys are public and
 * control nothing real. Every role key can be replaced by an environment variable.
 *   #0 deployer, admin and pauser   #1 operator (the server's pulling key)
 *   #2 facilitator (x402 settlement) #3..#19 funded payers for development and tests
 *   #20 refunder (the server's refunding key; funded with gas by the local deployment)
 */
import { mnemonicToSeedSync } from "@scure/bip39";
import type { Hex } from "viem";
import { HDKey, hdKeyToAccount, privateKeyToAccount, type Account } from "viem/accounts";

export const HARDHAT_MNEMONIC = "test test test test test test test test test test test junk";

export const FIRST_PAYER_INDEX = 3;
export const LAST_PAYER_INDEX = 19;

// The mnemonic's seed is derived once: it is PBKDF2, 2,048 rounds of HMAC-SHA512 in JavaScript
// (about 10 ms), which viem's mnemonicToAccount did again for every account. Each account is
// then a BIP-32 derivation from it, made once per index.
let master: HDKey | undefined;
const derived = new Map<number, Account>();

export function hardhatAccount(index: number): Account {
  let account = derived.get(index);
  if (!account) {
    master ??= HDKey.fromMasterSeed(mnemonicToSeedSync(HARDHAT_MNEMONIC));
    derived.set(index, (account = hdKeyToAccount(master, { addressIndex: index })));
  }
  return account;
}

function fromEnvOr(envName: string, index: number): Account {
  const key = process.env[envName];
  if (key) {
    if (!/^0x[0-9a-fA-F]{64}$/.test(key)) throw new Error(`${envName} must be a 0x-prefixed 32-byte hex private key`);
    return privateKeyToAccount(key as Hex);
  }
  return hardhatAccount(index);
}

export const deployerAccount = () => fromEnvOr("DEPLOYER_PRIVATE_KEY", 0);
export const operatorAccount = () => fromEnvOr("OPERATOR_PRIVATE_KEY", 1);
export const facilitatorAccount = () => fromEnvOr("FACILITATOR_PRIVATE_KEY", 2);
export const refunderAccount = () => fromEnvOr("REFUNDER_PRIVATE_KEY", 20);

export function payerAccounts(): Account[] {
  const out: Account[] = [];
  for (let i = FIRST_PAYER_INDEX; i <= LAST_PAYER_INDEX; i++) out.push(hardhatAccount(i));
  return out;
}

/** Hardhat's well-known accounts (the test mnemonic, indexes 0 to 30): public keys, never for a real network. Derived when first asked. */
let wellKnown: Set<string> | undefined;

export function isWellKnownAddress(address: string): boolean {
  wellKnown ??= new Set(Array.from({ length: 31 }, (_, i) => hardhatAccount(i).address.toLowerCase()));
  return wellKnown.has(address.toLowerCase());
}
