import type { Awaitable } from '../crypto/awaitable.js';
import { createGuardKeys, type KeyView } from './keys.js';
import { createLedgerEpoch, type LedgerEpoch } from './ledger-epoch.js';
import { type ParsedGuardOptions, parseGuardOptions } from './options.js';
import { createHolderTagger, createPrincipalTagger, type Principal } from './principal.js';
import { principalIn, type Scope } from './scope.js';
import { createStoreClock, type StoreClock } from './store-clock.js';
import type { OpenedState, StateGuardOptions } from './types.js';

/**
 * What every step of the guard reads (`verify.ts`, `mint.ts`, `spend.ts`, `report.ts`, `key-state.ts` and the
 * outcomes): the options validated, with what is derived from them once. Built once per guard, never changed.
 */
export interface GuardContext extends Readonly<ParsedGuardOptions> {
  /** The codec the guard exposes: the first one for a fixed ring, one that follows the ring in force otherwise. */
  readonly codec: ParsedGuardOptions['codec'];
  /** The ring in force and its codec, read once per operation (a mint seals with the key its principal tag names). */
  readonly current: () => KeyView;
  /** The principal of a request's scope (the policy applied once per request). */
  readonly whoIn: (scope: Scope) => Principal;
  /** The principal's tag under a kid: the `sub` a state carries. */
  readonly principalTag: (kid: string, principal: Principal) => Awaitable<string>;
  /** The principal's tag for this instance's bounds, whichever key seals (see `createHolderTagger`). */
  readonly holderTag: (principal: Principal) => Awaitable<string>;
  /**
   * The holder tag of a state verified here (the outcome budget and waiting retries of `claim`, which is given the
   * state alone); the state's `sub` for one verified elsewhere.
   */
  readonly holderOf: (state: OpenedState) => string;
  /** Remembers the holder tag of a state verified here (`holderOf`). */
  readonly holds: (state: OpenedState, holder: string) => OpenedState;
  /** This instance's view of the store's clock (refuses while skewed). */
  readonly clock: StoreClock;
  /** The store's ledger epoch as this instance knows it (sealed in the states it mints). */
  readonly ledgerEpoch: LedgerEpoch;
}

/** Validates the options (labelled `TypeError`/`RangeError`) and builds the guard's context on them. */
export function createGuardContext(options: StateGuardOptions): GuardContext {
  const parsed = parseGuardOptions(options);
  const { store, capabilities, audience, clockSkewMs, now, events } = parsed;
  const { codec, current } = createGuardKeys(parsed.keys, parsed.codec, parsed.codecFor);
  // A store of this process shares its clock: only a shared store's is measured.
  const clock = createStoreClock(store, capabilities.clock && capabilities.shared, {
    now,
    toleranceMs: clockSkewMs,
    checkMs: parsed.clockCheckMs,
    onSample: (sample) =>
      events?.emit({ type: 'store.clock', method: '', target: undefined, codec: codec.id, ...sample, toleranceMs: clockSkewMs }),
  });
  const holders = new WeakMap<OpenedState, string>();
  return Object.freeze({
    ...parsed,
    codec,
    current,
    whoIn: principalIn(parsed.readPrincipal, parsed.unauthenticated),
    principalTag: createPrincipalTagger(parsed.keys, audience),
    holderTag: createHolderTagger(audience),
    holderOf: (state: OpenedState): string => holders.get(state) ?? state.claims.sub,
    holds: (state: OpenedState, holder: string): OpenedState => {
      holders.set(state, holder);
      return state;
    },
    clock,
    ledgerEpoch: createLedgerEpoch(store, capabilities.epoch),
  });
}
