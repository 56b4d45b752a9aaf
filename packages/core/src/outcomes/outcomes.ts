import type { Awaitable } from '../crypto/awaitable.js';
import { MrtrError, OutcomeUnknownError, RoundInProgressError, StateReplayedError } from '../errors.js';
import type { OutcomeDropReason } from '../events.js';
import type { AdmitOptions, OpenedState } from '../guard/types.js';
import type { ClaimResult, ReplayStore, SpendOptions, StateCodec, StoreCapabilities } from '../interfaces.js';
import { createOwners, createRetrier, keepLease } from './lease.js';
import { createOutcomeSeal, fingerprint } from './seal.js';
import {
  createPoller,
  createWaiters,
  fromStore,
  NOTHING,
  type Settled,
  STILL_RUNNING,
  StalledRounds,
  UNKNOWN,
  type WaitingBounds,
  within,
} from './wait.js';
import type { JsonValue } from '../protocol.js';
import type { StoreClock } from '../guard/store-clock.js';

export { OUTCOME_AUDIENCE } from './seal.js';
export type { WaitingBounds } from './wait.js';

type Opened = OpenedState;

/**
 * What {@link StateGuard.claim} decided for a presented state:
 * - `replay: false`: this call owns the round. Run it, then `record` its outcome (a JSON value: the response, or
 *   what the caller needs to rebuild an error) so that an identical retry gets it; `record` resolves `false` when
 *   nothing was kept (no store that records outcomes, an outcome too large for the codec or the store, past the
 *   principal's `outcomeQuota`: reported as `outcome.dropped`, see {@link OutcomeDropReason}) and rejects with
 *   `ERR_STORE_UNAVAILABLE` when the store failed (answer the round anyway: its effect has happened).
 * - `replay: true`: an identical retry (same state, same principal, same answers) of a round that already ran;
 *   `outcome` is what its first attempt recorded. Run nothing.
 */
export type Admission<S> =
  | {
      readonly state: S;
      readonly replay: false;
      /**
       * 0 for a round's first run; with `reclaim` (at-least-once), one more for each run after an earlier one stopped
       * unrecorded: a fencing token for the effect (pass it downstream so that a second run can be told apart).
       */
      readonly fence: number;
      record(outcome: JsonValue): Promise<boolean>;
      /**
       * Instead of `record`: gives the claim back unrecorded, so that the next identical attempt runs again (for a run
       * whose effect did not happen, e.g. a failure not to be replayed). Resolves `true` when the claim was given back
       * (a store that declares `leases`; or no store: every attempt runs anyway), `false` when it cannot be (then
       * `record` the outcome, which stays usable).
       */
      release(): Promise<boolean>;
    }
  | { readonly state: S; readonly replay: true; readonly outcome: JsonValue };

export interface OutcomeDeps {
  store: ReplayStore | undefined;
  /** What the store declared. */
  capabilities: StoreCapabilities;
  codec: StateCodec;
  audience: string;
  /** The id and expiry a state is consumed under (shared with the guard's `consume`). */
  ledger: (state: Opened) => { id: string; expiresAtMs: number };
  /** What `consume` and `claim` tell the store besides the id (the state's mint time, for a store with an epoch). */
  spendOptions: (state: Opened) => SpendOptions | undefined;
  /** This instance's view of the store's clock. */
  clock: StoreClock;
  /** What a store's refusal of a spend means here (clock skew, a lost ledger learned again). */
  refusal: (error: unknown) => unknown;
  /** The guard's `consume`, for stores that do not record outcomes and for states whose outcomes are not kept. */
  consume: (state: Opened) => Promise<void>;
  now: () => number;
  /** How long an identical retry waits for a round in progress before `ERR_ROUND_IN_PROGRESS`. */
  retryWaitMs: number;
  /** A claim's lease, with a store that declares `leases`. */
  leaseMs: number;
  /** Whether the outcome of a state may be recorded and returned (not under the shared unauthenticated principal, unless opted in). */
  recordable: (state: Opened) => Awaitable<boolean>;
  /** The per-principal budget of recorded outcome bytes (`take(principal tag, now, bytes)`), if any. */
  budget: { take(principal: string, t: number, weight: number): boolean } | undefined;
  waiting: WaitingBounds;
}

/**
 * How long a client should wait before sending a round in progress again: a second, or less when the round's lease
 * runs out sooner (its outcome is then known: recorded, or unknown).
 */
