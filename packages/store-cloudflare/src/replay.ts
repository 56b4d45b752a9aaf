import type { ClaimResult, OutcomeStoreLimits, RecordingReplayStore, ReplayStore } from '@mrtr/core';
import {
  fnOption,
  intOption,
  ownerValues,
  optionsObject,
  parseOutcomeStoreLimits,
  StoreFullError,
  StoreUnavailableError,
  stringOption,
} from '@mrtr/core/authoring';
import type { DurableObjectNamespaceLike } from './binding.js';
import { fail, ObjectRefused, type Objects, objectsOf } from './client.js';

/** Options of {@link createDurableObjectStore}. */
export interface DurableObjectStoreOptions extends OutcomeStoreLimits {
  /** The Durable Object namespace binding of {@link MrtrStoreObject} (`env.MRTR_STORE`). */
  objects: DurableObjectNamespaceLike;
  /** Keeps this ledger apart from every other one on the same binding. @default '' */
  namespace?: string | undefined;
  /**
   * How many objects the ids are spread over (by a hash of the id: one id always reaches the same object). Each object
   * takes its share of the store-wide bounds (`maxEntries`, `outcomeBudgetBytes` divided by `shards`). Changing it moves
   * ids to other objects: change it only when no state minted before is still live (one state TTL).
   * @default 8
   */
  shards?: number | undefined;
  /**
   * Most ids held at once, in all (each object holds at most `maxEntries / shards`); past it a consume fails closed
   * with `ERR_STORE_FULL` once the expired ids of that object are dropped.
   * @default 1_000_000
   */
  maxEntries?: number | undefined;
  /** Most time one call to an object may take, in ms; past it the call's outcome is settled as a lost reply. @default 5_000 */
  timeoutMs?: number | undefined;
  /** The clock (ms since the epoch) the objects judge expiry by, sent with every call (for tests). @default Date.now */
  now?: (() => number) | undefined;
}

/** The {@link ReplayStore} that {@link createDurableObjectStore} returns. */
export interface DurableObjectReplayStore extends RecordingReplayStore {
  readonly namespace: string;
  readonly shards: number;
  readonly maxEntries: number;
}

const LABEL = 'createDurableObjectStore';
const FIRST: ClaimResult = Object.freeze({ status: 'first' });
const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });

/** A claim status an object answered (`first` only from the call that took the id). */
function claimResultOf(answer: Record<string, unknown>): ClaimResult {
  switch (answer.status) {
    case 'first':
      return FIRST;
    case 'pending':
      return PENDING;
    case 'replayed':
      return REPLAYED;
    case 'recorded':
      if (typeof answer.outcome === 'string' && answer.outcome !== '') return { status: 'recorded', outcome: answer.outcome };
  }
  throw new Error('unexpected answer to claim');
}

/**
 * A {@link ReplayStore} on Cloudflare Durable Objects: single use (and outcome recording) for every isolate and
 * every location of a Worker that reaches the same namespace binding.
 *
 * Each call is one request to the object that holds the id, applied there in one SQLite transaction. Every
 * `consume` and `claim` carries an owner value only that call knows: when its answer never arrives (a dropped
 * connection, an object reset, a timeout) the store asks the object once who holds the id — this call → taken
 * (`true`, `first`); another → `false` or what a claim would answer; no one or no answer → `ERR_STORE_UNAVAILABLE`.
 * Any other failure rejects with `ERR_STORE_UNAVAILABLE`, never `true`.
 */
