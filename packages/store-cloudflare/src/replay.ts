import type { ReplayStore } from '@mrtr/core';
import { LedgerLostError, StateExpiredError, StoreFullError, StoreUnavailableError } from '@mrtr/core/errors';
import { intOption, optionsObject, stringOption } from '@mrtr/core/options';
import {
  OUTCOME_STORE_LIMIT_OPTIONS,
  checkLeaseMs,
  checkOwner,
  fleetKeysFull,
  fullStoreCapabilities,
  ownerValues,
  parseKeyFingerprintOffer,
  parseOutcomeStoreLimits,
  type ClaimOptions,
  type ClaimResult,
  type KeyFingerprint,
  type OutcomeStoreLimits,
  type RecordingReplayStore,
  type SpendOptions,
} from '@mrtr/core/store';
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
  /**
   * Gone: the objects judge expiry, leases and the epoch by their own clock (`capabilities.clock`); passing one is a
   * `TypeError`. Tests give the object a clock (a subclass of {@link MrtrStoreObject} passing `{ now }`).
   */
  now?: undefined;
}

/** The {@link ReplayStore} that {@link createDurableObjectStore} returns. */
export interface DurableObjectReplayStore extends RecordingReplayStore {
  renew(id: string, owner: string, leaseMs: number): Promise<boolean>;
  release(id: string, owner: string): Promise<boolean>;
  /** The objects' clock (shard 0's `Date.now()`), epoch ms. */
  time(): Promise<number>;
  /**
   * The ledger's epoch: every shard's object is asked for its epoch (written with its clock when missing), in parallel;
   * resolves the latest. Safe to run again (an existing epoch never moves) and sent once more when a reply is lost.
   */
  ledgerEpoch(): Promise<number>;
  /**
   * The fleet check's exchange (see `ReplayStore.keyFingerprints`): held by shard 0's object (table `mrtr_keys`), in
   * one transaction on its clock; sent once more when the reply is lost (it answers as once).
   */
  keyFingerprints(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  readonly namespace: string;
  readonly shards: number;
  readonly maxEntries: number;
}

const LABEL = 'createDurableObjectStore';
const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });
const UNKNOWN: ClaimResult = Object.freeze({ status: 'unknown' });

type Answer = Record<string, unknown>;
const isCount = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

/** A claim status an object answered (`first`, with its fence, only to the call that took the id). */
function claimResultOf(answer: Answer): ClaimResult {
  switch (answer.status) {
    case 'first':
      if (isCount(answer.fence)) return { status: 'first', fence: answer.fence };
      break;
    case 'pending':
      return isCount(answer.leaseLeftMs) ? { status: 'pending', leaseLeftMs: answer.leaseLeftMs } : PENDING;
    case 'unknown':
      return UNKNOWN;
    case 'replayed':
      return REPLAYED;
    case 'recorded':
      if (typeof answer.outcome === 'string' && answer.outcome !== '') return { status: 'recorded', outcome: answer.outcome };
  }
  throw new Error('unexpected answer to claim');
}

/** The checked arguments of a spend: `consume`'s, or `claim`'s with its fingerprint and lease. */
interface Spend {
  id: string;
  exp: number;
  minted: number | null;
  owner: string;
  /** The caller gave `owner` (a claim then records only by it). */
  owned: boolean;
  leaseMs: number | null;
}

function spendOf(method: string, id: unknown, expiresAtMs: unknown, options: ClaimOptions | undefined): Spend {
  if (typeof id !== 'string' || id.length === 0) throw new TypeError(`${method}: id must be a non-empty string`);
  if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs))
    throw new TypeError(`${method}: expiresAtMs must be a finite number`);
  const { mintedAtMs, owner, leaseMs } = options ?? {};
  if (mintedAtMs !== undefined && (typeof mintedAtMs !== 'number' || !Number.isFinite(mintedAtMs)))
    throw new TypeError(`${method}: mintedAtMs must be a finite number`);
  const lease = leaseMs === undefined ? null : checkLeaseMs(method, leaseMs);
  return {
    id,
    exp: expiresAtMs,
    minted: mintedAtMs ?? null,
    owner: owner === undefined ? (ownerValues(1)[0] as string) : checkOwner(method, owner),
    owned: owner !== undefined,
    leaseMs: owner === undefined ? null : lease, // no owner: no lease
  };
}

