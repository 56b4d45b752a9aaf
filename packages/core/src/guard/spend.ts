import type { StateClaims } from '../claims.js';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { LedgerLostError, MrtrError, StateReplayedError, StoreUnavailableError } from '../errors.js';
import type { SpendOptions } from '../interfaces.js';
import { createOutcomes } from '../outcomes/outcomes.js';
import type { Claim, Dropped } from '../outcomes/types.js';
import type { JsonValue } from '../protocol.js';
import { timingSafeEqualText } from '../util/json.js';
import type { GuardContext } from './context.js';
import { keyRefusal, type KeyState } from './key-state.js';
import type { Principal } from './principal.js';
import type { Admission, AdmitOptions, OpenedState } from './types.js';

/** The single-use step of an open: none (`verify`), `consume`, or `claim` (admit, with the answers). */
export type Single = 'verify' | 'consume' | 'claim';

/** Single use through the store: `consume` (every retry a replay) and `claim` (an identical retry answered). */
export interface Spend {
  consume(state: OpenedState): Promise<void>;
  /** The guard's `claim`, told (when reported) why an outcome was not kept. */
  claim: Claim;
  /**
   * The single-use step of an opened state, the one place that picks it: `claim` for an admit (the admission),
   * `consume` for an open with a store, none for a `verify` or without a store (the state itself, at once).
   */
  spend(
    state: OpenedState,
    single: Single,
    answers: JsonValue,
    options?: AdmitOptions,
    dropped?: Dropped,
  ): Awaitable<OpenedState | Admission<OpenedState>>;
  /** A keyed call claimed under its state: a replay of its id is the key's conflict. */
  claimKey(keyed: KeyState, dropped?: Dropped): Promise<Admission<OpenedState>>;
}

/** Whether an open's single-use step calls the store (and so is timed when reported). */
export const spendsInStore = (single: Single, ctx: GuardContext): boolean =>
  single === 'claim' || (single === 'consume' && ctx.store !== undefined);

/**
 * What `consume` and `claim` tell a store besides the id: with `epoch`, the earliest time the state may have been
 * minted (its `iat` less the tolerated skew: a state minted on an instance whose clock ran ahead is not taken for a
 * newer one).
 */
const spendOptionsOf =
  (epoch: boolean, clockSkewMs: number) =>
  (state: { claims: StateClaims }): SpendOptions | undefined =>
    epoch ? { mintedAtMs: state.claims.le ?? state.claims.iat - clockSkewMs } : undefined;

/**
 * The ledger entry of a state. It must outlive every instance's view of the token's validity: an instance accepts
 * until its own clock passes exp + skew, and its clock may lag the store's by up to the skew.
 */
const ledgerOf =
  (clockSkewMs: number) =>
  (state: { claims: StateClaims }): { id: string; expiresAtMs: number } => ({
    id: `${state.claims.aud}:${state.claims.jti}`,
    expiresAtMs: state.claims.exp + 2 * clockSkewMs,
  });

/** Single use through the store (none without one): the guard's `consume`, and `claim` on {@link createOutcomes}. */
export function createSpend(ctx: GuardContext): Spend {
  const { store, capabilities, clockSkewMs, unauthenticated, recordUnauthenticated, principalTag, clock, ledgerEpoch, holderOf } = ctx;
  const entry = ledgerOf(clockSkewMs);
  const spendOptions = spendOptionsOf(capabilities.epoch, clockSkewMs);
  /** What a store's refusal means here: skew for an expiry this instance holds live; a lost ledger is learned again. */
  const refusal = (error: unknown): unknown => {
    if (error instanceof LedgerLostError) ledgerEpoch.lost();
    return clock.refusal(error);
  };
  const consume = async (state: OpenedState): Promise<void> => {
    if (store === undefined) return;
    clock.assertWithin();
    let first: boolean;
    try {
      const { id, expiresAtMs } = entry(state);
      first = await store.consume(id, expiresAtMs, spendOptions(state));
    } catch (error) {
      const cause = refusal(error);
      if (MrtrError.is(cause)) throw cause;
      throw new StoreUnavailableError({ cause });
    }
    if (first !== true) throw new StateReplayedError();
  };
  // Outcomes are kept for every principal but the shared unauthenticated one (unless opted in): its tag under the
  // state's key tells it (cached by the tagger).
  const anonymous: Principal | undefined =
    unauthenticated === 'reject' || recordUnauthenticated ? undefined : ['u', unauthenticated.principal];
  const recordable = (state: OpenedState): Awaitable<boolean> =>
    anonymous === undefined ? true : andThen(principalTag(state.kid, anonymous), (tag) => !timingSafeEqualText(state.claims.sub, tag));
  const claim = createOutcomes(ctx, { entry, spendOptions, refusal, consume, recordable });
  return {
    consume,
    claim,
    spend(state, single, answers, options, dropped) {
      if (single === 'claim') return claim(state, answers, holderOf(state), options, dropped);
      if (single === 'consume' && store !== undefined) return andThen(consume(state), () => state);
      return state;
    },
    claimKey: ({ state, holder, answers }, dropped) => claim(state, answers, holder, undefined, dropped).catch(keyRefusal),
  };
}
