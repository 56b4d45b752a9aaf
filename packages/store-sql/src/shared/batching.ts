import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { type BatchEntry, type Batcher, type ClaimResult, createBatcher, ownerValues } from '@mrtr/core/store';
import { toStoreError } from './lifecycle.js';
import type { GroupCommitSettings } from './options.js';

export { ownerValues };

/** A value only the calling consume knows, written with its id so a lost reply can be resolved. */
export const ownerValue = (): string => base64urlEncode(randomBytes(16));

/**
 * The owner values a batch writes: a claim's own owner when it has one (unique per attempt, so it resolves a lost
 * reply as well), else a fresh random value.
 */
export function ownersOf(waiters: readonly { owner?: string | undefined }[]): string[] {
  const fresh = ownerValues(waiters.length);
  return waiters.map((waiter, i) => waiter.owner ?? (fresh[i] as string));
}

/** One consume waiting for its batch. */
export interface Waiter extends BatchEntry<boolean> {
  readonly id: string;
  readonly expires: number;
  /** `mintedAtMs` (floored), or `undefined`: no epoch check. */
  readonly minted: number | undefined;
  /** `performance.now()` when it was queued (bounds its whole wait by the store's deadline). */
  readonly queuedAt: number;
}

/** One claim waiting for its batch. */
export interface ClaimWaiter extends BatchEntry<ClaimResult> {
  readonly id: string;
  readonly expires: number;
  readonly fp: string;
  readonly minted: number | undefined;
  /** The caller's owner (its own value is the claim's owner value), or `undefined`: a random one. */
  readonly owner: string | undefined;
  /** The lease, with an owner; `undefined`: no lease (never lapses). */
  readonly leaseMs: number | undefined;
  readonly reclaim: boolean;
  readonly queuedAt: number;
}

/** One record waiting for its batch; `outcome` is what is stored (`''` when it cannot be kept at all). */
export interface RecordWaiter extends BatchEntry<boolean> {
  readonly id: string;
  readonly fp: string;
  readonly outcome: string;
  /** Only the claim's owner records, when given. */
  readonly owner: string | undefined;
  readonly queuedAt: number;
}

/** The options of a claim or record queue: the group-commit settings of the consumes, `'microtask'` flush. */
export function batcherOptions(settings: GroupCommitSettings, maxInFlight: number) {
  return {
    maxBatchSize: settings.maxBatch,
    maxQueued: settings.maxQueued,
    maxInFlight,
    flush: 'microtask' as const,
    batchError: toStoreError,
  };
}

/**
 * Group commit (the shared `createBatcher` of `@mrtr/core/store`): consumes queue there and are handed to
 * `run` in batches of at most `maxBatch`, with at most `maxInFlight` batches running at once (PostgreSQL: up to
 * the pool size, so one slow statement — a locked row, a dead connection — does not hold up consumes that
 * arrive after it; SQLite: one, its writes are serial anyway). A consume that finds a free slot starts a batch
 * after the current tick's synchronous work (`'microtask'`: everything queued in the same tick goes together,
 * and nothing waits on a timer) or after the event loop's pending I/O callbacks (`'immediate'`: for a
 * synchronous driver, whose statement blocks the loop, so requests that arrived while it ran are served by the
 * next one). Consumes that arrive while every slot is busy go into the next batch, which starts as soon as a
 * running one ends. A full queue fails a consume closed at once (`ERR_STORE_UNAVAILABLE`); `run` must settle
 * every waiter it is given (a rejection fails the ones it left, as `toStoreError`).
 */
export function createGroupCommit(
  settings: GroupCommitSettings,
  mode: 'microtask' | 'immediate',
  run: (batch: Waiter[]) => Promise<void> | void,
  maxInFlight = 1,
): Batcher<Waiter, boolean> {
  return createBatcher<Waiter, boolean>({ ...batcherOptions(settings, maxInFlight), flush: mode, run });
}

/** Ids in code-unit order (the order every batch statement takes its row locks in). */
export const byId = <T extends { id: string }>(a: T, b: T): number => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Splits a batch by id: the first waiter of each id (sorted by id: the order rows are locked in) and the later ones. */
export function splitById<W extends { id: string }>(batch: readonly W[]): { unique: W[]; later: Map<string, W[]> } {
  const later = new Map<string, W[]>();
  const first = new Map<string, W>();
  for (const waiter of batch) {
    if (!first.has(waiter.id)) first.set(waiter.id, waiter);
    else {
      const list = later.get(waiter.id);
      if (list === undefined) later.set(waiter.id, [waiter]);
      else list.push(waiter);
    }
  }
  return { unique: [...first.values()].sort(byId), later };
}

/** Settles every call of a batch with one failure. */
export function rejectAll(batch: Iterable<{ reject(error: unknown): void }>, failure: unknown): void {
  for (const waiter of batch) waiter.reject(failure);
}
