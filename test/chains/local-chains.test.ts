import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { BaseError, ContractFunctionRevertedError, erc20Abi, getAddress, parseUnits, type Address } from "viem";
import { loadArtifact } from "../../lib/artifacts.ts";
import { chainInfo, CHAIN_KEYS, MULTICALL3_ADDRESS } from "../../lib/chains.ts";
import { readDeployments } from "../../lib/deployments.ts";
import { deployerAccount, hardhatAccount, operatorAccount, payerAccounts, refunderAccount } from "../../lib/local-accounts.ts";
import { publicClientFor, sharedClientFor } from "../../lib/chain-client.ts";
import { loadConfig } from "../../server/config.ts";
import { startLocalChains, type LocalChains } from "../../stack/local-chains.ts";
import { keepSubscriptionsAlive } from "../../stack/subscription-keeper.ts";
import { chainWideState, freshAccounts, tempDir } from "../support/stack.ts";
import { chainActors } from "../support/actors.ts";

const billPayAbi = loadArtifact("BillPay.sol", "BillPay").abi;

/** A proxy in front of a node that records what each HTTP request carried. */
async function recordingProxy(target: string) {
  const bodies: unknown[] = [];
  const proxy = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    bodies.push(JSON.parse(body));
    const upstream = await fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body });
    res.writeHead(upstream.status, { "content-type": "application/json" }).end(await upstream.text());
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    bodies,
    close: () => new Promise((r) => proxy.close(r)),
  };
}

