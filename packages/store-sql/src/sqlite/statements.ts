import type { SqliteDatabaseLike, SqliteStatementLike } from '../shared/drivers.js';
import { MAX_FINGERPRINT_MISSES } from '../shared/claims.js';
import { MAX_FLEET_KEYS } from '@mrtr/core/store';
import { EPOCH_SUFFIX, KEYS_SUFFIX } from '../shared/schema.js';

/** The replay store's statements, prepared once per database (statements can only be prepared after the table exists). */
export interface Statements {
  db: SqliteDatabaseLike;
  consume: SqliteStatementLike;
  purge: SqliteStatementLike;
  owner: SqliteStatementLike;
  claim: SqliteStatementLike;
  row: SqliteStatementLike;
  record: SqliteStatementLike;
  held: SqliteStatementLike;
  bump: SqliteStatementLike;
  purgeBudget: SqliteStatementLike;
  /** The ledger epoch: written when missing, then read. */
  epochInsert: SqliteStatementLike;
  epoch: SqliteStatementLike;
  renew: SqliteStatementLike;
  release: SqliteStatementLike;
  live: SqliteStatementLike;
  /** The fleet check's key fingerprints: the namespace's expired rows deleted, its live rows read, a row upserted. */
  keysExpired: SqliteStatementLike;
  keysLive: SqliteStatementLike;
  keysUpsert: SqliteStatementLike;
  begin: SqliteStatementLike;
  commit: SqliteStatementLike;
  rollback: SqliteStatementLike;
}

