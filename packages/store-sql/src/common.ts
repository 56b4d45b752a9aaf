import { createHash } from 'node:crypto';
import { type ClaimResult, MrtrError, type OutcomeStoreLimits, type ReplayStore } from '@mrtr/core';
import {
  BackgroundError,
  type Batcher,
  type BatchEntry,
  base64urlEncode,
  boolOption,
  createBatcher,
  intOption,
  MAX_FINGERPRINT_MISSES,
  type ParsedOutcomeStoreLimits,
  parseOutcomeStoreLimits,
  randomBytes,
  StoreUnavailableError,
} from '@mrtr/core/authoring';

/** Options shared by both dialects. */
export interface SqlStoreCommonOptions extends OutcomeStoreLimits {
  /**
   * Table that holds consumed ids. Letters, digits and `_`, starting with a letter or `_`, at most
   * 48 characters; it is always quoted. @default "mrtr_replay"
   */
  table?: string;
  /**
   * Ledger namespace: stores with different namespaces never see each other's ids, even in one
   * table. Any string up to 256 UTF-8 bytes. @default ""
   */
  namespace?: string;
  /**
   * Run `ensureSchema()` automatically before the first consume (once; retried after a failure).
   * Turn it off when the schema is managed by a migration tool and the role cannot create tables.
   * @default true
   */
  ensureSchema?: boolean;
  /**
   * How often expired rows are purged in the background, in ms, with an unref'd timer (never
   * keeps the process alive). `0` turns the background purge off (call `purge()` yourself).
   * @default 60000
   */
  purgeIntervalMs?: number;
  /** Most rows one purge statement deletes. @default 1000 */
  purgeBatchSize?: number;
  /** Most batches one purge run executes (bounds a run to `purgeBatchSize × purgeMaxBatches` rows). @default 10 */
  purgeMaxBatches?: number;
  /**
   * Rows are kept (not purged) this many ms past their expiry, as a margin for clock differences between
   * instances (an expired row is consumable again regardless). The name `@mrtr/store-redis` uses for the
   * same margin. @default 0
   */
  extraRetentionMs?: number;
  /** Clock in epoch ms used to decide whether a stored id has expired. @default Date.now */
  now?: () => number;
  /**
   * Receives the problems the store survives in the background, as a {@link BackgroundError} (an `Error` with a
   * stable `code`, the underlying error as `cause`): `STORE_PURGE_FAILED` when a background purge fails (it never
   * throws; expired rows stay until a later run succeeds). The hook every `@mrtr/store-*` store takes under this
   * name and shape.
   * @default ignore
   */
  onError?: (error: BackgroundError) => void;
  /**
   * Batching (group commit): consumes that arrive while a statement is running are coalesced into the next one
   * (PostgreSQL: one `INSERT … SELECT FROM unnest(…)`; SQLite: one `BEGIN IMMEDIATE … COMMIT`), and each
   * consume still gets its own answer; so are claims and records (PostgreSQL: a queue each, one statement per
   * batch of claims, one transaction per batch of records; SQLite: the consumes' queue and transaction). Nothing
   * waits on a timer: a call that finds the store idle starts its statement at once (at the end of the current
   * tick). `false` runs one statement per consume (and a batch of one per claim or record). The name
   * `@mrtr/store-redis` uses for the same switch. @default true
   */
  batch?: boolean;
  /** Most consumes one group-commit statement carries (1–4096). @default 256 */
  maxBatchSize?: number;
  /**
   * Most consumes waiting for a group-commit statement; one more fails closed at once with
   * `ERR_STORE_UNAVAILABLE` (a backlog that could not be served within the deadline anyway). @default 16384
   */
  maxQueued?: number;
}

