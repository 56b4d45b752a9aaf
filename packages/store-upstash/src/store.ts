import type { ClaimResult, KeyFingerprint, OutcomeStoreLimits, RecordingReplayStore, ReplayStore } from '@mrtr/core';
import {
  base64urlEncode,
  MAX_FINGERPRINT_MISSES,
  parseKeyFingerprintOffer,
  parseOutcomeStoreLimits,
  randomBytes,
  StoreUnavailableError,
} from '@mrtr/core/authoring';
import type { Redis } from '@upstash/redis';
import { fingerprintMisuse, KEY_FINGERPRINT_SCRIPT, keyFingerprintAnswer, keyFingerprintArgs } from '@mrtr/store-redis/scripts';
import { openLink, script, type UpstashConnectionOptions } from './link.js';

// One key per id, `<keyPrefix>r:<id>`, holding one of (`<owner>`: 22 random base64url characters that only the call
// that wrote it knows; `<m>`: the misses counted so far; `<fp>`: the fingerprint, without ':'):
//   c:<owner>                           taken by consume
//   p:<m>:<owner>:<fp>                  taken by claim, no outcome yet
//   d:<m>:<owner>:<fp>:<outcome>        taken by claim, outcome recorded
//   x:<owner>                           done, not kept (too large, over the budget, '' or three misses)
// Outcomes held are counted in `<keyPrefix>ob` (a sorted set of `<bytes>:<owner>` scored by the id's expiry) and
// `<keyPrefix>on` (their sum), so the budget is checked and taken in the same script as the write.
//
// Every script answers a second call of the same caller as it answered the first (it recognises its own owner
// value): asking again after a lost reply, or a client that retries by itself, can never turn a first use into a
// replay, nor a replay into a first use.

/** KEYS: the id. ARGV: `c:<owner>`, expiry (ms). */
const CONSUME = script(
  "local v = redis.call('GET', KEYS[1]) " +
    "if not v then redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2]) return 'yes' end " +
    "if v == ARGV[1] then return 'yes' end return 'no'",
);

/** KEYS: the id, the budget set, the budget sum. ARGV: owner, expiry (ms), fingerprint, misses that drop. */
const CLAIM = script(
  "local v = redis.call('GET', KEYS[1]) " +
    "if not v then redis.call('SET', KEYS[1], 'p:0:' .. ARGV[1] .. ':' .. ARGV[3], 'PXAT', ARGV[2]) return 'first' end " +
    "local kind, m, owner, rest = string.match(v, '^([pd]):(%d+):([^:]+):(.*)$') " +
    "if not kind then return 'replayed' end " +
    "if owner == ARGV[1] then if kind == 'p' then return 'first' end return 'replayed' end " +
    'local fp, outcome = rest, nil ' +
    "if kind == 'd' then fp, outcome = string.match(rest, '^([^:]*):(.*)$') end " +
    "if fp == ARGV[3] then if kind == 'p' then return 'pending' end return 'recorded:' .. outcome end " +
    'm = tonumber(m) + 1 ' +
    'if m >= tonumber(ARGV[4]) then ' +
    "if kind == 'd' then redis.call('ZREM', KEYS[2], #outcome .. ':' .. owner) redis.call('DECRBY', KEYS[3], #outcome) end " +
    "redis.call('SET', KEYS[1], 'x:' .. owner, 'KEEPTTL') " +
    "else redis.call('SET', KEYS[1], kind .. ':' .. m .. ':' .. owner .. ':' .. rest, 'KEEPTTL') end " +
    "return 'replayed'",
);

/**
 * KEYS: the id, the budget set, the budget sum. ARGV: fingerprint, outcome, budget (bytes), `1` to keep it. Drops up
 * to 64 expired entries of the budget (by Redis's clock), then keeps the outcome if it fits, else marks the id done,
 * not kept. 1 when kept (also for the same call asked again), else 0.
 */
