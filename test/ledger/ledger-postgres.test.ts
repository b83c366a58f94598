import { POSTGRES_URL } from "../support/stack.ts";
import { ledgerSuite } from "./ledger-suite.ts";

ledgerSuite("PostgreSQL", POSTGRES_URL);
