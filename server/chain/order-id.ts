import { keccak256, toBytes, type Hex } from "viem";

/** BillPay's 32-byte order id for a service request id: the key of a pull and of any refund on chain. */
export const onChainOrderId = (requestId: string): Hex => keccak256(toBytes(requestId));
