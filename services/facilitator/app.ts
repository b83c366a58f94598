/**
 * A local x402 facilitator over the standard facilitator HTTP API (POST /verify,
 * POST /settle, GET /supported), built on @x402/core's x402Facilitator with @x402/evm's
 * `exact` scheme (EIP-3009, and Permit2 through x402's exact proxy), one signer per chain. It stands in for the chains' hosted
 * facilitators; the service reaches either through the same HTTP client.
 *
 * Started with `apiKey` it meters /settle as Celo's hosted facilitator does (celo-org/docs,
 * build/agents/x402): /settle needs `X-API-Key` (401 without a valid one), spends one credit
 * per settlement (402 once `credits` are gone) and has a rate limit (429 past
 * `settlesPerMinute`); /verify and /supported stay open. Celo documents those statuses and
 * not their bodies, so the bodies here are a plain `{error}` a client must not rely on.
 */
import { Hono } from "hono";
import { x402Facilitator } from "@x402/core/facilitator";
import { PaymentPayloadV2Schema, PaymentRequirementsV2Schema } from "@x402/core/schemas";
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import pLimit from "p-limit";
import { createWalletClient, http, publicActions, WaitForTransactionReceiptTimeoutError, type Account, type Hex, type TransactionReceipt } from "viem";
import { RPC_TIMEOUT_MS } from "../../lib/chain-client.ts";
import { ChainHeads } from "../../lib/chain-heads.ts";
import { sameSecret } from "../../lib/same-secret.ts";
import { chainInfo, viemChain, type ChainKey } from "../../lib/chains.ts";

/** Bounds every receipt wait, so a stuck chain cannot hold a settle request forever. */
const CONFIRMATION_TIMEOUT_MS = 60_000;

export interface FacilitatorChain {
  chain: ChainKey;
  rpcUrl: string;
}

/** How often the head is read while a settlement waits for its receipt. */
const HEAD_POLL_MS = 20;

/** The transaction's receipt, looked for again as each new block arrives; throws after `timeoutMs`, as viem's wait does. */
async function receiptAsBlocksArrive(client: { getTransactionReceipt(args: { hash: Hex }): Promise<TransactionReceipt> }, heads: ChainHeads, chain: ChainKey, hash: Hex, timeoutMs: number): Promise<TransactionReceipt> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const seen = heads.latest(chain);
    const receipt = await client.getTransactionReceipt({ hash }).catch(() => null);
    if (receipt) return receipt;
    if (Date.now() >= deadline) throw new WaitForTransactionReceiptTimeoutError({ hash });
    await heads.after(chain, seen, Math.min(1_000, deadline - Date.now()));
  }
}

/**
 * `heads`: new blocks as the caller's own ChainHeads hears them (newHeads over the node's
 * WebSocket), which the caller closes. Without it the head is polled while a settlement waits,
 * and nothing is left open.
 */
export function createFacilitator(account: Account, chains: FacilitatorChain[], options: { confirmationTimeoutMs?: number; heads?: ChainHeads } = {}): x402Facilitator {
  const facilitator = new x402Facilitator();
  const rpcUrls = new Map(chains.map((c) => [c.chain, c.rpcUrl]));
  const heads = options.heads ?? new ChainHeads((chain) => rpcUrls.get(chain), { webSocket: false, pollMs: HEAD_POLL_MS });
  for (const { chain, rpcUrl } of chains) {
    const client = createWalletClient({
      account,
      chain: viemChain(chain, rpcUrl),
      transport: http(rpcUrl, { timeout: RPC_TIMEOUT_MS }),
      pollingInterval: 200,
    }).extend(publicActions);
    // Pipelined, as a hosted facilitator settles: transactions are signed and broadcast one
    // at a time per chain (each reads the next nonce from the node's pending count, which
    // holds the one broadcast before it), and their receipts are awaited side by side. A
    // send that fails before broadcast took no nonce, so none is ever skipped.
    const broadcasting = pLimit(1);
    const writeContract: typeof client.writeContract = (args) => broadcasting(() => client.writeContract(args));
    // A receipt is looked for as each block arrives, not on a 200 ms poll: a hosted
    // facilitator answers soon after the block, and so does this one.
    const waitForTransactionReceipt = (args: { hash: Hex; timeout?: number }) => receiptAsBlocksArrive(client, heads, chain, args.hash, args.timeout ?? CONFIRMATION_TIMEOUT_MS);
    const signer = toFacilitatorEvmSigner(
      { ...client, writeContract, waitForTransactionReceipt, address: account.address } as unknown as Parameters<typeof toFacilitatorEvmSigner>[0],
      // A receipt not seen in time is answered `settlement_pending` with the broadcast hash.
      { confirmationTimeoutMs: options.confirmationTimeoutMs ?? CONFIRMATION_TIMEOUT_MS },
    );
    facilitator.register(chainInfo(chain).caip2, new ExactEvmScheme(signer));
  }
  return facilitator;
}

