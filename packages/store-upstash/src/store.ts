import type { ReplayStore } from '@mrtr/core';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { StoreUnavailableError } from '@mrtr/core/errors';
import {
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  fullStoreCapabilities,
  parseKeyFingerprintOffer,
  parseOutcomeStoreLimits,
  type ClaimOptions,
  type ClaimResult,
  type KeyFingerprint,
  type OutcomeStoreLimits,
  type RecordingReplayStore,
  type SpendOptions,
} from '@mrtr/core/store';
import type { Redis } from '@upstash/redis';
import {
  claimMisuse,
  expiredError,
  fingerprintMisuse,
  idMisuse,
  KEY_FINGERPRINT_SCRIPT,
  keyFingerprintAnswer,
  keyFingerprintArgs,
  LUA_NOW,
  ledgerLostError,
  leaseMisuse,
  ownerMisuse,
  spendMisuse,
} from '@mrtr/store-redis/scripts';
import { openLink, script, type UpstashConnectionOptions, CONNECTION_OPTIONS } from './link.js';

// One key per id, `<keyPrefix>r:<id>`, holding one of (`<owner>`: 22 random base64url characters that only the call
// that wrote it knows, or the caller's `owner` of a claim; `<m>`: the misses counted so far; `<fp>`: the fingerprint,
// without ':'):
//   c:<owner>                           taken by consume
//   p:<m>:<owner>:<fp>                  taken by claim without an owner of the caller's, no outcome yet, no lease
//   l:<m>:<owner>:<fence>:<till>:<fp>   taken by the caller's owner (or a reclaim), no outcome yet; its lease runs until
//                                       <till> (epoch ms, Redis's clock; empty: no lease); <fence> 0, one more per reclaim
//   d:<m>:<owner>:<fp>:<outcome>        taken by claim, outcome recorded (by <owner>)
//   x:<owner>                           done, not kept (too large, over the budget, '' or three misses)
// Outcomes held are counted in `<keyPrefix>ob` (a sorted set of `<bytes>:<owner>` scored by the id's expiry) and
// `<keyPrefix>on` (their sum), so the budget is checked and taken in the same script as the write. The ledger epoch
// is `<keyPrefix>ep` (written with TIME when missing), read in the same script as each consume and claim.
//
// Every script reads Redis's TIME: an expiry at or before it is refused (nothing written), leases are judged by it.
// Every script answers a second call of the same caller as it answered the first (it recognises its own owner
// value): asking again after a lost reply, or a client that retries by itself, can never turn a first use into a
// replay, nor a replay into a first use.

/** Reads the epoch (KEYS[n]), writing it with Redis's TIME when missing, into `e`. */
const EPOCH = (n: number): string =>
  `${LUA_NOW} local e = redis.call('GET', KEYS[${n}]) if not e then e = string.format('%.0f', now) redis.call('SET', KEYS[${n}], e) end e = tonumber(e) `;

/** KEYS: the id, the epoch. ARGV: `c:<owner>`, expiresAtMs, mintedAtMs (`''`: none). */
const CONSUME = script(
  `${EPOCH(2)}local v = redis.call('GET', KEYS[1]) ` +
    "if v == ARGV[1] then return 'yes' end " +
    "if ARGV[3] ~= '' and tonumber(ARGV[3]) < e then return 'lost' end " +
    "if tonumber(ARGV[2]) <= now then return 'expired' end " +
    "if not v then redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2]) return 'yes' end return 'no'",
);

/**
 * KEYS: the id, the budget set, the budget sum, the epoch. ARGV: owner, expiresAtMs, fingerprint, misses that drop,
 * mintedAtMs (`''`: none), lease (ms, `''`: none), flags (`o`: the owner is the caller's, `r`: reclaim). Answers `f<fence>`,
 * `pending`, `pending:<leaseLeftMs>`, `unknown`, `recorded:<outcome>`, `replayed`, `expired` or `lost`.
 */
