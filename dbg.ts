import { join } from "node:path";
import { parseUnits } from "viem";
import { hardhatAccount } from "/work/main/lib/local-accounts.ts";
import { startLedger, waitForLedgerBlock } from "/work/main/scripts/ledger-process.ts";
import { chainActors } from "/work/main/test/support/actors.ts";
import { startTestChains, uniqueSchema } from "/work/main/test/support/stack.ts";
const stack = await startTestChains();
const celo = chainActors(stack.deployments, "CELO");
const r = await celo.payByAuthorization(hardhatAccount(5), "USDC", parseUnits("3", 6));
console.log("tx", r.receipt.transactionHash, "block", r.receipt.blockNumber);
const ledger = await startLedger({ deploymentsFile: stack.deploymentsFile, pgliteDir: join(stack.dir, "pg"), schema: uniqueSchema("dbg"), logTo: "/tmp/dbg4.log" }).catch(e => { console.log("ERR", e.message); return null; });
if (ledger) { await waitForLedgerBlock(ledger.url, 42220, await celo.publicClient.getBlockNumber()); const res = await fetch(`${ledger.url}/ledger/treasury`); console.log(await res.text()); await ledger.stop(); }
await stack.close();
