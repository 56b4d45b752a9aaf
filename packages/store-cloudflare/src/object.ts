import { roomFromAtLeast } from '@mrtr/core/tasks';
import type { DurableObjectStateLike, SqlStorageLike } from './binding.js';
import { bump, meta, PURGE_PER_WRITE, PURGE_WHEN_FULL, ReplayLedger } from './ledger.js';
import { BadRequest, count, fields, flag, type Message, num, str } from './message.js';
import { optionsObject } from '@mrtr/core/options';

/** Largest request body the object reads (a task record of up to 1 MiB, JSON-quoted, plus its fields). */
const MAX_BODY_CHARS = 4 * 1024 * 1024;

const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS mrtr_meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`,
  `INSERT OR IGNORE INTO mrtr_meta (k, v) VALUES ('ids', 0), ('outcome_bytes', 0), ('tasks', 0)`,
  // One row per held id: its expiry, the owner value of the call that took it, and for a claim its fingerprint,
  // misses and outcome (NULL: not recorded yet; '': done, not kept) with the owner value of the record call.
  // With a lease: `lease` (when it lapses, by the object's clock; NULL: no lease) and `fence` (reclaims so far);
  // `rkept` (1: the record call kept its outcome) answers a second record by the same owner; `owned` (1: claimed
  // with the caller's owner) lets only that owner record.
  `CREATE TABLE IF NOT EXISTS mrtr_ids (id TEXT PRIMARY KEY, exp REAL NOT NULL, owner TEXT NOT NULL, fp TEXT,
     misses INTEGER NOT NULL DEFAULT 0, outcome TEXT, osize INTEGER NOT NULL DEFAULT 0, rowner TEXT,
     lease REAL, fence INTEGER NOT NULL DEFAULT 0, rkept INTEGER, owned INTEGER NOT NULL DEFAULT 0)`,
  `CREATE INDEX IF NOT EXISTS mrtr_ids_exp ON mrtr_ids (exp)`,
  `CREATE TABLE IF NOT EXISTS mrtr_tasks (task_id TEXT PRIMARY KEY, principal TEXT NOT NULL, final INTEGER NOT NULL,
     final_at REAL NOT NULL, expires REAL NOT NULL, version TEXT NOT NULL, body TEXT NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS mrtr_tasks_principal ON mrtr_tasks (principal, expires)`,
  `CREATE INDEX IF NOT EXISTS mrtr_tasks_expires ON mrtr_tasks (expires)`,
  `CREATE INDEX IF NOT EXISTS mrtr_tasks_finals ON mrtr_tasks (principal, final, final_at)`,
  // The fleet check's key fingerprints (the replay store's shard 0 only): one row per kid, until `exp` (object's clock).
  `CREATE TABLE IF NOT EXISTS mrtr_keys (kid TEXT PRIMARY KEY, fp TEXT NOT NULL, exp REAL NOT NULL)`,
  `CREATE TABLE IF NOT EXISTS mrtr_holders (principal TEXT PRIMARY KEY, total INTEGER NOT NULL, live INTEGER NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS mrtr_holders_total ON mrtr_holders (total)`,
];

/** Columns added to `mrtr_ids` since its first version: an object created before gets them on start. */
const ADDED_COLUMNS: readonly (readonly [string, string])[] = [
  ['lease', 'lease REAL'],
  ['fence', 'fence INTEGER NOT NULL DEFAULT 0'],
  ['rkept', 'rkept INTEGER'],
  ['owned', 'owned INTEGER NOT NULL DEFAULT 0'],
];
/** The columns added with epochs: an object missing them kept ids before epochs were. */
const EPOCH_ERA = new Set(['lease', 'fence', 'rkept']);

/** Options of {@link MrtrStoreObject} beyond what the runtime passes (for tests, through a subclass). */
export interface MrtrStoreObjectOptions {
  /** The object's clock (ms since the epoch) for the replay ledger. @default Date.now */
  now?: (() => number) | undefined;
}

/**
 * The Durable Object behind `@mrtr/store-cloudflare`: export it from your Worker and bind it (SQLite-backed:
 * `new_sqlite_classes` in `wrangler.jsonc`). One class keeps both the replay ledger and the tasks; each store
 * uses its own objects, named after its kind, namespace and shard.
 *
 * Every request is applied inside one `transactionSync`, with no `await` between its reads and its writes:
 * atomic and isolated (a failure rolls it back whole). The replay ledger runs on the object's own clock (`Date.now()`
 * inside the object: expiry, leases, the epoch); the tasks on the caller's (`t` in each request). Requests come only
 * from the store clients of this package, through the binding.
 */
export class MrtrStoreObject {
  readonly #sql: SqlStorageLike;
  readonly #state: DurableObjectStateLike;
  readonly #ledger: ReplayLedger;

  constructor(state: DurableObjectStateLike, _env?: unknown, options: MrtrStoreObjectOptions = {}) {
    const sql = (state as Partial<DurableObjectStateLike> | undefined)?.storage?.sql;
    if (sql === undefined || typeof sql.exec !== 'function') {
      throw new TypeError(
        'MrtrStoreObject: needs SQLite-backed storage (declare the class under `new_sqlite_classes` in the migrations of wrangler.jsonc)',
      );
    }
    options = optionsObject('MrtrStoreObject', options, { now: true });
    const now = options.now ?? Date.now;
    if (typeof now !== 'function') throw new TypeError('MrtrStoreObject: options.now must be a function');
    this.#state = state;
    this.#sql = sql;
    state.storage.transactionSync(() => {
      for (const statement of SCHEMA) sql.exec(statement);
      const columns = new Set(
        sql
          .exec('PRAGMA table_info(mrtr_ids)')
          .toArray()
          .map((column) => column.name),
      );
      const missing = ADDED_COLUMNS.filter(([name]) => !columns.has(name));
      for (const [, definition] of missing) sql.exec(`ALTER TABLE mrtr_ids ADD COLUMN ${definition}`);
      // The ledger began now, unless this object kept one before epochs were (its ids are all there: epoch 0).
      const beforeEpochs = missing.some(([name]) => EPOCH_ERA.has(name));
      sql.exec("INSERT OR IGNORE INTO mrtr_meta (k, v) VALUES ('epoch', ?)", beforeEpochs ? 0 : now());
    });
    this.#ledger = new ReplayLedger(sql, now);
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
      case 'tcreate':
        return this.#createTask(m);
      case 'tget':
        return this.#getTask(m);
      case 'tput':
        return this.#putTask(m);
    }
    const answer = this.#ledger.handle(m.op, m);
    if (answer === undefined) throw new BadRequest('unknown op');
    return answer;
  }

  // ------------------------------------------------------------------------------------------------- tasks

  /** Drops a task row and its place in its holder's counts. */
  #dropTask(taskId: string, principal: string, final: boolean): void {
    this.#sql.exec('DELETE FROM mrtr_tasks WHERE task_id = ?', taskId);
    this.#sql.exec('UPDATE mrtr_holders SET total = total - 1, live = live - ? WHERE principal = ?', final ? 0 : 1, principal);
    this.#sql.exec('DELETE FROM mrtr_holders WHERE principal = ? AND total <= 0', principal);
    bump(this.#sql, 'tasks', -1);
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
    if (meta(this.#sql, 'tasks') >= maxTasks) {
      this.#purgeTasks(t, PURGE_WHEN_FULL);
      if (meta(this.#sql, 'tasks') >= maxTasks && !this.#makeRoom(principal, total)) return { error: 'store', max: maxTasks };
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
    bump(this.#sql, 'tasks', 1);
    return { created: true };
  }

  /**
   * Full: drops the oldest final task of the principal holding the most tasks among those holding a final one and
   * keeping at least `roomFromAtLeast` of the newcomer's `total`, or of the newcomer (`principal`) itself.
   */
  #makeRoom(principal: string, total: number): boolean {
    const heaviest = this.#sql
      .exec(
        'SELECT principal FROM mrtr_holders WHERE total > live AND (principal = ? OR total >= ?) ORDER BY total DESC LIMIT 1',
        principal,
        roomFromAtLeast(total),
      )
      .toArray()[0];
    if (heaviest === undefined) return false;
    const holder = String(heaviest.principal);
    const oldest = this.#sql
      .exec('SELECT task_id FROM mrtr_tasks WHERE principal = ? AND final = 1 ORDER BY final_at LIMIT 1', holder)
      .toArray()[0];
    if (oldest === undefined) return false;
    this.#dropTask(String(oldest.task_id), holder, true);
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