const retryAfter = (leaseLeftMs: number | undefined): number => Math.max(1, Math.min(1_000, leaseLeftMs ?? 1_000));

/**
 * The claim of a state: `Admission` for its attempt. `holder` is the principal's tag for this instance's bounds (its
 * outcome budget and waiting retries, whichever key sealed the state); `dropped` is told, once, why an outcome its
 * `record` was given was not kept (the guard's `outcome.dropped`).
 */
export type Claim = <S extends Opened>(
  state: S,
  answers: JsonValue,
  holder: string,
  options?: AdmitOptions,
  dropped?: Dropped,
) => Promise<Admission<S>>;

/** Told why a recorded outcome was not kept, and its sealed length when it was sealed. */
export type Dropped = (reason: OutcomeDropReason, outcomeBytes: number | undefined) => void;

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
export function createOutcomes(deps: OutcomeDeps): Claim {
  const { store, consume, recordable } = deps;
  const recorded = store === undefined || deps.capabilities.outcomes === undefined ? undefined : createRecording(deps, store);
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

/** Single use through a store that records outcomes: the claim, the owner's `record`, and the waits of retries. */
function createRecording(deps: OutcomeDeps, store: ReplayStore): Claim {
  const { ledger, now, retryWaitMs, waiting, clock, refusal, spendOptions, leaseMs } = deps;
  const leases = deps.capabilities.leases;
  const { seal, unseal } = createOutcomeSeal({ ...deps, store });
  /** Rounds this instance admitted and has not recorded yet: key → what they recorded, once they did. */
  const inflight = new Map<string, Promise<Settled>>();
  const stalled = new StalledRounds();
  const nextOwner = createOwners();
  const retry = createRetrier(now);
  /** Gives back a claim this instance took and will not run (its reply was lost, or a poll took it), until it lands. */
  const giveBack = (id: string, owner: string, expiresAtMs: number): void => {
    void retry(`release\n${id}\n${owner}`, () => fromStore(() => store.release!(id, owner)), expiresAtMs);
  };
  const poll = createPoller(store, stalled, leases ? { owner: nextOwner, leaseMs, giveBack } : undefined);
  const waitAsOneOf = createWaiters(waiting);

  /** Waits for what `settled` brings (it ends by the deadline), as one of the bounded waiters of the state's principal. */
  const wait = async <S extends Opened>(
    state: S,
    holder: string,
    fp: string,
    settled: () => Promise<Settled>,
    retryAfterMs: number | undefined,
    reclaim: boolean,
  ): Promise<Admission<S>> => {
    const result = await waitAsOneOf(holder, settled);
    if (result === NOTHING) throw new StateReplayedError();
    if (result === STILL_RUNNING) throw new RoundInProgressError({ retryAfterMs });
    // The lease lapsed while this retry waited: at-least-once rounds are retried at once (the next claim takes over).
    if (result === UNKNOWN) throw reclaim ? new RoundInProgressError({ retryAfterMs: 1 }) : new OutcomeUnknownError();
    return { state, replay: true, outcome: await unseal(state, fp, result.outcome) };
  };

  /**
   * Stores the sealed outcome. With leases, a store failure is retried in the background until the state expires
   * (`later` is called with its promise); the lease is kept and identical retries here get the outcome meanwhile.
   */
  const recordIn = async (
    id: string,
    fp: string,
    token: string,
    owner: string | undefined,
    expiresAtMs: number,
    later: (landed: Promise<void>) => void,
  ): Promise<boolean> => {
    const call = () => store.record!(id, fp, token, owner === undefined ? undefined : { owner });
    try {
      return await fromStore(call);
    } catch (error) {
      if (owner !== undefined && token !== '' && MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE') {
        later(retry(`record\n${id}\n${owner}`, () => fromStore(call), expiresAtMs));
      }
      throw error;
    }
  };

  /** The first attempt: it runs the round and records its outcome once. */
  const own = <S extends Opened>(
    state: S,
    holder: string,
    id: string,
    fp: string,
    key: string,
    owner: string | undefined,
    expiresAtMs: number,
    fence: number,
    dropped: Dropped | undefined,
  ): Admission<S> => {
    let settle!: (settled: Settled) => void;
    inflight.set(key, new Promise<Settled>((resolve) => (settle = resolve)));
    const lease = owner === undefined ? undefined : keepLease(() => store.renew!(id, owner, leaseMs), leaseMs, expiresAtMs, now);
    let done = false;
    let landing: Promise<void> | undefined;
    const record = async (outcome: JsonValue): Promise<boolean> => {
      if (done) throw new TypeError('Admission.record: called twice');
      done = true;
      let token = '';
      let kept = false;
      try {
        const sealed = await seal(state, holder, fp, outcome);
        token = sealed.token;
        kept = (await recordIn(id, fp, token, owner, expiresAtMs, (landed) => (landing = landed))) && token !== '';
        // Not kept although sealed: the store recorded it as done, not kept (its budget, or the claim was lost).
        if (!kept) dropped?.(sealed.dropped ?? 'store_refused', sealed.bytes ?? (token === '' ? undefined : token.length));
        return kept;
      } finally {
        const settled: Settled = kept || landing !== undefined ? { outcome: token } : NOTHING;
        settle(settled);
        if (landing === undefined) {
          inflight.delete(key);
          lease?.stop();
        } else {
          // Until the record lands (or is given up), identical retries here get the outcome and the lease is kept.
          const held = Promise.resolve(settled);
          inflight.set(key, held);
          void landing.finally(() => {
            if (inflight.get(key) === held) inflight.delete(key);
            lease?.stop();
          });
        }
      }
    };
    const release = async (): Promise<boolean> => {
      if (done) throw new TypeError('Admission.release: called after record or release');
      // Without an owner the claim cannot be given back: the caller records instead.
      if (owner === undefined) return false;
      done = true;
      // Retries waiting here are told to send again (they then run the round).
      settle(STILL_RUNNING);
      inflight.delete(key);
      lease?.stop();
      await fromStore(() => store.release!(id, owner)).catch(() => giveBack(id, owner, expiresAtMs));
      return true;
    };
    return { state, replay: false, fence, record, release };
  };

  /** The claim, on the store; a claim whose reply was lost is given back in the background (its round never ran). */
  const claimIn = async (
    state: Opened,
    id: string,
    expiresAtMs: number,
    fp: string,
    owner: string | undefined,
    reclaim: boolean,
  ): Promise<ClaimResult> => {
    const base = spendOptions(state);
    const options = owner === undefined ? base : { ...base, owner, leaseMs, ...(reclaim && { reclaim: true }) };
    try {
      return await fromStore(() => store.claim!(id, expiresAtMs, fp, options));
    } catch (error) {
      if (owner !== undefined && MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE') giveBack(id, owner, expiresAtMs);
      throw refusal(error);
    }
  };

  return async <S extends Opened>(
    state: S,
    answers: JsonValue,
    holder: string,
    admit?: AdmitOptions,
    dropped?: Dropped,
  ): Promise<Admission<S>> => {
    clock.assertWithin();
    const reclaim = admit?.reclaim === true;
    const { id, expiresAtMs } = ledger(state);
    const digest = fingerprint(state.claims.sub, answers);
    const fp = typeof digest === 'string' ? digest : await digest;
    const key = `${id}\n${fp}`;
    const deadline = performance.now() + retryWaitMs;

    const local = inflight.get(key);
    if (local !== undefined) return wait(state, holder, fp, () => within(local, deadline), undefined, reclaim);

    const owner = leases ? nextOwner() : undefined;
    const found = await claimIn(state, id, expiresAtMs, fp, owner, reclaim);
    switch (found.status) {
      case 'first':
        stalled.delete(key);
        return own(state, holder, id, fp, key, owner, expiresAtMs, found.fence ?? 0, dropped);
      case 'recorded':
        if (typeof found.outcome !== 'string' || found.outcome === '') throw new StateReplayedError();
        return { state, replay: true, outcome: await unseal(state, fp, found.outcome) };
      case 'pending':
        // A round polled for a whole wait already: this retry asked the store once, and is not polled again.
        if (stalled.has(key, now())) throw new RoundInProgressError({ retryAfterMs: retryAfter(found.leaseLeftMs) });
        stalled.delete(key);
        return wait(state, holder, fp, () => poll(key, id, expiresAtMs, fp, deadline), retryAfter(found.leaseLeftMs), reclaim);
      case 'unknown':
        throw new OutcomeUnknownError();
      default:
        throw new StateReplayedError();
    }
  };
}
