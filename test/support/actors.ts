/**
 * People acting on a local chain through plain viem, as the service and its payers do:
 * payers approve and set allowances or sign EIP-3009 payments, the facilitator submits
 * them, the operator pulls and refunds, the admin withdraws.
 */
import { createWalletClient, encodeFunctionData, http, maxUint256, type Address, type Hash, type Hex } from "viem";
import type { Account } from "viem/accounts";
import { billPayAbi, eip3009TokenAbi } from "../../lib/generated/abis.ts";
import { loadArtifact } from "../../lib/artifacts.ts";
import { publicClientFor, RPC_TIMEOUT_MS } from "../../lib/chain-client.ts";
import { viemChain, type ChainKey, type TokenSymbol } from "../../lib/chains.ts";
import type { Deployments } from "../../lib/deployments.ts";
import { randomNonce, TRANSFER_WITH_AUTHORIZATION_TYPES } from "../../lib/eip3009.ts";
import { deployerAccount, facilitatorAccount, operatorAccount, refunderAccount } from "../../lib/local-accounts.ts";

export interface SignedAuthorization {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
  signature: Hex;
}

export function chainActors(deployments: Deployments, chain: ChainKey) {
  const d = deployments.chains[chain];
  if (!d) throw new Error(`no deployment for ${chain}`);
  // The tests' own reads of the node are retried: a read that resets on a keep-alive socket the
  // node closed a moment before says nothing about the service under test.
  const publicClient = publicClientFor(chain, d.rpcUrl, 2);
  const billPay = d.billPay.address as Address;
  const tokenAddress = (symbol: TokenSymbol) => {
    const t = d.tokens.find((x) => x.symbol === symbol);
    if (!t) throw new Error(`no ${symbol} on ${chain}`);
    return t.address as Address;
  };
  const wallet = (account: Account) =>
    createWalletClient({ account, chain: viemChain(chain, d.rpcUrl), transport: http(d.rpcUrl, { timeout: RPC_TIMEOUT_MS }) });

  async function mined(hash: Hash) {
    const receipt = await publicClient.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") throw new Error(`transaction ${hash} reverted`);
    return receipt;
  }

  const operator = wallet(operatorAccount());
  const refunder = wallet(refunderAccount());
  const admin = wallet(deployerAccount());
  const facilitator = wallet(facilitatorAccount());

  return {
    deployment: d,
    publicClient,
    billPay,
    tokenAddress,
    mined,

    async approveAndAllow(payer: Account, symbol: TokenSymbol, spending: bigint, approval: bigint = maxUint256) {
      const token = tokenAddress(symbol);
      const w = wallet(payer);
      await mined(await w.writeContract({ address: token, abi: eip3009TokenAbi, functionName: "approve", args: [billPay, approval] }));
      return mined(
        await w.writeContract({ address: billPay, abi: billPayAbi, functionName: "setSpendingAllowance", args: [token, spending] }),
      );
    },

    async setSpendingAllowance(payer: Account, symbol: TokenSymbol, amount: bigint) {
      return mined(
        await wallet(payer).writeContract({
          address: billPay,
          abi: billPayAbi,
          functionName: "setSpendingAllowance",
          args: [tokenAddress(symbol), amount],
        }),
      );
    },

    async setSpendingLimit(payer: Account, symbol: TokenSymbol, amountPerPeriod: bigint, periodSeconds: bigint) {
      return mined(
        await wallet(payer).writeContract({
          address: billPay,
          abi: billPayAbi,
          functionName: "setSpendingLimit",
          args: [tokenAddress(symbol), amountPerPeriod, periodSeconds],
        }),
      );
    },

    async pull(orderId: Hex, payer: Address, symbol: TokenSymbol, amount: bigint) {
      return mined(
        await operator.writeContract({
          address: billPay,
          abi: billPayAbi,
          functionName: "pull",
          args: [orderId, payer, tokenAddress(symbol), amount],
        }),
      );
    },

    async pullBatch(items: Array<{ orderId: Hex; payer: Address; symbol: TokenSymbol; amount: bigint }>) {
      const requests = items.map((i) => ({ orderId: i.orderId, payer: i.payer, token: tokenAddress(i.symbol), amount: i.amount }));
      return mined(await operator.writeContract({ address: billPay, abi: billPayAbi, functionName: "pullBatch", args: [requests] }));
    },

    async refund(orderId: Hex, amount: bigint) {
      return mined(await refunder.writeContract({ address: billPay, abi: billPayAbi, functionName: "refund", args: [orderId, amount] }));
    },

    async refundAuthorization(orderId: Hex, symbol: TokenSymbol, authorization: SignedAuthorization, amount: bigint) {
      return mined(
        await refunder.writeContract({
          address: billPay,
          abi: billPayAbi,
          functionName: "refundAuthorization",
          args: [orderId, tokenAddress(symbol), authorization, amount],
        }),
      );
    },

    /** The payer signs an EIP-3009 TransferWithAuthorization (an x402 payload's core). */
    async signAuthorization(
      payer: Account,
      symbol: TokenSymbol,
      value: bigint,
      to: Address = billPay,
      window: { nonce?: Hex; validAfter?: bigint; validBefore?: bigint } = {},
    ): Promise<SignedAuthorization> {
      const token = tokenAddress(symbol);
      const info = d.tokens.find((t) => t.address === token)!;
      const message = {
        from: payer.address,
        to,
        value,
        validAfter: window.validAfter ?? 0n,
        validBefore: window.validBefore ?? BigInt(Math.floor(Date.now() / 1000) + 3600),
        nonce: window.nonce ?? randomNonce(),
      };
      const signature = await wallet(payer).signTypedData({
        domain: { name: info.name, version: info.eip712Version!, chainId: d.chainId, verifyingContract: token },
        types: TRANSFER_WITH_AUTHORIZATION_TYPES,
        primaryType: "TransferWithAuthorization",
        message,
      });
      return { ...message, signature };
    },

    /** An x402-style payment: the payer signs, the facilitator submits transferWithAuthorization. */
    async payByAuthorization(payer: Account, symbol: TokenSymbol, value: bigint, to: Address = billPay) {
      const auth = await this.signAuthorization(payer, symbol, value, to);
      const receipt = await mined(
        await facilitator.writeContract({
          address: tokenAddress(symbol),
          abi: eip3009TokenAbi,
          functionName: "transferWithAuthorization",
          args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, auth.signature],
        }),
      );
      return { receipt, nonce: auth.nonce, authorization: auth };
    },

    /** Anyone holding a signed authorization submits it (here: the facilitator's wallet, as any relayer could). */
    async submitAuthorization(symbol: TokenSymbol, auth: SignedAuthorization) {
      return mined(
        await facilitator.writeContract({
          address: tokenAddress(symbol),
          abi: eip3009TokenAbi,
          functionName: "transferWithAuthorization",
          args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, auth.signature],
        }),
      );
    },

    /** The payer burns a nonce without paying: the chain then reads it as used (once mined: `sentOnly` does not wait for it). */
    async cancelAuthorization(payer: Account, symbol: TokenSymbol, nonce: Hex = randomNonce(), { sentOnly = false } = {}) {
      const token = tokenAddress(symbol);
      const info = d.tokens.find((t) => t.address === token)!;
      const signature = await wallet(payer).signTypedData({
        domain: { name: info.name, version: info.eip712Version!, chainId: d.chainId, verifyingContract: token },
        types: { CancelAuthorization: [{ name: "authorizer", type: "address" }, { name: "nonce", type: "bytes32" }] },
        primaryType: "CancelAuthorization",
        message: { authorizer: payer.address, nonce },
      });
      const sent = await wallet(payer).writeContract({
        address: token,
        abi: eip3009TokenAbi,
        functionName: "cancelAuthorization",
        args: [payer.address, nonce, signature],
      });
      if (!sentOnly) await mined(sent);
      return nonce;
    },

    /**
     * In one transaction (through a test router the payer approved): the payer's EIP-3009
     * transfer of `authorization` to another address, then a plain transfer of `amount`
     * into BillPay.
     */
    async authorizationThenTransfer(payer: Account, symbol: TokenSymbol, authorization: SignedAuthorization, amount: bigint) {
      const router = loadArtifact("test/AuthorizationThenTransfer.sol", "AuthorizationThenTransfer");
      const deployed = await mined(await admin.deployContract({ abi: router.abi, bytecode: router.bytecode }));
      const address = deployed.contractAddress!;
      await mined(await wallet(payer).writeContract({ address: tokenAddress(symbol), abi: eip3009TokenAbi, functionName: "approve", args: [address, amount] }));
      const a = authorization;
      return mined(
        await admin.writeContract({
          address,
          abi: router.abi,
          functionName: "run",
          args: [tokenAddress(symbol), a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, a.signature, billPay, amount],
        }),
      );
    },

    /** A contract wallet (ERC-1271) that accepts `owner`'s signatures, deployed on this chain only. */
    async deployOwnedWallet(owner: Address): Promise<Address> {
      const wallet = loadArtifact("test/OwnedWallet.sol", "OwnedWallet");
      const deployed = await mined(await admin.deployContract({ abi: wallet.abi, bytecode: wallet.bytecode, args: [owner] }));
      return deployed.contractAddress!;
    },

    /**
     * An OwnedWallet not deployed yet: its address, and the factory and call that would deploy
     * it (what an ERC-6492 signature carries). The factory is deployed; the wallet is not.
     */
    async counterfactualOwnedWallet(owner: Address, salt: Hex): Promise<{ wallet: Address; factory: Address; factoryData: Hex }> {
      const artifact = loadArtifact("test/OwnedWalletFactory.sol", "OwnedWalletFactory");
      const factory = (await mined(await admin.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode }))).contractAddress!;
      const wallet = (await publicClient.readContract({ address: factory, abi: artifact.abi, functionName: "addressOf", args: [owner, salt] })) as Address;
      return { wallet, factory, factoryData: encodeFunctionData({ abi: artifact.abi, functionName: "deploy", args: [owner, salt] }) };
    },

    /** A contract whose ERC-1271 check burns all the gas it is given. */
    async deployGasBurningWallet(): Promise<Address> {
      const wallet = loadArtifact("test/GasBurningWallet.sol", "GasBurningWallet");
      const deployed = await mined(await admin.deployContract({ abi: wallet.abi, bytecode: wallet.bytecode }));
      return deployed.contractAddress!;
    },

    async transfer(from: Account, symbol: TokenSymbol, to: Address, amount: bigint) {
      return mined(
        await wallet(from).writeContract({ address: tokenAddress(symbol), abi: eip3009TokenAbi, functionName: "transfer", args: [to, amount] }),
      );
    },

    async withdraw(symbol: TokenSymbol, to: Address, amount: bigint) {
      return mined(
        await admin.writeContract({ address: billPay, abi: billPayAbi, functionName: "withdraw", args: [tokenAddress(symbol), to, amount] }),
      );
    },

    async setTokenAccepted(symbol: TokenSymbol, accepted: boolean) {
      return mined(
        await admin.writeContract({ address: billPay, abi: billPayAbi, functionName: "setTokenAccepted", args: [tokenAddress(symbol), accepted] }),
      );
    },

    async grantOrRevokeRole(grant: boolean, role: Hex, account: Address) {
      return mined(
        await admin.writeContract({ address: billPay, abi: billPayAbi, functionName: grant ? "grantRole" : "revokeRole", args: [role, account] }),
      );
    },

    /** The admin sets the token's refund budget: up to `limit` at once, refilled at `limit` per `periodSeconds`. */
    async setRefundBudget(symbol: TokenSymbol, limit: bigint, periodSeconds: bigint) {
      return mined(await admin.writeContract({ address: billPay, abi: billPayAbi, functionName: "setRefundBudget", args: [tokenAddress(symbol), limit, periodSeconds] }));
    },

    /** The admin sets the token's operator-wide pull budget, as the refund budget. */
    async setPullBudget(symbol: TokenSymbol, limit: bigint, periodSeconds: bigint) {
      return mined(await admin.writeContract({ address: billPay, abi: billPayAbi, functionName: "setPullBudget", args: [tokenAddress(symbol), limit, periodSeconds] }));
    },

    async pause(paused: boolean) {
      return mined(await admin.writeContract({ address: billPay, abi: billPayAbi, functionName: paused ? "pause" : "unpause" }));
    },

    async balanceOf(symbol: TokenSymbol, who: Address) {
      return publicClient.readContract({ address: tokenAddress(symbol), abi: eip3009TokenAbi, functionName: "balanceOf", args: [who] });
    },

    /**
     * Mines `blocks` empty blocks, one evm_mine each. Not hardhat_mine: Hardhat mines a range of
     * blocks at once as placeholders whose parentHash is zero, a broken hash chain no real node
     * makes, which Ponder reads as a reorganisation (beyond its finalized block, one it cannot
     * recover from: docs/development.md, local chains).
     */
    async mine(blocks: number) {
      for (let i = 0; i < blocks; i++) await publicClient.request({ method: "evm_mine" as never, params: [] as never });
    },

    /**
     * Runs `body` with mining paused, as on a chain whose blocks come seconds apart (the local
     * chains otherwise mine each transaction at once, and an idle block a second); `mine`
     * makes one block. Mining as the local chains do is restored after, whatever happened.
     */
    async miningPaused<T>(body: (mine: () => Promise<unknown>) => Promise<T>): Promise<T> {
      const rpc = (method: string, params: unknown[] = []) => publicClient.request({ method: method as never, params: params as never });
      await rpc("evm_setAutomine", [false]);
      await rpc("evm_setIntervalMining", [0]);
      try {
        return await body(() => rpc("evm_mine"));
      } finally {
        await rpc("evm_setAutomine", [true]);
        await rpc("evm_setIntervalMining", [1000]);
      }
    },
  };
}

export type ChainActors = ReturnType<typeof chainActors>;
