import { createHash } from 'node:crypto';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { evalScript } from './batching.js';
import type { RedisConnection } from './connection.js';
import { notWritten } from './lost-reply.js';

/**
 * `renew`: KEYS: the id. ARGV: owner, lease (ms). When the id holds `owner`'s unrecorded claim (`L…:<owner>:…`, see
 * `outcomes.ts`), its lease is set to run until Redis's `TIME` + lease, the key's expiry kept (a lapsed lease nobody
 * reclaimed too: its owner was only slow). 1 when renewed, else 0. Running it twice answers as once.
 */
const RENEW_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local m, fp, owner, fence = string.match(v, '^L(%d?):([^:]*):([^:]*):(%d+):%d*$')
if owner ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local till = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('SET', KEYS[1], 'L' .. m .. ':' .. fp .. ':' .. owner .. ':' .. fence .. ':' .. string.format('%.0f', till), 'KEEPTTL')
return 1`;

/**
 * `release`: KEYS: the id. ARGV: owner. Compare-and-delete: the key is deleted when it holds `owner`'s unrecorded claim.
 * 1 when `owner` holds no claim of the id afterwards (deleted now, or none: the claim never landed), 0 when another
 * value holds it (another owner's claim, a recorded outcome, a consume). Running it twice answers as once (unless
 * another claim took the freed id in between: then 0, and nothing changed).
 */
const RELEASE_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if not v then return 1 end
local owner = string.match(v, '^L%d?:[^:]*:([^:]*):%d+:%d*$')
if owner and owner == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0`;

const scripts: Record<'renew' | 'release', { readonly source: string; readonly sha: string }> = {
  renew: { source: RENEW_SCRIPT, sha: createHash('sha1').update(RENEW_SCRIPT).digest('hex') },
  release: { source: RELEASE_SCRIPT, sha: createHash('sha1').update(RELEASE_SCRIPT).digest('hex') },
};

/**
 * Runs the `renew` or `release` script on one key. Both answer a second run as the first, so a reply that never came
 * (a timeout, a connection lost in flight) is settled by running it once more; no answer then fails closed.
 */
export async function runLeaseScript(
  connection: RedisConnection,
  which: 'renew' | 'release',
  key: string,
  args: (string | number)[],
): Promise<boolean> {
  const { source, sha } = scripts[which];
  const once = async (): Promise<boolean> => {
    const reply = await evalScript(connection, source, sha, [key, ...args], 1);
    if (reply === 1 || reply === 0) return reply === 1;
    throw new StoreUnavailableError({ cause: new Error(`unexpected reply to the ${which} script`) });
  };
  try {
    return await once();
  } catch (error) {
    if (notWritten(error)) throw error instanceof StoreUnavailableError ? error : new StoreUnavailableError({ cause: error });
    try {
      return await once();
    } catch {
      throw new StoreUnavailableError({ cause: error });
    }
  }
}
