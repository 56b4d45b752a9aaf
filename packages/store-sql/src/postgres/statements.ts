import { createHash } from 'node:crypto';
import type { PgQueryConfigLike } from '../shared/drivers.js';
import { BUDGET_BUCKET_MS, MAX_FINGERPRINT_MISSES } from '../shared/claims.js';

/** A statement with its name (when prepared statements are on). */
export type NamedQuery = Pick<PgQueryConfigLike, 'name' | 'text'>;

/** The replay store's statements, on the quoted `table` and its quoted outcome `budgetTable`. */
export interface ReplayStatements {
  consume: NamedQuery;
  owner: NamedQuery;
  batch: NamedQuery;
  owners: NamedQuery;
  claimBatch: NamedQuery;
  misses: NamedQuery;
  row: NamedQuery;
  rows: NamedQuery;
  locked: NamedQuery;
  purge: NamedQuery;
  purgeBudget: NamedQuery;
  /** The record batch, sent as a simple query with its values written in (see records.ts). */
  recordBatchSql: string;
}

/**
 * A value written into SQL text: a string as an escape-string literal (quotes doubled, backslashes escaped, whatever
 * `standard_conforming_strings` says; the store's strings hold no NUL), an array of strings as `ARRAY[…]::text[]`, a
 * safe integer as itself.
 */