/** A replay store on a SQL table. */
export interface SqlReplayStore extends ReplayStore {
  /** `'postgres'` or `'sqlite'`. */
  readonly dialect: 'postgres' | 'sqlite';
  /** The quoted, possibly schema-qualified table name used in statements. */
  readonly table: string;
  /**
   * Atomically records `id` until `expiresAtMs` (epoch ms) and resolves `true` only for the first
   * call; `false` while a live row exists. An expired row is taken over by the next consume.
   * Rejects with `ERR_STORE_UNAVAILABLE` on any database failure (never resolves `true` then).
   */
  consume(id: string, expiresAtMs: number): Promise<boolean>;
  /**
   * `consume` that keeps `fingerprint` with the id (same ledger, same atomic upsert, an expired row is taken
   * over): `first` when this call took the id; else how it is held — `pending` (same fingerprint, no outcome
   * yet), `recorded` (same fingerprint, with its outcome), `replayed` (taken by `consume`, another fingerprint,
   * or an outcome recorded as not kept). Rejects with `ERR_STORE_UNAVAILABLE` on any database failure (never
   * resolves `first` then).
   */
  claim(id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult>;
  /**
   * Stores `outcome` for an id held by `claim` with this `fingerprint`, with no outcome yet and not expired:
   * batched with other records; `true` when stored. An outcome over `maxOutcomeBytes`, one past the namespace's
   * `outcomeBudgetBytes`, or one the database cannot hold unchanged (NUL characters, lone surrogates) is recorded as
   * `''` and resolves `false`, as does `''` itself.
   */
  record(id: string, fingerprint: string, outcome: string): Promise<boolean>;
  /** Largest outcome `record` keeps, in UTF-8 bytes. */
  readonly maxOutcomeBytes: number;
  /** Most UTF-8 bytes of outcomes the namespace holds at once (counted by expiry bucket, see the README). */
  readonly outcomeBudgetBytes: number;
  /** Creates the table, its columns and its expiry index when missing. Idempotent and safe to run concurrently. */
  ensureSchema(): Promise<void>;
  /** Deletes expired rows (all namespaces), bounded by `purgeBatchSize × purgeMaxBatches`; resolves the count. */
  purge(): Promise<number>;
  /** Stops the purge timer and closes a pool/database the store created itself (not an injected one). Idempotent. */
  close(): Promise<void>;
}

export const DEFAULT_TABLE = 'mrtr_replay';
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;
const MAX_ID_BYTES = 1024;
const MAX_NAMESPACE_BYTES = 256;
const MAX_FINGERPRINT_BYTES = 256;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Validates an SQL identifier against a strict pattern and returns it double-quoted. */
export function quoteIdentifier(label: string, name: unknown): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new TypeError(`${label} must match /^[A-Za-z_][A-Za-z0-9_]{0,47}$/`);
  }
  return `"${name.replaceAll('"', '""')}"`;
}

function checkKeyText(label: string, value: unknown, maxBytes: number, allowEmpty: boolean): string {
  if (typeof value !== 'string') throw new TypeError(`${label} must be a string`);
  if (!allowEmpty && value.length === 0) throw new RangeError(`${label} must not be empty`);
  if (value.includes('\u0000') || LONE_SURROGATE.test(value)) {
    throw new TypeError(`${label} must be well-formed Unicode without NUL characters`);
  }
  if (Buffer.byteLength(value, 'utf8') > maxBytes) throw new RangeError(`${label} must be at most ${maxBytes} UTF-8 bytes`);
  return value;
}

export function checkNamespace(label: string, value: unknown): string {
  return value === undefined ? '' : checkKeyText(`${label}: namespace`, value, MAX_NAMESPACE_BYTES, true);
}

/** Argument checks of `consume` (and `claim`); misuse is a TypeError/RangeError, never a store error. */
export function checkConsumeArgs(id: unknown, expiresAtMs: unknown, op: 'consume' | 'claim' = 'consume'): number {
  checkKeyText(`${op}: id`, id, MAX_ID_BYTES, false);
  if (typeof expiresAtMs !== 'number') throw new TypeError(`${op}: expiresAtMs must be a number (epoch ms)`);
  if (!Number.isFinite(expiresAtMs)) throw new RangeError(`${op}: expiresAtMs must be finite`);
  const rounded = Math.ceil(expiresAtMs);
  if (!Number.isSafeInteger(rounded)) throw new RangeError(`${op}: expiresAtMs is out of range`);
  return rounded;
}

/** Argument checks of `claim`: those of `consume` plus a fingerprint (non-empty, at most 256 UTF-8 bytes). */
export function checkClaimArgs(id: unknown, expiresAtMs: unknown, fingerprint: unknown): number {
  const expires = checkConsumeArgs(id, expiresAtMs, 'claim');
  checkKeyText('claim: fingerprint', fingerprint, MAX_FINGERPRINT_BYTES, false);
  return expires;
}

/**
 * Argument checks of `record`; returns the text to store: `outcome` itself, or `''` ("done, not kept") when it
 * is over `maxBytes` UTF-8 bytes or would not come back unchanged (a NUL character, which PostgreSQL's `text`
 * cannot hold, or a lone surrogate, which UTF-8 encoding replaces).
 */
