import { afterAll } from "vitest";
import { freshDatabase } from "../support/stack.ts";
import { ledgerSuite } from "./ledger-suite.ts";

const database = await freshDatabase("ledger_test");
afterAll(() => database.drop());

ledgerSuite("PostgreSQL", database.url);
