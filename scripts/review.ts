/**
 * `npm run review -- <command> [options]`: an operator's decisions on what the service holds
 * for review, through the running service's /ops routes (the service holds the refunder key
 * and the order flow; server/orders/review.ts decides what is allowed, from the ledger).
 *
 *   list                                            orders in NEEDS_REVIEW and x402 payments without an order
 *   show <request_id>                               an order: what the ledger shows under its key, what each action would meet, the actions taken
 *   refund <request_id> --reason "…"                refund exactly what the ledger shows paid under the order's key
 *   serve <request_id> --reason "…"                 vend the bill (the ledger must show exactly the order's payment)
 *   close <request_id> --reason "…" [--refund-tx 0x…]
 *                                                   no money moves (the ledger must show no payment under the key); with
 *                                                   --refund-tx, a Permit2 order held for a refund by hand, refunded (the
 *                                                   transaction is checked on chain)
 *   hold <request_id> --reason "…"                  a Permit2 order held for its payer's transfer into BillPay: held for a
 *                                                   refund by hand of that transfer, before sending one
 *   hold-orphan --chain CELO --token 0x… --payer 0x… --nonce 0x… --reason "…"
 *                                                   an x402 payment without an order, held for a refund by hand: do this
 *                                                   before sending one (the service then cannot refund it too)
 *   close-orphan --chain CELO --token 0x… --payer 0x… --nonce 0x… --reason "…" [--refund-tx 0x…]
 *                                                   an x402 payment without an order: refunded by hand (once held; the
 *                                                   transaction is checked on chain) or kept
 *
 * Common: --as NAME (who decides; default OPERATOR_NAME, else the system user), --json.
 * SERVICE_URL (default the local service) and OPS_TOKEN, as for `npm run audit`. Exits 0 when
 * the decision was taken, 1 when it was refused or came back to review, 2 on a usage error.
 */
import { userInfo } from "node:os";
import { localUrl } from "../lib/local-ports.ts";

export const REVIEW_COMMANDS = ["list", "show", "refund", "serve", "close", "hold", "hold-orphan", "close-orphan"] as const;
type Command = (typeof REVIEW_COMMANDS)[number];

export class UsageError extends Error {}

const TIMEOUT_MS = 120_000;

interface Parsed {
  command: Command;
  positional: string[];
  options: Record<string, string>;
  json: boolean;
}

/**
 * The options each command takes (beside --as and --json). Any other is refused: a misspelt
 * --refund-tx read as absent would close a held orphan as kept, not as refunded by hand.
 */
const OPTIONS: Record<Command, readonly string[]> = {
  list: [],
  show: [],
  refund: ["reason"],
  serve: ["reason"],
  close: ["reason", "refund-tx"],
  hold: ["reason"],
  "hold-orphan": ["chain", "token", "payer", "nonce", "reason"],
  "close-orphan": ["chain", "token", "payer", "nonce", "reason", "refund-tx"],
};

function parseArgs(argv: string[]): Parsed {
  const [command, ...rest] = argv;
  if (!REVIEW_COMMANDS.includes(command as Command)) throw new UsageError(`unknown command "${command ?? ""}"; commands: ${REVIEW_COMMANDS.join(", ")}`);
  const takes = ["as", ...OPTIONS[command as Command]];
  const options: Record<string, string> = {};
  const positional: string[] = [];
  let json = false;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === "--json") json = true;
    else if (arg.startsWith("--")) {
      const name = arg.slice(2);
      if (!takes.includes(name)) {
        const hint = name === "refund-tx" ? " (only close and close-orphan name a refund's transaction: hold first, send the refund, then close with it)" : "";
        throw new UsageError(`${command} takes no ${arg}${hint}; its options: ${takes.map((t) => `--${t}`).join(", ")}, --json`);
      }
      if (name in options) throw new UsageError(`${arg} is given twice`);
      if (rest[i + 1] === undefined) throw new UsageError(`${arg} needs a value`);
      options[name] = rest[++i]!;
    } else positional.push(arg);
  }
  return { command: command as Command, positional, options, json };
}

export interface ReviewCliResult {
  lines: string[];
  /** The decision was taken (or, for list and show, the service answered). */
  ok: boolean;
  body: unknown;
}

type ActionRecord = { id: string; action: string; operator: string; reason: string; outcome: string; detail: string | null; amount: string | null; amount_text?: string | null; tx_hash: string | null; created_at: string; status_after: string | null };

const actionLine = (a: ActionRecord) =>
  `#${a.id} ${a.created_at.slice(0, 19)} ${a.action} by ${a.operator} (${a.reason}): ${a.outcome}${a.status_after ? ` -> ${a.status_after}` : ""}${a.amount ? `, amount ${a.amount_text ?? `${a.amount} raw units`}` : ""}${a.tx_hash ? `, tx ${a.tx_hash}` : ""}${a.detail ? `\n    ${a.detail}` : ""}`;

