import { boolOption, intOption, type OptionNames } from '@mrtr/core/options';
import {
  type BackgroundError,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  type ParsedOutcomeStoreLimits,
  parseOutcomeStoreLimits,
} from '@mrtr/core/store';

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

/** The names of {@link SqlStoreCommonOptions}, for a replay store's list of known options. */
export const SQL_STORE_OPTIONS: OptionNames<SqlStoreCommonOptions> = {
  ...OUTCOME_STORE_LIMIT_OPTIONS,
  table: true,
  namespace: true,
  ensureSchema: true,
  purgeIntervalMs: true,
  purgeBatchSize: true,
  purgeMaxBatches: true,
  extraRetentionMs: true,
  now: true,
  onError: true,
  batch: true,
  maxBatchSize: true,
  maxQueued: true,
};

export const DEFAULT_TABLE = 'mrtr_replay';
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

/** Validates an SQL identifier against a strict pattern and returns it double-quoted. */
export function quoteIdentifier(label: string, name: unknown): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new TypeError(`${label} must match /^[A-Za-z_][A-Za-z0-9_]{0,47}$/`);
  }
  return `"${name.replaceAll('"', '""')}"`;
}

/** `maxOutcomeBytes` (default 16 KiB) and `outcomeBudgetBytes` (default 64 MiB), labelled errors on misuse. */
export function outcomeLimits(label: string, options: SqlStoreCommonOptions): ParsedOutcomeStoreLimits {
  return parseOutcomeStoreLimits(label, options);
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

export interface GroupCommitSettings {
  /** Most consumes one statement carries. */
  maxBatch: number;
  /** Most consumes waiting for a statement; beyond it a consume fails closed at once. */
  maxQueued: number;
}

/** The batching settings, or `undefined` with `batch: false`. */
export function groupCommitSettings(label: string, options: SqlStoreCommonOptions): GroupCommitSettings | undefined {
  const batch = boolOption(`${label}: batch`, options.batch, true);
  if (!batch) return undefined;
  return {
    maxBatch: intOption(`${label}: maxBatchSize`, options.maxBatchSize, 256, 1, 4096),
    maxQueued: intOption(`${label}: maxQueued`, options.maxQueued, 16_384, 1, 1_000_000),
  };
}

/** Exactly one of an injected connection (`pool`/`database`) and a way to open one (`connectionString`/`filename`). */
export function checkConnectionChoice(
  label: string,
  injected: unknown,
  opener: unknown,
  names: { injected: 'pool' | 'database'; opener: 'connectionString' | 'filename'; methods: readonly string[]; kind: string },
): void {
  if ((injected === undefined) === (opener === undefined)) {
    throw new TypeError(`${label}: pass exactly one of ${names.injected} or ${names.opener}`);
  }
  if (
    injected !== undefined &&
    (injected === null || names.methods.some((method) => typeof (injected as Record<string, unknown>)[method] !== 'function'))
  ) {
    throw new TypeError(`${label}: ${names.injected} must be a ${names.kind}`);
  }
  if (opener !== undefined && (typeof opener !== 'string' || opener.length === 0)) {
    throw new TypeError(`${label}: ${names.opener} must be a non-empty string`);
  }
}
