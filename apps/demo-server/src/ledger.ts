/**
 * The connect ledger: where connect_account (URL-mode elicitation) records a pending link and where the
 * connect page records its outcome. The tool learns completion from here — never from the client's
 * `accept`, which only means consent (spec EL7). It lives in the same backend as the replay store, so
 * with Redis or PostgreSQL any instance of a fleet sees what the page recorded on any other.
 *
 * A caller creates links by calling connect_account, so everything here is bounded per principal:
 *   - a live pending link for the same principal and provider is reused (same nonce, same URL);
 *   - a principal holds at most `maxPendingPerPrincipal` pending links (default 5): one more is refused;
 *   - a principal holds at most `maxLinksPerPrincipal` live links in all (default 20): settled ones give
 *     way, soonest-expiring first, to a new link;
 *   - a pending link lives `pendingTtlMs` (default 10 min); once the page (or the tool) settles it, it
 *     lives until the `expiresAtMs` the tool asked for (the flow's lifetime), so the tool can read it.
 * One principal filling its own quota never blocks another principal. Refusals and backend failures
 * surface as {@link ConnectLedgerError}, whose message is generic; the real reason goes to a report hook.
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

/** What connect_account asks for: `expiresAtMs` is the lifetime once settled (a pending link lives shorter). */
export type NewLink = Omit<ConnectLink, 'status'>;

export interface ConnectLedger {
  /**
   * Records a pending link under `nonce`, or reuses the principal's live pending link for the same
   * provider. Resolves with the nonce in effect (use it, not the argument, in the URL). Throws
   * {@link ConnectLedgerError} when the principal's quota is used up or the backend fails.
   */
  create(nonce: string, link: NewLink): Promise<string>;
  /** The link, or `undefined` when unknown or expired. */
  get(nonce: string): Promise<ConnectLink | undefined>;
  /** Moves a live pending link to `outcome`; `false` when it is unknown, expired or already settled. */
  settle(nonce: string, outcome: 'done' | 'denied'): Promise<boolean>;
  close(): Promise<void>;
}

export interface LedgerLimits {
  /** Pending (unconfirmed) links one principal may hold. @default 5 */
  maxPendingPerPrincipal: number;
  /** Live links (pending and settled) one principal may hold; settled ones give way to new links. @default 20 */
  maxLinksPerPrincipal: number;
  /** Lifetime of a pending link in ms. @default 600_000 (10 min) */
  pendingTtlMs: number;
}

export const DEFAULT_LEDGER_LIMITS: Readonly<LedgerLimits> = Object.freeze({
  maxPendingPerPrincipal: 5,
  maxLinksPerPrincipal: 20,
  pendingTtlMs: 600_000,
});

export interface LedgerOptions {
  limits?: Partial<LedgerLimits> | undefined;
  /** Clock (ms since the epoch); injected by tests. */
  now?: (() => number) | undefined;
}

/** The one text a client sees when the ledger refuses or fails (the reason is only reported). */
export const LEDGER_ERROR_MESSAGE = 'The account connection could not be started. Try again later.';

/** A ledger refusal or failure: the message is generic; `reason` is for the log only. */
export class ConnectLedgerError extends Error {
  override readonly name = 'ConnectLedgerError';
  /** The real reason (for the log only). */
  readonly reason: string;
  constructor(reason: string, options?: { cause?: unknown }) {
    super(LEDGER_ERROR_MESSAGE, options);
    this.reason = reason;
  }
}

function resolveLimits(options: LedgerOptions | undefined): LedgerLimits {
  const limits = { ...DEFAULT_LEDGER_LIMITS, ...options?.limits };
  const { maxPendingPerPrincipal: p, maxLinksPerPrincipal: l, pendingTtlMs: t } = limits;
  if (!Number.isSafeInteger(p) || p < 1) throw new RangeError('maxPendingPerPrincipal must be a positive integer');
  if (!Number.isSafeInteger(l) || l < p) throw new RangeError('maxLinksPerPrincipal must be an integer >= maxPendingPerPrincipal');
  if (!Number.isSafeInteger(t) || t < 1) throw new RangeError('pendingTtlMs must be a positive integer');
  return limits;
}

const pendingFull = (principal: string, limits: LedgerLimits) =>
  new ConnectLedgerError(
    `principal "${principal}" already has ${limits.maxPendingPerPrincipal} pending connect links (the per-principal cap)`,
  );

