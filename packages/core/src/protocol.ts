/**
 * The few MRTR protocol shapes core needs (MCP 2026-07-28, SEP-2322): JSON values, the embedded input
 * request and client capabilities. Structural, so core needs no SDK.
 */

/** A JSON primitive. */
export type JsonPrimitive = string | number | boolean | null;
/** Any JSON value. */
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

/** An embedded request in `InputRequiredResult.inputRequests` (elicitation, sampling or roots). */
export interface InputRequest {
  method: 'elicitation/create' | 'sampling/createMessage' | 'roots/list';
  params?: Record<string, unknown> | undefined;
}

/** The client capabilities a request declares in its `_meta` (only the parts MRTR gates on). */
export interface ClientCapabilities {
  roots?: Record<string, unknown>;
  sampling?: { context?: Record<string, unknown>; tools?: Record<string, unknown> };
  elicitation?: { form?: Record<string, unknown>; url?: Record<string, unknown> };
  [key: string]: unknown;
}
