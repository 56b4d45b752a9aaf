import { type ClaimResult, MrtrError } from '@mrtr/core';
import {
  type BackgroundError,
  boolOption,
  fnOption,
  intOption,
  oneOfOption,
  optionsObject,
  StoreUnavailableError,
} from '@mrtr/core/authoring';
import {
  CLAIM_TRIES,
  checkClaimArgs,
  checkConsumeArgs,
  checkNamespace,
  checkRecordArgs,
  DEFAULT_TABLE,
  FIRST,
  createGroupCommit,
  groupCommitSettings,
  type HeldRow,
  heldStatus,
  isLive,
  maxOutcomeBytesOption,
  once,
  ownerValue,
  ownerValues,
  purgeSettings,
  quoteIdentifier,
  REPLAYED,
  type SqlReplayStore,
  type SqlStoreCommonOptions,
  startPurgeTimer,
  toStoreError,
  unsettledClaimError,
  type Waiter,
} from './common.js';
import {
  type DatabaseConstructor,
  loadDriver,
  type SqliteConnectionOptions,
  type SqliteDatabaseLike,
  type SqliteStatementLike,
} from './drivers.js';

export interface SqliteStoreOptions extends SqlStoreCommonOptions, SqliteConnectionOptions {}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Options of {@link configureSqliteDatabase}. */
export interface ConfigureSqliteOptions {
  /** `busy_timeout` in ms: how long a statement waits for another connection's write lock. @default 5000 */
  busyTimeoutMs?: number;
  /** `synchronous` pragma (see {@link SqliteStoreOptions.synchronous}). @default "full" */
  synchronous?: 'full' | 'normal';
}

/**
 * Configures a `better-sqlite3` database the way the store configures a file it opens itself:
 * `busy_timeout`, WAL and `synchronous`. Use it when the store shares a database with your own tables
 * (pass the result as `database`).
 *
 * `PRAGMA journal_mode = WAL` can answer SQLITE_BUSY at once, without the busy handler, while another
 * process creates or converts the same new file; this retries it until the busy timeout has passed,
 * so several processes may open one new file at the same moment.
 */