/**
 * Wraps a ledger so that nothing internal reaches a client: every failure is reported through `report`
 * (with the real reason) and rethrown as a {@link ConnectLedgerError} with the generic message.
 */
export function withGenericErrors(ledger: ConnectLedger, report: (reason: string) => void): ConnectLedger {
  const wrap = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (error) {
      const reason =
        error instanceof ConnectLedgerError ? error.reason : `${what} failed: ${error instanceof Error ? error.message : String(error)}`;
      try {
        report(`connect ledger: ${reason}`);
      } catch {
        // A failing log must not change the answer.
      }
      throw error instanceof ConnectLedgerError ? error : new ConnectLedgerError(reason, { cause: error });
    }
  };
  return {
    create: (nonce, link) => wrap('create', () => ledger.create(nonce, link)),
    get: (nonce) => wrap('get', () => ledger.get(nonce)),
    settle: (nonce, outcome) => wrap('settle', () => ledger.settle(nonce, outcome)),
    close: () => ledger.close(),
  };
}

// ------------------------------------------------------------------------------------------------ memory

interface MemoryLink extends ConnectLink {
  nonce: string;
  /** Expiry once settled. */
  settledExpiresAtMs: number;
}

/** In-process ledger (memory store): one process only. Bounded per principal (see the module doc). */
export function createMemoryLedger(options: LedgerOptions = {}): ConnectLedger {
  const limits = resolveLimits(options);
  const now = options.now ?? Date.now;
  const links = new Map<string, MemoryLink>();
  /** principal → its links (each principal's map holds at most maxLinksPerPrincipal entries). */
  const byPrincipal = new Map<string, Map<string, MemoryLink>>();

  const drop = (link: MemoryLink) => {
    links.delete(link.nonce);
    const own = byPrincipal.get(link.principal);
    own?.delete(link.nonce);
    if (own !== undefined && own.size === 0) byPrincipal.delete(link.principal);
  };
  const live = (nonce: string): MemoryLink | undefined => {
    const link = links.get(nonce);
    if (link === undefined) return undefined;
    if (link.expiresAtMs <= now()) {
      drop(link);
      return undefined;
    }
    return link;
  };

  return {
    async create(nonce, link) {
      const t = now();
      const own = byPrincipal.get(link.principal);
      let pending = 0;
      const settled: MemoryLink[] = [];
      if (own !== undefined) {
        for (const entry of [...own.values()]) {
          if (entry.expiresAtMs <= t) {
            drop(entry);
          } else if (entry.status === 'pending') {
            if (entry.provider === link.provider) {
              // Renewed for the newest flow that uses it: it must outlive that flow once settled too.
              entry.settledExpiresAtMs = Math.max(entry.settledExpiresAtMs, link.expiresAtMs);
              entry.expiresAtMs = Math.min(link.expiresAtMs, t + limits.pendingTtlMs);
              return entry.nonce;
            }
            pending++;
          } else {
            settled.push(entry);
          }
        }
      }
      if (pending >= limits.maxPendingPerPrincipal) throw pendingFull(link.principal, limits);
      settled.sort((a, b) => a.expiresAtMs - b.expiresAtMs);
      let total = pending + settled.length;
      for (let i = 0; total >= limits.maxLinksPerPrincipal && i < settled.length; i++, total--) drop(settled[i]!);
      if (links.has(nonce)) throw new ConnectLedgerError('nonce collision');
      const entry: MemoryLink = {
        nonce,
        principal: link.principal,
        provider: link.provider,
        status: 'pending',
        expiresAtMs: Math.min(link.expiresAtMs, t + limits.pendingTtlMs),
        settledExpiresAtMs: link.expiresAtMs,
      };
      links.set(nonce, entry);
      let mine = byPrincipal.get(link.principal);
      if (mine === undefined) byPrincipal.set(link.principal, (mine = new Map()));
      mine.set(nonce, entry);
      return nonce;
    },
    async get(nonce) {
      const link = live(nonce);
      return link === undefined
        ? undefined
        : { principal: link.principal, provider: link.provider, status: link.status, expiresAtMs: link.expiresAtMs };
    },
    async settle(nonce, outcome) {
      const link = live(nonce);
      if (link === undefined || link.status !== 'pending') return false;
      link.status = outcome;
      link.expiresAtMs = link.settledExpiresAtMs;
      return true;
    },
    async close() {
      links.clear();
      byPrincipal.clear();
    },
  };
}

// ------------------------------------------------------------------------------------------------ Redis

