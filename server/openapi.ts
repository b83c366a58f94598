/** The OpenAPI 3.1 document (API version 1.0.0), built from the same zod schemas the routes validate with. */
import { z } from "zod";
import { ERRORS } from "./errors.ts";
import { linkRequestSchema, linkResultSchema, paymentRequestSchema } from "./schemas.ts";

const problemResponses = (statuses: number[]) =>
  Object.fromEntries(statuses.map((status) => [String(status), { description: "Problem", content: { "application/problem+json": { schema: problem } } }]));

const problem: Record<string, unknown> = {
  type: "object",
  required: ["type", "title", "status", "code", "detail"],
  properties: {
    type: { type: "string" },
    title: { type: "string" },
    status: { type: "integer" },
    code: { type: "string", enum: Object.keys(ERRORS) },
    detail: { type: "string" },
  },
};

export function openApiDocument() {
  return {
    openapi: "3.1.0",
    info: { title: "Bill payment service", version: "1.0.0" },
    paths: {
      "/api/pay/x402": {
        get: {
          summary: "Discover payment options (402 challenge at the minimum price)",
          responses: { "402": { description: "Payment challenge; x402 v2 in the PAYMENT-REQUIRED header" } },
        },
        post: {
          summary: "Pay a bill with x402",
          requestBody: { required: true, content: { "application/json": { schema: z.toJSONSchema(paymentRequestSchema, { io: "input" }) } } },
          responses: {
            "402": { description: "Payment challenge for this bill, at its locked price" },
            ...Object.fromEntries(
              [...new Set(Object.values(ERRORS).map((e) => e.status))].map((status) => [
                String(status),
                { description: "Problem", content: { "application/problem+json": { schema: problem } } },
              ]),
            ),
          },
        },
      },
      "/api/agent/link": {
        post: {
          summary: "Link a wallet to the agent hub: set its PIN and get an api_key (shown once)",
          parameters: [
            { name: "x-wallet-address", in: "header", required: true, schema: { type: "string" } },
            { name: "x-wallet-timestamp", in: "header", required: true, schema: { type: "string" }, description: "Milliseconds since the epoch" },
            {
              name: "x-wallet-signature",
              in: "header",
              required: true,
              schema: { type: "string" },
              description: "personal_sign of '<Service> Agent Action: POST:/api/agent/link: <x-wallet-timestamp>'",
            },
          ],
          requestBody: { required: true, content: { "application/json": { schema: z.toJSONSchema(linkRequestSchema, { io: "input" }) } } },
          responses: {
            "200": { description: "Linked", content: { "application/json": { schema: z.toJSONSchema(linkResultSchema) } } },
            ...problemResponses([400, 401, 403, 409, 413, 415, 422]),
          },
        },
      },
      "/api/mcp": {
        post: {
          summary: "Agent tools over MCP (JSON-RPC 2.0, stateless): tools/list, tools/call with arguments.api_key",
          requestBody: { required: true, content: { "application/json": { schema: { type: "object" } } } },
          responses: { "200": { description: "JSON-RPC response; a refused tool call has result.isError and the error code in content[0].text" }, ...problemResponses([403, 413]) },
        },
      },
      "/api/a2a": {
        post: {
          summary: "Agent tools as A2A skills (JSON-RPC: SendMessage with A2A-Version 1.0, or message/send for 0.3)",
          requestBody: { required: true, content: { "application/json": { schema: { type: "object" } } } },
          responses: { "200": { description: "JSON-RPC response with a message whose data part holds the result" }, ...problemResponses([403, 413]) },
        },
      },
      "/.well-known/agent-card.json": { get: { summary: "The A2A Agent Card", responses: { "200": { description: "Agent Card" } } } },
      "/api/quote": {
        post: {
          summary: "A bill's price before paying it: amount, breakdown and expiry (the same locked quote the 402 shows)",
          requestBody: { required: true, content: { "application/json": { schema: z.toJSONSchema(paymentRequestSchema, { io: "input" }) } } },
          responses: { "200": { description: "The quote, per payable option" }, ...problemResponses([400, 413, 415, 422, 429, 503]) },
        },
      },
      "/api/orders/{request_id}": {
        get: {
          summary: "Where an order stands (either rail); the purchased code only with proof",
          parameters: [
            { name: "request_id", in: "path", required: true, schema: { type: "string" } },
            {
              name: "authorization",
              in: "header",
              required: false,
              schema: { type: "string" },
              description: "Bearer <order_secret from the paying response> or Bearer <the paying wallet's api_key>: shows purchased_code",
            },
          ],
          responses: { "200": { description: "Payment result" }, ...problemResponses([400, 401, 404]) },
        },
      },
    },
  };
}