const RECORD = script(
  "local v = redis.call('GET', KEYS[1]) if not v then return 0 end " +
    "local kind, m, owner, rest = string.match(v, '^([pd]):(%d+):([^:]+):(.*)$') " +
    "if kind == 'd' then if ARGV[4] == '1' and rest == ARGV[1] .. ':' .. ARGV[2] then return 1 end return 0 end " +
    "if kind ~= 'p' or rest ~= ARGV[1] then return 0 end " +
    "local pttl = redis.call('PTTL', KEYS[1]) " +
    "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) " +
    "local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now, 'LIMIT', 0, 64) " +
    "for i = 1, #old do redis.call('DECRBY', KEYS[3], tonumber(string.match(old[i], '^(%d+):'))) redis.call('ZREM', KEYS[2], old[i]) end " +
    "local size = #ARGV[2] local held = tonumber(redis.call('GET', KEYS[3]) or '0') " +
    "if ARGV[4] ~= '1' or size == 0 or pttl < 0 or held + size > tonumber(ARGV[3]) then redis.call('SET', KEYS[1], 'x:' .. owner, 'KEEPTTL') return 0 end " +
    "redis.call('SET', KEYS[1], 'd:' .. m .. ':' .. owner .. ':' .. rest .. ':' .. ARGV[2], 'KEEPTTL') " +
    "redis.call('ZADD', KEYS[2], now + pttl, size .. ':' .. owner) redis.call('INCRBY', KEYS[3], size) return 1",
);

const LABEL = 'createUpstashStore';

/** Options of {@link createUpstashStore}: the connection, the outcome bounds and these. */
export interface UpstashStoreOptions extends UpstashConnectionOptions, OutcomeStoreLimits {}

/** A {@link ReplayStore} on Upstash Redis (REST). */
export interface UpstashReplayStore extends RecordingReplayStore {
  /**
   * The fleet check's exchange (see {@link ReplayStore.keyFingerprints}): one script on one hash, `<keyPrefix>kf`,
   * expiry judged by Redis's clock; a new kid past 256 live records rejects with `ERR_STORE_UNAVAILABLE`.
   */
  keyFingerprints(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  readonly namespace: string;
  /** The prefix every key of this store starts with (`prefix + encoded namespace + ":"`). */
  readonly keyPrefix: string;
  /** The `@upstash/redis` client in use. */
  readonly client: Redis;
  /** Stops the store; later calls reject `ERR_STORE_UNAVAILABLE` (an HTTP client holds no connection to close). */
  close(): Promise<void>;
}

const FIRST: ClaimResult = Object.freeze({ status: 'first' });
const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });

/** The fleet check's exchange, shared with `@mrtr/store-redis`: see `KEY_FINGERPRINT_SCRIPT` there. */
const KEY_FINGERPRINTS = script(KEY_FINGERPRINT_SCRIPT);

const unexpected = (what: string): StoreUnavailableError =>
  new StoreUnavailableError({ cause: new Error(`unexpected reply to the ${what} script`) });

/**
 * Replay store on Upstash Redis over its REST API (`@upstash/redis`), for serverless functions (Vercel, Lambda,
 * Workers) that cannot hold a TCP connection. `consume`, `claim` and `record` are each one `EVALSHA` (`EVAL` on
 * `NOSCRIPT`) of a script on the id's key: atomic on Upstash as on Redis. An id is held until its expiry by Redis's
 * own `PXAT`.
 *
 * Lost replies: each write carries an owner value only its call knows, and each script recognises it, so when a
 * reply does not come (a timeout, a cut connection) the store sends the same script once more and gets the answer the
 * first run gave; a client's own automatic retries get it too. No answer either time → `ERR_STORE_UNAVAILABLE`, never
 * `true`.
 *
 * Outcomes are bounded by `maxOutcomeBytes` (16 KiB) and, store-wide, `outcomeBudgetBytes` (64 MiB, checked and
 * taken in the record script); the third claim of an id with another fingerprint drops its outcome
 * (`MAX_FINGERPRINT_MISSES`).
 */
