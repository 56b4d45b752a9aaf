/**
 * `@mrtr/core/adapter`: for adapters that put the guard behind a protocol SDK (such as `@mrtr/mcp-server`) — the
 * guard's option names, the principal policy and tag as the guard computes them, idempotency key checks, and the
 * MRTR protocol shapes an adapter reads.
 */
export { isIdempotencyKey, keyTtlMs } from './guard/key-state.js';
export { STATE_GUARD_OPTIONS } from './guard/options.js';
export { createPrincipalTagger, type Principal, principalPolicy } from './guard/principal.js';
export type { ClientCapabilities, InputRequest } from './protocol.js';