/** What every spend may be refused with: a past expiry (object's clock), a lost ledger, a full object. */
function refuse(answer: Answer): void {
  if (answer.expired === true) throw new StateExpiredError();
  if (answer.lost === true) throw new LedgerLostError();
  if (answer.full === true) throw new StoreFullError();
}

interface Context {
  objects: Objects;
  shards: number;
  maxPerObject: number;
  budgetPerObject: number;
  maxOutcomeBytes: number;
  open(): void;
}

/**
 * Sends a spend. When its reply never arrives, asks the object once who holds the id: `settle` turns what it holds
 * into the answer; no holder → the refusal its clock and epoch explain, else `ERR_STORE_UNAVAILABLE`.
 */
async function sendSpend<T>(
  ctx: Context,
  spend: Spend,
  message: Answer,
  settle: (held: Answer) => T,
  read: (answer: Answer) => T,
): Promise<T> {
  let answer: Answer;
  try {
    answer = await ctx.objects.call(spend.id, {
      ...message,
      id: spend.id,
      exp: spend.exp,
      owner: spend.owner,
      max: ctx.maxPerObject,
      minted: spend.minted,
      owned: spend.owned,
    });
  } catch (error) {
    if (error instanceof ObjectRefused) return fail(error);
    let held: Answer;
    try {
      held = await ctx.objects.call(spend.id, {
        op: 'inspect',
        id: spend.id,
        fp: typeof message.fp === 'string' ? message.fp : spend.owner,
      });
    } catch {
      return fail(error);
    }
    if (typeof held.owner === 'string') return settle(held);
    if (typeof held.now === 'number' && spend.exp <= held.now) throw new StateExpiredError();
    if (spend.minted !== null && typeof held.epoch === 'number' && spend.minted < held.epoch) throw new LedgerLostError();
    return fail(error);
  }
  refuse(answer);
  try {
    return read(answer);
  } catch (cause) {
    return fail(cause);
  }
}

/** Sends a request that is safe to repeat (renew, release, a record by its owner, an epoch): once more when the reply is lost. */
async function sendTwice(send: () => Promise<Answer>): Promise<Answer> {
  try {
    return await send();
  } catch (error) {
    if (error instanceof ObjectRefused) return fail(error);
    try {
      return await send();
    } catch (again) {
      return fail(again);
    }
  }
}

const answered = (answer: Answer, key: string): boolean => {
  if (typeof answer[key] !== 'boolean') return fail(new Error(`unexpected answer (no ${key})`));
  return answer[key] as boolean;
};

