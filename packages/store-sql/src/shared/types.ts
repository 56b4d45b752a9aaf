import {
  fullStoreCapabilities,
  type BackgroundError,
  type ClaimOptions,
  type ClaimResult,
  type KeyFingerprint,
  type RecordingReplayStore,
  type SpendOptions,
} from '@mrtr/core/store';
import { startPurgeTimer, storeCall } from './lifecycle.js';
import type { PurgeSettings } from './options.js';

/** A replay store on a SQL table. */
export interface SqlReplayStore extends RecordingReplayStore {
  /** `'postgres'` or `'sqlite'`. */
  readonly dialect: 'postgres' | 'sqlite';
  /** The quoted, possibly schema-qualified table name used in statements. */
  readonly table: string;
  /**
   * Atomically records `id` until `expiresAtMs` (epoch ms) and resolves `true` only for the first
   * call; `false` while a live row exists. An expired row is taken over by the next consume. Judged by the store's
   * clock (PostgreSQL: the server's; SQLite: the `now` option): an `expiresAtMs` at or before it rejects with
   * `ERR_STATE_EXPIRED`, a `mintedAtMs` before the namespace's ledger epoch with `ERR_LEDGER_LOST`; neither writes.
   * Rejects with `ERR_STORE_UNAVAILABLE` on any database failure (never resolves `true` then).
   */
  consume(id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean>;
  /**
   * `consume` that keeps `fingerprint` with the id (same ledger, same atomic upsert, an expired row is taken
   * over, the same refusals): `first` (with its `fence`) when this call took the id; else how it is held —
   * `pending` (same fingerprint, no outcome yet; `leaseLeftMs` while a lease runs), `unknown` (its lease lapsed
   * unrecorded; `reclaim` takes it over with the next fence), `recorded` (same fingerprint, with its outcome),
   * `replayed` (taken by `consume`, another fingerprint, or an outcome recorded as not kept). With `owner` and
   * `leaseMs` the claim holds a lease; `owner` is also its owner value (a claim by the same owner again answers
   * `first` again). Rejects with `ERR_STORE_UNAVAILABLE` on any database failure (never resolves `first` then).
   */
  claim(id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult>;
  /**
   * Stores `outcome` for an id held by `claim` with this `fingerprint` (and this `owner`, when given), with no
   * outcome yet and not expired: batched with other records; `true` when stored. A second record by the same owner
   * answers what the first did. An outcome over `maxOutcomeBytes`, one past the namespace's `outcomeBudgetBytes`, or
   * one the database cannot hold unchanged (NUL characters, lone surrogates) is recorded as `''` and resolves
   * `false`, as does `''` itself.
   */
  record(id: string, fingerprint: string, outcome: string, options?: { readonly owner?: string | undefined }): Promise<boolean>;
  /** Extends the lease of `owner`'s unrecorded claim of `id` to `leaseMs` from the store's now; `true` when it did. */
  renew(id: string, owner: string, leaseMs: number): Promise<boolean>;
  /** Gives back `id` when `owner` holds an unrecorded claim of it; `true` when `owner` holds no claim of it afterwards. */
  release(id: string, owner: string): Promise<boolean>;
  /** The store's time, epoch ms (PostgreSQL: the server's clock; SQLite: the `now` option). */
  time(): Promise<number>;
  /** The namespace's ledger epoch, written with the store's time when missing (see `ReplayStore.ledgerEpoch`). */
  ledgerEpoch(): Promise<number>;
  /**
   * The fleet check's exchange (see `ReplayStore.keyFingerprints`): the namespace's rows of `<table>_keys`, in one
   * transaction (PostgreSQL: under the namespace's advisory lock, by the server's clock; SQLite: `BEGIN IMMEDIATE`, by
   * the `now` option).
   */
  keyFingerprints(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  /** The namespace (named in the fleet check's `ERR_KEY_MISMATCH`). */
  readonly namespace: string;
  /** Largest outcome `record` keeps, in UTF-8 bytes. */
  readonly maxOutcomeBytes: number;
  /** Most UTF-8 bytes of outcomes the namespace holds at once (counted by expiry bucket, see the README). */
  readonly outcomeBudgetBytes: number;
  /** Creates the table, its columns and its expiry index when missing. Idempotent and safe to run concurrently. */
  ensureSchema(): Promise<void>;
  /** Deletes rows expired by the store's clock (all namespaces), bounded by `purgeBatchSize × purgeMaxBatches`; resolves the count. */
  purge(): Promise<number>;
  /** Stops the purge timer and closes a pool/database the store created itself (not an injected one). Idempotent. */
  close(): Promise<void>;
}

/** What a dialect's replay store is made of; {@link sqlReplayStore} puts it together. */
export interface ReplayParts
  extends Pick<
    SqlReplayStore,
    | 'dialect'
    | 'table'
    | 'maxOutcomeBytes'
    | 'outcomeBudgetBytes'
    | 'consume'
    | 'claim'
    | 'record'
    | 'renew'
    | 'release'
    | 'time'
    | 'ledgerEpoch'
    | 'keyFingerprints'
    | 'namespace'
  > {
  label: string;
  purge: PurgeSettings;
  onError: (error: BackgroundError) => void;
  assertOpen(): void;
  /** Creates what is missing of the schema (once; retried after a failure). */
  ensureSchema(): Promise<void>;
  /** One purge run. */
  runPurge(): Promise<number>;
  /** Whether the store has been used (an idle store's background purge opens no connection). */
  used(): boolean;
  /** Closes the store, given the function that stops the background purge. */
  close(stopPurge: () => void): () => Promise<void>;
}

/** A replay store from its parts, with its background purge started. */
export function sqlReplayStore(parts: ReplayParts): SqlReplayStore {
  const { assertOpen, runPurge } = parts;
  const purgeIfUsed = async () => {
    if (parts.used()) await runPurge();
  };
  const stopPurge = startPurgeTimer(parts.label, parts.purge.intervalMs, purgeIfUsed, parts.onError);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parts;
  return {
    capabilities: fullStoreCapabilities({ maxOutcomeBytes, outcomeBudgetBytes }),
    dialect: parts.dialect,
    table: parts.table,
    maxOutcomeBytes: parts.maxOutcomeBytes,
    outcomeBudgetBytes: parts.outcomeBudgetBytes,
    consume: parts.consume,
    claim: parts.claim,
    record: parts.record,
    renew: parts.renew,
    release: parts.release,
    time: parts.time,
    ledgerEpoch: parts.ledgerEpoch,
    keyFingerprints: parts.keyFingerprints,
    namespace: parts.namespace,
    async ensureSchema() {
      assertOpen();
      await storeCall(() => parts.ensureSchema());
    },
    purge: () => storeCall(runPurge),
    close: parts.close(stopPurge),
  };
}
