import type { RequestBinding } from '../claims.js';
import { checkFleetKeys } from '../keys/fleet.js';
import type { JsonValue } from '../protocol.js';
import { createGuardContext } from './context.js';
import { createKeyState } from './key-state.js';
import { createMint } from './mint.js';
import { createOperations } from './operations.js';
import { bindNow, scopeOf } from './scope.js';
import { createSpend } from './spend.js';
import type {
  Admission,
  AdmitOptions,
  GuardRequest,
  MintedState,
  MintOptions,
  OpenedState,
  RequestContext,
  StateGuard,
  StateGuardOptions,
} from './types.js';
import { createVerify } from './verify.js';

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
 * The parts: `guard-options.ts` (the options validated), `guard-keys.ts` (the ring in force and its codec),
 * `guard-scope.ts` (a request's principal and binding), `guard-checks.ts` (checks 1–8), `guard-single-use.ts`
 * (`consume`, `claim`), `guard-mint.ts` (the mint pipeline), `guard-operations.ts` (the operations and their events).
 */
export function createStateGuard(options: StateGuardOptions): StateGuard {
  const ctx = createGuardContext(options);
  const { store, maxTokenBytes, maxRounds, ttlMs, clockSkewMs, now, whoIn, clock, codec, holderOf } = ctx;
  const singleUse = createSpend(ctx);
  const { consume, claim } = singleUse;
  const { openIn, mintIn, mintTokenIn, claimKeyIn } = createOperations({
    verifyNow: createVerify(ctx),
    mintNow: createMint(ctx),
    singleUse,
    keyState: createKeyState(ctx),
    holderOf,
    store,
    codecId: codec.id,
    events: ctx.events,
    now,
  });

  return {
    codec,
    store,
    maxTokenBytes,
    maxRounds,
    ttlMs,
    checkKeys: () => checkFleetKeys(ctx.keys, store, { now: now(), lifetimeMs: ttlMs + 2 * clockSkewMs }),
    checkClock: () => clock.measure(),
    bind: async (request: RequestContext): Promise<RequestBinding> => bindNow(request),
    consume,
    claim: (state, answers, options) => claim(state, answers, holderOf(state), options),
    open<P extends JsonValue>(token: unknown, request: RequestContext) {
      return openIn(scopeOf(request), token, 'consume') as Promise<OpenedState<P>>;
    },
    verify<P extends JsonValue>(token: unknown, request: RequestContext) {
      return openIn(scopeOf(request), token, 'verify') as Promise<OpenedState<P>>;
    },
    admit<P extends JsonValue>(token: unknown, request: RequestContext, answers: JsonValue, options?: AdmitOptions) {
      return openIn(scopeOf(request), token, 'claim', answers, options) as Promise<Admission<OpenedState<P>>>;
    },
    mint<P extends JsonValue>(data: P, request: RequestContext, mintOptions?: MintOptions): Promise<string> {
      return mintTokenIn(scopeOf(request), data, mintOptions);
    },
    mintFlow<P extends JsonValue>(data: P, request: RequestContext, mintOptions?: MintOptions): Promise<MintedState> {
      return mintIn(scopeOf(request), data, mintOptions);
    },
    forRequest(request: RequestContext): GuardRequest {
      const scope = scopeOf(request);
      whoIn(scope);
      return {
        request,
        open: <P extends JsonValue>(token: unknown) => openIn(scope, token, 'consume') as Promise<OpenedState<P>>,
        verify: <P extends JsonValue>(token: unknown) => openIn(scope, token, 'verify') as Promise<OpenedState<P>>,
        admit: <P extends JsonValue>(token: unknown, answers: JsonValue, options?: AdmitOptions) =>
          openIn(scope, token, 'claim', answers, options) as Promise<Admission<OpenedState<P>>>,
        mint: <P extends JsonValue>(data: P, mintOptions?: MintOptions) => mintTokenIn(scope, data, mintOptions),
        mintFlow: <P extends JsonValue>(data: P, mintOptions?: MintOptions) => mintIn(scope, data, mintOptions),
        claimKey: (key, keyOptions) => claimKeyIn(scope, key, keyOptions?.ttlMs),
      };
    },
  };
}
