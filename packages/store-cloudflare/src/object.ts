import type { DurableObjectStateLike, SqlStorageLike } from './binding.js';

/** Largest request body the object reads (a task record of up to 1 MiB, JSON-quoted, plus its fields). */
const MAX_BODY_CHARS = 4 * 1024 * 1024;
/** Expired rows dropped by every write: the ledger shrinks twice as fast as it grows, with no timer. */
const PURGE_PER_WRITE = 2;
/** Expired rows dropped at most when the object is full, before it refuses (one bounded batch). */
const PURGE_WHEN_FULL = 256;
const MAX_FINGERPRINT_MISSES = 3;

const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS mrtr_meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`,
  `INSERT OR IGNORE INTO mrtr_meta (k, v) VALUES ('ids', 0), ('outcome_bytes', 0), ('tasks', 0)`,
  // One row per held id: its expiry, the owner value of the call that took it, and for a claim its fingerprint,
  // misses and outcome (NULL: not recorded yet; '': done, not kept) with the owner value of the record call.
  `CREATE TABLE IF NOT EXISTS mrtr_ids (id TEXT PRIMARY KEY, exp REAL NOT NULL, owner TEXT NOT NULL, fp TEXT,
     misses INTEGER NOT NULL DEFAULT 0, outcome TEXT, osize INTEGER NOT NULL DEFAULT 0, rowner TEXT)`,
  `CREATE INDEX IF NOT EXISTS mrtr_ids_exp ON mrtr_ids (exp)`,
  `CREATE TABLE IF NOT EXISTS mrtr_tasks (task_id TEXT PRIMARY KEY, principal TEXT NOT NULL, final INTEGER NOT NULL,
     final_at REAL NOT NULL, expires REAL NOT NULL, version TEXT NOT NULL, body TEXT NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS mrtr_tasks_principal ON mrtr_tasks (principal, expires)`,
  `CREATE INDEX IF NOT EXISTS mrtr_tasks_expires ON mrtr_tasks (expires)`,
  `CREATE INDEX IF NOT EXISTS mrtr_tasks_finals ON mrtr_tasks (principal, final, final_at)`,
  `CREATE TABLE IF NOT EXISTS mrtr_holders (principal TEXT PRIMARY KEY, total INTEGER NOT NULL, live INTEGER NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS mrtr_holders_total ON mrtr_holders (total)`,
];

/** A request the object cannot act on (answered 400; nothing was written). */
class BadRequest extends Error {}

type Message = Record<string, unknown>;
const str = (m: Message, key: string): string => {
  const v = m[key];
  if (typeof v !== 'string') throw new BadRequest(`${key} must be a string`);
  return v;
};
const num = (m: Message, key: string): number => {
  const v = m[key];
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new BadRequest(`${key} must be a finite number`);
  return v;
};
const count = (m: Message, key: string): number => {
  const v = num(m, key);
  if (!Number.isSafeInteger(v) || v < 0) throw new BadRequest(`${key} must be a non-negative integer`);
  return v;
};
const flag = (m: Message, key: string): boolean => m[key] === true;
type Reader = (m: Message, key: string) => unknown;
/** The fields of a request that `spec` names, each read (and checked, in this order) by its reader. */
function fields<S extends Record<string, Reader>>(m: Message, spec: S): { [K in keyof S]: ReturnType<S[K]> } {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(spec)) out[key] = (spec[key] as Reader)(m, key);
  return out as { [K in keyof S]: ReturnType<S[K]> };
}

interface IdRow {
  exp: number;
  owner: string;
  fp: string | null;
  misses: number;
  outcome: string | null;
  osize: number;
  rowner: string | null;
}

/** What a held id answers a claim with this fingerprint (the claim's own state machine, without its side effects). */
function claimStatus(row: IdRow, fp: string): Message {
  if (row.fp === null || row.fp !== fp) return { status: 'replayed' };
  if (row.outcome === null) return { status: 'pending' };
  return row.outcome === '' ? { status: 'replayed' } : { status: 'recorded', outcome: row.outcome };
}

/**
 * The Durable Object behind `@mrtr/store-cloudflare`: export it from your Worker and bind it (SQLite-backed:
 * `new_sqlite_classes` in `wrangler.jsonc`). One class keeps both the replay ledger and the tasks; each store
 * uses its own objects, named after its kind, namespace and shard.
 *
 * Every request is applied inside one `transactionSync`, with no `await` between its reads and its writes:
 * atomic and isolated (a failure rolls it back whole). Time is the caller's clock (`t` in each request),
 * as with the SQL stores. Requests come only from the store clients of this package, through the binding.
 */
export class MrtrStoreObject {
  readonly #sql: SqlStorageLike;
  readonly #state: DurableObjectStateLike;

  constructor(state: DurableObjectStateLike, _env?: unknown) {
    const sql = (state as Partial<DurableObjectStateLike> | undefined)?.storage?.sql;
    if (sql === undefined || typeof sql.exec !== 'function') {
      throw new TypeError(
        'MrtrStoreObject: needs SQLite-backed storage (declare the class under `new_sqlite_classes` in the migrations of wrangler.jsonc)',
      );
    }
    this.#state = state;
    this.#sql = sql;
    state.storage.transactionSync(() => {
      for (const statement of SCHEMA) sql.exec(statement);
    });
  }

  async fetch(request: Request): Promise<Response> {
    if (request.method !== 'POST') return new Response('method not allowed', { status: 405 });
    const text = await request.text();
    if (text.length > MAX_BODY_CHARS) return new Response('request too large', { status: 413 });
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      return new Response('malformed request', { status: 400 });
    }
    if (message === null || typeof message !== 'object' || Array.isArray(message))
      return new Response('malformed request', { status: 400 });
    try {
      const result = this.#state.storage.transactionSync(() => this.#handle(message as Message));
      return Response.json(result);
    } catch (error) {
      if (error instanceof BadRequest) return new Response(error.message, { status: 400 });
      return new Response('store error', { status: 500 });
    }
  }

  #handle(m: Message): Message {
    switch (m.op) {
      case 'consume':
        return this.#take(m, null);
      case 'claim':
        return this.#take(m, str(m, 'fp'));
      case 'record':
        return this.#record(m);
      case 'inspect':
        return this.#inspect(m);
      case 'tcreate':
        return this.#createTask(m);
      case 'tget':
        return this.#getTask(m);
      case 'tput':
        return this.#putTask(m);
      default:
        throw new BadRequest('unknown op');
    }
  }

  // ------------------------------------------------------------------------------------------ replay ledger

  #meta(key: string): number {
    return Number(this.#sql.exec('SELECT v FROM mrtr_meta WHERE k = ?', key).toArray()[0]?.v ?? 0);
  }
  #bump(key: string, by: number): void {
    if (by !== 0) this.#sql.exec('UPDATE mrtr_meta SET v = v + ? WHERE k = ?', by, key);
  }

  /** Drops up to `limit` ids expired before `t` (oldest first, through the expiry index), and their outcomes' bytes. */
  #purgeIds(t: number, limit: number): void {
    const gone = this.#sql
      .exec('DELETE FROM mrtr_ids WHERE rowid IN (SELECT rowid FROM mrtr_ids WHERE exp < ? ORDER BY exp LIMIT ?) RETURNING osize', t, limit)
      .toArray();
    if (gone.length === 0) return;
    this.#bump('ids', -gone.length);
    this.#bump('outcome_bytes', -gone.reduce((sum, row) => sum + Number(row.osize), 0));
  }

  #row(id: string): IdRow | undefined {
    return this.#sql.exec('SELECT exp, owner, fp, misses, outcome, osize, rowner FROM mrtr_ids WHERE id = ?', id).toArray()[0] as
      | IdRow
      | undefined;
  }

  #dropId(id: string, row: IdRow): void {
    this.#sql.exec('DELETE FROM mrtr_ids WHERE id = ?', id);
    this.#bump('ids', -1);
    this.#bump('outcome_bytes', -row.osize);
  }

  /** `consume` (fp null) and `claim`: takes the id if it is not live, else answers how it is held. */
  #take(m: Message, fp: string | null): Message {
    const { id, exp, t, owner, max } = fields(m, { id: str, exp: num, t: num, owner: str, max: count });
    const row = this.#row(id);
    if (row !== undefined && row.exp >= t) {
      this.#purgeIds(t, PURGE_PER_WRITE);
      if (fp === null) return { taken: false };
      if (row.fp !== null && row.fp !== fp) {
        // A miss: the third drops the outcome, recorded or to come (no oracle for the answers).
        const misses = row.misses + 1;
        if (misses >= MAX_FINGERPRINT_MISSES && row.outcome !== '') {
          this.#sql.exec("UPDATE mrtr_ids SET misses = ?, outcome = '', osize = 0 WHERE id = ?", misses, id);
          this.#bump('outcome_bytes', -row.osize);
        } else {
          this.#sql.exec('UPDATE mrtr_ids SET misses = ? WHERE id = ?', misses, id);
        }
      }
      return claimStatus(row, fp);
    }
    // An expiry not in the future is never remembered, so never a first use.
    if (exp <= t) return fp === null ? { taken: false } : { status: 'replayed' };
    if (row !== undefined) this.#dropId(id, row);
    if (this.#meta('ids') >= max) {
      this.#purgeIds(t, PURGE_WHEN_FULL);
      if (this.#meta('ids') >= max) return { full: true };
    }
    this.#sql.exec('INSERT INTO mrtr_ids (id, exp, owner, fp) VALUES (?, ?, ?, ?)', id, exp, owner, fp);
    this.#bump('ids', 1);
    this.#purgeIds(t, PURGE_PER_WRITE);
    return fp === null ? { taken: true } : { status: 'first' };
  }

  #record(m: Message): Message {
    const { id, fp, outcome, t, maxOutcome, budget, rowner } = fields(m, {
      id: str,
      fp: str,
      outcome: str,
      t: num,
      maxOutcome: count,
      budget: count,
      rowner: str,
    });
    const row = this.#row(id);
    if (row === undefined || row.fp !== fp || row.outcome !== null || row.exp < t) return { stored: false };
    let kept = outcome.length <= maxOutcome;
    if (kept && this.#meta('outcome_bytes') + outcome.length > budget) {
      this.#purgeIds(t, PURGE_WHEN_FULL);
      kept = this.#meta('outcome_bytes') + outcome.length <= budget;
    }
    const value = kept ? outcome : '';
    this.#sql.exec('UPDATE mrtr_ids SET outcome = ?, osize = ?, rowner = ? WHERE id = ?', value, value.length, rowner, id);
    this.#bump('outcome_bytes', value.length);
    return { stored: value !== '' };
  }

  /** For a reply that never arrived: who holds the id, and what a claim with `fp` would answer now. */
  #inspect(m: Message): Message {
    const id = str(m, 'id');
    const fp = str(m, 'fp');
    const t = num(m, 't');
    const row = this.#row(id);
    if (row === undefined || row.exp < t) return { owner: null };
    return { owner: row.owner, rowner: row.rowner, kept: row.outcome !== null && row.outcome !== '', ...claimStatus(row, fp) };
  }

  // ------------------------------------------------------------------------------------------------- tasks

  /** Drops a task row and its place in its holder's counts. */
  #dropTask(taskId: string, principal: string, final: boolean): void {
    this.#sql.exec('DELETE FROM mrtr_tasks WHERE task_id = ?', taskId);
    this.#sql.exec('UPDATE mrtr_holders SET total = total - 1, live = live - ? WHERE principal = ?', final ? 0 : 1, principal);
    this.#sql.exec('DELETE FROM mrtr_holders WHERE principal = ? AND total <= 0', principal);
    this.#bump('tasks', -1);
  }

  /** Drops expired tasks: one principal's (all of them: at most its bound since its last create), or up to `limit` of any. */
  #purgeTasks(t: number, limit: number, principal?: string): void {
    const rows =
      principal === undefined
        ? this.#sql.exec('SELECT task_id, principal, final FROM mrtr_tasks WHERE expires <= ? ORDER BY expires LIMIT ?', t, limit).toArray()
        : this.#sql.exec('SELECT task_id, principal, final FROM mrtr_tasks WHERE principal = ? AND expires <= ?', principal, t).toArray();
    for (const row of rows) this.#dropTask(String(row.task_id), String(row.principal), Number(row.final) === 1);
  }

  #createTask(m: Message): Message {
    const { taskId, principal, final, expires, t, version, body, maxLive, maxKept, maxTasks } = fields(m, {
      taskId: str,
      principal: str,
      final: flag,
      expires: num,
      t: num,
      version: str,
      body: str,
      maxLive: count,
      maxKept: count,
      maxTasks: count,
    });
    this.#purgeTasks(t, PURGE_PER_WRITE);
    this.#purgeTasks(t, 0, principal);
    const existing = this.#sql.exec('SELECT principal, final, expires FROM mrtr_tasks WHERE task_id = ?', taskId).toArray()[0];
    if (existing !== undefined) {
      if (Number(existing.expires) > t) return { error: 'exists' };
      this.#dropTask(taskId, String(existing.principal), Number(existing.final) === 1);
    }
    const holder = this.#sql.exec('SELECT total, live FROM mrtr_holders WHERE principal = ?', principal).toArray()[0];
    const total = Number(holder?.total ?? 0);
    const live = Number(holder?.live ?? 0);
    if (!final && live >= maxLive) return { error: 'live', max: maxLive };
    if (total >= maxKept) return { error: 'kept', max: maxKept };
    if (this.#meta('tasks') >= maxTasks) {
      this.#purgeTasks(t, PURGE_WHEN_FULL);
      if (this.#meta('tasks') >= maxTasks && !this.#makeRoom()) return { error: 'store', max: maxTasks };
    }
    this.#sql.exec(
      'INSERT INTO mrtr_tasks (task_id, principal, final, final_at, expires, version, body) VALUES (?, ?, ?, ?, ?, ?, ?)',
      taskId,
      principal,
      final ? 1 : 0,
      t,
      expires,
      version,
      body,
    );
    this.#sql.exec(
      'INSERT INTO mrtr_holders (principal, total, live) VALUES (?, 1, ?) ON CONFLICT (principal) DO UPDATE SET total = total + 1, live = live + excluded.live',
      principal,
      final ? 0 : 1,
    );
    this.#bump('tasks', 1);
    return { created: true };
  }

  /** Full: drops the oldest final task of the principal holding the most tasks among those holding a final one. */
  #makeRoom(): boolean {
    const heaviest = this.#sql.exec('SELECT principal FROM mrtr_holders WHERE total > live ORDER BY total DESC LIMIT 1').toArray()[0];
    if (heaviest === undefined) return false;
    const principal = String(heaviest.principal);
    const oldest = this.#sql
      .exec('SELECT task_id FROM mrtr_tasks WHERE principal = ? AND final = 1 ORDER BY final_at LIMIT 1', principal)
      .toArray()[0];
    if (oldest === undefined) return false;
    this.#dropTask(String(oldest.task_id), principal, true);
    return true;
  }

  #getTask(m: Message): Message {
    const taskId = str(m, 'taskId');
    const t = num(m, 't');
    const row = this.#sql.exec('SELECT body, version, expires FROM mrtr_tasks WHERE task_id = ?', taskId).toArray()[0];
    if (row === undefined || Number(row.expires) <= t) return { found: false };
    return { found: true, body: row.body, version: row.version };
  }

  /** Compare-and-set of one task: written only when its version is still `version`. */
  #putTask(m: Message): Message {
    const { taskId, version, next, body, final, expires, t } = fields(m, {
      taskId: str,
      version: str,
      next: str,
      body: str,
      final: flag,
      expires: num,
      t: num,
    });
    const row = this.#sql.exec('SELECT principal, final, expires, version FROM mrtr_tasks WHERE task_id = ?', taskId).toArray()[0];
    if (row === undefined || Number(row.expires) <= t) return { put: 'gone' };
    if (row.version === next) return { put: 'ok' }; // this very write already landed (a retried request)
    if (row.version !== version) return { put: 'conflict' };
    const wasFinal = Number(row.final) === 1;
    if (wasFinal && !final) throw new BadRequest('a final task cannot change its status');
    this.#sql.exec(
      'UPDATE mrtr_tasks SET final = ?, final_at = CASE WHEN final = 1 THEN final_at ELSE ? END, expires = ?, version = ?, body = ? WHERE task_id = ?',
      final ? 1 : 0,
      t,
      expires,
      next,
      body,
      taskId,
    );
    if (!wasFinal && final) this.#sql.exec('UPDATE mrtr_holders SET live = live - 1 WHERE principal = ?', String(row.principal));
    return { put: 'ok' };
  }
}
