/**
 * `@mrtr/mcp-server/http`: serves MCP over HTTP from a server factory, 2026-07-28 requests statelessly and 2025-era
 * clients on bounded, owner-bound sessions (where the SDK's legacy shim can ask them a protected call's questions).
 *
 * ```ts
 * const handler = createHttpHandler(() => buildServer());
 * createServer(toNodeHandler(handler)).listen(3000); // toNodeHandler from @modelcontextprotocol/node
 * ```
 */
export { IDEMPOTENCY_KEY_HEADER } from '../rounds/keys.js';
export { createHttpHandler } from './handler.js';
export type { HttpHandler, HttpHandlerOptions, HttpHandlerRequestOptions, LegacySessionOptions } from './options.js';
