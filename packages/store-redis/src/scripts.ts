/**
 * `@mrtr/store-redis/scripts`: the Lua and the value rules that every Redis-protocol store of mrtr shares (this
 * package over ioredis, `@mrtr/store-upstash` over REST). Nothing here talks to Redis or imports a client or a Node
 * built-in, so a store for an edge runtime can take it without ioredis.
 */
import { LedgerLostError, StateExpiredError, StoreUnavailableError } from '@mrtr/core/errors';
import {
  checkLeaseMs,
  checkOwner,
  type ClaimOptions,
  fleetKeysFull,
  type KeyFingerprint,
  MAX_FLEET_KEYS,
  type SpendOptions,
} from '@mrtr/core/store';

/** Longest fingerprint `claim` and `record` accept (core's is a 43-character SHA-256 in base64url). */
export const MAX_FINGERPRINT_LENGTH = 256;

/**
 * A misused `claim`/`record` fingerprint (it is stored between `:` separators, so it may not hold one), labelled with
 * `method`; `undefined` when it is fine.
 */
export function fingerprintMisuse(method: string, fingerprint: unknown): Error | undefined {
  if (typeof fingerprint !== 'string' || fingerprint.length === 0 || fingerprint.includes(':')) {
    return new TypeError(`${method}: fingerprint must be a non-empty string without ":"`);
  }
  if (fingerprint.length > MAX_FINGERPRINT_LENGTH) {
    return new RangeError(`${method}: fingerprint must be at most ${MAX_FINGERPRINT_LENGTH} characters`);
  }
  return undefined;
}

/** A misused id or `expiresAtMs`, labelled with `method`; `undefined` when fine. */
export function idMisuse(method: string, id: unknown, expiresAtMs: unknown): Error | undefined {
  if (typeof id !== 'string' || id.length === 0) return new TypeError(`${method}: id must be a non-empty string`);
  if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs))
    return new TypeError(`${method}: expiresAtMs must be a finite number`);
  return undefined;
}

/** A misused `mintedAtMs` (a finite number when given); `undefined` when fine. */
export function spendMisuse(method: string, options: SpendOptions | undefined): Error | undefined {
  if (options === undefined) return undefined;
  if (options === null || typeof options !== 'object') return new TypeError(`${method}: options must be an object`);
  const { mintedAtMs } = options;
  if (mintedAtMs !== undefined && (typeof mintedAtMs !== 'number' || !Number.isFinite(mintedAtMs))) {
    return new TypeError(`${method}: mintedAtMs must be a finite number`);
  }
  return undefined;
}

/** A misused owner (16 to 64 base64url characters, stored between `:` separators; absent unless `required`). */
export function ownerMisuse(method: string, owner: unknown, required: boolean): Error | undefined {
  return owner === undefined && !required ? undefined : thrownBy(() => checkOwner(method, owner));
}

/** A misused lease (a positive safe integer, ms; absent unless `required`); `undefined` when fine. */
export function leaseMisuse(method: string, leaseMs: unknown, required: boolean): Error | undefined {
  return leaseMs === undefined && !required ? undefined : thrownBy(() => checkLeaseMs(method, leaseMs));
}

/** The labelled misuse error core's check throws (this package rejects with it instead); `undefined` when fine. */
function thrownBy(check: () => unknown): Error | undefined {
  try {
    check();
    return undefined;
  } catch (error) {
    return error as Error;
  }
}

/** A misused `claim` option; `undefined` when fine. */
export function claimMisuse(options: ClaimOptions | undefined): Error | undefined {
  const misuse = spendMisuse('claim', options);
  if (misuse !== undefined || options === undefined) return misuse;
  if (options.reclaim !== undefined && typeof options.reclaim !== 'boolean') return new TypeError('claim: reclaim must be a boolean');
  return ownerMisuse('claim', options.owner, false) ?? leaseMisuse('claim', options.leaseMs, false);
}

/** A script's refusal of an `expiresAtMs` at or before Redis's clock (nothing written). */
export const expiredError = (): StateExpiredError => new StateExpiredError({ cause: new Error("expiresAtMs is not after Redis's clock") });