/** The part of an ioredis client the ledger uses. */
export interface RedisLike {
  hgetall(key: string): Promise<Record<string, string>>;
  eval(script: string, numKeys: number, ...args: string[]): Promise<unknown>;
}

/*
 * One hash per link (`<prefix>l:<nonce>`, PEXPIREAT its current expiry) and one sorted set per principal
 * (`<prefix>p:<principal>`: nonce scored by expiry, PEXPIREAT its latest member). Both scripts run
 * atomically; the create script reads at most maxLinksPerPrincipal members. Expiry decisions use the
 * caller's clock (ARGV), so every instance of a fleet decides alike; PEXPIREAT only frees memory.
 *
 * create: KEYS[1] principal set, KEYS[2] new link hash.
 *   ARGV: 1 link-key prefix, 2 principal, 3 provider, 4 now, 5 pending expiry, 6 settled expiry,
 *         7 max pending, 8 max links, 9 nonce.
 *   Returns {1, nonce} (created or reused), {0, 'pending'} or {0, 'links'}.
 */
const CREATE_SCRIPT = `
local idx = KEYS[1]
local now = tonumber(ARGV[4])
local expired = redis.call('ZRANGEBYSCORE', idx, '-inf', now)
for _, n in ipairs(expired) do redis.call('DEL', ARGV[1] .. n) end
if #expired > 0 then redis.call('ZREMRANGEBYSCORE', idx, '-inf', now) end
local function touch()
  local last = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIREAT', idx, last[2]) end
end
local members = redis.call('ZRANGE', idx, 0, -1)
local pending = 0
local settled = {}
for _, n in ipairs(members) do
  local f = redis.call('HMGET', ARGV[1] .. n, 'provider', 'status', 'settledexp')
  if not f[2] then
    redis.call('ZREM', idx, n)
  elseif f[2] == 'pending' then
    if f[1] == ARGV[3] then
      local settledexp = math.max(tonumber(f[3]) or 0, tonumber(ARGV[6]))
      redis.call('HSET', ARGV[1] .. n, 'exp', ARGV[5], 'settledexp', string.format('%d', settledexp))
      redis.call('PEXPIREAT', ARGV[1] .. n, ARGV[5])
      redis.call('ZADD', idx, ARGV[5], n)
      touch()
      return {1, n}
    end
    pending = pending + 1
  else
    settled[#settled + 1] = n
  end
end
if pending >= tonumber(ARGV[7]) then return {0, 'pending'} end
local total = pending + #settled
local i = 1
while total >= tonumber(ARGV[8]) and i <= #settled do
  redis.call('DEL', ARGV[1] .. settled[i])
  redis.call('ZREM', idx, settled[i])
  total = total - 1
  i = i + 1
end
if total >= tonumber(ARGV[8]) then return {0, 'links'} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, 'collision'} end
redis.call('HSET', KEYS[2], 'principal', ARGV[2], 'provider', ARGV[3], 'status', 'pending', 'exp', ARGV[5], 'settledexp', ARGV[6])
redis.call('PEXPIREAT', KEYS[2], ARGV[5])
redis.call('ZADD', idx, ARGV[5], ARGV[9])
touch()
return {1, ARGV[9]}`;

/*
 * settle: KEYS[1] link hash. ARGV: 1 outcome, 2 now, 3 principal-set prefix, 4 nonce.
 * (The principal set's name is read from the hash: single-instance Redis, not Cluster.)
 */
const SETTLE_SCRIPT = `
local f = redis.call('HMGET', KEYS[1], 'status', 'exp', 'settledexp', 'principal')
if f[1] ~= 'pending' or not f[2] or not f[4] or tonumber(f[2]) <= tonumber(ARGV[2]) then return 0 end
local exp = f[3] or f[2]
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'exp', exp)
redis.call('PEXPIREAT', KEYS[1], exp)
local idx = ARGV[3] .. f[4]
redis.call('ZADD', idx, exp, ARGV[4])
local last = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', idx, last[2]) end
return 1`;

