/**
 * The direction of imports (docs/architecture.md): `npm run lint:imports`, run by the suite
 * (test/docs/imports.test.ts). No cycles anywhere; each part imports only the parts below it.
 * Imports that broke a direction rule when the rules came in are listed, one by one, in
 * .dependency-cruiser-known-violations.json: they are the debt left, and a new one fails.
 */
const TOP = "^server/(app|main|services|storage-purge|discovery)\\.ts$";
const RAILS = `${TOP}|^server/(x402|agent|console|operator)/|^server/(ops|landing|docs|openapi)\\.tsx?$`;
const ORDER_LIFE = "^server/(orders|audit)/|^server/metrics\\.ts$";
const ADAPTERS = "^server/(quote|chain|biller|pricing|x402-protocol)/|^server/(ledger-client|ledger-health|startup-checks|limits)\\.ts$";

module.exports = {
  forbidden: [
    { name: "no-cycles", severity: "error", comment: "A file never imports one that imports it back.", from: {}, to: { circular: true } },
    {
      name: "lib-is-shared",
      severity: "error",
      comment: "lib/ is what everything shares: it imports nothing of the parts that use it.",
      from: { path: "^lib/" },
      to: { path: "^(server|ponder|services|stack|scripts|test)/" },
    },
    {
      name: "ledger-and-stand-ins-stand-alone",
      severity: "error",
      comment: "The ledger (ponder/) and the stand-ins (services/) import only lib/: they are not the service.",
      from: { path: "^(ponder|services)/" },
      to: { path: "^(server|stack|scripts|test)/" },
    },
    {
      name: "service-below-its-starters",
      severity: "error",
      comment: "The service imports lib/ and the ledger's schema, never what starts or drives it.",
      from: { path: "^server/" },
      to: { path: "^(stack|scripts|services|test)/|^ponder/(?!ponder\\.schema\\.ts$|src/ids\\.ts$)" },
    },
    {
      name: "no-tests-in-code",
      severity: "error",
      comment: "Code never imports a test; the benchmarks (scripts/bench*) start the suites' own stacks (test/support).",
      from: { path: "^(lib|server|ponder|services|stack)/|^scripts/(?!bench)" },
      to: { path: "^test/" },
    },
    {
      name: "order-life-below-rails",
      severity: "error",
      comment: "An order's life (orders/, audit/) does not reach up into the rails or the app.",
      from: { path: ORDER_LIFE },
      to: { path: RAILS },
    },
    {
      name: "adapters-below-order-life",
      severity: "error",
      comment: "The chain, the biller and pricing know nothing of orders or rails.",
      from: { path: ADAPTERS },
      to: { path: `${RAILS}|${ORDER_LIFE}` },
    },
    {
      name: "rooms-in-order",
      severity: "error",
      comment:
        "Inside a level the rooms keep one order too, so no two rooms import each other: agent above x402; the operators' views below the rails; " +
        "audit above orders; quote above chain, chain above the biller, the biller above pricing; x402-protocol and pricing at the bottom.",
      from: { path: "^server/(x402|operator|orders|chain|biller|pricing|x402-protocol)/" },
      to: { path: "^server/(agent|console)/" },
    },
    { name: "x402-below-agent", severity: "error", from: { path: "^server/x402/" }, to: { path: "^server/(agent|console|operator)/" } },
    { name: "orders-below-audit", severity: "error", from: { path: "^server/orders/" }, to: { path: "^server/audit/" } },
    { name: "chain-below-quote", severity: "error", from: { path: "^server/(chain|biller|pricing|x402-protocol)/" }, to: { path: "^server/quote/" } },
    { name: "biller-below-chain", severity: "error", from: { path: "^server/(biller|pricing|x402-protocol)/" }, to: { path: "^server/chain/" } },
    { name: "pricing-below-biller", severity: "error", from: { path: "^server/(pricing|x402-protocol)/" }, to: { path: "^server/biller/" } },
    { name: "protocol-and-pricing-apart", severity: "error", from: { path: "^server/x402-protocol/" }, to: { path: "^server/pricing/" } },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|artifacts|cache|\\.data)/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"], extensions: [".ts", ".tsx", ".js", ".mjs", ".cjs", ".json"] },
  },
};
