import type { RequestBinding } from '../claims.js';
import type { GuardEvent } from '../events.js';
import { checkFleetKeys } from '../keys/fleet.js';
import { createGuardContext } from './context.js';
import { createOperations } from './operations.js';
import { bindNow, scopeOf } from './scope.js';
import type { GuardRequest, RequestContext, StateGuard, StateGuardOptions } from './types.js';

export type {
  AdmitOptions,
  GuardRequest,
  MintedState,
  MintOptions,
  MintQuota,
  OpenedState,
  RequestContext,
  StateGuard,
  StateGuardOptions,
} from './types.js';

/**
 * Composes a codec, an optional replay store and policy. `open` checks, in this order (numbered as in
 * docs/architecture.md): 1. size cap (before any decoding), 2. integrity (the codec), 3. claims shape,
 * 4. expiry/iat, 5. audience, 6. principal, 7. request binding, 8. flow deadline/round; then single use through
 * the store. Nothing is accepted on a store error.
 * With `onEvent`, the guard reports each step itself (see {@link GuardEvent}); without it no event is built.
 *
 * The parts, in `guard/`: `context.ts` (the options validated, by `options.ts`, and what every step reads, built once),
 * `operations.ts` (the one table of operations, each on a request's scope, `scope.ts`), and one file per step:
 * `verify.ts` (checks 1–8), `mint.ts` (the mint pipeline), `spend.ts` (single use: the one place that picks `consume`
 * or `claim`, on `outcomes/`), `report.ts` (the events, only with `onEvent`); `key-state.ts` (a keyed call's state),
 * `keys.ts` (the ring in force and its codec).
 */
export function createStateGuard(options: StateGuardOptions): StateGuard {
  const ctx = createGuardContext(options);
  const { store, maxTokenBytes, maxRounds, ttlMs, clockSkewMs, now, clock } = ctx;
  const ops = createOperations(ctx);
  return {
    codec: ctx.codec,
    store,
    maxTokenBytes,
    maxRounds,
    ttlMs,
    checkKeys: () => checkFleetKeys(ctx.keys, store, { now: now(), lifetimeMs: ttlMs + 2 * clockSkewMs }),
    checkClock: () => clock.measure(),
    bind: async (request: RequestContext): Promise<RequestBinding> => bindNow(request),
    consume: ops.consume,
    claim: ops.claim,
    open: (token, request) => ops.open(scopeOf(request), token),
    verify: (token, request) => ops.verify(scopeOf(request), token),
    admit: (token, request, answers, admitOptions) => ops.admit(scopeOf(request), token, answers, admitOptions),
    mint: (data, request, mintOptions) => ops.mint(scopeOf(request), data, mintOptions),
    mintFlow: (data, request, mintOptions) => ops.mintFlow(scopeOf(request), data, mintOptions),
    forRequest(request: RequestContext): GuardRequest {
      const scope = scopeOf(request);
      ctx.whoIn(scope);
      return {
        request,
        open: (token) => ops.open(scope, token),
        verify: (token) => ops.verify(scope, token),
        admit: (token, answers, admitOptions) => ops.admit(scope, token, answers, admitOptions),
        mint: (data, mintOptions) => ops.mint(scope, data, mintOptions),
        mintFlow: (data, mintOptions) => ops.mintFlow(scope, data, mintOptions),
        claimKey: (key, keyOptions) => ops.claimKey(scope, key, keyOptions?.ttlMs),
      };
    },
  };
}