export async function configureSqliteDatabase<T extends { pragma(source: string): unknown }>(
  db: T,
  options: ConfigureSqliteOptions = {},
): Promise<T> {
  const label = 'configureSqliteDatabase';
  if (db === null || typeof db !== 'object' || typeof db.pragma !== 'function') {
    throw new TypeError(`${label}: db must be a better-sqlite3 Database`);
  }
  options = optionsObject(label, options);
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = synchronousOption(label, options.synchronous);
  db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  const deadline = Date.now() + busyTimeoutMs;
  for (;;) {
    try {
      db.pragma('journal_mode = WAL');
      break;
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (typeof code !== 'string' || !code.startsWith('SQLITE_BUSY') || Date.now() >= deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
  db.pragma(`synchronous = ${synchronous.toUpperCase()}`);
  return db;
}

const synchronousOption = (label: string, value: unknown): 'full' | 'normal' =>
  oneOfOption(`${label}: synchronous`, value, 'full', ['full', 'normal'] as const);

/**
 * Replay store on SQLite (≥ 3.24, bundled with better-sqlite3) through `better-sqlite3` (loaded only
 * when this factory is used). Each consume is one prepared `INSERT … ON CONFLICT DO UPDATE … WHERE
 * expired` statement (with a random owner value, like the PostgreSQL store); its change count is the answer.
 * It records outcomes too (`claim`, `record`), like the PostgreSQL store.
 */
export function createSqliteStore(options: SqliteStoreOptions): SqlReplayStore {
  const label = 'createSqliteStore';
  options = optionsObject(label, options);
  const { database: injected, filename } = options;
  if ((injected === undefined) === (filename === undefined)) {
    throw new TypeError(`${label}: pass exactly one of database or filename`);
  }
  if (injected !== undefined && (injected === null || typeof injected.prepare !== 'function' || typeof injected.exec !== 'function')) {
    throw new TypeError(`${label}: database must be a better-sqlite3 Database`);
  }
  if (filename !== undefined && (typeof filename !== 'string' || filename.length === 0)) {
    throw new TypeError(`${label}: filename must be a non-empty string`);
  }
  const tableName = options.table ?? DEFAULT_TABLE;
  const table = quoteIdentifier(`${label}: table`, tableName);
  // Derived from the validated table name.
  const indexName = `"${tableName}_expires_at_idx"`;
  const namespace = checkNamespace(label, options.namespace);
  const autoSchema = boolOption(`${label}: ensureSchema`, options.ensureSchema, true);
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = synchronousOption(label, options.synchronous);
  const purge = purgeSettings(label, options);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, () => {});
  const groupCommit = groupCommitSettings(label, options);
  const maxOutcomeBytes = maxOutcomeBytesOption(label, options);

  // SQLite runs one write at a time (per database file, across processes), so the upsert is atomic:
  // it inserts a new id, takes over an expired row, or changes nothing (a live duplicate). The
  // change count says which; it is cheaper than RETURNING and needs only SQLite ≥ 3.24.
  // `owner` is a random value only the writing consume knows (see resolveLost). Taking over an expired row
  // clears what a claim kept with it (fingerprint, outcome).
  const consumeSql =
    `INSERT INTO ${table} (ns, id, expires_at, owner) VALUES (?, ?, ?, ?) ` +
    `ON CONFLICT (ns, id) DO UPDATE SET expires_at = excluded.expires_at, owner = excluded.owner, fp = NULL, outcome = NULL ` +
    `WHERE ${table}.expires_at < ?`;
  const ownerSql = `SELECT owner, expires_at FROM ${table} WHERE ns = ? AND id = ?`;
  // claim: the same upsert keeping the fingerprint; when it changed nothing, the live row is read next (in the
  // same synchronous call: no other statement of this connection runs in between).
  const claimSql =
    `INSERT INTO ${table} (ns, id, expires_at, owner, fp) VALUES (?, ?, ?, ?, ?) ` +
    `ON CONFLICT (ns, id) DO UPDATE SET expires_at = excluded.expires_at, owner = excluded.owner, fp = excluded.fp, outcome = NULL ` +
    `WHERE ${table}.expires_at < ?`;
  const rowSql = `SELECT owner, fp, outcome, expires_at FROM ${table} WHERE ns = ? AND id = ?`;
  const recordSql = `UPDATE ${table} SET outcome = ? WHERE ns = ? AND id = ? AND fp = ? AND outcome IS NULL AND expires_at >= ?`;
  const purgeSql = `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE expires_at < ? ORDER BY expires_at LIMIT ?)`;
  const createTableSql =
    `CREATE TABLE IF NOT EXISTS ${table} (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, owner TEXT, fp TEXT, outcome TEXT, ` +
    'PRIMARY KEY (ns, id))';
  const createIndexSql = `CREATE INDEX IF NOT EXISTS ${indexName} ON ${table} (expires_at)`;
  // Columns added after the first version (`owner`; `fp` and `outcome` for outcome recording): a table created
  // by an earlier version lacks some. SQLite has no ADD COLUMN IF NOT EXISTS, so the catalog says which.
  const addedColumns = ['owner', 'fp', 'outcome'] as const;
  const tableInfoSql = `PRAGMA table_info(${table})`;
  const indexSql = "SELECT 1 AS found FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE AND tbl_name = ? COLLATE NOCASE";
  const addColumnSql = (column: string) => `ALTER TABLE ${table} ADD COLUMN ${column} TEXT`;

  let closed = false;
  let owned: SqliteDatabaseLike | undefined;

  const dbReady = once<SqliteDatabaseLike>(async () => {
    if (injected !== undefined) return injected;
    const Database = (await loadDriver('better-sqlite3')) as DatabaseConstructor;
    if (closed) throw new StoreUnavailableError();
    const db = new Database(filename as string, { timeout: busyTimeoutMs });
    try {
      await configureSqliteDatabase(db, { busyTimeoutMs, synchronous });
    } catch (error) {
      db.close();
      throw error;
    }
    owned = db;
    return db;
  });

  /** What exists of the schema, read from the catalog (no write lock). */
  const readCatalog = (db: SqliteDatabaseLike) => {
    const columns = new Set((db.prepare(tableInfoSql) as unknown as { all(): { name: string }[] }).all().map((column) => column.name));
    return {
      table: columns.size > 0,
      missing: addedColumns.filter((column) => !columns.has(column)),
      index: db.prepare(indexSql).get(`${tableName}_expires_at_idx`, tableName) !== undefined,
    };
  };

  const runEnsureSchema = async (): Promise<void> => {
    const db = await dbReady.get();
    // Nothing missing (every start but the first): no DDL and no write lock.
    const found = readCatalog(db);
    if (found.table && found.missing.length === 0 && found.index) return;
    // BEGIN IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so two processes
    // creating the schema at once run one after the other.
    db.exec('BEGIN IMMEDIATE');
    try {
      // Another process may have finished while this one waited for the lock.
      const catalog = readCatalog(db);
      if (!catalog.table) db.exec(createTableSql);
      else for (const column of catalog.missing) db.exec(addColumnSql(column));
      if (!catalog.index) db.exec(createIndexSql);
      db.exec('COMMIT');
    } catch (error) {
      try {
        db.exec('ROLLBACK');
      } catch {
        // no transaction left to roll back
      }
      throw error;
    }
  };
  const schemaReady = once(runEnsureSchema);

  // Prepared once per database (statements can only be prepared after the table exists).
  interface Statements {
    db: SqliteDatabaseLike;
    consume: SqliteStatementLike;
    purge: SqliteStatementLike;
    owner: SqliteStatementLike;
    claim: SqliteStatementLike;
    row: SqliteStatementLike;
    record: SqliteStatementLike;
    begin: SqliteStatementLike;
    commit: SqliteStatementLike;
    rollback: SqliteStatementLike;
  }
  let statements: Statements | undefined;
  const ready = async () => {
    const db = await dbReady.get();
    if (autoSchema) await schemaReady.get();
    if (statements?.db !== db) {
      statements = {
        db,
        consume: db.prepare(consumeSql),
        purge: db.prepare(purgeSql),
        owner: db.prepare(ownerSql),
        claim: db.prepare(claimSql),
        row: db.prepare(rowSql),
        record: db.prepare(recordSql),
        // BEGIN IMMEDIATE takes the write lock first (waiting up to busy_timeout): the batch cannot
        // fail half-way on a lock held by another process.
        begin: db.prepare('BEGIN IMMEDIATE'),
        commit: db.prepare('COMMIT'),
        rollback: db.prepare('ROLLBACK'),
      };
    }
    return statements;
  };

  /**
   * better-sqlite3 runs the statement inside the call: when `run` throws a SQLite error, the statement
   * did not write, and when it returns, its answer is in hand — no reply can be lost in between. Only a
   * wrapped database (an injected object that adds timeouts, proxies to another thread or process)
   * can fail after writing; for any error that is not SQLite's the store asks once, as the PostgreSQL
   * store does: this call's owner → `true`; a live row of another owner → `false`; else unknown.
   */
  const resolveLost = (statement: SqliteStatementLike, id: string, mine: string, original: unknown): boolean => {
    let row: { owner?: unknown; expires_at?: unknown } | undefined;
    try {
      row = statement.get(namespace, id) as typeof row;
    } catch {
      throw toStoreError(original);
    }
    if (row !== undefined && row.owner === mine) return true;
    if (row !== undefined && Number(row.expires_at) >= Math.floor(now())) return false;
    throw toStoreError(original);
  };
  const isSqliteError = (error: unknown): boolean => {
    const code = (error as { code?: unknown } | null)?.code;
    return typeof code === 'string' && code.startsWith('SQLITE_');
  };

  const assertOpen = (): void => {
    if (closed) throw new StoreUnavailableError({ cause: new Error('replay store is closed') });
  };

  /** One consume, one autocommit statement (no group commit, or a batch of one). */
  const consumeOne = (prepared: Statements, id: string, expires: number, mine: string): boolean => {
    try {
      return prepared.consume.run(namespace, id, expires, mine, Math.floor(now())).changes > 0;
    } catch (error) {
      if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw error;
      return resolveLost(prepared.owner, id, mine, error);
    }
  };

  const closedError = () => new StoreUnavailableError({ cause: new Error('replay store is closed') });

  /**
   * Runs one batch of queued consumes in one `BEGIN IMMEDIATE … COMMIT` (one commit, one sync, for the
   * whole batch) and settles each waiter once the commit has succeeded. A repeated id in the batch is
   * answered `false` (its first waiter is the only one that can win). A SQLite error (a busy lock past
   * busy_timeout, a full disk, a failed commit) rolls the batch back and fails every waiter closed.
   */
  const runBatch = async (batch: Waiter[]): Promise<void> => {
    let prepared: Statements;
    try {
      prepared = statements ?? (await ready());
      assertOpen();
    } catch (error) {
      const failure = toStoreError(error);
      for (const waiter of batch) waiter.reject(failure);
      return;
    }
    if (batch.length === 1) {
      const waiter = batch[0] as Waiter;
      try {
        waiter.resolve(consumeOne(prepared, waiter.id, waiter.expires, ownerValue()));
      } catch (error) {
        waiter.reject(toStoreError(error));
      }
      return;
    }
    const owners = ownerValues(batch.length);
    const answers = new Array<boolean | MrtrError>(batch.length);
    const seen = new Set<string>();
    try {
      prepared.begin.run();
      try {
        const t = Math.floor(now());
        for (let i = 0; i < batch.length; i++) {
          const waiter = batch[i] as Waiter;
          if (seen.has(waiter.id)) {
            answers[i] = false;
            continue;
          }
          seen.add(waiter.id);
          const mine = owners[i] as string;
          try {
            answers[i] = prepared.consume.run(namespace, waiter.id, waiter.expires, mine, t).changes > 0;
          } catch (error) {
            if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw error;
            // A wrapped database failing after the write: asked inside the transaction, like a single consume.
            try {
              answers[i] = resolveLost(prepared.owner, waiter.id, mine, error);
            } catch (unknown) {
              answers[i] = toStoreError(unknown);
            }
          }
        }
        prepared.commit.run();
      } catch (error) {
        try {
          prepared.rollback.run();
        } catch {
          // SQLite rolled back already (or the database is gone)
        }
        throw error;
      }
    } catch (error) {
      const failure = toStoreError(error);
      for (const waiter of batch) waiter.reject(failure);
      return;
    }
    for (let i = 0; i < batch.length; i++) {
      const answer = answers[i] as boolean | MrtrError;
      if (typeof answer === 'boolean') (batch[i] as Waiter).resolve(answer);
      else (batch[i] as Waiter).reject(answer);
    }
  };

  const queue = groupCommit === undefined ? undefined : createGroupCommit(groupCommit, 'immediate', runBatch);

  const consume = async (id: string, expiresAtMs: number): Promise<boolean> => {
    const expires = checkConsumeArgs(id, expiresAtMs);
    assertOpen();
    // An id is live while now <= expiresAtMs; one already past it cannot be remembered, so it is never a first use.
    if (expires <= now()) return false;
    if (queue !== undefined) {
      return new Promise<boolean>((resolve, reject) => {
        queue.push({ id, expires, queuedAt: 0, resolve, reject });
      });
    }
    try {
      // After the first successful consume the statement is ready: no await on the hot path.
      const prepared = statements ?? (await ready());
      assertOpen();
      return consumeOne(prepared, id, expires, ownerValue());
    } catch (error) {
      throw toStoreError(error);
    }
  };

  /**
   * One claim: the upsert, then (when it changed nothing) the row it met. Synchronous from the upsert to the
   * read, so no statement of this connection comes in between; another process can still remove or take over
   * the row in between (its clock saw it expired), and then the claim runs again (CLAIM_TRIES at most, then it
   * fails closed), never answering `first` for a row it did not write.
   */
  const claimOne = (prepared: Statements, id: string, expires: number, fingerprint: string): ClaimResult => {
    for (let attempt = 0; attempt < CLAIM_TRIES; attempt++) {
      const mine = ownerValue();
      const t = Math.floor(now());
      let changes: number;
      try {
        changes = prepared.claim.run(namespace, id, expires, mine, fingerprint, t).changes;
      } catch (error) {
        if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw error;
        // A wrapped database failing after the write: asked once, as for a consume.
        let row: HeldRow | undefined;
        try {
          row = prepared.row.get(namespace, id) as HeldRow | undefined;
        } catch {
          throw toStoreError(error);
        }
        if (row !== undefined && row.owner === mine) return FIRST;
        if (isLive(row, Math.floor(now()))) return heldStatus(row, fingerprint);
        throw toStoreError(error);
      }
      if (changes > 0) return FIRST;
      const row = prepared.row.get(namespace, id) as HeldRow | undefined;
      if (isLive(row, t)) return heldStatus(row, fingerprint);
    }
    throw unsettledClaimError();
  };

  /** Not part of group commit (claims are per round, far rarer than consumes): one statement of its own. */
  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    const expires = checkClaimArgs(id, expiresAtMs, fingerprint);
    assertOpen();
    try {
      const prepared = statements ?? (await ready());
      assertOpen();
      // As for consume: an id already past its expiry cannot be remembered, so it is never a first use and
      // nothing is written; a live row of the id still answers how it is held (read only).
      if (expires <= now()) {
        const row = prepared.row.get(namespace, id) as HeldRow | undefined;
        return isLive(row, Math.floor(now())) ? heldStatus(row, fingerprint) : REPLAYED;
      }
      return claimOne(prepared, id, expires, fingerprint);
    } catch (error) {
      throw toStoreError(error);
    }
  };

  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    const stored = checkRecordArgs(id, fingerprint, outcome, maxOutcomeBytes);
    assertOpen();
    let prepared: Statements;
    try {
      prepared = statements ?? (await ready());
      assertOpen();
    } catch (error) {
      throw toStoreError(error);
    }
    try {
      return prepared.record.run(stored, namespace, id, fingerprint, Math.floor(now())).changes > 0 && stored !== '';
    } catch (error) {
      if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw toStoreError(error);
      // A wrapped database failing after the write: this outcome on the row → stored; a row this update cannot
      // have changed → false; else unknown.
      let row: HeldRow | undefined;
      try {
        row = prepared.row.get(namespace, id) as HeldRow | undefined;
      } catch {
        throw toStoreError(error);
      }
      if (row !== undefined && row.fp === fingerprint && row.outcome === stored) return stored !== '';
      if (row !== undefined && (row.fp !== fingerprint || (row.outcome !== null && row.outcome !== undefined))) return false;
      throw toStoreError(error);
    }
  };

  const runPurge = async (): Promise<number> => {
    assertOpen();
    const { purge: statement } = await ready();
    let total = 0;
    for (let batch = 0; batch < purge.maxBatches && !closed; batch++) {
      if (batch > 0) await yieldToEventLoop();
      if (closed) break;
      const deleted = statement.run(Math.floor(now()) - purge.graceMs, purge.batchSize).changes;
      total += deleted;
      if (deleted < purge.batchSize) break;
    }
    return total;
  };

  const stopPurge = startPurgeTimer(
    label,
    purge.intervalMs,
    async () => {
      if (dbReady.done && (!autoSchema || schemaReady.done)) await runPurge();
    },
    onError,
  );

  let closing: Promise<void> | undefined;
  return {
    dialect: 'sqlite',
    table,
    maxOutcomeBytes,
    consume,
    claim,
    record,
    async ensureSchema() {
      assertOpen();
      try {
        await schemaReady.get();
      } catch (error) {
        throw toStoreError(error);
      }
    },
    async purge() {
      try {
        return await runPurge();
      } catch (error) {
        throw toStoreError(error);
      }
    },
    close() {
      if (closing === undefined) {
        closed = true;
        stopPurge();
        // Consumes still queued fail closed.
        queue?.failAll(closedError);
        closing = (async () => {
          if (injected !== undefined) return;
          await dbReady.get().catch(() => undefined);
          try {
            owned?.close();
          } catch {
            // already closed
          }
        })();
      }
      return closing;
    },
  };
}
