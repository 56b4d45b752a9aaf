import { MrtrError, OutcomeUnknownError, RoundInProgressError, StateReplayedError } from '../errors.js';
import type { GuardContext } from '../guard/context.js';
import type { Admission, AdmitOptions, OpenedState } from '../guard/types.js';
import type { ClaimResult, ReplayStore } from '../interfaces.js';
import type { JsonValue } from '../protocol.js';
import { createLeaseKeeper, createOwners, createRetrier } from './lease.js';
import { createOutcomeSeal, fingerprint } from './seal.js';
import type { Claim, Dropped, Ledger } from './types.js';
import { createPoller, createWaiters, fromStore, NOTHING, type Settled, STILL_RUNNING, StalledRounds, UNKNOWN, within } from './wait.js';

type Opened = OpenedState;

/**
 * How long a client should wait before sending a round in progress again: a second, or less when the round's lease
 * runs out sooner (its outcome is then known: recorded, or unknown).
 */
const retryAfter = (leaseLeftMs: number | undefined): number => Math.max(1, Math.min(1_000, leaseLeftMs ?? 1_000));

/** The store calls of a recording, and the background retries of its records and releases. */
interface StoreCalls {
  /** Gives back a claim this instance took and will not run (its reply was lost, or a poll took it), until it lands. */
  giveBack(id: string, owner: string, expiresAtMs: number): void;
  /**
   * Stores the sealed outcome. With leases, a store failure is retried in the background until the state expires
   * (`later` is called with its promise); the lease is kept and identical retries here get the outcome meanwhile.
   */
  recordIn(
    id: string,
    fp: string,
    token: string,
    owner: string | undefined,
    expiresAtMs: number,
    later: (landed: Promise<void>) => void,
  ): Promise<boolean>;
  /** The claim, on the store; a claim whose reply was lost is given back in the background (its round never ran). */
  claimIn(state: Opened, id: string, expiresAtMs: number, fp: string, owner: string | undefined, reclaim: boolean): Promise<ClaimResult>;
}

function createStoreCalls(ctx: GuardContext, ledger: Ledger, store: ReplayStore): StoreCalls {
  const { leaseMs } = ctx;
  const retry = createRetrier(ctx.now);
  const giveBack = (id: string, owner: string, expiresAtMs: number): void => {
    void retry(`release\n${id}\n${owner}`, () => fromStore(() => store.release!(id, owner)), expiresAtMs);
  };
  const recordIn: StoreCalls['recordIn'] = async (id, fp, token, owner, expiresAtMs, later) => {
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
  const claimIn: StoreCalls['claimIn'] = async (state, id, expiresAtMs, fp, owner, reclaim) => {
    const base = ledger.spendOptions(state);
    const options = owner === undefined ? base : { ...base, owner, leaseMs, ...(reclaim && { reclaim: true }) };
    try {
      return await fromStore(() => store.claim!(id, expiresAtMs, fp, options));
    } catch (error) {
      if (owner !== undefined && MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE') giveBack(id, owner, expiresAtMs);
      throw ledger.refusal(error);
    }
  };
  return { giveBack, recordIn, claimIn };
}

/** Single use through a store that records outcomes: the claim, the owner's `record`, and the waits of retries. */
export function createRecording(ctx: GuardContext, ledger: Ledger, store: ReplayStore): Claim {
  const { now, retryWaitMs, clock, leaseMs } = ctx;
  const leases = ctx.capabilities.leases;
  const { seal, unseal } = createOutcomeSeal(ctx, store);
  const { giveBack, recordIn, claimIn } = createStoreCalls(ctx, ledger, store);
  /** Rounds this instance admitted and has not recorded yet: key → what they recorded, once they did. */
  const inflight = new Map<string, Promise<Settled>>();
  const stalled = new StalledRounds();
  const [nextOwner, keepLease] = [createOwners(), createLeaseKeeper(leaseMs, now)];
  const poll = createPoller(store, stalled, leases ? { owner: nextOwner, leaseMs, giveBack } : undefined);
  const waitAsOneOf = createWaiters(ctx.waiting);

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
    const lease = owner === undefined ? undefined : keepLease(() => store.renew!(id, owner, leaseMs), expiresAtMs);
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

  return async <S extends Opened>(
    state: S,
    answers: JsonValue,
    holder: string,
    admit?: AdmitOptions,
    dropped?: Dropped,
  ): Promise<Admission<S>> => {
    clock.assertWithin();
    const reclaim = admit?.reclaim === true;
    const { id, expiresAtMs } = ledger.entry(state);
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