export function checkRecordArgs(id: unknown, fingerprint: unknown, outcome: unknown, maxBytes: number): string {
  checkKeyText('record: id', id, MAX_ID_BYTES, false);
  checkKeyText('record: fingerprint', fingerprint, MAX_FINGERPRINT_BYTES, false);
  if (typeof outcome !== 'string') throw new TypeError('record: outcome must be a string');
  // A string has between 1 and 3 UTF-8 bytes per UTF-16 code unit: count the bytes only when that leaves doubt.
  if (outcome.length > maxBytes) return '';
  if (outcome.length * 3 > maxBytes && Buffer.byteLength(outcome, 'utf8') > maxBytes) return '';
  if (outcome.includes('\u0000') || LONE_SURROGATE.test(outcome)) return '';
  return outcome;
}

/** `maxOutcomeBytes` (default 16 KiB) and `outcomeBudgetBytes` (default 64 MiB), labelled errors on misuse. */
export function outcomeLimits(label: string, options: SqlStoreCommonOptions): ParsedOutcomeStoreLimits {
  return parseOutcomeStoreLimits(label, options);
}

/**
 * Width of an outcome budget bucket in ms: an outcome recorded for an id expiring at E counts in bucket
 * floor(E / BUDGET_BUCKET_MS) until the store's clock leaves that bucket, so at most this long past E (over-counted,
 * never under-counted).
 */
export const BUDGET_BUCKET_MS = 60_000;
export const budgetBucket = (t: number): number => Math.floor(t / BUDGET_BUCKET_MS);

export { MAX_FINGERPRINT_MISSES };

/** A row as `claim` and its lookups read it. */
export interface HeldRow {
  id?: unknown;
  owner?: unknown;
  misses?: unknown;
  fp?: unknown;
  outcome?: unknown;
  expires_at?: unknown;
}

const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
export const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });
export const FIRST: ClaimResult = Object.freeze({ status: 'first' });

/**
 * How a live row that this claim did not take is held: taken by `consume` (no fingerprint) or with another
 * fingerprint → replayed; same fingerprint and no outcome yet → pending; outcome `''` (done, not kept) →
 * replayed; else recorded with the outcome.
 */
export function heldStatus(row: HeldRow, fingerprint: string): ClaimResult {
  if (typeof row.fp !== 'string' || row.fp !== fingerprint) return REPLAYED;
  if (row.outcome === null || row.outcome === undefined) return PENDING;
  if (typeof row.outcome !== 'string' || row.outcome === '') return REPLAYED;
  return { status: 'recorded', outcome: row.outcome };
}

/** Whether a row read back is live at `t` (an expired row counts as absent, as for `consume`). */
export const isLive = (row: HeldRow | undefined, t: number): row is HeldRow => row !== undefined && Number(row.expires_at) >= t;

/** Anything that is not already a `MrtrError` becomes `ERR_STORE_UNAVAILABLE` with the original as `cause`. */
export function toStoreError(error: unknown): MrtrError {
  return MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error });
}

export interface PurgeSettings {
  intervalMs: number;
  batchSize: number;
  maxBatches: number;
  graceMs: number;
}

export function purgeSettings(label: string, options: SqlStoreCommonOptions): PurgeSettings {
  return {
    intervalMs: intOption(`${label}: purgeIntervalMs`, options.purgeIntervalMs, 60_000, 0, 2_147_483_647),
    batchSize: intOption(`${label}: purgeBatchSize`, options.purgeBatchSize, 1000, 1, 100_000),
    maxBatches: intOption(`${label}: purgeMaxBatches`, options.purgeMaxBatches, 10, 1, 10_000),
    graceMs: intOption(`${label}: extraRetentionMs`, options.extraRetentionMs, 0, 0, 2_147_483_647),
  };
}

/**
 * Runs bounded purge passes on an unref'd interval, one at a time. `run` must never throw
 * synchronously into the timer; its errors go to `onError` as a `STORE_PURGE_FAILED` {@link BackgroundError}
 * labelled with `label` (the factory), the error itself as `cause`.
 */