const CLAIM = script(
  `${EPOCH(4)}local v = redis.call('GET', KEYS[1]) ` +
    "local till = '' if ARGV[6] ~= '' then till = string.format('%.0f', now + tonumber(ARGV[6])) end " +
    'if v then ' +
    "local k, o = string.match(v, '^([pdl]):%d+:([^:]+):') " +
    "if k == 'p' and o == ARGV[1] then return 'f0' end " +
    "if k == 'l' and o == ARGV[1] then return 'f' .. string.match(v, '^l:%d+:[^:]+:(%d+):') end end " +
    "if ARGV[5] ~= '' and tonumber(ARGV[5]) < e then return 'lost' end " +
    "if tonumber(ARGV[2]) <= now then return 'expired' end " +
    'if not v then ' +
    "if string.find(ARGV[7], 'o', 1, true) then redis.call('SET', KEYS[1], 'l:0:' .. ARGV[1] .. ':0:' .. till .. ':' .. ARGV[3], 'PXAT', ARGV[2]) " +
    "else redis.call('SET', KEYS[1], 'p:0:' .. ARGV[1] .. ':' .. ARGV[3], 'PXAT', ARGV[2]) end return 'f0' end " +
    "local kind, m, owner, rest = string.match(v, '^([pdl]):(%d+):([^:]+):(.*)$') " +
    "if not kind then return 'replayed' end " +
    "local fp, outcome, fence, held = rest, nil, '0', '' " +
    "if kind == 'd' then fp, outcome = string.match(rest, '^([^:]*):(.*)$') end " +
    "if kind == 'l' then fence, held, fp = string.match(rest, '^(%d+):(%d*):(.*)$') end " +
    'if fp == ARGV[3] then ' +
    "if kind == 'd' then return 'recorded:' .. outcome end " +
    "if kind == 'p' or held == '' then return 'pending' end " +
    "if tonumber(held) > now then return 'pending:' .. string.format('%.0f', tonumber(held) - now) end " +
    "if not string.find(ARGV[7], 'r', 1, true) then return 'unknown' end " +
    'fence = tonumber(fence) + 1 ' +
    "redis.call('SET', KEYS[1], 'l:' .. m .. ':' .. ARGV[1] .. ':' .. fence .. ':' .. till .. ':' .. fp, 'KEEPTTL') " +
    "return 'f' .. fence end " +
    'm = tonumber(m) + 1 ' +
    'if m >= tonumber(ARGV[4]) then ' +
    "if kind == 'd' then redis.call('ZREM', KEYS[2], #outcome .. ':' .. owner) redis.call('DECRBY', KEYS[3], #outcome) end " +
    "redis.call('SET', KEYS[1], 'x:' .. owner, 'KEEPTTL') " +
    "else redis.call('SET', KEYS[1], kind .. ':' .. m .. ':' .. owner .. ':' .. rest, 'KEEPTTL') end " +
    "return 'replayed'",
);

/**
 * KEYS: the id, the budget set, the budget sum. ARGV: fingerprint, outcome, budget (bytes), `1` to keep it, owner
 * (`''`: none). With an owner: only the claim's owner records, and its second record answers as its first. Drops up
 * to 64 expired entries of the budget (by Redis's clock), then keeps the outcome if it fits, else marks the id done,
 * not kept. 1 when kept (also for the same call asked again), else 0.
 */
const RECORD = script(
  "local v = redis.call('GET', KEYS[1]) if not v then return 0 end " +
    "local kind, m, owner, rest = string.match(v, '^([pdl]):(%d+):([^:]+):(.*)$') " +
    "if kind == 'd' then if ARGV[5] ~= '' then if owner == ARGV[5] then return 1 end return 0 end " +
    "if ARGV[4] == '1' and rest == ARGV[1] .. ':' .. ARGV[2] then return 1 end return 0 end " +
    "local fp = rest if kind == 'l' then fp = string.match(rest, '^%d+:%d*:(.*)$') end " +
    "if (kind ~= 'p' and kind ~= 'l') or fp ~= ARGV[1] then return 0 end " +
    "if kind == 'l' and owner ~= ARGV[5] then return 0 end " +
    "if ARGV[5] ~= '' then owner = ARGV[5] end " +
    "local pttl = redis.call('PTTL', KEYS[1]) " +
    `${LUA_NOW} ` +
    "local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now, 'LIMIT', 0, 64) " +
    "for i = 1, #old do redis.call('DECRBY', KEYS[3], tonumber(string.match(old[i], '^(%d+):'))) redis.call('ZREM', KEYS[2], old[i]) end " +
    "local size = #ARGV[2] local held = tonumber(redis.call('GET', KEYS[3]) or '0') " +
    "if ARGV[4] ~= '1' or size == 0 or pttl < 0 or held + size > tonumber(ARGV[3]) then redis.call('SET', KEYS[1], 'x:' .. owner, 'KEEPTTL') return 0 end " +
    "redis.call('SET', KEYS[1], 'd:' .. m .. ':' .. owner .. ':' .. fp .. ':' .. ARGV[2], 'KEEPTTL') " +
    "redis.call('ZADD', KEYS[2], now + pttl, size .. ':' .. owner) redis.call('INCRBY', KEYS[3], size) return 1",
);

