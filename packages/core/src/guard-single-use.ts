import type { StateClaims } from './claims.js';
import { type Awaitable, andThen } from './crypto/awaitable.js';
import { MrtrError, StateReplayedError, StoreUnavailableError } from './errors.js';
import type { ParsedGuardOptions } from './guard-options.js';
import type { OpenedState, StateGuard } from './guard-types.js';
import type { StateCodec } from './interfaces.js';
import { timingSafeEqualText } from './json.js';
import { createOutcomes } from './outcomes.js';
import type { Principal } from './principal.js';

/** The single-use step of an open: `consume` (every retry a replay) and `claim` (an identical retry answered). */
export interface SingleUse {
  consume(state: OpenedState): Promise<void>;
  claim: StateGuard['claim'];
}

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
  const { store, audience, clockSkewMs, now, retryWaitMs, unauthenticated, recordUnauthenticated, outcomeQuota, waiting } = parsed;
  const ledger = ledgerOf(clockSkewMs);
  const consume = async (state: OpenedState): Promise<void> => {
    if (store === undefined) return;
    let first: boolean;
    try {
      const { id, expiresAtMs } = ledger(state);
      first = await store.consume(id, expiresAtMs);
    } catch (cause) {
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
    codec,
    audience,
    ledger,
    consume,
    now,
    retryWaitMs,
    recordable,
    budget: outcomeQuota,
    waiting,
  }) as StateGuard['claim'];
  return { consume, claim };
}