describe("local chains (npm run chains)", () => {
  let chains: LocalChains;
  let deploymentsFile: string;

  beforeAll(async () => {
    deploymentsFile = join(await tempDir("chains"), "deployments.json");
    chains = await startLocalChains({ ports: { CELO: 0, BASE: 0 }, deploymentsFile });
  });
  afterAll(async () => {
    await chains?.close();
  });

  it("keeps WebSocket subscriptions as a real node does: each live one renewed (Hardhat drops one after five minutes otherwise), one whose socket closed forgotten", async () => {
    const keeper = keepSubscriptionsAlive(); // the one the chains installed
    const socket = new WebSocket(chains.rpcUrls.CELO.replace(/^http/, "ws"));
    const pushed: string[] = [];
    const id = await new Promise<string>((resolve) => {
      socket.onopen = () => socket.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] }));
      socket.onmessage = (event) => {
        const msg = JSON.parse(String(event.data)) as { id?: number; result?: string; params?: { result?: { hash?: string } } };
        if (msg.id === 1) resolve(msg.result!);
        else if (msg.params?.result?.hash) pushed.push(msg.params.result.hash);
      };
    });
    expect(keeper.live()).toContain(id);
    // Renewing polls the subscription's filter, which is what resets Hardhat's deadline; the node still has it.
    expect(await keeper.renewNow()).toBeGreaterThanOrEqual(1);
    const before = pushed.length;
    await expect.poll(() => pushed.length, { timeout: 15_000 }).toBeGreaterThan(before); // and it still pushes heads
    socket.close();
    await expect.poll(() => keeper.live().includes(id), { timeout: 15_000 }).toBe(false);
  });

  it("serves chain ids 42220 and 8453 on 127.0.0.1", async () => {
    for (const key of CHAIN_KEYS) {
      expect(chains.rpcUrls[key]).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(await publicClientFor(key, chains.rpcUrls[key]).getChainId()).toBe(chainInfo(key).chainId);
    }
    expect(chains.started.sort()).toEqual(["BASE", "CELO"]);
  });

  it("writes one deployments file with every chain's addresses and blocks", async () => {
    const onDisk = await readDeployments(deploymentsFile);
    expect(onDisk).toEqual(chains.deployments);
    for (const key of CHAIN_KEYS) {
      const d = onDisk.chains[key]!;
      expect(d.chainId).toBe(chainInfo(key).chainId);
      expect(d.tokens.map((t) => t.symbol)).toEqual(chainInfo(key).tokens.map((t) => t.symbol));
      for (const t of d.tokens) expect(t.block).toBeLessThanOrEqual(d.billPay.block);
    }
    const raw = JSON.parse(await readFile(deploymentsFile, "utf8"));
    expect(Object.keys(raw.chains).sort()).toEqual(["BASE", "CELO"]);
  });

  it("deploys BillPay with its roles, refund budgets and the tokens that may be pulled", async () => {
    for (const key of CHAIN_KEYS) {
      const d = chains.deployments.chains[key]!;
      const client = publicClientFor(key, chains.rpcUrls[key]);
      const read = (functionName: string, args: unknown[]) =>
        client.readContract({ address: d.billPay.address as Address, abi: billPayAbi, functionName, args });
      const operatorRole = await read("OPERATOR_ROLE", []);
      const refunderRole = await read("REFUNDER_ROLE", []);
      expect(await read("hasRole", [operatorRole, operatorAccount().address])).toBe(true);
      expect(await read("hasRole", [refunderRole, refunderAccount().address])).toBe(true);
      // The pulling key cannot refund, nor the refunding key pull.
      expect(await read("hasRole", [refunderRole, operatorAccount().address])).toBe(false);
      expect(await read("hasRole", [operatorRole, refunderAccount().address])).toBe(false);
      expect(await read("hasRole", [`0x${"0".repeat(64)}`, hardhatAccount(0).address])).toBe(true);
      for (const [i, t] of d.tokens.entries()) {
        const accepted = chainInfo(key).tokens[i]!.acceptedForPulls;
        expect(await read("isAcceptedToken", [t.address])).toBe(accepted);
        const [limit, period] = (await read("refundBudget", [t.address])) as [bigint, bigint, bigint];
        expect([limit, period]).toEqual(accepted ? [BigInt(d.refundBudget.limit), BigInt(d.refundBudget.periodSeconds)] : [0n, 0n]);
      }
    }
    // Tether on Base cannot settle x402 and is not pulled.
    expect(chains.deployments.chains.BASE!.tokens.find((t) => t.symbol === "USD₮")!.eip712Version).toBeNull();
  });

  it("funds accounts #3 to #19 with 10,000 of every token, and nobody else", async () => {
    for (const key of CHAIN_KEYS) {
      const client = publicClientFor(key, chains.rpcUrls[key]);
      for (const t of chains.deployments.chains[key]!.tokens) {
        const balanceOf = (who: Address) =>
          client.readContract({ address: t.address as Address, abi: erc20Abi, functionName: "balanceOf", args: [who] });
        for (const payer of payerAccounts()) expect(await balanceOf(payer.address)).toBe(parseUnits("10000", 6));
        expect(await balanceOf(hardhatAccount(2).address)).toBe(0n);
        expect(await balanceOf(hardhatAccount(20).address)).toBe(0n);
      }
    }
    expect(payerAccounts()).toHaveLength(17);
  });

  it("a suite's fresh payers: 17 keys of its own, none Hardhat's nor another suite's, each funded with gas and 10,000 of every token, the mints sharing a block", async () => {
    const mine = freshAccounts();
    const theirs = freshAccounts();
    const indexes = Array.from({ length: 17 }, (_, i) => i + 3);
    const addresses = indexes.map((i) => mine(i).address);
    expect(new Set(addresses).size).toBe(17);
    expect(mine(7)).toBe(mine(7)); // the same wallet each time a suite asks
    const hardhats = new Set(payerAccounts().map((p) => p.address));
    for (const a of [...addresses, ...indexes.map((i) => theirs(i).address)]) expect(hardhats.has(a)).toBe(false);
    expect(indexes.some((i) => theirs(i).address === mine(i).address)).toBe(false);
    for (const outside of [2, 20, 3.5]) expect(() => mine(outside)).toThrow(/outside 3 to 19/);

    const blocks = await mine.fund(chains.deployments);
    for (const key of CHAIN_KEYS) {
      const client = publicClientFor(key, chains.rpcUrls[key]);
      // The mints share a block, not one a mint (each would move the chain's clock a second
      // ahead); Celo's one-second interval blocks may cut in once or twice. Automining as before.
      expect(blocks[key]!.length).toBeGreaterThan(0);
      expect(blocks[key]!.length).toBeLessThanOrEqual(3);
      expect(await client.request({ method: "hardhat_getAutomine" as never })).toBe(true);
      for (const a of [mine(3).address, mine(19).address]) {
        expect(await client.getBalance({ address: a })).toBe(parseUnits("1000", 18));
        for (const t of chains.deployments.chains[key]!.tokens) {
          expect(await client.readContract({ address: t.address as Address, abi: erc20Abi, functionName: "balanceOf", args: [a] })).toBe(parseUnits("10000", 6));
        }
      }
      // Nothing funded for the suite that did not ask.
      expect(await client.getBalance({ address: theirs(3).address })).toBe(0n);
    }
  });

  it("what a suite on shared chains must give back as it found it: a changed budget, pause or mining mode is seen, and its restoring too", async () => {
    const lent = await chainWideState(chains.deployments);
    const celo = chainActors(chains.deployments, "CELO");
    const d = chains.deployments.chains.CELO!;
    const celoClient = publicClientFor("CELO", chains.rpcUrls.CELO);
    await celo.setRefundBudget("USDC", 1n, 60n);
    expect(await chainWideState(chains.deployments)).not.toBe(lent);
    await celo.setRefundBudget("USDC", BigInt(d.refundBudget.limit), BigInt(d.refundBudget.periodSeconds));
    await celo.setPullBudget("USDC", 1n, 60n);
    expect(await chainWideState(chains.deployments)).not.toBe(lent);
    await celo.setPullBudget("USDC", BigInt(d.pullBudget!.limit), BigInt(d.pullBudget!.periodSeconds));
    await celo.pause(true);
    expect(await chainWideState(chains.deployments)).not.toBe(lent);
    await celo.pause(false);
    await celoClient.request({ method: "evm_setAutomine" as never, params: [false] as never });
    expect(await chainWideState(chains.deployments)).not.toBe(lent);
    await celoClient.request({ method: "evm_setAutomine" as never, params: [true] as never });
    // Restored: the same as lent, although the budgets' available amounts and the blocks moved on.
    expect(await chainWideState(chains.deployments)).toBe(lent);
  });

  it("puts a working Multicall3 at the canonical address", async () => {
    const client = publicClientFor("CELO", chains.rpcUrls.CELO);
    const d = chains.deployments.chains.CELO!;
    const results = await client.multicall({
      contracts: d.tokens.map((t) => ({
        address: t.address as Address,
        abi: erc20Abi,
        functionName: "decimals" as const,
      })),
    });
    expect(results.map((r) => r.result)).toEqual([6, 6, 6]);
    expect(getAddress(d.multicall3)).toBe(MULTICALL3_ADDRESS);
  });

  it("is idempotent: run again against the running chains, it reuses the deployment", async () => {
    const before = await readDeployments(deploymentsFile);
    const ports = {
      CELO: Number(new URL(chains.rpcUrls.CELO).port),
      BASE: Number(new URL(chains.rpcUrls.BASE).port),
    };
    const deployer = hardhatAccount(0).address;
    const nonces = () =>
      Promise.all(CHAIN_KEYS.map((k) => publicClientFor(k, chains.rpcUrls[k]).getTransactionCount({ address: deployer })));
    const noncesBefore = await nonces();
    const again = await startLocalChains({ ports, deploymentsFile });
    try {
      expect(again.started).toEqual([]);
      expect(again.deployments).toEqual(before);
      // Nothing was sent: the deployer's nonce on each chain is unchanged.
      expect(await nonces()).toEqual(noncesBefore);
    } finally {
      await again.close();
    }
  });

  it("redeploys when the recorded deployment belongs to another chain (genesis differs)", async () => {
    const file = join(await tempDir("chains"), "deployments.json");
    const stale = structuredClone(chains.deployments);
    stale.chains.CELO!.genesisHash = `0x${"1".repeat(64)}`;
    const { writeDeployments } = await import("../../lib/deployments.ts");
    await writeDeployments(stale, file);
    const madeAt = BigInt(Math.floor(Date.now() / 1000));
    const fresh = await startLocalChains({ ports: { CELO: 0, BASE: 0 }, deploymentsFile: file });
    try {
      expect(fresh.started.sort()).toEqual(["BASE", "CELO"]);
      expect(fresh.deployments.chains.CELO!.genesisHash).not.toBe(stale.chains.CELO!.genesisHash);
      const client = publicClientFor("CELO", fresh.rpcUrls.CELO);
      expect(await client.getCode({ address: fresh.deployments.chains.CELO!.billPay.address as Address })).toMatch(/^0x[0-9a-f]{100,}/);
      // A chain made late in a process that has lived a while starts at the wall clock's time,
      // not at the time the process read Hardhat's configuration: payments are signed by the wall clock.
      const genesis = await client.getBlock({ blockNumber: 0n });
      expect(genesis.timestamp).toBeGreaterThanOrEqual(madeAt - 1n);
    } finally {
      await fresh.close();
    }
  });

  it("sends the requests made in one tick through the shared client as one batch, each with its own result or error", async () => {
    const target = chains.rpcUrls.CELO;
    const { url, bodies, close } = await recordingProxy(target);
    try {
      const client = sharedClientFor("CELO", url);
      expect(sharedClientFor("CELO", url)).toBe(client);
      const d = chains.deployments.chains.CELO!;
      const stranger = hardhatAccount(7);
      const [chainId, nonce, refused] = await Promise.all([
        client.getChainId(),
        client.getTransactionCount({ address: operatorAccount().address }),
        // Only the operator may pull: this estimate reverts, and only it fails.
        client
          .estimateContractGas({
            address: d.billPay.address as Address,
            abi: billPayAbi,
            functionName: "pull",
            args: [`0x${"ab".repeat(32)}`, stranger.address, d.tokens[0]!.address, 1n],
            account: stranger,
            prepare: false,
          })
          .then(
            () => undefined,
            (err: unknown) => err,
          ),
      ]);
      expect(chainId).toBe(42220);
      expect(nonce).toBe(await publicClientFor("CELO", target).getTransactionCount({ address: operatorAccount().address }));
      expect(refused).toBeInstanceOf(BaseError);
      const reverted = (refused as BaseError).walk((e) => e instanceof ContractFunctionRevertedError) as ContractFunctionRevertedError;
      expect(reverted.data?.errorName).toBe("AccessControlUnauthorizedAccount");
      // One HTTP request carried all three.
      expect(bodies).toHaveLength(1);
      expect((bodies[0] as Array<{ method: string }>).map((b) => b.method)).toEqual(["eth_chainId", "eth_getTransactionCount", "eth_estimateGas"]);
      // A later call is a request of its own.
      expect(await client.getBlockNumber({ cacheTime: 0 })).toBeGreaterThan(0n);
      expect(bodies).toHaveLength(2);
    } finally {
      await close();
    }
  });

  it("sends each request alone with RPC_BATCH_SIZE=0, and refuses a size it cannot honour", async () => {
    const { url, bodies, close } = await recordingProxy(chains.rpcUrls.BASE);
    vi.stubEnv("RPC_BATCH_SIZE", "0");
    try {
      const client = sharedClientFor("BASE", url);
      const [chainId, block] = await Promise.all([client.getChainId(), client.getBlockNumber({ cacheTime: 0 })]);
      expect(chainId).toBe(8453);
      expect(block).toBeGreaterThan(0n);
      expect(bodies).toHaveLength(2);
      expect(bodies.every((b) => !Array.isArray(b))).toBe(true);
      vi.stubEnv("RPC_BATCH_SIZE", "-1");
      expect(() => sharedClientFor("BASE", "http://127.0.0.1:1")).toThrow(/RPC_BATCH_SIZE must be an integer/);
      // The service's configuration refuses it at start, beside every other bad variable.
      expect(() => loadConfig({ RPC_BATCH_SIZE: "-1" })).toThrow(/invalid configuration[\s\S]*RPC_BATCH_SIZE must be an integer/);
      expect(() => loadConfig({ RPC_BATCH_SIZE: "1.5" })).toThrow(/RPC_BATCH_SIZE must be an integer/);
      expect(loadConfig({ RPC_BATCH_SIZE: "0" }).RPC_BATCH_SIZE).toBe("0");
    } finally {
      vi.unstubAllEnvs();
      await close();
    }
  });

  it("refuses a running chain that does not hold this stack's deployment (another stack's), naming it, and deploys nothing onto it", async () => {
    const file = join(await tempDir("chains"), "deployments.json"); // a checkout that never deployed there
    const celoUrl = chains.rpcUrls.CELO;
    const deployer = deployerAccount().address;
    const nonce = await publicClientFor("CELO", celoUrl).getTransactionCount({ address: deployer });
    const port = Number(new URL(celoUrl).port);
    await expect(startLocalChains({ ports: { CELO: port, BASE: 0 }, deploymentsFile: file })).rejects.toThrow(
      `${celoUrl} already serves a CELO chain (id 42220) that does not hold this stack's deployment (${file}): it is another stack's; stop it, or move this stack's CELO chain with CELO_PORT`,
    );
    expect(await publicClientFor("CELO", celoUrl).getTransactionCount({ address: deployer })).toBe(nonce);
  });

  it("refuses a port that serves a different chain", async () => {
    const file = join(await tempDir("chains"), "deployments.json");
    const basePort = Number(new URL(chains.rpcUrls.BASE).port);
    await expect(startLocalChains({ ports: { CELO: basePort, BASE: 0 }, deploymentsFile: file })).rejects.toThrow(
      /serves chain id 8453, not 42220/,
    );
  });
});