/** Metering of /settle, as Celo's hosted facilitator does it (see the file's comment). */
export interface SettleMetering {
  /** The key /settle requires in X-API-Key. */
  apiKey: string;
  /** Settlements left before 402 (unlimited when absent). */
  credits?: number;
  /** Settlements per rolling minute before 429 (unlimited when absent). */
  settlesPerMinute?: number;
}

function problem(status: 400 | 401 | 402 | 429 | 500, detail: string) {
  return new Response(JSON.stringify({ error: detail }), {
    status,
    headers: { "content-type": "application/json" },
  });
}

/** The facilitator HTTP API, protocol v2. Bodies: { x402Version, paymentPayload, paymentRequirements }. */
export function facilitatorApp(facilitator: x402Facilitator, metering?: SettleMetering): Hono {
  const app = new Hono();
  let credits = metering?.credits;
  const recentSettles: number[] = [];
  /** The metering's refusal of a /settle, if any; a settlement admitted spends a credit. */
  const refusal = (key: string | undefined): Response | undefined => {
    if (!metering) return undefined;
    if (!key || !sameSecret(key, metering.apiKey)) return problem(401, key ? "Invalid X-API-Key" : "Missing X-API-Key");
    if (credits !== undefined && credits <= 0) return problem(402, "Out of credits");
    const now = Date.now();
    while (recentSettles.length > 0 && recentSettles[0]! <= now - 60_000) recentSettles.shift();
    if (metering.settlesPerMinute !== undefined && recentSettles.length >= metering.settlesPerMinute) return problem(429, "Rate limit reached");
    recentSettles.push(now);
    if (credits !== undefined) credits -= 1;
    return undefined;
  };

  async function parse(req: Request) {
    let body: unknown;
    try {
      body = await req.json();
    } catch {
      return { error: "body is not JSON" } as const;
    }
    const b = body as { paymentPayload?: unknown; paymentRequirements?: unknown };
    const payload = PaymentPayloadV2Schema.safeParse(b?.paymentPayload);
    if (!payload.success) return { error: `paymentPayload: ${payload.error.issues[0]?.message ?? "invalid"}` } as const;
    const requirements = PaymentRequirementsV2Schema.safeParse(b?.paymentRequirements);
    if (!requirements.success) {
      return { error: `paymentRequirements: ${requirements.error.issues[0]?.message ?? "invalid"}` } as const;
    }
    // The schemas type networks as plain strings; they were validated as CAIP-2 ids.
    return { payload: payload.data as PaymentPayload, requirements: requirements.data as PaymentRequirements } as const;
  }

  app.get("/supported", (c) => c.json(facilitator.getSupported()));
  app.get("/healthz", (c) => c.json({ ok: true }));

  app.post("/verify", async (c) => {
    const parsed = await parse(c.req.raw);
    if ("error" in parsed) return problem(400, parsed.error!);
    return c.json(await facilitator.verify(parsed.payload, parsed.requirements));
  });

  // Settlements run side by side (their broadcasts are ordered per chain in the signer). The
  // same authorization asked for twice while the first is in flight (a client retrying, two
  // service instances) joins the first: one transaction, one answer for both. The x402
  // facilitator spec (specs/x402-specification-v2.md, /settle) does not say how a duplicate
  // is answered; the safe reading is never a second transaction for one authorization.
  const inFlight = new Map<string, Promise<unknown>>();
  app.post("/settle", async (c) => {
    const refused = refusal(c.req.header("x-api-key"));
    if (refused) return refused;
    const parsed = await parse(c.req.raw);
    if ("error" in parsed) return problem(400, parsed.error!);
    // One authorization: EIP-3009's (token, from, nonce), or Permit2's (owner, nonce), which Permit2 spends once across tokens.
    const signed = parsed.payload.payload as { authorization?: { from?: string; nonce?: string }; permit2Authorization?: { from?: string; nonce?: string } };
    const authorization = signed.authorization ?? signed.permit2Authorization;
    if (!authorization?.from || !authorization.nonce) return c.json(await facilitator.settle(parsed.payload, parsed.requirements));
    const scope = signed.authorization ? parsed.requirements.asset : "permit2";
    const key = `${parsed.requirements.network}:${scope}:${authorization.from}:${authorization.nonce}`.toLowerCase();
    let settled = inFlight.get(key);
    if (!settled) {
      settled = facilitator.settle(parsed.payload, parsed.requirements).finally(() => inFlight.delete(key));
      inFlight.set(key, settled);
    }
    return c.json((await settled) as object);
  });

  app.onError((err) => problem(500, err.message));
  return app;
}