function consumeOp(ctx: Context) {
  return async (id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean> => {
    const spend = spendOf('consume', id, expiresAtMs, { mintedAtMs: options?.mintedAtMs });
    ctx.open();
    return sendSpend(
      ctx,
      spend,
      { op: 'consume' },
      (held) => held.owner === spend.owner,
      (answer) => answered(answer, 'taken'),
    );
  };
}

function claimOp(ctx: Context) {
  return async (id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult> => {
    const spend = spendOf('claim', id, expiresAtMs, options);
    if (typeof fingerprint !== 'string' || fingerprint.length === 0) throw new TypeError('claim: fingerprint must be a non-empty string');
    ctx.open();
    const settle = (held: Answer): ClaimResult => {
      try {
        return held.owner === spend.owner ? claimResultOf({ status: 'first', fence: held.fence }) : claimResultOf(held);
      } catch (cause) {
        return fail(cause);
      }
    };
    const message = { op: 'claim', fp: fingerprint, leaseMs: spend.leaseMs, reclaim: options?.reclaim === true };
    return sendSpend(ctx, spend, message, settle, claimResultOf);
  };
}

function recordOp(ctx: Context) {
  return async (id: string, fingerprint: string, outcome: string, options?: { readonly owner?: string | undefined }): Promise<boolean> => {
    if (typeof id !== 'string' || typeof fingerprint !== 'string' || typeof outcome !== 'string') {
      throw new TypeError('record: id, fingerprint and outcome must be strings');
    }
    const owner = options?.owner === undefined ? null : checkOwner('record', options.owner);
    ctx.open();
    if (id.length === 0) return false;
    // An outcome the object would not keep is sent as '' (done, not kept): no use carrying it.
    const value = outcome.length > ctx.maxOutcomeBytes || outcome.length > ctx.budgetPerObject ? '' : outcome;
    const rowner = owner ?? (ownerValues(1)[0] as string);
    const message = {
      op: 'record',
      id,
      fp: fingerprint,
      outcome: value,
      maxOutcome: ctx.maxOutcomeBytes,
      budget: ctx.budgetPerObject,
      rowner,
      owner,
    };
    // By its owner, a record answers as once however often it is sent.
    if (owner !== null) return answered(await sendTwice(() => ctx.objects.call(id, message)), 'stored');
    let answer: Answer;
    try {
      answer = await ctx.objects.call(id, message);
    } catch (error) {
      if (error instanceof ObjectRefused) return fail(error);
      let held: Answer;
      try {
        held = await ctx.objects.call(id, { op: 'inspect', id, fp: fingerprint });
      } catch {
        return fail(error);
      }
      if (held.rowner === rowner) return held.kept === true;
      if (owner === null && held.owned === true) return false; // an owned claim: refused to a record without owner
      if (typeof held.owner === 'string' && held.rowner !== null) return false; // someone else's record landed
      return fail(error);
    }
    return answered(answer, 'stored');
  };
}

function leaseOps(ctx: Context) {
  return {
    async renew(id: string, owner: string, leaseMs: number): Promise<boolean> {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('renew: id must be a non-empty string');
      const message = { op: 'renew', id, owner: checkOwner('renew', owner), leaseMs: checkLeaseMs('renew', leaseMs) };
      ctx.open();
      return answered(await sendTwice(() => ctx.objects.call(id, message)), 'renewed');
    },
    async release(id: string, owner: string): Promise<boolean> {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('release: id must be a non-empty string');
      const message = { op: 'release', id, owner: checkOwner('release', owner) };
      ctx.open();
      return answered(await sendTwice(() => ctx.objects.call(id, message)), 'released');
    },
    async time(): Promise<number> {
      ctx.open();
      let answer: Answer;
      try {
        answer = await ctx.objects.callShard(0, { op: 'time' });
      } catch (error) {
        return fail(error);
      }
      if (typeof answer.now !== 'number' || !Number.isFinite(answer.now)) return fail(new Error('unexpected answer to time'));
      return answer.now;
    },
    async keyFingerprints(offer: readonly KeyFingerprint[]): Promise<KeyFingerprint[]> {
      const records = parseKeyFingerprintOffer(offer).map((r) => [r.kid, r.fingerprint, r.expiresAtMs]);
      ctx.open();
      const answer = await sendTwice(() => ctx.objects.callShard(0, { op: 'keys', offer: records }));
      if (answer.full === true) throw fleetKeysFull();
      const held = answer.records;
      if (!Array.isArray(held)) return fail(new Error('unexpected answer to keys'));
      return held.map((r: unknown) => {
        if (!Array.isArray(r) || typeof r[0] !== 'string' || typeof r[1] !== 'string' || typeof r[2] !== 'number') {
          return fail(new Error('unexpected answer to keys'));
        }
        return { kid: r[0], fingerprint: r[1], expiresAtMs: r[2] };
      });
    },
    async ledgerEpoch(): Promise<number> {
      ctx.open();
      const epochOf = async (shard: number): Promise<number> => {
        const answer = await sendTwice(() => ctx.objects.callShard(shard, { op: 'epoch' }));
        const { epoch } = answer;
        if (typeof epoch !== 'number' || !Number.isSafeInteger(epoch) || epoch < 0) return fail(new Error('unexpected answer to epoch'));
        return epoch;
      };
      const epochs = await Promise.all(Array.from({ length: ctx.shards }, (_, shard) => epochOf(shard)));
      return Math.max(...epochs);
    },
  };
}

/**
 * A {@link ReplayStore} on Cloudflare Durable Objects: single use (and outcome recording) for every isolate and
 * every location of a Worker that reaches the same namespace binding.
 *
 * Each call is one request to the object that holds the id, applied there in one SQLite transaction, on the object's
 * own clock (`capabilities.clock`): a `consume` or `claim` whose expiry that clock has passed is refused with
 * `ERR_STATE_EXPIRED`, one minted before the object's epoch with `ERR_LEDGER_LOST`. Claims carry leases (owner,
 * lease expiry and fence in the object's row). Every `consume` and `claim` carries an owner value only that call
 * knows: when its answer never arrives (a dropped connection, an object reset, a timeout) the store asks the object
 * once who holds the id — this call → taken (`true`, `first` with its fence); another → `false` or what a claim
 * would answer; no one → the refusal the object's clock or epoch explains, else `ERR_STORE_UNAVAILABLE`. `renew`,
 * `release`, a `record` by its owner and `ledgerEpoch` (every shard's epoch, written where missing; the latest) are
 * sent once more when their reply is lost (each answers as once). Any other failure rejects with `ERR_STORE_UNAVAILABLE`, never `true`.
 */
export function createDurableObjectStore(options: DurableObjectStoreOptions): DurableObjectReplayStore {
  options = optionsObject(LABEL, options, {
    ...OUTCOME_STORE_LIMIT_OPTIONS,
    objects: true,
    namespace: true,
    shards: true,
    maxEntries: true,
    timeoutMs: true,
    now: true,
  });
  if (options.objects === undefined) throw new TypeError(`${LABEL}: objects (the Durable Object namespace binding) is required`);
  if (options.now !== undefined) throw new TypeError(`${LABEL}: now is gone: the objects decide on their own clock`);
  const namespace = stringOption(`${LABEL}: namespace`, options.namespace, '');
  const shards = intOption(`${LABEL}: shards`, options.shards, 8, 1, 1024);
  const maxEntries = intOption(`${LABEL}: maxEntries`, options.maxEntries, 1_000_000, 1, Number.MAX_SAFE_INTEGER);
  if (maxEntries < shards) throw new RangeError(`${LABEL}: maxEntries must be at least shards`);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(LABEL, options);
  const timeoutMs = intOption(`${LABEL}: timeoutMs`, options.timeoutMs, 5_000, 1, 600_000);
  let closed = false;
  const ctx: Context = {
    objects: objectsOf(LABEL, options.objects, 'replay', namespace, shards, timeoutMs),
    shards,
    // Each object's share of the store-wide bounds: together they never pass them.
    maxPerObject: Math.floor(maxEntries / shards),
    budgetPerObject: Math.floor(outcomeBudgetBytes / shards),
    maxOutcomeBytes,
    open: () => {
      if (closed) throw new StoreUnavailableError();
    },
  };
  return {
    capabilities: fullStoreCapabilities({ maxOutcomeBytes, outcomeBudgetBytes }, maxEntries),
    consume: consumeOp(ctx),
    claim: claimOp(ctx),
    record: recordOp(ctx),
    ...leaseOps(ctx),
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