/** KEYS: the id. ARGV: owner, lease (ms). Renews `owner`'s unrecorded claim's lease from Redis's TIME: 1, else 0. */
const RENEW = script(
  "local v = redis.call('GET', KEYS[1]) if not v then return 0 end " +
    "local m, o, fence, fp = string.match(v, '^l:(%d+):([^:]+):(%d+):%d*:(.*)$') " +
    'if o ~= ARGV[1] then return 0 end ' +
    `${LUA_NOW} ` +
    "redis.call('SET', KEYS[1], 'l:' .. m .. ':' .. o .. ':' .. fence .. ':' .. string.format('%.0f', now + tonumber(ARGV[2])) .. ':' .. fp, 'KEEPTTL') return 1",
);

/** KEYS: the id. ARGV: owner. Deletes `owner`'s unrecorded claim: 1 when `owner` holds none afterwards, else 0. */
const RELEASE = script(
  "local v = redis.call('GET', KEYS[1]) if not v then return 1 end " +
    "local o = string.match(v, '^l:%d+:([^:]+):') " +
    "if o == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end return 0",
);

/**
 * KEYS: the epoch. Redis's TIME in epoch ms (`time()`); writes the epoch when it is missing, as `ledgerEpoch` does (a
 * guard's clock check begins the ledger too).
 */
const TIME = script(`${EPOCH(1)}return now`);

/**
 * KEYS: the epoch. The ledger's epoch (`ledgerEpoch()`), written with Redis's TIME when missing (`SET` where no key,
 * so an existing epoch is never moved), answered as a string: running it again answers the same.
 */
const LEDGER_EPOCH = script(`${EPOCH(1)}return string.format('%.0f', e)`);

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
  /** One script on the id's key: extends `owner`'s lease to `leaseMs` from Redis's `TIME` (see {@link ReplayStore.renew}). */
  renew(id: string, owner: string, leaseMs: number): Promise<boolean>;
  /** One script on the id's key: deletes `owner`'s unrecorded claim (see {@link ReplayStore.release}). */
  release(id: string, owner: string): Promise<boolean>;
  /** Redis's `TIME`, epoch ms. */
  time(): Promise<number>;
  /**
   * The ledger's epoch (`<keyPrefix>ep`, epoch ms by Redis's clock): one script that writes it with `TIME` when it is
   * missing and answers it (see {@link ReplayStore.ledgerEpoch}).
   */
  ledgerEpoch(): Promise<number>;
  readonly namespace: string;
  /** The prefix every key of this store starts with (`prefix + encoded namespace + ":"`). */
  readonly keyPrefix: string;
  /** The `@upstash/redis` client in use. */
  readonly client: Redis;
  /** Stops the store; later calls reject `ERR_STORE_UNAVAILABLE` (an HTTP client holds no connection to close). */
  close(): Promise<void>;
}

const FIRST: ClaimResult = Object.freeze({ status: 'first', fence: 0 });
const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });
const UNKNOWN: ClaimResult = Object.freeze({ status: 'unknown' });

/** The claim script's answer (see `CLAIM`); `undefined` when it is not one. */
function claimAnswer(reply: string): ClaimResult | undefined {
  if (reply === 'f0') return FIRST;
  if (reply === 'pending') return PENDING;
  if (reply === 'replayed') return REPLAYED;
  if (reply === 'unknown') return UNKNOWN;
  if (reply.startsWith('recorded:') && reply.length > 9) return { status: 'recorded', outcome: reply.slice(9) };
  const number = /^(f|pending:)(\d+)$/.exec(reply);
  if (number === null) return undefined;
  return number[1] === 'f' ? { status: 'first', fence: Number(number[2]) } : { status: 'pending', leaseLeftMs: Number(number[2]) };
}

