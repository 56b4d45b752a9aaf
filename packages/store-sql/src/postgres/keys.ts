import { applyKeyFingerprintOffer, fleetKeysFull, type KeyFingerprint, MAX_FLEET_KEYS, parseKeyFingerprintOffer } from '@mrtr/core/store';
import type { PgPoolLike } from '../shared/drivers.js';
import { storeCall } from '../shared/lifecycle.js';
import type { PostgresSettings } from './connection.js';
import { SERVER_NOW_MS } from './statements.js';
import { withClient } from './tasks.js';

/** Arbitrary 32-bit class id ("mrtf") for `pg_advisory_xact_lock(int, int)`: a namespace's key fingerprints. */
const KEYS_LOCK_CLASS = 0x6d727466;

/** What the exchange needs of its store. */
export interface KeyExchangeContext {
  readonly namespace: string;
  /** The quoted, possibly schema-qualified `<table>_keys`. */
  readonly keysTable: string;
  readonly settings: PostgresSettings;
  /** The pool once it exists and the schema is ensured. */
  ready(): Promise<PgPoolLike>;
  assertOpen(): void;
  /** Bounds the whole exchange by the store's deadline. */
  bounded<T>(work: Promise<T>): Promise<T>;
}

/**
 * `keyFingerprints` on PostgreSQL: one transaction under the namespace's advisory lock (so that two instances'
 * exchanges take turns, and the bound of 256 holds), judged by the server's clock — the namespace's expired rows are
 * deleted, its live rows read, the offer applied by the contract's rules (`applyKeyFingerprintOffer`), the new and
 * extended rows upserted. Running it twice answers as once (a retry after a lost reply is safe).
 */
export function keyFingerprintsOf(ctx: KeyExchangeContext): (offer: readonly KeyFingerprint[]) => Promise<KeyFingerprint[]> {
  const { keysTable, namespace, settings } = ctx;
  const readSql =
    `WITH gone AS (DELETE FROM ${keysTable} WHERE ns = $1 AND expires_at <= $2) ` +
    `SELECT kid, fp, expires_at FROM ${keysTable} WHERE ns = $1 AND expires_at > $2 ORDER BY kid LIMIT ${MAX_FLEET_KEYS + 1}`;
  const writeSql =
    `INSERT INTO ${keysTable} AS t (ns, kid, fp, expires_at) SELECT $1::text, u.kid, u.fp, u.exp ` +
    'FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(kid, fp, exp) ' +
    'ON CONFLICT (ns, kid) DO UPDATE SET fp = EXCLUDED.fp, expires_at = EXCLUDED.expires_at';
  const exchange = async (offer: readonly KeyFingerprint[]) =>
    withClient(await ctx.ready(), settings, true, async (query) => {
      await query({ text: 'SELECT pg_advisory_xact_lock($1, hashtext($2))', values: [KEYS_LOCK_CLASS, `${keysTable} ${namespace}`] });
      const clock = (await query({ text: `SELECT ${SERVER_NOW_MS} AS now_ms` })).rows[0] as { now_ms?: unknown } | undefined;
      const now = Number(clock?.now_ms);
      if (!Number.isSafeInteger(now)) throw new Error('keyFingerprints: the server returned no time');
      const rows = (await query({ text: readSql, values: [namespace, now] })).rows as { kid: string; fp: string; expires_at: unknown }[];
      const held = rows.map((r) => ({ kid: r.kid, fingerprint: r.fp, expiresAtMs: Number(r.expires_at) }));
      const applied = applyKeyFingerprintOffer(held, offer, now);
      if (applied === undefined || applied.writes.length === 0) return applied;
      const { writes } = applied;
      const values = [namespace, writes.map((w) => w.kid), writes.map((w) => w.fingerprint), writes.map((w) => w.expiresAtMs)];
      await query({ text: writeSql, values });
      return applied;
    });
  return async (offer) => {
    const checked = parseKeyFingerprintOffer(offer);
    ctx.assertOpen();
    const answer = await storeCall(() => ctx.bounded(exchange(checked)));
    if (answer === undefined) throw fleetKeysFull();
    return answer.records;
  };
}
