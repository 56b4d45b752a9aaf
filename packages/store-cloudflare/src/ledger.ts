// The replay ledger inside a Durable Object: one row per held id, judged by the object's own clock.
import { applyKeyFingerprintOffer, MAX_FLEET_KEYS } from '@mrtr/core/store';
import type { SqlStorageLike } from './binding.js';
import { BadRequest, count, fields, flag, maybeNum, maybeStr, type Message, num, str } from './message.js';

/** Expired rows dropped by every write: the ledger shrinks twice as fast as it grows, with no timer. */
export const PURGE_PER_WRITE = 2;
/** Expired rows dropped at most when the object is full, before it refuses (one bounded batch). */
export const PURGE_WHEN_FULL = 256;
const MAX_FINGERPRINT_MISSES = 3;

/** A counter of `mrtr_meta` (0 when absent). */
export const meta = (sql: SqlStorageLike, key: string): number =>
  Number(sql.exec('SELECT v FROM mrtr_meta WHERE k = ?', key).toArray()[0]?.v ?? 0);
export const bump = (sql: SqlStorageLike, key: string, by: number): void => {
  if (by !== 0) sql.exec('UPDATE mrtr_meta SET v = v + ? WHERE k = ?', by, key);
};

interface IdRow {
  exp: number;
  owner: string;
  fp: string | null;
  misses: number;
  outcome: string | null;
  osize: number;
  rowner: string | null;
  lease: number | null;
  fence: number;
  rkept: number | null;
  owned: number;
}

/**
 * What a held id answers a claim with this fingerprint at `t` (the claim's own state machine, without its side
 * effects): an unrecorded claim is `pending` while its lease runs (or when it has none), `unknown` once it lapsed.
 */
function claimStatus(row: IdRow, fp: string, t: number): Message {
  if (row.fp === null || row.fp !== fp) return { status: 'replayed' };
  if (row.outcome === null) {
    if (row.lease === null) return { status: 'pending' };
    return row.lease > t ? { status: 'pending', leaseLeftMs: row.lease - t } : { status: 'unknown' };
  }
  return row.outcome === '' ? { status: 'replayed' } : { status: 'recorded', outcome: row.outcome };
}

/**
 * The ledger's operations, each run by the object inside one `transactionSync`. Every decision is taken at `now()`,
 * the object's clock, read once per request: expiry, leases and the epoch (the `mrtr_meta` row `epoch`, written with
 * that clock by the first spend that finds it missing — a new object, or one whose storage was deleted).
 */
export class ReplayLedger {
  readonly #sql: SqlStorageLike;
  readonly #now: () => number;

  constructor(sql: SqlStorageLike, now: () => number) {
    this.#sql = sql;
    this.#now = now;
  }

  /** The answer to one ledger request, or `undefined` when `op` is not the ledger's. */
  handle(op: unknown, m: Message): Message | undefined {
    const t = this.#now();
    switch (op) {
      case 'consume':
        return this.#take(m, null, t);
      case 'claim':
        return this.#take(m, str(m, 'fp'), t);
      case 'record':
        return this.#record(m, t);
      case 'inspect':
        return this.#inspect(m, t);
      case 'renew':
        return this.#renew(m, t);
      case 'release':
        return this.#release(m, t);
      case 'time':
        return { now: t, epoch: this.#epoch(t) };
      case 'epoch':
        return { epoch: this.#epoch(t) }; // `ledgerEpoch`: written when missing, never moved
      case 'keys':
        return this.#keys(m, t);
      default:
        return undefined;
    }
  }

  /**
   * `keyFingerprints` (shard 0 of a replay store): the expired rows dropped, the offer (`[kid, fingerprint,
   * expiresAtMs]` each, checked by the client) applied to the live rows by the contract's rules, the new or extended
   * rows written; answers every live record, or `full` (nothing written) when a new kid would pass 256.
   */
  #keys(m: Message, t: number): Message {
    const offer = m.offer;
    if (!Array.isArray(offer) || offer.length > MAX_FLEET_KEYS) throw new BadRequest('offer must be an array of at most 256 records');
    const records = offer.map((r: unknown) => {
      if (!Array.isArray(r) || typeof r[0] !== 'string' || typeof r[1] !== 'string' || typeof r[2] !== 'number' || !Number.isFinite(r[2]))
        throw new BadRequest('each record must be [kid, fingerprint, expiresAtMs]');
      return { kid: r[0], fingerprint: r[1], expiresAtMs: r[2] };
    });
    this.#sql.exec('DELETE FROM mrtr_keys WHERE exp <= ?', t);
    const held = this.#sql
      .exec('SELECT kid, fp, exp FROM mrtr_keys ORDER BY kid LIMIT ?', MAX_FLEET_KEYS + 1)
      .toArray()
      .map((row) => ({ kid: String(row.kid), fingerprint: String(row.fp), expiresAtMs: Number(row.exp) }));
    const applied = applyKeyFingerprintOffer(held, records, t);
    if (applied === undefined) return { full: true };
    for (const w of applied.writes) {
      this.#sql.exec(
        'INSERT INTO mrtr_keys (kid, fp, exp) VALUES (?, ?, ?) ON CONFLICT (kid) DO UPDATE SET fp = excluded.fp, exp = excluded.exp',
        w.kid,
        w.fingerprint,
        w.expiresAtMs,
      );
    }
    return { records: applied.records.map((r) => [r.kid, r.fingerprint, r.expiresAtMs]) };
  }

