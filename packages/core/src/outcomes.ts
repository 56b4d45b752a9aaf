import { storeCapabilities } from './capabilities.js';
import type { Awaitable } from './crypto/awaitable.js';
import { RoundInProgressError, StateReplayedError } from './errors.js';
import type { OpenedState } from './guard-types.js';
import type { ClaimResult, ReplayStore, StateCodec } from './interfaces.js';
import { createOutcomeSeal, fingerprint } from './outcome-seal.js';
import {
  createPoller,
  createWaiters,
  fromStore,
  NOTHING,
  type Settled,
  STILL_RUNNING,
  StalledRounds,
  type WaitingBounds,
  within,
} from './outcome-wait.js';
import type { JsonValue } from './protocol.js';

export { OUTCOME_AUDIENCE } from './outcome-seal.js';
export type { WaitingBounds } from './outcome-wait.js';

type Opened = OpenedState;

/**
 * What {@link StateGuard.claim} decided for a presented state:
 * - `replay: false`: this call owns the round. Run it, then `record` its outcome (a JSON value: the response, or
 *   what the caller needs to rebuild an error) so that an identical retry gets it; `record` resolves `false` when
 *   nothing was kept (no store that records outcomes, an outcome too large for the codec) and rejects with
 *   `ERR_STORE_UNAVAILABLE` when the store failed (answer the round anyway: its effect has happened).
 * - `replay: true`: an identical retry (same state, same principal, same answers) of a round that already ran;
 *   `outcome` is what its first attempt recorded. Run nothing.
 */
export type Admission<S> =
  | { readonly state: S; readonly replay: false; record(outcome: JsonValue): Promise<boolean> }
  | { readonly state: S; readonly replay: true; readonly outcome: JsonValue };

export interface OutcomeDeps {
  store: ReplayStore | undefined;
  codec: StateCodec;
  audience: string;
  /** The id and expiry a state is consumed under (shared with the guard's `consume`). */
  ledger: (state: Opened) => { id: string; expiresAtMs: number };
  /** The guard's `consume`, for stores that do not record outcomes and for states whose outcomes are not kept. */
  consume: (state: Opened) => Promise<void>;
  now: () => number;
  /** How long an identical retry waits for a round in progress before `ERR_ROUND_IN_PROGRESS`. */
  retryWaitMs: number;
  /** Whether the outcome of a state may be recorded and returned (not under the shared unauthenticated principal, unless opted in). */
  recordable: (state: Opened) => Awaitable<boolean>;
  /** The per-principal budget of recorded outcome bytes (`take(principal tag, now, bytes)`), if any. */
  budget: { take(principal: string, t: number, weight: number): boolean } | undefined;
  waiting: WaitingBounds;
}

/** The claim of a state: `Admission` for its attempt. */
export type Claim = <S extends Opened>(state: S, answers: JsonValue) => Promise<Admission<S>>;

const notRecorded = async (): Promise<boolean> => false;

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
 */
export function createOutcomes(deps: OutcomeDeps): Claim {
  const { store, consume, recordable } = deps;
  const recorded = store === undefined ? undefined : createRecording(deps, store);
  return async <S extends Opened>(state: S, answers: JsonValue): Promise<Admission<S>> => {
    if (store === undefined || recorded === undefined) return { state, replay: false, record: notRecorded };
    if (storeCapabilities(store).outcomes === undefined) {
      await consume(state);
      return { state, replay: false, record: notRecorded };
    }
    const allowed = recordable(state);
    if (!(typeof allowed === 'boolean' ? allowed : await allowed)) {
      await consume(state);
      return { state, replay: false, record: notRecorded };
    }
    return recorded(state, answers);
  };
}

/** Single use through a store that records outcomes: the claim, the owner's `record`, and the waits of retries. */
function createRecording(deps: OutcomeDeps, store: ReplayStore): Claim {
  const { ledger, now, retryWaitMs, waiting } = deps;
  const { seal, unseal } = createOutcomeSeal({ ...deps, store });
  /** Rounds this instance admitted and has not recorded yet: key → what they recorded, once they did. */
  const inflight = new Map<string, Promise<Settled>>();
  const stalled = new StalledRounds();
  const poll = createPoller(store, stalled);
  const waitAsOneOf = createWaiters(waiting);

  /** Waits for what `settled` brings (it ends by the deadline), as one of the bounded waiters of the state's principal. */
  const wait = async <S extends Opened>(state: S, fp: string, settled: () => Promise<Settled>): Promise<Admission<S>> => {
    const result = await waitAsOneOf(state.claims.sub, settled);
    if (result === NOTHING) throw new StateReplayedError();
    if (result === STILL_RUNNING) throw new RoundInProgressError();
    return { state, replay: true, outcome: await unseal(state, fp, result.outcome) };
  };

  /** The first attempt: it runs the round and records its outcome once. */
  const owner = <S extends Opened>(state: S, id: string, fp: string, key: string): Admission<S> => {
    let settle!: (settled: Settled) => void;
    inflight.set(key, new Promise<Settled>((resolve) => (settle = resolve)));
    let done = false;
    const record = async (outcome: JsonValue): Promise<boolean> => {
      if (done) throw new TypeError('Admission.record: called twice');
      done = true;
      let token = '';
      let kept = false;
      try {
        token = await seal(state, fp, outcome);
        kept = (await fromStore(() => store.record!(id, fp, token))) && token !== '';
        return kept;
      } finally {
        inflight.delete(key);
        settle(kept ? { outcome: token } : NOTHING);
      }
    };
    return { state, replay: false, record };
  };

  return async <S extends Opened>(state: S, answers: JsonValue): Promise<Admission<S>> => {
    const { id, expiresAtMs } = ledger(state);
    const digest = fingerprint(state.claims.sub, answers);
    const fp = typeof digest === 'string' ? digest : await digest;
    const key = `${id}\n${fp}`;
    const deadline = performance.now() + retryWaitMs;

    const local = inflight.get(key);
    if (local !== undefined) return wait(state, fp, () => within(local, deadline));

    const found: ClaimResult = await fromStore(() => store.claim!(id, expiresAtMs, fp));
    switch (found.status) {
      case 'first':
        stalled.delete(key);
        return owner(state, id, fp, key);
      case 'recorded':
        if (typeof found.outcome !== 'string' || found.outcome === '') throw new StateReplayedError();
        return { state, replay: true, outcome: await unseal(state, fp, found.outcome) };
      case 'pending':
        // A round polled for a whole wait already: this retry asked the store once, and is not polled again.
        if (stalled.has(key, now())) throw new RoundInProgressError();
        stalled.delete(key);
        return wait(state, fp, () => poll(key, id, expiresAtMs, fp, deadline));
      default:
        throw new StateReplayedError();
    }
  };
}