export function createDurableObjectStore(options: DurableObjectStoreOptions): DurableObjectReplayStore {
  options = optionsObject(LABEL, options);
  if (options.objects === undefined) throw new TypeError(`${LABEL}: objects (the Durable Object namespace binding) is required`);
  const namespace = stringOption(`${LABEL}: namespace`, options.namespace, '');
  const shards = intOption(`${LABEL}: shards`, options.shards, 8, 1, 1024);
  const maxEntries = intOption(`${LABEL}: maxEntries`, options.maxEntries, 1_000_000, 1, Number.MAX_SAFE_INTEGER);
  if (maxEntries < shards) throw new RangeError(`${LABEL}: maxEntries must be at least shards`);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(LABEL, options);
  const timeoutMs = intOption(`${LABEL}: timeoutMs`, options.timeoutMs, 5_000, 1, 600_000);
  const now = fnOption(`${LABEL}: now`, options.now, Date.now);
  const objects: Objects = objectsOf(LABEL, options.objects, 'replay', namespace, shards, timeoutMs);
  // Each object's share of the store-wide bounds: together they never pass them.
  const maxPerObject = Math.floor(maxEntries / shards);
  const budgetPerObject = Math.floor(outcomeBudgetBytes / shards);
  let closed = false;

  const check = (id: unknown, expiresAtMs: unknown): void => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('consume: id must be a non-empty string');
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs))
      throw new TypeError('consume: expiresAtMs must be a finite number');
    if (closed) throw new StoreUnavailableError();
  };

  /** A reply that never arrived: asks the object once who holds `id` now (unknown → fail closed). */
  const inspect = async (id: string, fp: string, original: unknown): Promise<Record<string, unknown>> => {
    try {
      return await objects.call(id, { op: 'inspect', id, fp, t: now() });
    } catch {
      return fail(original);
    }
  };

  const consume = async (id: string, expiresAtMs: number): Promise<boolean> => {
    check(id, expiresAtMs);
    const [owner] = ownerValues(1) as [string];
    let answer: Record<string, unknown>;
    try {
      answer = await objects.call(id, { op: 'consume', id, exp: expiresAtMs, t: now(), owner, max: maxPerObject });
    } catch (error) {
      if (error instanceof ObjectRefused) return fail(error);
      const held = await inspect(id, owner, error);
      if (held.owner === owner) return true;
      if (typeof held.owner === 'string') return false;
      return fail(error);
    }
    if (answer.full === true) throw new StoreFullError();
    if (typeof answer.taken !== 'boolean') return fail(new Error('unexpected answer to consume'));
    return answer.taken;
  };

  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    check(id, expiresAtMs);
    if (typeof fingerprint !== 'string' || fingerprint.length === 0) throw new TypeError('claim: fingerprint must be a non-empty string');
    const [owner] = ownerValues(1) as [string];
    let answer: Record<string, unknown>;
    try {
      answer = await objects.call(id, { op: 'claim', id, exp: expiresAtMs, t: now(), owner, fp: fingerprint, max: maxPerObject });
    } catch (error) {
      if (error instanceof ObjectRefused) return fail(error);
      const held = await inspect(id, fingerprint, error);
      if (held.owner === owner) return FIRST;
      if (typeof held.owner !== 'string') return fail(error);
      try {
        return claimResultOf(held);
      } catch (cause) {
        return fail(cause);
      }
    }
    if (answer.full === true) throw new StoreFullError();
    try {
      return claimResultOf(answer);
    } catch (cause) {
      return fail(cause);
    }
  };

  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    if (typeof id !== 'string' || typeof fingerprint !== 'string' || typeof outcome !== 'string') {
      throw new TypeError('record: id, fingerprint and outcome must be strings');
    }
    if (closed) throw new StoreUnavailableError();
    if (id.length === 0) return false;
    const [rowner] = ownerValues(1) as [string];
    // An outcome the object would not keep is sent as '' (done, not kept): no use carrying it.
    const value = outcome.length > maxOutcomeBytes || outcome.length > budgetPerObject ? '' : outcome;
    let answer: Record<string, unknown>;
    try {
      answer = await objects.call(id, {
        op: 'record',
        id,
        fp: fingerprint,
        outcome: value,
        t: now(),
        maxOutcome: maxOutcomeBytes,
        budget: budgetPerObject,
        rowner,
      });
    } catch (error) {
      if (error instanceof ObjectRefused) return fail(error);
      const held = await inspect(id, fingerprint, error);
      if (held.rowner === rowner) return held.kept === true;
      if (typeof held.owner === 'string' && held.rowner !== null) return false; // someone else's record landed
      return fail(error);
    }
    if (typeof answer.stored !== 'boolean') return fail(new Error('unexpected answer to record'));
    return answer.stored;
  };

  return {
    capabilities: {
      shared: true,
      capacity: maxEntries,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: false,
      clock: false,
      leases: false,
      epoch: false,
    },
    consume,
    claim,
    record,
    async close(): Promise<void> {
      closed = true; // idempotent; the binding holds no connection of ours
    },
    namespace,
    shards,
    maxEntries,
    maxOutcomeBytes,
    outcomeBudgetBytes,
  };
}