/** Ledger on Redis: bounded per principal by atomic Lua scripts, every key with a TTL (see above). */
export function createRedisLedger(client: RedisLike, prefix = 'mrtr-demo:connect:', options: LedgerOptions = {}): ConnectLedger {
  const limits = resolveLimits(options);
  const now = options.now ?? Date.now;
  const linkPrefix = `${prefix}l:`;
  const principalPrefix = `${prefix}p:`;
  return {
    async create(nonce, link) {
      const t = now();
      const pendingExp = Math.min(link.expiresAtMs, t + limits.pendingTtlMs);
      const reply = await client.eval(
        CREATE_SCRIPT,
        2,
        principalPrefix + link.principal,
        linkPrefix + nonce,
        linkPrefix,
        link.principal,
        link.provider,
        String(t),
        String(pendingExp),
        String(link.expiresAtMs),
        String(limits.maxPendingPerPrincipal),
        String(limits.maxLinksPerPrincipal),
        nonce,
      );
      if (!Array.isArray(reply) || reply.length !== 2) throw new ConnectLedgerError('unexpected reply from the create script');
      const [ok, value] = reply as [unknown, unknown];
      if (ok === 1 && typeof value === 'string') return value;
      if (value === 'pending') throw pendingFull(link.principal, limits);
      throw new ConnectLedgerError(`create refused (${String(value)}) for principal "${link.principal}"`);
    },
    async get(nonce) {
      const fields = await client.hgetall(linkPrefix + nonce);
      const { principal, provider, status, exp } = fields;
      if (principal === undefined || provider === undefined || exp === undefined) return undefined;
      if (status !== 'pending' && status !== 'done' && status !== 'denied') return undefined;
      const expiresAtMs = Number(exp);
      if (!(expiresAtMs > now())) return undefined;
      return { principal, provider, status, expiresAtMs };
    },
    async settle(nonce, outcome) {
      return (await client.eval(SETTLE_SCRIPT, 1, linkPrefix + nonce, outcome, String(now()), principalPrefix, nonce)) === 1;
    },
    async close() {
      // The client belongs to the replay store, which closes it.
    },
  };
}

// ------------------------------------------------------------------------------------------------ SQL

export const LEDGER_TABLE = 'mrtr_demo_connect_links';
/** A global sweep of expired rows runs at most this often and deletes at most SWEEP_LIMIT rows. */
export const SWEEP_INTERVAL_MS = 60_000;
export const SWEEP_LIMIT = 500;

interface Row {
  nonce: string;
  provider: string;
  status: string;
  expires_at: number;
  settled_expires_at: number;
}

/** The decision of one create, from the principal's live rows (at most maxLinksPerPrincipal of them). */
type Plan =
  | { kind: 'reuse'; nonce: string; expiresAtMs: number; settledExpiresAtMs: number }
  | { kind: 'insert'; evict: string[]; pendingExp: number }
  | { kind: 'refuse'; error: ConnectLedgerError };

function plan(rows: readonly Row[], link: NewLink, t: number, limits: LedgerLimits): Plan {
  const pendingExp = Math.min(link.expiresAtMs, t + limits.pendingTtlMs);
  let pending = 0;
  const settled: Row[] = [];
  for (const row of rows) {
    if (row.status === 'pending') {
      if (row.provider === link.provider) {
        // Renewed for the newest flow that uses it: it must outlive that flow once settled too.
        return {
          kind: 'reuse',
          nonce: row.nonce,
          expiresAtMs: pendingExp,
          settledExpiresAtMs: Math.max(row.settled_expires_at, link.expiresAtMs),
        };
      }
      pending++;
    } else {
      settled.push(row);
    }
  }
  if (pending >= limits.maxPendingPerPrincipal) return { kind: 'refuse', error: pendingFull(link.principal, limits) };
  settled.sort((a, b) => a.expires_at - b.expires_at);
  const evict: string[] = [];
  let total = pending + settled.length;
  for (let i = 0; total >= limits.maxLinksPerPrincipal && i < settled.length; i++, total--) evict.push(settled[i]!.nonce);
  return { kind: 'insert', evict, pendingExp };
}

function toRows(rows: Record<string, unknown>[]): Row[] {
  return rows.map((r) => ({
    nonce: String(r.nonce),
    provider: String(r.provider),
    status: String(r.status),
    expires_at: Number(r.expires_at),
    settled_expires_at: Number(r.settled_expires_at),
  }));
}

function rowToLink(row: Record<string, unknown> | undefined, now: number): ConnectLink | undefined {
  if (row === undefined) return undefined;
  const expiresAtMs = Number(row.expires_at);
  const status = row.status;
  if (!(expiresAtMs > now) || (status !== 'pending' && status !== 'done' && status !== 'denied')) return undefined;
  return { principal: String(row.principal), provider: String(row.provider), status, expiresAtMs };
}

