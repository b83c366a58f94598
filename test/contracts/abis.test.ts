import { readFile } from "node:fs/promises";
import { expect, it } from "vitest";
import { renderAbis } from "../../scripts/gen-abis.ts";

it("lib/generated/abis.ts matches the compiled contracts (run `npm run gen:abis` after a contract change)", async () => {
  const committed = await readFile(new URL("../../lib/generated/abis.ts", import.meta.url), "utf8");
  expect(committed).toBe(renderAbis());
});