export function sqlLiteral(value: unknown): string {
  if (typeof value === 'string') return `E'${value.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
  if (Array.isArray(value)) return `ARRAY[${value.map(sqlLiteral).join(', ')}]::text[]`;
  throw new TypeError('sqlLiteral: not a string, safe integer or array of strings');
}

/** A 32-bit key of `text` for `pg_advisory_xact_lock(int, int)` (computed here, so it can be written into SQL). */
export function lockKey(text: string): number {
  return createHash('sha256').update(text).digest().readInt32BE(0);
}

/** A statement name is derived from its text, so stores on different tables can share a pool. */
const namer =
  (prepared: boolean) =>
  (text: string): NamedQuery =>
    prepared ? { name: `mrtr_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`, text } : { text };

/** The statements of consumes, claims, records, lost-reply lookups and the purge. */
export function replayStatements(table: string, budgetTable: string, prepared: boolean): ReplayStatements {
  // One upsert: a new id is inserted; a row whose expiry has passed is taken over; a live row is
  // left alone. The command tag counts inserted plus updated rows, so rowCount is 1 exactly when
  // this call won. Concurrent consumers of one id serialise on the unique index (a second inserter
  // waits for the first, then takes the conflict path) and on the row lock (the WHERE is re-checked
  // on the newest row version), so exactly one of them gets 1.
  // Trade-off: on a live duplicate (a replay attempt) PostgreSQL still locks the row, which costs a
  // small WAL write; in exchange a fresh id (the common case) does the work of a bare
  // INSERT … ON CONFLICT DO NOTHING. (A CTE of INSERT … DO NOTHING plus UPDATE-if-expired avoids the
  // lock but measured about a quarter slower per fresh id in a CPU-bound ad-hoc run.)
  // Each consume also writes `owner`, a random value only it knows: if its reply is lost, one SELECT
  // tells whether the row is its own (→ true), someone else's (→ false), or still unknown (→ error).
  // Taking over an expired row clears what a `claim` kept with it (fingerprint, outcome): the id is now held
  // by a plain consume, and its old outcome is gone with the old row.
  const takeOver = 'expires_at = EXCLUDED.expires_at, owner = EXCLUDED.owner, fp = NULL, outcome = NULL';
  const consumeSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at, owner) VALUES ($1, $2, $3, $5) ` +
    `ON CONFLICT (ns, id) DO UPDATE SET ${takeOver} WHERE t.expires_at < $4`;
  const ownerSql = `SELECT owner, expires_at FROM ${table} WHERE ns = $1 AND id = $2`;
  // Group commit: the same upsert for a batch of distinct ids (sorted, so two batches of different
  // stores that share ids take their row locks in one order and cannot deadlock). RETURNING lists the
  // ids this statement inserted or took over; ON CONFLICT DO UPDATE may touch a row only once per
  // statement, so the batch never holds an id twice (a repeated id is answered without the database).
  const batchSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at, owner) SELECT $1::text, u.id, u.expires_at, u.owner ` +
    'FROM unnest($2::text[], $3::bigint[], $4::text[]) AS u(id, expires_at, owner) ' +
    `ON CONFLICT (ns, id) DO UPDATE SET ${takeOver} WHERE t.expires_at < $5 ` +
    'RETURNING t.id';
  const ownersSql = `SELECT id, owner, expires_at FROM ${table} WHERE ns = $1 AND id = ANY($2::text[])`;
  // claim, for a batch of distinct ids (sorted, like consumes): the consume upsert that also keeps the fingerprint,
  // and that always updates the row it meets, so that RETURNING hands back every id's row as this statement left it
  // (the newest version, locked by the statement: no snapshot can hide a row a concurrent transaction committed). A
  // row whose expiry has passed is taken over (fingerprint and owner replaced, outcome and misses cleared); a live
  // one keeps its values, except that a claim with another fingerprint of a row held by a claim counts a miss, and
  // the MAX_FINGERPRINT_MISSES-th marks the outcome '' ("done, not kept"). The row holds this call's owner exactly
  // when this claim took the id (inserted it or took it over).
  const miss = 't.fp IS NOT NULL AND t.fp <> EXCLUDED.fp';
  const claimBatchSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at, owner, fp) SELECT $1::text, u.id, u.expires_at, u.owner, u.fp ` +
    'FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[]) AS u(id, expires_at, owner, fp) ' +
    'ON CONFLICT (ns, id) DO UPDATE SET ' +
    'expires_at = CASE WHEN t.expires_at < $6 THEN EXCLUDED.expires_at ELSE t.expires_at END, ' +
    'owner = CASE WHEN t.expires_at < $6 THEN EXCLUDED.owner ELSE t.owner END, ' +
    'fp = CASE WHEN t.expires_at < $6 THEN EXCLUDED.fp ELSE t.fp END, ' +
    `outcome = CASE WHEN t.expires_at < $6 THEN NULL WHEN ${miss} AND coalesce(t.misses, 0) + 1 >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE t.outcome END, ` +
    `misses = CASE WHEN t.expires_at < $6 THEN NULL WHEN ${miss} THEN coalesce(t.misses, 0) + 1 ELSE t.misses END ` +
    'RETURNING t.id, t.owner, t.fp, t.outcome, t.misses, t.expires_at';
  // The misses of later claims of an id in the same batch (see laterClaims), on the row incarnation they met.
  const missesSql =
    `UPDATE ${table} AS t SET misses = coalesce(t.misses, 0) + u.k, ` +
    `outcome = CASE WHEN coalesce(t.misses, 0) + u.k >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE t.outcome END ` +
    'FROM unnest($2::text[], $3::text[], $4::int[]) AS u(id, owner, k) WHERE t.ns = $1 AND t.id = ANY($2::text[]) AND t.id = u.id AND t.owner = u.owner';
  // record, for a batch of distinct (id, fingerprint) pairs, run under the namespace's budget lock (see recordBatch):
  // only the claim's own fingerprint, only once, only while the id is live. An outcome is kept when it is not '' and
  // the outcomes before it in the batch and it fit in what the budget has left (outcomeBudgetBytes minus the bytes of
  // the buckets not yet past); else '' is stored. The kept bytes are added to the bucket of their id's expiry. The
  // `id = ANY(ids)` conditions keep the table's side an index scan whatever join the planner picks (with a batch
  // of literal values it knows the batch's size, and would otherwise hash-join a sequential scan of the table).
  const recordBatchSql =
    'WITH u AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(id, fp, outcome, ord)), ' +
    'c AS (SELECT u.id, u.outcome, r.owner, sum(octet_length(u.outcome)) OVER (ORDER BY u.ord) AS run ' +
    `FROM u JOIN ${table} AS r ON r.ns = $1 AND r.id = ANY($2::text[]) AND r.id = u.id AND r.fp = u.fp AND r.outcome IS NULL AND r.expires_at >= $5), ` +
    `room AS (SELECT $6::bigint - coalesce(sum(b.bytes), 0) AS left_bytes FROM ${budgetTable} AS b WHERE b.ns = $1 AND b.bucket >= $7), ` +
    `upd AS (UPDATE ${table} AS t SET outcome = CASE WHEN c.outcome <> '' AND c.run <= (SELECT left_bytes FROM room) THEN c.outcome ELSE '' END ` +
    'FROM c WHERE t.ns = $1 AND t.id = ANY($2::text[]) AND t.id = c.id AND t.owner IS NOT DISTINCT FROM c.owner AND t.outcome IS NULL AND t.expires_at >= $5 ' +
    'RETURNING t.id, t.outcome, t.expires_at), ' +
    `bump AS (INSERT INTO ${budgetTable} AS b (ns, bucket, bytes) SELECT $1::text, upd.expires_at / ${BUDGET_BUCKET_MS}, sum(octet_length(upd.outcome)) ` +
    `FROM upd WHERE upd.outcome <> '' GROUP BY upd.expires_at / ${BUDGET_BUCKET_MS} ` +
    'ON CONFLICT (ns, bucket) DO UPDATE SET bytes = b.bytes + EXCLUDED.bytes) ' +
    "SELECT upd.id, upd.outcome <> '' AS kept FROM upd";
  // What a claim or record whose reply was lost asks, and what a claim of an already expired id reads.
  const rowSql = `SELECT owner, fp, outcome, expires_at FROM ${table} WHERE ns = $1 AND id = $2`;
  const rowsSql = `SELECT id, owner, fp, outcome, expires_at FROM ${table} WHERE ns = $1 AND id = ANY($2::text[])`;
  // After a batch statement gave up on a lock: which of its ids' rows another transaction holds locked (SKIP LOCKED
  // takes the free ones and waits for none; autocommit releases them at once).
  const lockedSql =
    `WITH free AS (SELECT id FROM ${table} WHERE ns = $1 AND id = ANY($2::text[]) FOR UPDATE SKIP LOCKED) ` +
    `SELECT id FROM ${table} WHERE ns = $1 AND id = ANY($2::text[]) AND id NOT IN (SELECT id FROM free)`;
  // SKIP LOCKED: never wait for (or make a consume wait on) a row another transaction holds;
  // FOR UPDATE re-checks the expiry on a row a concurrent consume has just renewed.
  const purgeSql =
    `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE expires_at < $1 ` +
    `ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND expires_at < $1`;
  // Budget buckets the clock has left (every namespace): they no longer count; a small table.
  const purgeBudgetSql = `DELETE FROM ${budgetTable} WHERE bucket < $1`;
  const named = namer(prepared);
  return {
    consume: named(consumeSql),
    owner: named(ownerSql),
    batch: named(batchSql),
    owners: named(ownersSql),
    claimBatch: named(claimBatchSql),
    misses: named(missesSql),
    row: named(rowSql),
    rows: named(rowsSql),
    locked: named(lockedSql),
    purge: named(purgeSql),
    purgeBudget: named(purgeBudgetSql),
    recordBatchSql,
  };
}
