import type { RequestBinding } from './claims.js';
import { andThen } from './crypto/awaitable.js';
import type { GuardEvent } from './events.js';
import { checkFleetKeys } from './fleet.js';
import { createChecks } from './guard-checks.js';
import { createKeyState } from './guard-key.js';
import { createGuardKeys } from './guard-keys.js';
import { createMint } from './guard-mint.js';
import { createOperations } from './guard-operations.js';
import { parseGuardOptions } from './guard-options.js';
import { bindNow, principalIn, type Scope, scopeOf } from './guard-scope.js';
import { createSingleUse } from './guard-single-use.js';
import type {
  AdmitOptions,
  GuardRequest,
  MintedState,
  MintOptions,
  OpenedState,
  RequestContext,
  StateGuard,
  StateGuardOptions,
} from './guard-types.js';
import type { Admission } from './outcomes.js';
import { createHolderTagger, createPrincipalTagger } from './principal.js';
import type { JsonValue } from './protocol.js';

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
} from './guard-types.js';

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
  const parsed = parseGuardOptions(options);
  const { store, audience, ttlMs, flowTtlMs, maxRounds, clockSkewMs, maxTokenBytes, quota, now, events } = parsed;
  const whoIn = principalIn(parsed.readPrincipal, parsed.unauthenticated);
  const principalTag = createPrincipalTagger(parsed.keys, audience);
  const holderTag = createHolderTagger(audience);
  const keys = createGuardKeys(parsed.keys, parsed.codec, parsed.codecFor);
  const { codec } = keys;
  const singleUse = createSingleUse(parsed, codec, principalTag);
  const { consume, claim, clock, ledgerEpoch } = singleUse;
  const verifyNow = createChecks({ keys, audience, maxTokenBytes, maxRounds, clockSkewMs, now, principalTag, whoIn });
  const mintNow = createMint({
    keys,
    audience,
    ttlMs,
    flowTtlMs,
    maxRounds,
    maxTokenBytes,
    quota,
    now,
    principalTag,
    whoIn,
    holderTag,
    ledgerEpoch,
  });
  // Nothing is minted while this instance's clock is off the store's by more than the tolerance, nor before the store's
  // ledger epoch exists.
  const mintWithin: typeof mintNow = (...args) => {
    clock.assertWithin();
    const learning = ledgerEpoch.ready();
    return learning === undefined ? mintNow(...args) : learning.then(() => mintNow(...args));
  };
  // The principal of each state verified here, for this instance's bounds whichever key sealed it (the outcome budget
  // and waiting retries of `claim`, which is given the state alone).
  const holders = new WeakMap<OpenedState, string>();
  const holderOf = (state: OpenedState): string => holders.get(state) ?? state.claims.sub;
  // Nor is anything opened: a skewed instance's own checks (expiry, iat) are off, so it refuses first, with the reason.
  const verifyWithin: typeof verifyNow = <P extends JsonValue>(scope: Scope, token: unknown) => {
    clock.assertWithin();
    return andThen(verifyNow<P>(scope, token), (state) =>
      andThen(holderTag(whoIn(scope)), (holder) => {
        holders.set(state, holder);
        return state;
      }),
    );
  };
  const keyState = createKeyState({ keys, audience, ttlMs, quota, now, principalTag, whoIn, holderTag, ledgerEpoch });
  const { openIn, mintIn, mintTokenIn, claimKeyIn } = createOperations({
    verifyNow: verifyWithin,
    mintNow: mintWithin,
    singleUse,
    keyState: (scope, key, keyTtlMs) => {
      clock.assertWithin();
      return keyState(scope, key, keyTtlMs);
    },
    holderOf,
    store,
    codecId: codec.id,
    events,
    now,
  });

  return {
    codec,
    store,
    maxTokenBytes,
    maxRounds,
    ttlMs,
    checkKeys: () => checkFleetKeys(parsed.keys, store, { now: now(), lifetimeMs: ttlMs + 2 * clockSkewMs }),
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
