/** Orders as a request leaves them when it dies: for the suites that test what the worker does next. */
import { encodePaymentSignatureHeader } from "@x402/core/http";
import type { PaymentPayload } from "@x402/core/types";
import type { Hex } from "viem";
import type { FlowDeps } from "../../server/orders/fulfil.ts";
import type { ServiceStack } from "../../stack/service-stack.ts";
import { hashOrderSecret, newOrderIds, type Order } from "../../server/orders/store.ts";
import { decodePayment } from "../../server/x402-protocol/payment.ts";

/**
 * What an x402 request does before it settles, then "crashes": the once-only lock on the
 * payment and the order in SETTLING, its lease already run out. The caller settles it.
 */
export async function lockAsCrashedRequest(
  flow: FlowDeps,
  input: { body: Record<string, unknown>; payload: PaymentPayload; payer: Hex; tokenAddress: string; tag: string; chain?: "CELO" | "BASE"; token?: string },
): Promise<Order> {
  const payment = decodePayment("PAYMENT-SIGNATURE", encodePaymentSignatureHeader(input.payload));
  const a = payment.authorization;
  const { order } = await flow.orders.lockPayment(
    {
      ...newOrderIds(),
      vend: null,
      bodyHash: input.tag,
      bill: input.body,
      chain: input.chain ?? "CELO",
      token: input.token ?? "USDC",
      tokenAddress: input.tokenAddress,
      payer: input.payer,
      amount: BigInt(input.payload.accepted.amount),
      authNonce: a.nonce,
      authValidBefore: a.validBefore,
      secretHash: hashOrderSecret(`ors_${input.tag}`),
      payment: {
        x402Version: 2,
        method: payment.method,
        payload: input.payload,
        authorization: { ...a, value: String(a.value), validAfter: String(a.validAfter), validBefore: String(a.validBefore) },
        signature: payment.signature,
      },
      requirements: input.payload.accepted as unknown as Record<string, unknown>,
    },
    0,
  );
  return order;
}

/** What the biller sandbox did with each of an order's pay attempts (its own transaction route), in attempt order. */
export async function deliveredBy(service: ServiceStack, requestId: unknown): Promise<string[]> {
  const keys = { "api-key": service.config.BILLER_API_KEY, "secret-key": service.config.BILLER_SECRET_KEY };
  const attempts = await service.flow.attempts.of(requestId as string);
  return Promise.all(
    attempts.map(async (a) => ((await (await fetch(`${service.urls.biller}/sandbox/transactions/${a.billerRequestId}`, { headers: keys })).json()) as { status: string }).status),
  );
}

/** As the biller taking a served bill back leaves it: held for an operator, its code gone and its attempt reversed. */
export async function takenBackByBiller(service: ServiceStack, requestId: string): Promise<void> {
  // The biller reverses each attempt (its staff's route, its webhook left out), as an operator's refund asks it afresh.
  const attempts = await service.db.query<{ biller_request_id: string }>(`SELECT biller_request_id FROM biller_attempt WHERE request_id = $1`, [requestId]);
  for (const a of attempts) {
    const res = await fetch(`${service.urls.biller}/sandbox/transactions/${a.biller_request_id}/reverse?notify=0`, {
      method: "POST",
      headers: { "api-key": service.config.BILLER_API_KEY, "secret-key": service.config.BILLER_SECRET_KEY },
    });
    if (!res.ok) throw new Error(`the sandbox would not reverse ${a.biller_request_id}: ${res.status}`);
  }
  await service.db.query(`UPDATE bill_order SET status = 'NEEDS_REVIEW', purchased_code = NULL WHERE request_id = $1`, [requestId]);
  await service.db.query(`UPDATE biller_attempt SET outcome = 'reversed' WHERE request_id = $1`, [requestId]);
}
