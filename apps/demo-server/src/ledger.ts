/**
 * The connect ledger: where connect_account (URL-mode elicitation) records a pending link and where the
 * connect page records its outcome. The tool learns completion from here — never from the client's
 * `accept`, which only means consent (spec EL7). It lives in the same backend as the replay store, so
 * with Redis or PostgreSQL any instance of a fleet sees what the page recorded on any other.
 */

export type LinkStatus = 'pending' | 'done' | 'denied';

export interface ConnectLink {
  /** Principal that started the flow (the page checks the visitor is the same principal). */
  principal: string;
  /** What is being connected, e.g. "github". */
  provider: string;
  status: LinkStatus;
  expiresAtMs: number;
}

export interface ConnectLedger {
  /** Records a pending link until `expiresAtMs`. */
  create(nonce: string, link: Omit<ConnectLink, 'status'>): Promise<void>;
  /** The link, or `undefined` when unknown or expired. */
  get(nonce: string): Promise<ConnectLink | undefined>;
  /** Moves a live pending link to `outcome`; `false` when it is unknown, expired or already settled. */
  settle(nonce: string, outcome: 'done' | 'denied'): Promise<boolean>;
  close(): Promise<void>;
}

/** In-process ledger (memory store): one process only. Bounded; expired links are swept on create. */
export function createMemoryLedger(maxLinks = 10_000, now: () => number = Date.now): ConnectLedger {
  const links = new Map<string, ConnectLink>();
  const live = (nonce: string): ConnectLink | undefined => {
    const link = links.get(nonce);
    if (link === undefined) return undefined;
    if (link.expiresAtMs <= now()) {
      links.delete(nonce);
      return undefined;
    }
    return link;
  };
  return {
    async create(nonce, link) {
      if (links.size >= maxLinks) {
        const t = now();
        for (const [key, value] of links) if (value.expiresAtMs <= t) links.delete(key);
        if (links.size >= maxLinks) throw new Error('connect ledger is full');
      }
      links.set(nonce, { ...link, status: 'pending' });
    },
    async get(nonce) {
      const link = live(nonce);
      return link === undefined ? undefined : { ...link };
    },
    async settle(nonce, outcome) {
      const link = live(nonce);
      if (link === undefined || link.status !== 'pending') return false;
      link.status = outcome;
      return true;
    },
    async close() {
      links.clear();
    },
  };
}

/** The part of an ioredis client the ledger uses. */
export interface RedisLike {
  hgetall(key: string): Promise<Record<string, string>>;
  eval(script: string, numKeys: number, ...args: string[]): Promise<unknown>;
}

const CREATE_SCRIPT = `
redis.call('HSET', KEYS[1], 'principal', ARGV[1], 'provider', ARGV[2], 'status', 'pending', 'exp', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1`;

const SETTLE_SCRIPT = `
if redis.call('HGET', KEYS[1], 'status') == 'pending' then
  redis.call('HSET', KEYS[1], 'status', ARGV[1])
  return 1
end
return 0`;

/** Ledger on Redis: one hash per link with `PEXPIREAT`, written and settled by atomic Lua scripts. */
export function createRedisLedger(client: RedisLike, prefix = 'mrtr-demo:connect:'): ConnectLedger {
  return {
    async create(nonce, link) {
      await client.eval(CREATE_SCRIPT, 1, prefix + nonce, link.principal, link.provider, String(link.expiresAtMs));
    },
    async get(nonce) {
      const fields = await client.hgetall(prefix + nonce);
      const { principal, provider, status, exp } = fields;
      if (principal === undefined || provider === undefined || exp === undefined) return undefined;
      if (status !== 'pending' && status !== 'done' && status !== 'denied') return undefined;
      const expiresAtMs = Number(exp);
      if (!(expiresAtMs > Date.now())) return undefined;
      return { principal, provider, status, expiresAtMs };
    },
    async settle(nonce, outcome) {
      return (await client.eval(SETTLE_SCRIPT, 1, prefix + nonce, outcome)) === 1;
    },
    async close() {
      // The client belongs to the replay store, which closes it.
    },
  };
}