  /** When this object's ledger began: the epoch row, written with `t` when missing. */
  #epoch(t: number): number {
    const row = this.#sql.exec("SELECT v FROM mrtr_meta WHERE k = 'epoch'").toArray()[0];
    if (row !== undefined) return Number(row.v);
    this.#sql.exec("INSERT INTO mrtr_meta (k, v) VALUES ('epoch', ?)", t);
    return t;
  }

  /** Drops up to `limit` ids expired before `t` (oldest first, through the expiry index), and their outcomes' bytes. */
  #purge(t: number, limit: number): void {
    const gone = this.#sql
      .exec('DELETE FROM mrtr_ids WHERE rowid IN (SELECT rowid FROM mrtr_ids WHERE exp < ? ORDER BY exp LIMIT ?) RETURNING osize', t, limit)
      .toArray();
    if (gone.length === 0) return;
    bump(this.#sql, 'ids', -gone.length);
    bump(this.#sql, 'outcome_bytes', -gone.reduce((sum, row) => sum + Number(row.osize), 0));
  }

  /** The row of `id` while it is live at `t`. */
  #live(id: string, t: number): IdRow | undefined {
    const row = this.#sql
      .exec('SELECT exp, owner, fp, misses, outcome, osize, rowner, lease, fence, rkept, owned FROM mrtr_ids WHERE id = ?', id)
      .toArray()[0] as IdRow | undefined;
    return row !== undefined && row.exp >= t ? row : undefined;
  }

  #drop(id: string): void {
    const gone = this.#sql.exec('DELETE FROM mrtr_ids WHERE id = ? RETURNING osize', id).toArray()[0];
    if (gone === undefined) return;
    bump(this.#sql, 'ids', -1);
    bump(this.#sql, 'outcome_bytes', -Number(gone.osize));
  }

  /**
   * `consume` (fp null) and `claim`: refuses a state minted before the epoch (`lost`); answers how a live id is held
   * (a lapsed lease taken over on `reclaim`); takes a free id, unless the expiry is not after `t` (`expired`: never
   * written with a past expiry, never a first use).
   */
  #take(m: Message, fp: string | null, t: number): Message {
    const { id, exp, owner, max, minted, leaseMs, owned } = fields(m, {
      id: str,
      exp: num,
      owner: str,
      max: count,
      minted: maybeNum,
      leaseMs: maybeNum,
      owned: flag,
    });
    const epoch = this.#epoch(t); // written by every spend that finds it missing, with or without mintedAtMs
    if (minted !== null && minted < epoch) return { lost: true };
    const lease = leaseMs === null ? null : t + leaseMs;
    const row = this.#live(id, t);
    if (row !== undefined) {
      this.#purge(t, PURGE_PER_WRITE);
      if (fp === null) return { taken: false };
      if (row.fp !== null && row.fp !== fp) return this.#miss(id, row, fp, t);
      if (m.reclaim === true && exp > t && row.outcome === null && row.lease !== null && row.lease <= t) {
        this.#sql.exec('UPDATE mrtr_ids SET owner = ?, lease = ?, fence = fence + 1 WHERE id = ?', owner, lease, id);
        return { status: 'first', fence: row.fence + 1 };
      }
      return claimStatus(row, fp, t);
    }
    if (exp <= t) return { expired: true };
    this.#drop(id); // an expired row of the same id
    if (meta(this.#sql, 'ids') >= max) {
      this.#purge(t, PURGE_WHEN_FULL);
      if (meta(this.#sql, 'ids') >= max) return { full: true };
    }
    this.#sql.exec(
      'INSERT INTO mrtr_ids (id, exp, owner, fp, lease, owned) VALUES (?, ?, ?, ?, ?, ?)',
      id,
      exp,
      owner,
      fp,
      lease,
      owned && fp !== null ? 1 : 0,
    );
    bump(this.#sql, 'ids', 1);
    this.#purge(t, PURGE_PER_WRITE);
    return fp === null ? { taken: true } : { status: 'first', fence: 0 };
  }

  /** A claim with another fingerprint: the third drops the outcome, recorded or to come (no oracle for the answers). */
  #miss(id: string, row: IdRow, fp: string, t: number): Message {
    const misses = row.misses + 1;
    if (misses >= MAX_FINGERPRINT_MISSES && row.outcome !== '') {
      this.#sql.exec("UPDATE mrtr_ids SET misses = ?, outcome = '', osize = 0 WHERE id = ?", misses, id);
      bump(this.#sql, 'outcome_bytes', -row.osize);
    } else {
      this.#sql.exec('UPDATE mrtr_ids SET misses = ? WHERE id = ?', misses, id);
    }
    return claimStatus(row, fp, t);
  }

  /**
   * Stores the outcome of an unrecorded claim of `fp` (with `owner`: only the claim's owner's, and a second record
   * by that owner answers what the first did). `rowner` is the record call's owner value (the owner, when given).
   */
  #record(m: Message, t: number): Message {
    const { id, fp, outcome, maxOutcome, budget, rowner, owner } = fields(m, {
      id: str,
      fp: str,
      outcome: str,
      maxOutcome: count,
      budget: count,
      rowner: str,
      owner: maybeStr,
    });
    const row = this.#live(id, t);
    if (row === undefined || row.fp !== fp) return { stored: false };
    if (row.outcome !== null) return { stored: owner !== null && row.rowner === owner && row.rkept === 1 };
    if (owner === null ? row.owned === 1 : row.owner !== owner) return { stored: false }; // an owned claim: its owner only
    let kept = outcome.length <= maxOutcome;
    if (kept && meta(this.#sql, 'outcome_bytes') + outcome.length > budget) {
      this.#purge(t, PURGE_WHEN_FULL);
      kept = meta(this.#sql, 'outcome_bytes') + outcome.length <= budget;
    }
    const value = kept ? outcome : '';
    this.#sql.exec(
      'UPDATE mrtr_ids SET outcome = ?, osize = ?, rowner = ?, rkept = ? WHERE id = ?',
      value,
      value.length,
      rowner,
      value === '' ? 0 : 1,
      id,
    );
    bump(this.#sql, 'outcome_bytes', value.length);
    return { stored: value !== '' };
  }

  /** Extends the lease of `owner`'s unrecorded claim to `leaseMs` from now (a lapsed one too, if nobody took it over). */
  #renew(m: Message, t: number): Message {
    const { id, owner, leaseMs } = fields(m, { id: str, owner: str, leaseMs: count });
    const row = this.#live(id, t);
    if (row === undefined || row.owner !== owner || row.outcome !== null) return { renewed: false };
    this.#sql.exec('UPDATE mrtr_ids SET lease = ? WHERE id = ?', t + leaseMs, id);
    return { renewed: true };
  }

  /** Compare-and-delete: frees `id` when `owner` holds an unrecorded claim of it; true when `owner` holds none after. */
  #release(m: Message, t: number): Message {
    const { id, owner } = fields(m, { id: str, owner: str });
    const row = this.#live(id, t);
    if (row === undefined) return { released: true };
    if (row.owner !== owner || row.outcome !== null) return { released: false };
    this.#drop(id);
    return { released: true };
  }

  /** For a reply that never arrived: who holds the id, what a claim with `fp` would answer now, the clock and epoch. */
  #inspect(m: Message, t: number): Message {
    const { id, fp } = fields(m, { id: str, fp: str });
    const row = this.#live(id, t);
    const clock = { now: t, epoch: this.#epoch(t) };
    if (row === undefined) return { owner: null, ...clock };
    const status = claimStatus(row, fp, t);
    const held = { owner: row.owner, rowner: row.rowner, kept: row.rkept === 1, owned: row.owned === 1, fence: row.fence };
    return { ...held, ...clock, ...status };
  }
}