export function startPurgeTimer(
  label: string,
  intervalMs: number,
  run: () => Promise<unknown>,
  onError: (error: BackgroundError) => void,
): () => void {
  if (intervalMs === 0) return () => {};
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    run()
      .catch((error: unknown) => {
        try {
          const reason = error instanceof Error ? error.message || error.name : String(error);
          onError(
            new BackgroundError(
              'STORE_PURGE_FAILED',
              `${label}: the background purge failed (${reason}); expired rows stay until a later run succeeds`,
              {
                cause: error,
              },
            ),
          );
        } catch {
          // a throwing onError must not become an unhandled rejection
        }
      })
      .finally(() => {
        running = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** Caches a successful async initialisation; a failed one is retried by the next caller. */
export function once<T>(init: () => Promise<T>): { get(): Promise<T>; readonly done: boolean } {
  let pending: Promise<T> | undefined;
  let done = false;
  return {
    get() {
      if (pending === undefined) {
        pending = init().then(
          (value) => {
            done = true;
            return value;
          },
          (error: unknown) => {
            pending = undefined;
            throw error;
          },
        );
      }
      return pending;
    },
    get done() {
      return done;
    },
  };
}

/** A value only the calling consume knows, written with its id so a lost reply can be resolved. */
export const ownerValue = (): string => base64urlEncode(randomBytes(16));

export { ownerValues } from '@mrtr/core/authoring';

/** One consume waiting for its batch. */
export interface Waiter extends BatchEntry<boolean> {
  readonly id: string;
  readonly expires: number;
  /** `performance.now()` when it was queued (bounds its whole wait by the store's deadline). */
  readonly queuedAt: number;
}

export interface GroupCommitSettings {
  /** Most consumes one statement carries. */
  maxBatch: number;
  /** Most consumes waiting for a statement; beyond it a consume fails closed at once. */
  maxQueued: number;
}

export function groupCommitSettings(label: string, options: SqlStoreCommonOptions): GroupCommitSettings | undefined {
  const batch = boolOption(`${label}: batch`, options.batch, true);
  if (!batch) return undefined;
  return {
    maxBatch: intOption(`${label}: maxBatchSize`, options.maxBatchSize, 256, 1, 4096),
    maxQueued: intOption(`${label}: maxQueued`, options.maxQueued, 16_384, 1, 1_000_000),
  };
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
 * Group commit (the shared `createBatcher` of `@mrtr/core/authoring`): consumes queue there and are handed to
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
  return createBatcher<Waiter, boolean>({
    maxBatchSize: settings.maxBatch,
    maxQueued: settings.maxQueued,
    maxInFlight,
    flush: mode,
    run,
    batchError: toStoreError,
  });
}

/** One claim waiting for its batch. */
export interface ClaimWaiter extends BatchEntry<ClaimResult> {
  readonly id: string;
  readonly expires: number;
  readonly fp: string;
  readonly queuedAt: number;
}

/** One record waiting for its batch; `outcome` is what is stored (`''` when it cannot be kept at all). */
export interface RecordWaiter extends BatchEntry<boolean> {
  readonly id: string;
  readonly fp: string;
  readonly outcome: string;
  readonly queuedAt: number;
}

/**
 * The later claims of one id in a batch, after its first claim's statement left `row` (the row as that statement
 * left it, locked by it): answered in queue order as the database would, each claim with another fingerprint on a
 * row held by a claim counting a miss (the {@link MAX_FINGERPRINT_MISSES}-th drops the outcome). Returns the answers
 * and how many misses they add (written by the caller in one more statement before any of them is answered).
 */
export function laterClaims(row: HeldRow, later: readonly ClaimWaiter[]): { answers: ClaimResult[]; misses: number } {
  const held: HeldRow = { fp: row.fp, outcome: row.outcome };
  let count = Number(row.misses ?? 0) || 0;
  let misses = 0;
  const answers = later.map((waiter) => {
    if (typeof held.fp === 'string' && held.fp !== waiter.fp) {
      misses++;
      if (++count >= MAX_FINGERPRINT_MISSES) held.outcome = '';
    }
    return heldStatus(held, waiter.fp);
  });
  return { answers, misses };
}

/** Ids in code-unit order (the order every batch statement takes its row locks in). */
export const byId = <T extends { id: string }>(a: T, b: T): number => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** A 32-bit key of `text` for `pg_advisory_xact_lock(int, int)` (computed here, so it can be written into SQL). */
export function lockKey(text: string): number {
  return createHash('sha256').update(text).digest().readInt32BE(0);
}
