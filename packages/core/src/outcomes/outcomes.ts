import type { GuardContext } from '../guard/context.js';
import type { Admission, AdmitOptions, OpenedState } from '../guard/types.js';
import type { JsonValue } from '../protocol.js';
import { createRecording } from './recording.js';
import type { Claim, Dropped, Ledger } from './types.js';

export type { Admission } from '../guard/types.js';
export { OUTCOME_AUDIENCE } from './seal.js';
export type { Claim, Dropped, Ledger } from './types.js';
export type { WaitingBounds } from './wait.js';

type Opened = OpenedState;

const notRecorded = async (): Promise<boolean> => false;
const released = async (): Promise<boolean> => true;

/**
 * Single use that tells an identical retry from a replay. The fingerprint of an attempt is a digest of the
 * principal tag the state carries and the canonical JSON of the answers: the state alone fixes the method, target
 * and arguments (its binding), so equal fingerprints on one state id mean the same request by the same principal.
 *
 * What an outcome may cost is bounded: an outcome is sealed only when it may be kept (the store's
 * `maxOutcomeBytes`), and kept only within the principal's byte budget (else recorded as "done, not kept"). Waiting
 * is bounded too: identical retries on this instance wait for the first attempt's promise (no polling); a round
 * in progress on another instance is polled by one poller per state on this instance, the others waiting on it;
 * at most `waiting.perPrincipal` retries of a principal, and `waiting.total` in all, wait at once (past it
 * `ERR_ROUND_IN_PROGRESS` at once); a round polled for a whole wait is remembered as stalled, and its later
 * retries ask the store once instead of polling again.
 *
 * With a store that declares `leases`, faults heal: the claim carries an owner and a lease renewed while the round
 * runs; a claim whose reply was lost is released in the background (its round never ran here); a `record` that failed
 * is retried in the background until the store answers or the state expires (identical retries on this instance get
 * the outcome meanwhile); a round whose lease lapsed unrecorded is `ERR_OUTCOME_UNKNOWN` for its retries.
 */
export function createOutcomes(ctx: GuardContext, ledger: Ledger): Claim {
  const { store } = ctx;
  const { consume, recordable } = ledger;
  const recorded = store === undefined || ctx.capabilities.outcomes === undefined ? undefined : createRecording(ctx, ledger, store);
  return async <S extends Opened>(
    state: S,
    answers: JsonValue,
    holder: string,
    options?: AdmitOptions,
    dropped?: Dropped,
  ): Promise<Admission<S>> => {
    if (store === undefined) return { state, replay: false, fence: 0, record: notRecorded, release: released };
    if (recorded === undefined) {
      await consume(state);
      return { state, replay: false, fence: 0, record: notRecorded, release: notRecorded };
    }
    const allowed = recordable(state);
    if (!(typeof allowed === 'boolean' ? allowed : await allowed)) {
      await consume(state);
      return { state, replay: false, fence: 0, record: notRecorded, release: notRecorded };
    }
    return recorded(state, answers, holder, options, dropped);
  };
}
