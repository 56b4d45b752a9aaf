import { MrtrError, RoundInProgressError, StoreUnavailableError } from '../errors.js';
import type { ClaimResult, ReplayStore } from '../interfaces.js';

/** First pause between two polls of a round in progress on another instance; it doubles up to {@link MAX_POLL_MS}. */
const FIRST_POLL_MS = 50;
/** Longest pause between two polls. */
const MAX_POLL_MS = 1_000;
/** Rounds remembered as stalled (polled for a whole wait, still pending): a bound on that memory. */
const MAX_STALLED = 1_024;
/** Answered to waiters when the first attempt recorded nothing they can use. */
export const NOTHING: unique symbol = Symbol('nothing recorded');
/** Answered to waiters when the wait ran out with the round still running. */
export const STILL_RUNNING: unique symbol = Symbol('still running');
/** Answered to waiters when the round's lease lapsed with nothing recorded (a store with `leases`). */
export const UNKNOWN: unique symbol = Symbol('outcome unknown');
/** What a wait for a round brings: its sealed outcome, nothing usable, the round still running, or its outcome unknown. */
export type Settled = { outcome: string } | typeof NOTHING | typeof STILL_RUNNING | typeof UNKNOWN;

/** Bounds on identical retries waiting for a round in progress (see `StateGuardOptions.maxWaitingRetries`). */
export interface WaitingBounds {
  perPrincipal: number;
  total: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A store call whose failure (anything but an `MrtrError` or an argument error) is `ERR_STORE_UNAVAILABLE`. */
export const fromStore = async <T>(call: () => Promise<T>): Promise<T> => {
  try {
    return await call();
  } catch (cause) {
    if (MrtrError.is(cause) || cause instanceof TypeError || cause instanceof RangeError) throw cause;
    throw new StoreUnavailableError({ cause });
  }
};

/** Races `settled` against the time left until `deadline` (performance.now()). */
export const within = async (settled: Promise<Settled>, deadline: number): Promise<Settled> => {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<Settled>((resolve) => {
    timer = setTimeout(() => resolve(STILL_RUNNING), Math.max(0, deadline - performance.now()));
  });
  try {
    return await Promise.race([settled, timeout]);
  } finally {
    clearTimeout(timer);
  }
};

/** Rounds polled for a whole wait and still pending: key → until when (epoch ms) they count as stalled (bounded). */
export class StalledRounds {
  readonly #until = new Map<string, number>();
  /** Whether the round counts as stalled at `t`: its retries ask the store once and are not polled again. */
  has(key: string, t: number): boolean {
    const until = this.#until.get(key);
    return until !== undefined && until >= t;
  }
  add(key: string, until: number): void {
    if (this.#until.size >= MAX_STALLED) this.#until.delete(this.#until.keys().next().value!);
    this.#until.set(key, until);
  }
  delete(key: string): void {
    this.#until.delete(key);
  }
}

/** Waits for a round in progress elsewhere (by key: id and fingerprint), until `deadline` (performance.now()). */
export type Poll = (key: string, id: string, expiresAtMs: number, fp: string, deadline: number) => Promise<Settled>;

/**
 * Polls the store for a round in progress elsewhere until it is recorded or `deadline` passes: one poller per key
 * on this instance, the others waiting on it; a round polled for a whole wait is remembered as stalled.
 */
export function createPoller(
  store: ReplayStore,
  stalled: StalledRounds,
  lease?: { owner: () => string; leaseMs: number; giveBack: (id: string, owner: string, expiresAtMs: number) => void },
): Poll {
  /** Rounds in progress on another instance that this instance polls: key → what the poll found. */
  const polls = new Map<string, Promise<Settled>>();
  const run = async (key: string, id: string, expiresAtMs: number, fp: string, deadline: number): Promise<Settled> => {
    for (let pause = FIRST_POLL_MS; ; pause = Math.min(MAX_POLL_MS, pause * 2)) {
      await sleep(Math.min(pause, Math.max(0, deadline - performance.now())));
      if (performance.now() >= deadline) {
        stalled.add(key, expiresAtMs);
        return STILL_RUNNING;
      }
      const owner = lease?.owner();
      const options = owner === undefined ? undefined : { owner, leaseMs: lease!.leaseMs };
      let found: ClaimResult;
      try {
        found = await fromStore(() => store.claim!(id, expiresAtMs, fp, options));
      } catch (error) {
        // The reply was lost: the claim may have landed (the round was given back meanwhile). Give it back too.
        if (owner !== undefined && MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE') lease!.giveBack(id, owner, expiresAtMs);
        throw error;
      }
      if (found.status === 'recorded') return found.outcome === '' ? NOTHING : { outcome: found.outcome };
      if (found.status === 'unknown') return UNKNOWN;
      if (found.status === 'first' && owner !== undefined) {
        // The round's claim was given back (its first attempt never ran it): give this poll's claim back too (in the
        // background until it lands), so that the client's next retry owns the round and runs it.
        lease!.giveBack(id, owner, expiresAtMs);
        return STILL_RUNNING;
      }
      if (found.status === 'first') {
        // The id expired (or its claim was given back) while this retry waited: taken now by this poll, whose round
        // never runs. Done, not kept: the client starts again.
        await store.record!(id, fp, '').catch(() => false);
        return NOTHING;
      }
      if (found.status !== 'pending') return NOTHING;
    }
  };
  return (key: string, id: string, expiresAtMs: number, fp: string, deadline: number): Promise<Settled> => {
    const running = polls.get(key);
    if (running !== undefined) return running;
    const polled = run(key, id, expiresAtMs, fp, deadline).finally(() => polls.delete(key));
    polls.set(key, polled);
    return polled;
  };
}

/**
 * At most `bounds.perPrincipal` retries of a principal, and `bounds.total` in all, wait at once; past it
 * `ERR_ROUND_IN_PROGRESS` at once. Answers what `settled` brings.
 */
export function createWaiters(bounds: WaitingBounds): (principal: string, settled: () => Promise<Settled>) => Promise<Settled> {
  /** Retries waiting, per principal tag, and in all. */
  const waiters = new Map<string, number>();
  let waitingTotal = 0;
  return async (principal: string, settled: () => Promise<Settled>): Promise<Settled> => {
    const mine = waiters.get(principal) ?? 0;
    if (mine >= bounds.perPrincipal || waitingTotal >= bounds.total) throw new RoundInProgressError();
    waiters.set(principal, mine + 1);
    waitingTotal++;
    try {
      return await settled();
    } finally {
      waitingTotal--;
      const left = (waiters.get(principal) ?? 1) - 1;
      if (left === 0) waiters.delete(principal);
      else waiters.set(principal, left);
    }
  };
}
