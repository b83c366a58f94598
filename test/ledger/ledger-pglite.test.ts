import { ledgerSuite } from "./ledger-suite.ts";

ledgerSuite("PGlite");