/** The statements' text on the quoted `table` (whose unquoted name is `tableName`). */
function statementsSql(table: string, tableName: string) {
  // Every time below is the store's clock (the `now` option), passed in by the batch.
  // SQLite runs one write at a time (per database file, across processes), so the upsert is atomic:
  // it inserts a new id, takes over an expired row, or changes nothing (a live duplicate). The
  // change count says which; it is cheaper than RETURNING and needs only SQLite ≥ 3.24.
  // `owner` is a random value only the writing consume knows (see resolveLost). Taking over an expired row
  // clears what a claim kept with it (fingerprint, outcome).
  const consumeSql =
    `INSERT INTO ${table} (ns, id, expires_at, owner) VALUES (?, ?, ?, ?) ` +
    'ON CONFLICT (ns, id) DO UPDATE SET expires_at = excluded.expires_at, owner = excluded.owner, fp = NULL, outcome = NULL, ' +
    'misses = NULL, lease_until = NULL, fence = NULL ' +
    `WHERE ${table}.expires_at < ?`;
  const ownerSql = `SELECT owner, expires_at FROM ${table} WHERE ns = ? AND id = ?`;
  // claim: the consume upsert that also keeps the fingerprint and the lease, and always updates the row it meets, so
  // RETURNING hands back the row as it left it (inside the batch's write transaction). An expired row is taken over
  // (fingerprint, owner and lease replaced, outcome and misses cleared, fence 0); a row of the same fingerprint,
  // unrecorded, whose lease lapsed is taken over by a claim with `reclaim` (owner and lease replaced, the next fence);
  // a live one keeps its values, except that a claim with another fingerprint of a row held by a claim counts a miss,
  // the MAX_FINGERPRINT_MISSES-th marking the outcome '' ("done, not kept"). The row holds this call's owner exactly
  // when this claim took the id.
  const old = (column: string) => `${table}.${column}`;
  const expired = `${old('expires_at')} < @now`;
  const lapsed = `(${old('fp')} = excluded.fp AND ${old('outcome')} IS NULL AND ${old('lease_until')} < @now AND @reclaim = 1)`;
  const miss = `${old('fp')} IS NOT NULL AND ${old('fp')} <> excluded.fp`;
  const claimSql =
    `INSERT INTO ${table} (ns, id, expires_at, owner, fp, lease_until, fence) VALUES (@ns, @id, @expires, @owner, @fp, @lease, 0) ` +
    'ON CONFLICT (ns, id) DO UPDATE SET ' +
    `expires_at = CASE WHEN ${expired} THEN excluded.expires_at ELSE ${old('expires_at')} END, ` +
    `owner = CASE WHEN ${expired} OR ${lapsed} THEN excluded.owner ELSE ${old('owner')} END, ` +
    `fp = CASE WHEN ${expired} THEN excluded.fp ELSE ${old('fp')} END, ` +
    `outcome = CASE WHEN ${expired} THEN NULL WHEN ${miss} AND coalesce(${old('misses')}, 0) + 1 >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE ${old('outcome')} END, ` +
    `misses = CASE WHEN ${expired} THEN NULL WHEN ${miss} THEN coalesce(${old('misses')}, 0) + 1 ELSE ${old('misses')} END, ` +
    `lease_until = CASE WHEN ${expired} OR ${lapsed} THEN excluded.lease_until ELSE ${old('lease_until')} END, ` +
    `fence = CASE WHEN ${expired} THEN 0 WHEN ${lapsed} THEN coalesce(${old('fence')}, 0) + 1 ELSE ${old('fence')} END ` +
    'RETURNING owner, fp, outcome, misses, expires_at, lease_until, fence';
  const rowSql = `SELECT owner, fp, outcome, expires_at, lease_until, fence FROM ${table} WHERE ns = ? AND id = ?`;
  const recordSql = `UPDATE ${table} SET outcome = ? WHERE ns = ? AND id = ? AND fp = ? AND outcome IS NULL AND expires_at >= ?`;
  // The ledger epoch of a namespace, written by the first batch that finds it missing (see runOps).
  const epochTable = `"${tableName}${EPOCH_SUFFIX}"`;
  const epochInsertSql = `INSERT INTO ${epochTable} (ns, epoch_ms) VALUES (?, ?) ON CONFLICT (ns) DO NOTHING`;
  const epochSql = `SELECT epoch_ms FROM ${epochTable} WHERE ns = ?`;
  // renew: the owner's unrecorded, live claim gets a lease of leaseMs from now (a lapsed lease too).
  const renewSql =
    `UPDATE ${table} SET lease_until = @now + @lease WHERE ns = @ns AND id = @id AND owner = @owner ` +
    'AND fp IS NOT NULL AND outcome IS NULL AND expires_at >= @now';
  // release: compare-and-delete of the owner's unrecorded claim (then: is the id still held live? see releaseIn).
  const releaseSql = `DELETE FROM ${table} WHERE ns = ? AND id = ? AND owner = ? AND fp IS NOT NULL AND outcome IS NULL`;
  const liveSql = `SELECT 1 AS found FROM ${table} WHERE ns = ? AND id = ? AND expires_at >= ?`;
  // The outcome budget: bytes of kept outcomes per namespace and expiry bucket (see recordIn).
  const budgetTable = `"${tableName}_budget"`;
  const heldSql = `SELECT coalesce(sum(bytes), 0) AS held FROM ${budgetTable} WHERE ns = ? AND bucket >= ?`;
  const bumpSql =
    `INSERT INTO ${budgetTable} (ns, bucket, bytes) VALUES (?, ?, ?) ` +
    `ON CONFLICT (ns, bucket) DO UPDATE SET bytes = ${budgetTable}.bytes + excluded.bytes`;
  const purgeSql = `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE expires_at < ? ORDER BY expires_at LIMIT ?)`;
  const purgeBudgetSql = `DELETE FROM ${budgetTable} WHERE bucket < ?`;
  // The fleet check's key fingerprints of a namespace (see keyFingerprints in calls.ts).
  const keysTable = `"${tableName}${KEYS_SUFFIX}"`;
  const keysExpiredSql = `DELETE FROM ${keysTable} WHERE ns = ? AND expires_at <= ?`;
  // The live rows as one JSON array of [kid, fp, expires_at] (one `get`: the driver interface has no `all`).
  const keysLiveSql =
    'SELECT json_group_array(json_array(kid, fp, expires_at)) AS records FROM ' +
    `(SELECT kid, fp, expires_at FROM ${keysTable} WHERE ns = ? AND expires_at > ? ORDER BY kid LIMIT ${MAX_FLEET_KEYS + 1})`;
  const keysUpsertSql =
    `INSERT INTO ${keysTable} (ns, kid, fp, expires_at) VALUES (?, ?, ?, ?) ` +
    'ON CONFLICT (ns, kid) DO UPDATE SET fp = excluded.fp, expires_at = excluded.expires_at';
  return {
    keysExpiredSql,
    keysLiveSql,
    keysUpsertSql,
    consumeSql,
    ownerSql,
    claimSql,
    rowSql,
    recordSql,
    heldSql,
    bumpSql,
    purgeSql,
    purgeBudgetSql,
    epochInsertSql,
    epochSql,
    renewSql,
    releaseSql,
    liveSql,
  };
}

/** Prepares the replay store's statements on `db`. */
export function prepareStatements(db: SqliteDatabaseLike, table: string, tableName: string): Statements {
  const sql = statementsSql(table, tableName);
  return {
    db,
    consume: db.prepare(sql.consumeSql),
    purge: db.prepare(sql.purgeSql),
    owner: db.prepare(sql.ownerSql),
    claim: db.prepare(sql.claimSql),
    row: db.prepare(sql.rowSql),
    record: db.prepare(sql.recordSql),
    held: db.prepare(sql.heldSql),
    bump: db.prepare(sql.bumpSql),
    purgeBudget: db.prepare(sql.purgeBudgetSql),
    epochInsert: db.prepare(sql.epochInsertSql),
    epoch: db.prepare(sql.epochSql),
    renew: db.prepare(sql.renewSql),
    release: db.prepare(sql.releaseSql),
    live: db.prepare(sql.liveSql),
    keysExpired: db.prepare(sql.keysExpiredSql),
    keysLive: db.prepare(sql.keysLiveSql),
    keysUpsert: db.prepare(sql.keysUpsertSql),
    // BEGIN IMMEDIATE takes the write lock first (waiting up to busy_timeout): the batch cannot
    // fail half-way on a lock held by another process.
    begin: db.prepare('BEGIN IMMEDIATE'),
    commit: db.prepare('COMMIT'),
    rollback: db.prepare('ROLLBACK'),
  };
}
