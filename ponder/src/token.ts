/**
 * Token transfers into and out of BillPay, classified by the log just before each one:
 * BillPay's Pulled, Refunded or Withdrawn, or the token's AuthorizationUsed (an x402
 * payment, recorded here because BillPay never sees it); anything else is "other".
 * And approvals of BillPay, for the payer's token allowance.
 */
import { ponder, type IndexingFunctionArgs } from "ponder:registry";
import { payment, refund, treasuryTransfer, withdrawal } from "ponder:schema";
import { toEventSelector, type Hex } from "viem";
import { updateAccount, updateTreasury } from "./accounts.ts";
import { logId } from "./ids.ts";

const AUTHORIZATION_USED = toEventSelector("AuthorizationUsed(address,bytes32)");
type Kind = "pull" | "authorization" | "refund" | "withdrawal" | "other";

const sameAddress = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
const topicAddress = (topic: Hex | undefined) => (topic ? `0x${topic.slice(26)}` : "");

type TransferEvent = IndexingFunctionArgs<"TokenIn:Transfer">;

async function onTransfer({ event, context }: TransferEvent) {
  const chainId = context.chain.id;
  const token = event.log.address;
  const { from, to, value } = event.args;
  const billPay = context.contracts.BillPay.address as Hex;
  const inbound = sameAddress(to, billPay);
  if (inbound && sameAddress(from, billPay)) return; // a self-transfer moves nothing
  const tx = event.transaction.hash;
  const previousId = logId(chainId, tx, event.log.logIndex - 1);
  const timestamp = event.block.timestamp;

  let kind: Kind = "other";
  if (inbound) {
    if (await context.db.find(payment, { id: previousId })) {
      kind = "pull";
    } else {
      const receipt = await context.client.getTransactionReceipt({ hash: tx });
      const used = receipt.logs.find(
        (l) =>
          l.logIndex === event.log.logIndex - 1 &&
          sameAddress(l.address, token) &&
          l.topics[0] === AUTHORIZATION_USED &&
          sameAddress(topicAddress(l.topics[1]), from),
      );
      if (used) {
        kind = "authorization";
        await context.db.insert(payment).values({
          id: logId(chainId, tx, event.log.logIndex),
          chainId,
          rail: "authorization",
          orderId: null,
          authorizationNonce: used.topics[2]!,
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
    }
  } else if (await context.db.find(refund, { id: previousId })) {
    kind = "refund";
  } else if (await context.db.find(withdrawal, { id: previousId })) {
    kind = "withdrawal";
  }

  await context.db.insert(treasuryTransfer).values({
    id: logId(chainId, tx, event.log.logIndex),
    chainId,
    token,
    from,
    to,
    amount: value,
    inbound,
    kind,
    txHash: tx,
    blockNumber: event.block.number,
    logIndex: event.log.logIndex,
    timestamp,
  });
  await updateTreasury(context.db, { chainId, token }, timestamp, (row) => {
    const balance = inbound ? row.balance + value : row.balance - value;
    switch (kind) {
      case "pull":
        return { balance, pullInflow: row.pullInflow + value };
      case "authorization":
        return { balance, authorizationInflow: row.authorizationInflow + value };
      case "refund":
        return { balance, refunds: row.refunds + value };
      case "withdrawal":
        return { balance, withdrawals: row.withdrawals + value };
      default:
        return inbound ? { balance, otherInflow: row.otherInflow + value } : { balance, otherOutflow: row.otherOutflow + value };
    }
  });
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
