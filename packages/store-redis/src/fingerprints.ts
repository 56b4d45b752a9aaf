import { createHash } from 'node:crypto';
import type { KeyFingerprint } from '@mrtr/core';
import { MAX_FLEET_KEYS, parseKeyFingerprintOffer, StoreUnavailableError } from '@mrtr/core/authoring';
import { evalScript } from './batching.js';
import type { RedisConnection } from './connection.js';

/**
 * The fleet check's exchange (`ReplayStore.keyFingerprints`) in one script on one hash (`KEYS[1]`, field = kid,
 * value = `<expiresAtMs>:<fingerprint>`), judged by Redis's clock (`TIME`): expired fields are dropped; each offered
 * record (ARGV: max, then kid, fingerprint, expiresAtMs per record) is stored when its kid has no live field, extends
 * a live field with the same fingerprint to the later expiry, and leaves one with another fingerprint as it is (the
 * first writer wins). A new kid that would take the hash past `max` live fields refuses the whole offer before any
 * write (`full`). The hash expires with its latest record. Answer: `ok`, then kid, fingerprint, expiry per live field.
 */
export const FINGERPRINT_SCRIPT = `
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
if count > max then return { 'full' } end
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
  r[#r + 1] = kid r[#r + 1] = held[1] r[#r + 1] = string.format('%.0f', held[2])
  if held[2] > latest then latest = held[2] end
end
if latest > 0 then redis.call('PEXPIREAT', h, string.format('%.0f', latest)) end
return r
`;
const FINGERPRINT_SHA = createHash('sha1').update(FINGERPRINT_SCRIPT).digest('hex');

/** Reads the script's answer: the live records, sorted by kid; `full` and anything unexpected reject. */
export function fingerprintAnswer(reply: unknown): KeyFingerprint[] {
  if (!Array.isArray(reply) || (reply[0] !== 'ok' && reply[0] !== 'full') || (reply.length - 1) % 3 !== 0) {
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to the key fingerprint script') });
  }
  if (reply[0] === 'full') {
    throw new StoreUnavailableError({
      cause: new RangeError(`keyFingerprints: the store already holds ${MAX_FLEET_KEYS} unexpired key fingerprints`),
    });
  }
  const records: KeyFingerprint[] = [];
  for (let i = 1; i < reply.length; i += 3) {
    const [kid, fingerprint, at] = [reply[i], reply[i + 1], Number(reply[i + 2])];
    if (typeof kid !== 'string' || typeof fingerprint !== 'string' || !Number.isFinite(at)) {
      throw new StoreUnavailableError({ cause: new Error('unexpected reply to the key fingerprint script') });
    }
    records.push({ kid, fingerprint, expiresAtMs: at });
  }
  return records.sort((a, b) => (a.kid < b.kid ? -1 : a.kid > b.kid ? 1 : 0));
}

/** Script arguments of an offer (checked: labelled TypeError/RangeError). */
export function fingerprintArgs(offer: unknown): string[] {
  const records = parseKeyFingerprintOffer(offer);
  return [String(MAX_FLEET_KEYS), ...records.flatMap((r) => [r.kid, r.fingerprint, String(r.expiresAtMs)])];
}

/** Runs the exchange on `key` (one hash: one slot on a Cluster). */
export async function exchangeFingerprints(connection: RedisConnection, key: string, offer: unknown): Promise<KeyFingerprint[]> {
  const args = fingerprintArgs(offer);
  let reply: unknown;
  try {
    reply = await evalScript(connection, FINGERPRINT_SCRIPT, FINGERPRINT_SHA, [key, ...args], 1);
  } catch (cause) {
    throw cause instanceof StoreUnavailableError ? cause : new StoreUnavailableError({ cause });
  }
  return fingerprintAnswer(reply);
}
