/**
 * Token transfers into and out of BillPay: each moves the treasury's totals and balance.
 * An inbound transfer is an x402 payment only when it is the transfer of an EIP-3009
 * authorization or of an x402 Permit2 settlement, by the one predicate in lib/payment-logs.ts
 * that the service's receipt check shares; anything else is "other" inflow, never a payment. BillPay never sees x402 payments, so they are recorded
 * here. Pulls, refunds and withdrawals are booked from BillPay's own events (billpay.ts),
 * not from transfers. And approvals of BillPay, for the payer's token allowance.
 */
import { ponder, type IndexingFunctionArgs } from "ponder:registry";
import { payment, treasuryTransfer } from "ponder:schema";
import { type Hex } from "viem";
import { authorizationNonceOf, logsInBlock, mayCarryAuthorization, permit2NonceOf, transactionLogsInBlock } from "../../lib/payment-logs.ts";
import { updateAccount, updateTreasury } from "./accounts.ts";
import { logId } from "./ids.ts";

const sameAddress = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

type TransferEvent = IndexingFunctionArgs<"TokenIn:Transfer">;

/** The payment's rail and nonce, by the predicate the service's receipt check shares (lib/payment-logs.ts). */
async function signedPaymentOf({ event, context }: TransferEvent): Promise<{ rail: "authorization" | "permit2"; nonce: Hex } | null> {
  const hash = event.transaction.hash;
  const inBlock = () => transactionLogsInBlock((args) => context.client.request(args), event.block.hash, hash, { token: event.log.address, logIndex: event.log.logIndex });
  const logs = await logsInBlock(event.block.hash, () => context.client.getTransactionReceipt({ hash }), inBlock);
  const transfer = { token: event.log.address, from: event.args.from, to: event.args.to, value: event.args.value, logIndex: event.log.logIndex };
  const nonce = authorizationNonceOf(logs, transfer);
  if (nonce) return { rail: "authorization", nonce };
  const permit2Nonce = permit2NonceOf(event.transaction, logs, transfer);
  return permit2Nonce ? { rail: "permit2", nonce: permit2Nonce } : null;
}

async function onTransfer(args: TransferEvent) {
  const { event, context } = args;
  const chainId = context.chain.id;
  const token = event.log.address;
  const { from, to, value } = event.args;
  const billPay = context.contracts.BillPay.address as Hex;
  const inbound = sameAddress(to, billPay);
  if (inbound && sameAddress(from, billPay)) return; // a self-transfer moves nothing
  const tx = event.transaction.hash;
  const id = logId(chainId, tx, event.log.logIndex);
  const timestamp = event.block.timestamp;

  // A transaction sent to BillPay (a pull) carries no x402 payment: no receipt to fetch.
  const signed = inbound && mayCarryAuthorization(event.transaction.to, billPay) ? await signedPaymentOf(args) : null;
  const nonce = signed?.nonce ?? null;
  if (signed) {
    await context.db.insert(payment).values({
      id,
      chainId,
      rail: signed.rail,
      orderId: null,
      authorizationNonce: signed.nonce,
      payer: from,
      token,
      amount: value,
      allowanceLeft: null,
      txHash: tx,
      blockNumber: event.block.number,
      logIndex: event.log.logIndex,
      timestamp,
    });
    await updateAccount(context.db, { chainId, token, payer: from }, timestamp, (row) => ({
      totalPaid: row.totalPaid + value,
      net: row.net + value,
      paymentCount: row.paymentCount + 1,
    }));
  }

  await context.db.insert(treasuryTransfer).values({
    id,
    chainId,
    token,
    from,
    to,
    amount: value,
    inbound,
    authorizationNonce: nonce,
    txHash: tx,
    blockNumber: event.block.number,
    logIndex: event.log.logIndex,
    timestamp,
  });
  await updateTreasury(context.db, { chainId, token }, timestamp, (row) =>
    inbound
      ? {
          balance: row.balance + value,
          totalInflow: row.totalInflow + value,
          authorizationInflow: nonce ? row.authorizationInflow + value : row.authorizationInflow,
        }
      : { balance: row.balance - value, totalOutflow: row.totalOutflow + value },
  );
}

ponder.on("TokenIn:Transfer", onTransfer);
ponder.on("TokenOut:Transfer", onTransfer);

ponder.on("TokenIn:Approval", async ({ event, context }) => {
  const { owner, value } = event.args;
  await updateAccount(
    context.db,
    { chainId: context.chain.id, token: event.log.address, payer: owner },
    event.block.timestamp,
    () => ({ tokenAllowance: value }),
  );
});