/** A script's refusal: `expired` (Redis's clock is at or past `expiresAtMs`) or `lost` (minted before the epoch). */
function refusal(reply: unknown): Error | undefined {
  if (reply === 'expired') return expiredError();
  if (reply === 'lost') return ledgerLostError();
  return undefined;
}

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
  const link = openLink(LABEL, options, { ...CONNECTION_OPTIONS, ...OUTCOME_STORE_LIMIT_OPTIONS });
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(LABEL, options);
  const { keyPrefix } = link;
  const budgetKeys = [`${keyPrefix}ob`, `${keyPrefix}on`];
  const idKey = (id: string): string => `${keyPrefix}r:${id}`;
  const owner = (): string => base64urlEncode(randomBytes(16));
  const closedError = (): StoreUnavailableError => new StoreUnavailableError({ cause: new Error('store is closed') });

  const epochKey = `${keyPrefix}ep`;

  const consume = async (id: string, expiresAtMs: number, spend?: SpendOptions): Promise<boolean> => {
    const misuse = idMisuse('consume', id, expiresAtMs) ?? spendMisuse('consume', spend);
    if (misuse !== undefined) throw misuse;
    if (link.closed) throw closedError();
    const minted = spend?.mintedAtMs ?? '';
    const reply = await link.run(CONSUME, [idKey(id), epochKey], [`c:${owner()}`, Math.ceil(expiresAtMs), minted]);
    if (reply === 'yes') return true;
    if (reply === 'no') return false;
    throw refusal(reply) ?? unexpected('consume');
  };

  const claim = async (id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult> => {
    const misuse = idMisuse('claim', id, expiresAtMs) ?? fingerprintMisuse('claim', fingerprint) ?? claimMisuse(options);
    if (misuse !== undefined) throw misuse;
    if (link.closed) throw closedError();
    const mine = options?.owner;
    const args = [
      mine ?? owner(),
      Math.ceil(expiresAtMs),
      fingerprint,
      MAX_FINGERPRINT_MISSES,
      options?.mintedAtMs ?? '',
      mine === undefined || options?.leaseMs === undefined ? '' : options.leaseMs,
      `${mine === undefined ? '' : 'o'}${options?.reclaim === true ? 'r' : ''}`,
    ];
    const reply = await link.run(CLAIM, [idKey(id), ...budgetKeys, epochKey], args);
    const answer = typeof reply === 'string' ? claimAnswer(reply) : undefined;
    if (answer !== undefined) return answer;
    throw refusal(reply) ?? unexpected('claim');
  };

  /** UTF-8 bytes ≤ 3 × UTF-16 code units: the exact count only when that bound does not settle it. */
  const fits = (outcome: string): boolean =>
    outcome.length <= maxOutcomeBytes &&
    (outcome.length * 3 <= maxOutcomeBytes || new TextEncoder().encode(outcome).length <= maxOutcomeBytes);

  const record = async (
    id: string,
    fingerprint: string,
    outcome: string,
    options?: { readonly owner?: string | undefined },
  ): Promise<boolean> => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('record: id must be a non-empty string');
    const misuse = fingerprintMisuse('record', fingerprint) ?? ownerMisuse('record', options?.owner, false);
    if (misuse !== undefined) throw misuse;
    if (typeof outcome !== 'string') throw new TypeError('record: outcome must be a string');
    if (link.closed) throw closedError();
    // Too large: recorded as done, not kept (and not sent), so identical retries are replays.
    const kept = outcome !== '' && fits(outcome);
    const reply = await link.run(
      RECORD,
      [idKey(id), ...budgetKeys],
      [fingerprint, kept ? outcome : '', outcomeBudgetBytes, kept ? '1' : '0', options?.owner ?? ''],
    );
    if (reply === 1) return true;
    if (reply === 0) return false;
    throw unexpected('record');
  };

  /** `renew` and `release`: one script each, idempotent for their owner (a lost reply is asked again by the link). */
  const lease = async (method: 'renew' | 'release', id: string, by: string, leaseMs?: number): Promise<boolean> => {
    const misuse =
      idMisuse(method, id, 0) ?? ownerMisuse(method, by, true) ?? (method === 'renew' ? leaseMisuse(method, leaseMs, true) : undefined);
    if (misuse !== undefined) throw misuse;
    if (link.closed) throw closedError();
    const reply = await link.run(method === 'renew' ? RENEW : RELEASE, [idKey(id)], method === 'renew' ? [by, leaseMs as number] : [by]);
    if (reply === 1 || reply === 0) return reply === 1;
    throw unexpected(method);
  };

  const time = async (): Promise<number> => {
    if (link.closed) throw closedError();
    const reply = Number(await link.run(TIME, [epochKey], []));
    if (!Number.isSafeInteger(reply) || reply <= 0) throw unexpected('time');
    return reply;
  };

  const ledgerEpoch = async (): Promise<number> => {
    if (link.closed) throw closedError();
    const reply = Number(await link.run(LEDGER_EPOCH, [epochKey], []));
    if (!Number.isSafeInteger(reply) || reply <= 0) throw unexpected('ledger epoch');
    return reply;
  };

  const keyFingerprints = async (offer: readonly KeyFingerprint[]): Promise<KeyFingerprint[]> => {
    const records = parseKeyFingerprintOffer(offer);
    if (link.closed) throw closedError();
    return keyFingerprintAnswer(await link.run(KEY_FINGERPRINTS, [`${keyPrefix}kf`], keyFingerprintArgs(records)));
  };

  return {
    capabilities: fullStoreCapabilities({ maxOutcomeBytes, outcomeBudgetBytes }),
    keyFingerprints,
    consume,
    claim,
    record,
    renew: (id, by, leaseMs) => lease('renew', id, by, leaseMs),
    release: (id, by) => lease('release', id, by),
    ledgerEpoch,
    time,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    namespace: link.namespace,
    keyPrefix,
    client: link.client,
    close: async () => link.close(),
  };
}
