import { createHash } from 'node:crypto';
import type { PgQueryConfigLike } from '../shared/drivers.js';
import { BUDGET_BUCKET_MS, MAX_FINGERPRINT_MISSES } from '../shared/claims.js';

/** A statement with its name (when prepared statements are on). */
export type NamedQuery = Pick<PgQueryConfigLike, 'name' | 'text'>;

/** The replay store's statements, on the quoted `table`, its quoted outcome `budgetTable` and `epochTable`. */
export interface ReplayStatements {
  consume: NamedQuery;
  owner: NamedQuery;
  batch: NamedQuery;
  owners: NamedQuery;
  claimBatch: NamedQuery;
  misses: NamedQuery;
  rows: NamedQuery;
  locked: NamedQuery;
  renew: NamedQuery;
  release: NamedQuery;
  time: NamedQuery;
  ledgerEpoch: NamedQuery;
  purge: NamedQuery;
  purgeBudget: NamedQuery;
  /** The record batch, sent as a simple query with its values written in (see records.ts). */
  recordBatchSql: string;
  /** The row lock a held id's records wait for before their budget shard's lock (written in likewise). */
  recordLockSql: string;
}

/**
 * The server's time in epoch ms, one value for the whole statement (`statement_timestamp()`: when the statement
 * arrived): every expiry, lease, retention and epoch is judged by it, never by the process's clock.
 */
export const SERVER_NOW_MS = 'floor(extract(epoch from statement_timestamp()) * 1000)::bigint';

/**
 * A value written into SQL text: `null` as NULL, a string as an escape-string literal (quotes doubled, backslashes escaped, whatever
 * `standard_conforming_strings` says; the store's strings hold no NUL), an array of strings as `ARRAY[…]::text[]`, a
 * safe integer as itself.
 */
