/** The OpenAPI 3.1 document (API version 1.0.0), built from the same zod schemas the routes validate with. */
import { z } from "zod";
import { ERRORS } from "./errors.ts";
import { paymentRequestSchema } from "./schemas.ts";

const problem = {
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
    },
  };
}