/** The part of a pooled `pg` client the ledger uses. */
export interface PgClientLike {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
  release(error?: Error | boolean): void;
}

/** The part of a `pg.Pool` the ledger uses. */
export interface PgLike {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
  connect(): Promise<PgClientLike>;
}

export interface SqlLedgerOptions extends LedgerOptions {
  /** Table name (tests use their own). @default mrtr_demo_connect_links */
  table?: string | undefined;
}

const tableName = (options: SqlLedgerOptions): string => {
  const table = options.table ?? LEDGER_TABLE;
  if (!/^[a-z_][a-z0-9_]{0,40}$/.test(table)) throw new RangeError('ledger table name must match [a-z_][a-z0-9_]{0,40}');
  return table;
};

/**
 * Ledger on PostgreSQL (same pool as the replay store). A create runs in one transaction under an
 * advisory lock on the principal, so concurrent creates (any instance) cannot overshoot the caps.
 */
export async function createPostgresLedger(pool: PgLike, options: SqlLedgerOptions = {}): Promise<ConnectLedger> {
  const limits = resolveLimits(options);
  const now = options.now ?? Date.now;
  const table = tableName(options);
  await pool.query(
    `CREATE TABLE IF NOT EXISTS ${table} (nonce text PRIMARY KEY, principal text NOT NULL, provider text NOT NULL, status text NOT NULL, expires_at bigint NOT NULL, settled_expires_at bigint NOT NULL)`,
  );
  await pool.query(`CREATE INDEX IF NOT EXISTS ${table}_principal_idx ON ${table} (principal, expires_at)`);
  await pool.query(`CREATE INDEX IF NOT EXISTS ${table}_expires_idx ON ${table} (expires_at)`);
  let nextSweep = 0;

  // Housekeeping only (expired rows are never read as live): a failed sweep is retried a minute later.
  const sweep = async (t: number) => {
    if (t < nextSweep) return;
    nextSweep = t + SWEEP_INTERVAL_MS;
    await pool
      .query(
        `DELETE FROM ${table} WHERE nonce IN (SELECT nonce FROM ${table} WHERE expires_at <= $1 ORDER BY expires_at LIMIT ${SWEEP_LIMIT})`,
        [t],
      )
      .catch(() => {});
  };

  return {
    async create(nonce, link) {
      const t = now();
      const client = await pool.connect();
      let result: Plan;
      try {
        await client.query('BEGIN');
        await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`${table}:${link.principal}`]);
        await client.query(`DELETE FROM ${table} WHERE principal = $1 AND expires_at <= $2`, [link.principal, t]);
        const { rows } = await client.query(
          `SELECT nonce, provider, status, expires_at, settled_expires_at FROM ${table} WHERE principal = $1 ORDER BY expires_at LIMIT $2`,
          [link.principal, limits.maxLinksPerPrincipal + 1],
        );
        result = plan(toRows(rows), link, t, limits);
        if (result.kind === 'reuse') {
          await client.query(`UPDATE ${table} SET expires_at = $2, settled_expires_at = $3 WHERE nonce = $1`, [
            result.nonce,
            result.expiresAtMs,
            result.settledExpiresAtMs,
          ]);
        } else if (result.kind === 'insert') {
          if (result.evict.length > 0) await client.query(`DELETE FROM ${table} WHERE nonce = ANY($1::text[])`, [result.evict]);
          await client.query(
            `INSERT INTO ${table} (nonce, principal, provider, status, expires_at, settled_expires_at) VALUES ($1, $2, $3, 'pending', $4, $5)`,
            [nonce, link.principal, link.provider, result.pendingExp, link.expiresAtMs],
          );
        }
        await client.query('COMMIT');
        client.release();
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        client.release(true);
        throw error;
      }
      await sweep(t);
      if (result.kind === 'refuse') throw result.error;
      return result.kind === 'reuse' ? result.nonce : nonce;
    },
    async get(nonce) {
      const { rows } = await pool.query(`SELECT principal, provider, status, expires_at FROM ${table} WHERE nonce = $1`, [nonce]);
      return rowToLink(rows[0], now());
    },
    async settle(nonce, outcome) {
      const { rowCount } = await pool.query(
        `UPDATE ${table} SET status = $2, expires_at = settled_expires_at WHERE nonce = $1 AND status = 'pending' AND expires_at > $3`,
        [nonce, outcome, now()],
      );
      return rowCount === 1;
    },
    async close() {
      // The pool is closed by the backend.
    },
  };
}