export function sqlLiteral(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
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

/**
 * The head every consume and claim statement shares: the server's time (`c`), the namespace's ledger epoch written
 * when missing (`e`: a new, truncated or restored table starts a new one, by the server's clock), and both read once
 * for the statement (`k`; a row another transaction inserted since the statement's snapshot is not seen: its epoch is
 * then taken as now, which refuses more, never less).
 */
const spendHead = (epochTable: string): string =>
  `WITH c AS (SELECT ${SERVER_NOW_MS} AS now_ms), ` +
  `e AS (INSERT INTO ${epochTable} AS e (ns, epoch_ms) SELECT $1::text, c.now_ms FROM c ON CONFLICT (ns) DO NOTHING RETURNING e.epoch_ms), ` +
  `k AS (SELECT c.now_ms, coalesce((SELECT epoch_ms FROM e), (SELECT x.epoch_ms FROM ${epochTable} AS x WHERE x.ns = $1), c.now_ms) AS epoch_ms FROM c), `;

/**
 * The calls a statement admits: an expiry after the server's time, and no `mintedAtMs` before the epoch. The others
 * write nothing (the caller refuses them from the `k` row the statement returns: see spendRefusal).
 */
const ADMITTED = 'u.expires_at > k.now_ms AND (u.minted IS NULL OR u.minted >= k.epoch_ms)';

/** The last row of every consume and claim statement: the server's time and the epoch it judged by. */
const clockRow = (nulls: number): string => `SELECT ${'NULL, '.repeat(nulls)}k.now_ms, k.epoch_ms FROM k`;

/** The statements of consumes, claims, records, renew, release, lost-reply lookups, the time and the purge. */
export function replayStatements(table: string, budgetTable: string, epochTable: string, prepared: boolean): ReplayStatements {
  const head = spendHead(epochTable);
  const now = '(SELECT now_ms FROM k)';
  // One upsert per consume (or per batch of distinct ids, sorted, so two batches of different stores that share ids
  // take their row locks in one order and cannot deadlock): a new id is inserted; a row whose expiry has passed (by
  // the server's clock) is taken over; a live row is left alone. RETURNING lists the ids this statement inserted or
  // took over; ON CONFLICT DO UPDATE may touch a row only once per statement, so a batch never holds an id twice (a
  // repeated id is answered without the database). Concurrent consumers of one id serialise on the unique index and
  // on the row lock (the WHERE is re-checked on the newest row version), so exactly one of them wins.
  // Each consume also writes `owner`, a random value only it knows: if its reply is lost, one SELECT tells whether
  // the row is its own (→ true), someone else's (→ false), or still unknown (→ error). Taking over an expired row
  // clears what a `claim` kept with it (fingerprint, outcome, lease): the id is now held by a plain consume.
  const takeOver =
    'expires_at = EXCLUDED.expires_at, owner = EXCLUDED.owner, fp = NULL, outcome = NULL, misses = NULL, lease_until = NULL, fence = NULL';
  const consumeSql = (source: string) =>
    `${head}a AS (SELECT u.* FROM ${source} AS u(id, expires_at, owner, minted) CROSS JOIN k WHERE ${ADMITTED}), ` +
    `w AS (INSERT INTO ${table} AS t (ns, id, expires_at, owner) SELECT $1::text, a.id, a.expires_at, a.owner FROM a ` +
    `ON CONFLICT (ns, id) DO UPDATE SET ${takeOver} WHERE t.expires_at < ${now} RETURNING t.id) ` +
    `SELECT w.id, NULL::bigint AS now_ms, NULL::bigint AS epoch_ms FROM w UNION ALL ${clockRow(1)}`;
  const ownerSql = `SELECT owner, expires_at, ${SERVER_NOW_MS} AS now_ms FROM ${table} WHERE ns = $1 AND id = $2`;
  const ownersSql = `SELECT id, owner, expires_at, ${SERVER_NOW_MS} AS now_ms FROM ${table} WHERE ns = $1 AND id = ANY($2::text[])`;
  // claim, for a batch of distinct ids (sorted, like consumes): the consume upsert that also keeps the fingerprint
  // and the lease, and that always updates the row it meets, so that RETURNING hands back every id's row as this
  // statement left it (the newest version, locked by the statement: no snapshot can hide a row a concurrent
  // transaction committed). A row whose expiry has passed is taken over (fingerprint, owner and lease replaced,
  // outcome and misses cleared, fence 0); a row of the same fingerprint, unrecorded, whose lease lapsed is taken over
  // by a claim with `reclaim` (owner and lease replaced, the next fence); a live one keeps its values, except that a
  // claim with another fingerprint of a row held by a claim counts a miss, and the MAX_FINGERPRINT_MISSES-th marks
  // the outcome '' ("done, not kept"). The row holds this call's owner exactly when this claim took the id.
  const expired = `t.expires_at < ${now}`;
  const lapsed = `(t.fp = EXCLUDED.fp AND t.outcome IS NULL AND t.lease_until < ${now} AND (SELECT a.reclaim FROM a WHERE a.id = EXCLUDED.id))`;
  const miss = 't.fp IS NOT NULL AND t.fp <> EXCLUDED.fp';
  const claimBatchSql =
    `${head}a AS (SELECT u.*, k.now_ms + u.lease_ms AS lease_until FROM ` +
    'unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::boolean[]) ' +
    `AS u(id, expires_at, owner, fp, minted, lease_ms, reclaim) CROSS JOIN k WHERE ${ADMITTED}), ` +
    `w AS (INSERT INTO ${table} AS t (ns, id, expires_at, owner, fp, lease_until, fence) ` +
    'SELECT $1::text, a.id, a.expires_at, a.owner, a.fp, a.lease_until, 0 FROM a ON CONFLICT (ns, id) DO UPDATE SET ' +
    `expires_at = CASE WHEN ${expired} THEN EXCLUDED.expires_at ELSE t.expires_at END, ` +
    `owner = CASE WHEN ${expired} OR ${lapsed} THEN EXCLUDED.owner ELSE t.owner END, ` +
    `fp = CASE WHEN ${expired} THEN EXCLUDED.fp ELSE t.fp END, ` +
    `outcome = CASE WHEN ${expired} THEN NULL WHEN ${miss} AND coalesce(t.misses, 0) + 1 >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE t.outcome END, ` +
    `misses = CASE WHEN ${expired} THEN NULL WHEN ${miss} THEN coalesce(t.misses, 0) + 1 ELSE t.misses END, ` +
    `lease_until = CASE WHEN ${expired} OR ${lapsed} THEN EXCLUDED.lease_until ELSE t.lease_until END, ` +
    `fence = CASE WHEN ${expired} THEN 0 WHEN ${lapsed} THEN coalesce(t.fence, 0) + 1 ELSE t.fence END ` +
    'RETURNING t.id, t.owner, t.fp, t.outcome, t.misses, t.expires_at, t.lease_until, t.fence) ' +
    'SELECT w.id, w.owner, w.fp, w.outcome, w.misses, w.expires_at, w.lease_until, w.fence, NULL::bigint AS now_ms, NULL::bigint AS epoch_ms ' +
    `FROM w UNION ALL ${clockRow(8)}`;
  // The misses of later claims of an id in the same batch (see laterClaims), on the row incarnation they met.
  const missesSql =
    `UPDATE ${table} AS t SET misses = coalesce(t.misses, 0) + u.k, ` +
    `outcome = CASE WHEN coalesce(t.misses, 0) + u.k >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE t.outcome END ` +
    'FROM unnest($2::text[], $3::text[], $4::int[]) AS u(id, owner, k) WHERE t.ns = $1 AND t.id = ANY($2::text[]) AND t.id = u.id AND t.owner = u.owner';
  // record, for a batch of distinct (id, fingerprint) pairs of one budget shard, run under that shard's lock (see
  // recordTexts): $6 is the shard's part of the budget, $7 its key in the budget table, $8 the keys whose bytes count
  // against it (its own and every key of another layout: see budgetCountedKeys). Only the claim's own fingerprint
  // (and, given an owner, only the claim's owner), only once, only while the id is
  // live by the server's clock. An outcome is kept when it is not '' and the outcomes before it in the batch and it
  // fit in what the shard has left (its part of outcomeBudgetBytes minus the bytes of its buckets not yet past); else '' is
  // stored. The kept bytes are added to the bucket of their id's expiry. A record by the owner of an outcome already
  // recorded answers what the first one did (kept or not). The `id = ANY(ids)` conditions keep the table's side an
  // index scan whatever join the planner picks (with a batch of literal values it knows the batch's size, and would
  // otherwise hash-join a sequential scan of the table).
  // The statement waits for no row (it holds the shard's lock, which every record batch of the shard waits for):
  // `l` locks the rows of its ids that no other transaction holds (SKIP LOCKED; the aggregate reads them all), only
  // those are recorded or answered, and the ids of the others come back as `held` (recorded alone afterwards, see
  // recordLockSql).
  // A claim made with an owner and a lease is recorded by that owner only; an unowned claim by any caller.
  const ownerMatch = '(CASE WHEN u.owner IS NULL THEN r.lease_until IS NULL ELSE r.owner = u.owner END)';
  const mine = 'r.id = ANY((SELECT ids FROM l)::text[])';
  // Every row of the batch is looked up by its whole key, one unique-index probe per id (a LATERAL subquery the
  // planner cannot flatten: OFFSET 0, or the locking clause): with `ns = $1 AND id = ANY(ids)` a planner without
  // statistics on the table yet (a new or fast-growing table) scans the namespace's whole index range by ns alone
  // and filters the ids, work that grows with the table. `r`: the batch's rows as this statement sees them.
  const byKey = (select: string) =>
    `unnest($2::text[]) AS q(id) CROSS JOIN LATERAL (SELECT ${select} FROM ${table} WHERE ns = $1 AND id = q.id`;
  const recordBatchSql =
    `WITH n AS (SELECT ${SERVER_NOW_MS} AS now_ms), ` +
    `l AS (SELECT coalesce(array_agg(x.id), '{}') AS ids FROM ${byKey('id')} FOR UPDATE SKIP LOCKED) AS x), ` +
    'u AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(id, fp, outcome, owner, ord)), ' +
    `r AS (SELECT t.* FROM ${byKey('*')} OFFSET 0) AS t), ` +
    'c AS (SELECT u.id, u.outcome, r.owner, sum(octet_length(u.outcome)) OVER (ORDER BY u.ord) AS run ' +
    `FROM u JOIN r ON r.id = u.id AND ${mine} AND r.fp = u.fp AND ${ownerMatch} ` +
    'AND r.outcome IS NULL AND r.expires_at >= (SELECT now_ms FROM n)), ' +
    `room AS (SELECT $6::bigint - coalesce(sum(b.bytes), 0) AS left_bytes FROM ${budgetTable} AS b WHERE b.ns = ANY($8::text[]) AND b.bucket >= (SELECT now_ms FROM n) / ${BUDGET_BUCKET_MS}), ` +
    `upd AS (UPDATE ${table} AS t SET outcome = CASE WHEN c.outcome <> '' AND c.run <= (SELECT left_bytes FROM room) THEN c.outcome ELSE '' END ` +
    'FROM c WHERE t.ns = $1 AND t.id = ANY($2::text[]) AND t.id = c.id AND t.owner IS NOT DISTINCT FROM c.owner AND t.outcome IS NULL ' +
    'AND t.expires_at >= (SELECT now_ms FROM n) RETURNING t.id, t.fp, t.outcome, t.expires_at), ' +
    `bump AS (INSERT INTO ${budgetTable} AS b (ns, bucket, bytes) SELECT $7::text, upd.expires_at / ${BUDGET_BUCKET_MS}, sum(octet_length(upd.outcome)) ` +
    `FROM upd WHERE upd.outcome <> '' GROUP BY upd.expires_at / ${BUDGET_BUCKET_MS} ` +
    'ON CONFLICT (ns, bucket) DO UPDATE SET bytes = b.bytes + EXCLUDED.bytes) ' +
    "SELECT upd.id, upd.fp, upd.outcome <> '' AS kept, false AS held FROM upd UNION ALL " +
    `SELECT r.id, r.fp, r.outcome <> '', false FROM u JOIN r ON r.id = u.id AND ${mine} AND r.fp = u.fp ` +
    'AND u.owner IS NOT NULL AND r.owner = u.owner AND r.outcome IS NOT NULL UNION ALL ' +
    `SELECT r.id, NULL, NULL, true FROM r WHERE NOT ${mine}`;
  // A held id's records run alone: their transaction first waits for the id's row (lock_timeout), and only then takes
  // the shard's lock, so no transaction waits for a row while it holds that lock.
  const recordLockSql = `SELECT 1 FROM ${table} WHERE ns = $1 AND id = $2 FOR UPDATE`;
  // What a claim or record whose reply was lost asks (with the server's time, to judge the rows by).
  const rowsSql = `SELECT id, owner, fp, outcome, expires_at, lease_until, fence, ${SERVER_NOW_MS} AS now_ms FROM ${table} WHERE ns = $1 AND id = ANY($2::text[])`;
  // After a batch statement gave up on a lock: which of its ids' rows another transaction holds locked (SKIP LOCKED
  // takes the free ones and waits for none; autocommit releases them at once).
  const lockedSql =
    `WITH free AS (SELECT id FROM ${table} WHERE ns = $1 AND id = ANY($2::text[]) FOR UPDATE SKIP LOCKED) ` +
    `SELECT id FROM ${table} WHERE ns = $1 AND id = ANY($2::text[]) AND id NOT IN (SELECT id FROM free)`;
  // renew: the owner's unrecorded claim, live, gets a lease of $4 ms from the server's now (a lapsed lease too).
  const renewSql =
    `UPDATE ${table} SET lease_until = ${SERVER_NOW_MS} + $4::bigint ` +
    `WHERE ns = $1 AND id = $2 AND owner = $3 AND fp IS NOT NULL AND outcome IS NULL AND expires_at >= ${SERVER_NOW_MS}`;
  // release: compare-and-delete of the owner's unrecorded claim; true when the owner holds no claim afterwards (it was
  // deleted now, or no live row holds the id), false when another owner's claim or an outcome holds it.
  const releaseSql =
    `WITH d AS (DELETE FROM ${table} WHERE ns = $1 AND id = $2 AND owner = $3 AND fp IS NOT NULL AND outcome IS NULL RETURNING id) ` +
    `SELECT EXISTS (SELECT 1 FROM d) OR NOT EXISTS (SELECT 1 FROM ${table} WHERE ns = $1 AND id = $2 AND expires_at >= ${SERVER_NOW_MS}) AS free`;
  // SKIP LOCKED: never wait for (or make a consume wait on) a row another transaction holds; FOR UPDATE re-checks the
  // expiry on a row a concurrent consume has just renewed. Expiry and retention by the server's clock.
  const purgeSql =
    `WITH n AS (SELECT ${SERVER_NOW_MS} - $1::bigint AS before) DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} ` +
    'WHERE expires_at < (SELECT before FROM n) ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND expires_at < (SELECT before FROM n)';
  // Budget buckets the server's clock has left (every namespace): they no longer count; a small table.
  const purgeBudgetSql = `DELETE FROM ${budgetTable} WHERE bucket < (${SERVER_NOW_MS} - $1::bigint) / ${BUDGET_BUCKET_MS}`;
  const named = namer(prepared);
  return {
    consume: named(consumeSql('(VALUES ($2::text, $3::bigint, $4::text, $5::bigint))')),
    owner: named(ownerSql),
    batch: named(consumeSql('unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[])')),
    owners: named(ownersSql),
    claimBatch: named(claimBatchSql),
    misses: named(missesSql),
    rows: named(rowsSql),
    locked: named(lockedSql),
    renew: named(renewSql),
    release: named(releaseSql),
    time: named(`SELECT ${SERVER_NOW_MS} AS now_ms`),
    // The namespace's ledger epoch: written with the server's time when missing, then read (one statement).
    ledgerEpoch: named(
      `WITH e AS (INSERT INTO ${epochTable} AS e (ns, epoch_ms) VALUES ($1::text, ${SERVER_NOW_MS}) ON CONFLICT (ns) DO NOTHING RETURNING e.epoch_ms) ` +
        `SELECT coalesce((SELECT epoch_ms FROM e), (SELECT x.epoch_ms FROM ${epochTable} AS x WHERE x.ns = $1)) AS epoch_ms`,
    ),
    purge: named(purgeSql),
    purgeBudget: named(purgeBudgetSql),
    recordBatchSql,
    recordLockSql,
  };
}