/** A script's refusal of a `mintedAtMs` before the ledger's epoch. */
export const ledgerLostError = (): LedgerLostError => new LedgerLostError({ cause: new Error("the ledger's epoch is after mintedAtMs") });

/** Redis's `TIME` in epoch ms, as Lua: every script of the stores judges expiry and leases by it. */
export const LUA_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)";

/**
 * The fleet check's exchange (`ReplayStore.keyFingerprints`) in one script on one hash (`KEYS[1]`, field = kid,
 * value = `<expiresAtMs>:<fingerprint>`), judged by Redis's clock (`TIME`): expired fields are dropped; each offered
 * record (ARGV: max, then kid, fingerprint, expiresAtMs per record: see {@link keyFingerprintArgs}) is stored when its
 * kid has no live field, extends a live field with the same fingerprint to the later expiry, and leaves one with
 * another fingerprint as it is (the first writer wins). A new kid that would take the hash past `max` live fields
 * refuses the whole offer before any write (`full`). The hash expires with its latest record. Answers one string (never
 * an array, which a REST client may deserialize): `ok`, then `kid fingerprint expiresAtMs` per live field,
 * space-separated (kids and fingerprints are base64url). Running it twice answers as once (a retry after a lost reply
 * is safe).
 */
export const KEY_FINGERPRINT_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h, max = KEYS[1], tonumber(ARGV[1])
local all = redis.call('HGETALL', h)
local live, count = {}, 0
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sep = string.find(v, ':', 1, true)
  local exp = sep and tonumber(string.sub(v, 1, sep - 1))
  if exp and exp > now then live[all[i]] = { string.sub(v, sep + 1), exp } count = count + 1
  else redis.call('HDEL', h, all[i]) end
end
local new = {}
for i = 2, #ARGV, 3 do
  local kid, exp = ARGV[i], tonumber(ARGV[i + 2])
  if exp > now and not live[kid] and not new[kid] then new[kid] = true count = count + 1 end
end
if count > max then return 'full' end
local latest = 0
for i = 2, #ARGV, 3 do
  local kid, fp, exp = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if exp > now then
    local held = live[kid]
    if not held then live[kid] = { fp, exp } redis.call('HSET', h, kid, string.format('%.0f', exp) .. ':' .. fp)
    elseif held[1] == fp and exp > held[2] then held[2] = exp redis.call('HSET', h, kid, string.format('%.0f', exp) .. ':' .. fp) end
  end
end
local r = { 'ok' }
for kid, held in pairs(live) do
  r[#r + 1] = kid .. ' ' .. held[1] .. ' ' .. string.format('%.0f', held[2])
  if held[2] > latest then latest = held[2] end
end
if latest > 0 then redis.call('PEXPIREAT', h, string.format('%.0f', latest)) end
return table.concat(r, ' ')
`;

/** The script's arguments for a checked offer (`parseKeyFingerprintOffer` of `@mrtr/core/store`). */
export function keyFingerprintArgs(records: readonly KeyFingerprint[]): string[] {
  return [String(MAX_FLEET_KEYS), ...records.flatMap((r) => [r.kid, r.fingerprint, String(r.expiresAtMs)])];
}

const unexpected = (): StoreUnavailableError =>
  new StoreUnavailableError({ cause: new Error('unexpected reply to the key fingerprint script') });

/** Reads the script's answer: the live records, sorted by kid; `full` and anything unexpected reject `ERR_STORE_UNAVAILABLE`. */
export function keyFingerprintAnswer(reply: unknown): KeyFingerprint[] {
  if (reply === 'full') throw fleetKeysFull();
  const words = typeof reply === 'string' ? reply.split(' ') : [];
  if (words[0] !== 'ok' || (words.length - 1) % 3 !== 0) throw unexpected();
  const held: KeyFingerprint[] = [];
  for (let i = 1; i < words.length; i += 3) {
    const expiresAtMs = Number(words[i + 2]);
    if (!Number.isFinite(expiresAtMs)) throw unexpected();
    held.push({ kid: words[i] as string, fingerprint: words[i + 1] as string, expiresAtMs });
  }
  return held.sort((a, b) => (a.kid < b.kid ? -1 : a.kid > b.kid ? 1 : 0));
}