/** The part of a `pg.Pool` the ledger uses. */
export interface PgLike {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

const TABLE = 'mrtr_demo_connect';

function rowToLink(row: Record<string, unknown> | undefined, now: number): ConnectLink | undefined {
  if (row === undefined) return undefined;
  const expiresAtMs = Number(row.expires_at);
  const status = row.status;
  if (!(expiresAtMs > now) || (status !== 'pending' && status !== 'done' && status !== 'denied')) return undefined;
  return { principal: String(row.principal), provider: String(row.provider), status, expiresAtMs };
}

/** Ledger on PostgreSQL (same pool as the replay store). */
export async function createPostgresLedger(pool: PgLike): Promise<ConnectLedger> {
  await pool.query(
    `CREATE TABLE IF NOT EXISTS ${TABLE} (nonce text PRIMARY KEY, principal text NOT NULL, provider text NOT NULL, status text NOT NULL, expires_at bigint NOT NULL)`,
  );
  return {
    async create(nonce, link) {
      await pool.query(`DELETE FROM ${TABLE} WHERE expires_at < $1`, [Date.now() - 60_000]);
      await pool.query(`INSERT INTO ${TABLE} (nonce, principal, provider, status, expires_at) VALUES ($1, $2, $3, 'pending', $4)`, [
        nonce,
        link.principal,
        link.provider,
        link.expiresAtMs,
      ]);
    },
    async get(nonce) {
      const { rows } = await pool.query(`SELECT principal, provider, status, expires_at FROM ${TABLE} WHERE nonce = $1`, [nonce]);
      return rowToLink(rows[0], Date.now());
    },
    async settle(nonce, outcome) {
      const { rowCount } = await pool.query(
        `UPDATE ${TABLE} SET status = $2 WHERE nonce = $1 AND status = 'pending' AND expires_at > $3`,
        [nonce, outcome, Date.now()],
      );
      return rowCount === 1;
    },
    async close() {
      // The pool is closed by the backend.
    },
  };
}

/** The part of a better-sqlite3 database the ledger uses. */
export interface SqliteLike {
  exec(source: string): unknown;
  prepare(source: string): {
    run(...params: unknown[]): { changes: number };
    get(...params: unknown[]): unknown;
  };
}

/** Ledger on SQLite (same database as the replay store). */
export function createSqliteLedger(db: SqliteLike): ConnectLedger {
  db.exec(
    `CREATE TABLE IF NOT EXISTS ${TABLE} (nonce TEXT PRIMARY KEY, principal TEXT NOT NULL, provider TEXT NOT NULL, status TEXT NOT NULL, expires_at INTEGER NOT NULL)`,
  );
  const purge = db.prepare(`DELETE FROM ${TABLE} WHERE expires_at < ?`);
  const insert = db.prepare(`INSERT INTO ${TABLE} (nonce, principal, provider, status, expires_at) VALUES (?, ?, ?, 'pending', ?)`);
  const select = db.prepare(`SELECT principal, provider, status, expires_at FROM ${TABLE} WHERE nonce = ?`);
  const update = db.prepare(`UPDATE ${TABLE} SET status = ? WHERE nonce = ? AND status = 'pending' AND expires_at > ?`);
  return {
    async create(nonce, link) {
      purge.run(Date.now() - 60_000);
      insert.run(nonce, link.principal, link.provider, link.expiresAtMs);
    },
    async get(nonce) {
      return rowToLink(select.get(nonce) as Record<string, unknown> | undefined, Date.now());
    },
    async settle(nonce, outcome) {
      return update.run(outcome, nonce, Date.now()).changes === 1;
    },
    async close() {
      // The database is closed by the backend.
    },
  };
}
