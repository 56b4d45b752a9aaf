import type { ReplayStore } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';

/** The store methods a {@link FaultyStore} passes through its faults (`close` always goes straight through). */
const FAULTED = ['consume', 'claim', 'record', 'renew', 'release', 'time', 'ledgerEpoch', 'keyFingerprints'] as const;
type Faulted = (typeof FAULTED)[number];

/** What a {@link FaultyStore} did with each call, in order: for tests that check what reached the store. */
export interface FaultLogEntry {
  readonly method: Faulted;
  /** `passed`: answered as the inner store did; `lost`: the inner store acted, its reply was lost; `blackholed`: never reached it. */
  readonly fate: 'passed' | 'lost' | 'blackholed';
  readonly stalled: boolean;
}

/**
 * A {@link ReplayStore} wrapped in process with faults on command: any store can run fault tests without a TCP proxy.
 * Its `store` has the inner store's capabilities and methods; each call goes to the inner store unless a fault says
 * otherwise.
 */
export interface FaultyStore<S extends ReplayStore = ReplayStore> {
  /** The wrapped store (the same object for every call; `storeCapabilities` reads the inner store's declaration). */
  readonly store: S;
  /** The next `count` calls reach the inner store and act, and their replies are lost: they reject `ERR_STORE_UNAVAILABLE`. */
  loseNextReply(count?: number): void;
  /** Every call from now on acts, and its reply (or rejection) is held until {@link resume} or {@link heal}. */
  stall(): void;
  /** Delivers every held reply, in order of the calls, and stops stalling. */
  resume(): void;
  /** Every call from now on fails at once with `ERR_STORE_UNAVAILABLE` without reaching the inner store, until {@link heal}. */
  blackhole(): void;
  /** Back to normal: no black hole, no stall (held replies are delivered), no reply left to lose. */
  heal(): void;
  /** Resolves once every call made so far has its answer from the inner store (held by a stall or not). */
  idle(): Promise<void>;
  /** Every call so far, and what was done with it. */
  readonly log: readonly FaultLogEntry[];
}

const unavailable = (why: string) => new StoreUnavailableError({ cause: new Error(`fault: ${why}`) });

/** Wraps `inner` in a {@link FaultyStore}. */
export function withFaults<S extends ReplayStore>(inner: S): FaultyStore<S> {
  let toLose = 0;
  let stalled = false;
  let holed = false;
  let held: (() => void)[] = [];
  const acting = new Set<Promise<unknown>>();
  const log: FaultLogEntry[] = [];

  const call = (method: Faulted, args: unknown[]): Promise<unknown> => {
    const entry = { method, stalled, fate: 'passed' as FaultLogEntry['fate'] };
    log.push(entry);
    if (holed) {
      entry.fate = 'blackholed';
      return Promise.reject(unavailable('black hole'));
    }
    const lose = toLose > 0;
    if (lose) toLose--;
    let reply: Promise<unknown>;
    try {
      reply = Promise.resolve((inner[method] as (...a: unknown[]) => Promise<unknown>)(...args));
    } catch (error) {
      reply = Promise.reject(error);
    }
    const acted: Promise<unknown> = reply.then(
      () => acting.delete(acted),
      () => acting.delete(acted),
    );
    acting.add(acted);
    if (lose) {
      entry.fate = 'lost';
      reply = reply.then(
        () => Promise.reject(unavailable('reply lost')),
        () => Promise.reject(unavailable('reply lost')),
      );
    }
    if (!stalled) return reply;
    return new Promise((resolve, reject) => held.push(() => reply.then(resolve, reject)));
  };

  const wrapped = new Proxy(inner, {
    get(target, property) {
      const value = Reflect.get(target, property);
      if (typeof value !== 'function' || !(FAULTED as readonly PropertyKey[]).includes(property)) {
        return typeof value === 'function' ? value.bind(target) : value;
      }
      return (...args: unknown[]) => call(property as Faulted, args);
    },
  });

  const resume = () => {
    stalled = false;
    const release = held;
    held = [];
    for (const deliver of release) deliver();
  };
  return {
    store: wrapped,
    loseNextReply(count = 1) {
      if (!Number.isSafeInteger(count) || count < 1) throw new RangeError('loseNextReply: count must be a positive integer');
      toLose += count;
    },
    stall() {
      stalled = true;
    },
    resume,
    idle: async () => {
      while (acting.size > 0) await Promise.all(acting);
    },
    blackhole() {
      holed = true;
    },
    heal() {
      holed = false;
      toLose = 0;
      resume();
    },
    log,
  };
}