export function createUpstashStore(options: UpstashStoreOptions): UpstashReplayStore {
  if (options === undefined) throw new TypeError(`${LABEL}: options must be an object with url and token, or client`);
  const link = openLink(LABEL, options);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(LABEL, options);
  const { keyPrefix } = link;
  const budgetKeys = [`${keyPrefix}ob`, `${keyPrefix}on`];
  const idKey = (id: string): string => `${keyPrefix}r:${id}`;
  const owner = (): string => base64urlEncode(randomBytes(16));
  const closedError = (): StoreUnavailableError => new StoreUnavailableError({ cause: new Error('store is closed') });

  const checkId = (method: string, id: unknown, expiresAtMs: unknown): Error | undefined => {
    if (typeof id !== 'string' || id.length === 0) return new TypeError(`${method}: id must be a non-empty string`);
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return new TypeError(`${method}: expiresAtMs must be a finite number`);
    }
    return undefined;
  };

  const consume = async (id: string, expiresAtMs: number): Promise<boolean> => {
    const misuse = checkId('consume', id, expiresAtMs);
    if (misuse !== undefined) throw misuse;
    if (link.closed) throw closedError();
    // Redis would take `PXAT <past>` and drop the key at once: such an id could not be remembered.
    if (expiresAtMs <= Date.now()) return false;
    const reply = await link.run(CONSUME, [idKey(id)], [`c:${owner()}`, Math.ceil(expiresAtMs)]);
    if (reply === 'yes') return true;
    if (reply === 'no') return false;
    throw unexpected('consume');
  };

  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    const misuse = checkId('claim', id, expiresAtMs) ?? fingerprintMisuse('claim', fingerprint);
    if (misuse !== undefined) throw misuse;
    if (link.closed) throw closedError();
    if (expiresAtMs <= Date.now()) return REPLAYED;
    const reply = await link.run(CLAIM, [idKey(id), ...budgetKeys], [owner(), Math.ceil(expiresAtMs), fingerprint, MAX_FINGERPRINT_MISSES]);
    if (reply === 'first') return FIRST;
    if (reply === 'pending') return PENDING;
    if (reply === 'replayed') return REPLAYED;
    if (typeof reply === 'string' && reply.startsWith('recorded:') && reply.length > 9) {
      return { status: 'recorded', outcome: reply.slice(9) };
    }
    throw unexpected('claim');
  };

  /** UTF-8 bytes ≤ 3 × UTF-16 code units: the exact count only when that bound does not settle it. */
  const fits = (outcome: string): boolean =>
    outcome.length <= maxOutcomeBytes &&
    (outcome.length * 3 <= maxOutcomeBytes || new TextEncoder().encode(outcome).length <= maxOutcomeBytes);

  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('record: id must be a non-empty string');
    const misuse = fingerprintMisuse('record', fingerprint);
    if (misuse !== undefined) throw misuse;
    if (typeof outcome !== 'string') throw new TypeError('record: outcome must be a string');
    if (link.closed) throw closedError();
    // Too large: recorded as done, not kept (and not sent), so identical retries are replays.
    const kept = outcome !== '' && fits(outcome);
    const reply = await link.run(
      RECORD,
      [idKey(id), ...budgetKeys],
      [fingerprint, kept ? outcome : '', outcomeBudgetBytes, kept ? '1' : '0'],
    );
    if (reply === 1) return true;
    if (reply === 0) return false;
    throw unexpected('record');
  };

  const keyFingerprints = async (offer: readonly KeyFingerprint[]): Promise<KeyFingerprint[]> => {
    const records = parseKeyFingerprintOffer(offer);
    if (link.closed) throw closedError();
    return keyFingerprintAnswer(await link.run(KEY_FINGERPRINTS, [`${keyPrefix}kf`], keyFingerprintArgs(records)));
  };

  return {
    capabilities: {
      shared: true,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: true,
      clock: false,
      leases: false,
      epoch: false,
    },
    keyFingerprints,
    consume,
    claim,
    record,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    namespace: link.namespace,
    keyPrefix,
    client: link.client,
    close: async () => link.close(),
  };
}
