import { keccak256, toBytes, type Hex } from "viem";

/** BillPay's 32-byte order id for a service request id: the key of a pull and of any refund on chain. */
export const onChainOrderId = (requestId: string): Hex => keccak256(toBytes(requestId));

/**
 * The order id an x402 order's refund goes under when its own is taken (BillPay's OrderExists
 * while the payment's key is not refunded: whoever held the operator or refunder key used it).
 * An x402 refund is bounded by the payment's key, which BillPay refunds once, whatever the id.
 */
export const refundOrderIdOnceTaken = (requestId: string): Hex => keccak256(toBytes(`${requestId}/refund`));