interface SqliteStatement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/** The part of a better-sqlite3 database the ledger uses. */
export interface SqliteLike {
  exec(source: string): unknown;
  prepare(source: string): SqliteStatement;
  transaction<F extends (...args: never[]) => unknown>(fn: F): { immediate(...args: Parameters<F>): ReturnType<F> };
}

/** Ledger on SQLite (same database as the replay store); a create is one IMMEDIATE transaction. */
export function createSqliteLedger(db: SqliteLike, options: SqlLedgerOptions = {}): ConnectLedger {
  const limits = resolveLimits(options);
  const now = options.now ?? Date.now;
  const table = tableName(options);
  // In one IMMEDIATE transaction (takes the write lock first, waiting up to busy_timeout): a deferred
  // CREATE … IF NOT EXISTS reads the schema before it writes and can fail at once with SQLITE_BUSY
  // when another instance creates the same tables at that moment.
  db.transaction(() => {
    db.exec(
      `CREATE TABLE IF NOT EXISTS ${table} (nonce TEXT PRIMARY KEY, principal TEXT NOT NULL, provider TEXT NOT NULL, status TEXT NOT NULL, expires_at INTEGER NOT NULL, settled_expires_at INTEGER NOT NULL);` +
        `CREATE INDEX IF NOT EXISTS ${table}_principal_idx ON ${table} (principal, expires_at);` +
        `CREATE INDEX IF NOT EXISTS ${table}_expires_idx ON ${table} (expires_at);`,
    );
  }).immediate();
  const purgeOwn = db.prepare(`DELETE FROM ${table} WHERE principal = ? AND expires_at <= ?`);
  const selectOwn = db.prepare(
    `SELECT nonce, provider, status, expires_at, settled_expires_at FROM ${table} WHERE principal = ? ORDER BY expires_at LIMIT ?`,
  );
  const refresh = db.prepare(`UPDATE ${table} SET expires_at = ?, settled_expires_at = ? WHERE nonce = ?`);
  const remove = db.prepare(`DELETE FROM ${table} WHERE nonce = ?`);
  const insert = db.prepare(
    `INSERT INTO ${table} (nonce, principal, provider, status, expires_at, settled_expires_at) VALUES (?, ?, ?, 'pending', ?, ?)`,
  );
  const select = db.prepare(`SELECT principal, provider, status, expires_at FROM ${table} WHERE nonce = ?`);
  const update = db.prepare(
    `UPDATE ${table} SET status = ?, expires_at = settled_expires_at WHERE nonce = ? AND status = 'pending' AND expires_at > ?`,
  );
  const sweepStatement = db.prepare(
    `DELETE FROM ${table} WHERE nonce IN (SELECT nonce FROM ${table} WHERE expires_at <= ? ORDER BY expires_at LIMIT ${SWEEP_LIMIT})`,
  );
  let nextSweep = 0;
  const createTx = db.transaction((nonce: string, link: NewLink, t: number): Plan => {
    purgeOwn.run(link.principal, t);
    const rows = toRows(selectOwn.all(link.principal, limits.maxLinksPerPrincipal + 1) as Record<string, unknown>[]);
    const result = plan(rows, link, t, limits);
    if (result.kind === 'reuse') refresh.run(result.expiresAtMs, result.settledExpiresAtMs, result.nonce);
    else if (result.kind === 'insert') {
      for (const evicted of result.evict) remove.run(evicted);
      insert.run(nonce, link.principal, link.provider, result.pendingExp, link.expiresAtMs);
    }
    return result;
  });
  return {
    async create(nonce, link) {
      const t = now();
      const result = createTx.immediate(nonce, link, t);
      if (t >= nextSweep) {
        // Housekeeping only (expired rows are never read as live): a failed sweep is retried a minute later.
        nextSweep = t + SWEEP_INTERVAL_MS;
        try {
          sweepStatement.run(t);
        } catch {
          // e.g. SQLITE_BUSY from another process
        }
      }
      if (result.kind === 'refuse') throw result.error;
      return result.kind === 'reuse' ? result.nonce : nonce;
    },
    async get(nonce) {
      return rowToLink(select.get(nonce) as Record<string, unknown> | undefined, now());
    },
    async settle(nonce, outcome) {
      return update.run(outcome, nonce, now()).changes === 1;
    },
    async close() {
      // The database is closed by the backend.
    },
  };
}