export async function runReview(argv: string[], env: { url: string; token?: string; operator?: string }): Promise<ReviewCliResult> {
  const { command, positional, options, json } = parseArgs(argv);
  const operator = options.as ?? env.operator ?? process.env.OPERATOR_NAME ?? userInfo().username;
  const headers: Record<string, string> = { ...(env.token ? { authorization: `Bearer ${env.token}` } : {}), "x-operator": operator };
  const call = async (method: "GET" | "POST", path: string, body?: unknown) => {
    const res = await fetch(`${env.url}${path}`, {
      method,
      headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: kept as text
    }
    return { status: res.status, body: parsed as Record<string, unknown> };
  };
  const reason = () => {
    const r = options.reason?.trim();
    if (!r) throw new UsageError(`${command} needs --reason "…": every decision is recorded with who made it and why`);
    return r;
  };
  const problem = (r: { status: number; body: Record<string, unknown> }) => `the service answered ${r.status}: ${String(r.body.code ?? "")} ${String(r.body.detail ?? JSON.stringify(r.body))}`;

  switch (command) {
    case "list": {
      const r = await call("GET", "/ops/review");
      if (r.status !== 200) return { lines: [problem(r)], ok: false, body: r.body };
      const { orders, orphans } = r.body as { orders: Array<Record<string, string | null>>; orphans: Array<Record<string, string | null>> };
      const lines = json
        ? [JSON.stringify(r.body, null, 2)]
        : [
            `orders held for review: ${orders.length}`,
            ...(orders.length === 0 ? ["  none"] : orders.map((o) => `  ${o.request_id} ${o.rail} ${o.amount_text} from ${o.payer}: ${o.failure_reason ?? ""}`)),
            `x402 payments without an order: ${orphans.length}`,
            ...(orphans.length === 0
              ? ["  none"]
              : orphans.map((p) => {
                  const key = `--chain ${p.chain} --token ${p.token_address} --payer ${p.payer} --nonce ${p.auth_nonce}`;
                  const held = p.status !== "NEEDS_REVIEW";
                  return `  ${p.amount_text} from ${p.payer} in ${p.tx_hash}${held ? ` (${p.status}: close it with --refund-tx once sent)` : ""}\n    close-orphan ${key}${held ? "" : `\n    hold-orphan ${key}   (before a refund by hand)`}`;
                })),
          ];
      return { lines, ok: true, body: r.body };
    }
    case "show": {
      const id = positional[0];
      if (!id) throw new UsageError("show needs the order's request_id");
      const r = await call("GET", `/ops/review/orders/${encodeURIComponent(id)}`);
      if (r.status !== 200) return { lines: [problem(r)], ok: false, body: r.body };
      if (json) return { lines: [JSON.stringify(r.body, null, 2)], ok: true, body: r.body };
      const b = r.body as {
        order: Record<string, string | null>;
        ledger: { payment?: { amount_text: string; payer: string; txHash: string } | null; refunds?: Array<{ amount_text: string; txHash: string }>; error?: string };
        refused?: Record<string, string | null>;
        actions: ActionRecord[];
      };
      const o = b.order;
      const lines = [
        `${o.request_id}: ${o.status} (${o.rail}, ${o.amount_text} from ${o.payer})`,
        `held because: ${o.failure_reason ?? "–"}`,
        b.ledger.error
          ? `ledger: could not be read: ${b.ledger.error}`
          : `ledger under its key: ${b.ledger.payment ? `${b.ledger.payment.amount_text} paid by ${b.ledger.payment.payer} in ${b.ledger.payment.txHash}` : "no payment"}; refunds: ${b.ledger.refunds?.length ? b.ledger.refunds.map((x) => `${x.amount_text} in ${x.txHash}`).join(", ") : "none"}`,
        ...(b.refused ? Object.entries(b.refused).map(([action, why]) => `  ${action}: ${why ? `refused, ${why}` : "allowed"}`) : []),
        `actions: ${b.actions.length}`,
        ...b.actions.map((a) => `  ${actionLine(a)}`),
      ];
      return { lines, ok: true, body: r.body };
    }
    case "refund":
    case "serve":
    case "close":
    case "hold": {
      const id = positional[0];
      if (!id) throw new UsageError(`${command} needs the order's request_id`);
      const r = await call("POST", `/ops/review/orders/${encodeURIComponent(id)}`, { action: command, reason: reason(), ...(options["refund-tx"] ? { refund_tx_hash: options["refund-tx"] } : {}) });
      return decided(r, json, problem);
    }
    case "hold-orphan":
    case "close-orphan": {
      const need = (name: string) => {
        const v = options[name];
        if (!v) throw new UsageError(`${command} needs --${name}`);
        return v;
      };
      const body = {
        chain: need("chain").toUpperCase(),
        token_address: need("token"),
        payer: need("payer"),
        auth_nonce: need("nonce"),
        action: command === "hold-orphan" ? "hold" : "close",
        reason: reason(),
        ...(options["refund-tx"] ? { refund_tx_hash: options["refund-tx"] } : {}),
      };
      return decided(await call("POST", "/ops/review/orphans", body), json, problem);
    }
  }
}

function decided(r: { status: number; body: Record<string, unknown> }, json: boolean, problem: (r: { status: number; body: Record<string, unknown> }) => string): ReviewCliResult {
  const action = r.body.action as ActionRecord | undefined;
  if (json) return { lines: [JSON.stringify(r.body, null, 2)], ok: r.status === 200 && action?.outcome !== "FAILED", body: r.body };
  if (!action) return { lines: [problem(r)], ok: false, body: r.body };
  const taken = r.status === 200 && action.outcome !== "FAILED";
  return { lines: [`${taken ? "taken" : "not taken"}: ${actionLine(action)}`], ok: taken, body: r.body };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const result = await runReview(process.argv.slice(2), { url: process.env.SERVICE_URL ?? localUrl("service"), token: process.env.OPS_TOKEN });
    console.log(result.lines.join("\n"));
    process.exitCode = result.ok ? 0 : 1;
  } catch (err) {
    console.error(err instanceof UsageError ? err.message : (err as Error).stack);
    process.exitCode = 2;
  }
}
