import type { StateClaims } from '../claims.js';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { LedgerLostError, MrtrError, StateReplayedError, StoreUnavailableError } from '../errors.js';
import type { ParsedGuardOptions } from './options.js';
import type { OpenedState } from './types.js';
import type { SpendOptions, StateCodec } from '../interfaces.js';
import { createLedgerEpoch, type LedgerEpoch } from './ledger-epoch.js';
import { createStoreClock, type StoreClock } from './store-clock.js';
import { timingSafeEqualText } from '../util/json.js';
import { type Claim, createOutcomes } from '../outcomes/outcomes.js';
import type { Principal } from './principal.js';

/** The single-use step of an open: `consume` (every retry a replay) and `claim` (an identical retry answered). */
export interface SingleUse {
  consume(state: OpenedState): Promise<void>;
  /** The guard's `claim`, told (when reported) why an outcome was not kept. */
  claim: Claim;
  /** This instance's view of the store's clock (refuses while skewed). */
  clock: StoreClock;
  /** The store's ledger epoch as this instance knows it (sealed in the states it mints). */
  ledgerEpoch: LedgerEpoch;
}

/**
 * What `consume` and `claim` tell a store besides the id: with `epoch`, the earliest time the state may have been
 * minted (its `iat` less the tolerated skew: a state minted on an instance whose clock ran ahead is not taken for a
 * newer one).
 */
export const spendOptionsOf =
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
export function createSingleUse(
  parsed: ParsedGuardOptions,
  codec: StateCodec,
  principalTag: (kid: string, principal: Principal) => Awaitable<string>,
): SingleUse {
  const { store, capabilities, audience, clockSkewMs, now, unauthenticated, recordUnauthenticated, outcomeQuota, events } = parsed;
  const ledger = ledgerOf(clockSkewMs);
  const spendOptions = spendOptionsOf(capabilities.epoch, clockSkewMs);
  // A store of this process shares its clock: only a shared store's is measured.
  const clock = createStoreClock(store, capabilities.clock && capabilities.shared, {
    now,
    toleranceMs: clockSkewMs,
    checkMs: parsed.clockCheckMs,
    onSample: (sample) =>
      events?.emit({ type: 'store.clock', method: '', target: undefined, codec: codec.id, ...sample, toleranceMs: clockSkewMs }),
  });
  const ledgerEpoch = createLedgerEpoch(store, capabilities.epoch);
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
      const { id, expiresAtMs } = ledger(state);
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
  const claim = createOutcomes({
    store,
    capabilities,
    codec,
    audience,
    ledger,
    spendOptions,
    clock,
    refusal,
    consume,
    now,
    retryWaitMs: parsed.retryWaitMs,
    leaseMs: parsed.leaseMs,
    recordable,
    budget: outcomeQuota,
    waiting: parsed.waiting,
  });
  return { consume, claim, clock, ledgerEpoch };
}
