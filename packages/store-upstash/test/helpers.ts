import { Redis } from 'ioredis';
import { it } from 'vitest';

// Redis availability: REDIS_URL unset → the tests skip with a printed reason, unless MRTR_REQUIRE_SERVICES=1, where a
// missing or unreachable Redis fails. The REST shim (rest-shim.ts) runs in the test process in front of that Redis.
export const REDIS_URL: string | undefined = process.env.REDIS_URL === '' ? undefined : process.env.REDIS_URL;
export const REQUIRE_SERVICES: boolean = process.env.MRTR_REQUIRE_SERVICES === '1';
export const skipRedis: boolean = REDIS_URL === undefined;

/** Call at the top of a test file: prints why it skips, or registers a failing test when Redis is required. */
export function gateRedis(file: string): void {
  if (!skipRedis) return;
  if (REQUIRE_SERVICES) {
    it('Redis is required (MRTR_REQUIRE_SERVICES=1) but REDIS_URL is not set', () => {
      throw new Error('REDIS_URL must be set when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn(`[store-upstash] ${file}: tests skipped because REDIS_URL is not set (they run a REST shim in front of Redis)`);
  }
}

/** Fails with a clear message when the configured Redis does not answer (set but unreachable is an error). */
export async function assertRedisReachable(url: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, connectTimeout: 3000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    if ((await client.ping()) !== 'PONG') throw new Error('unexpected PING reply');
  } catch (error) {
    throw new Error(`Redis at REDIS_URL is unreachable: ${(error as Error).message}`, { cause: error });
  } finally {
    client.disconnect();
  }
}

/**
 * Loses a namespace's ledger as a flush would: deletes every key that starts with `prefix` (SCAN, bounded in rounds),
 * on the Redis behind the shim. Resolves how many keys it deleted.
 */
export async function loseKeys(url: string, prefix: string): Promise<number> {
  const client = new Redis(url, { maxRetriesPerRequest: 0 });
  client.on('error', () => {});
  try {
    const match = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
    let [cursor, deleted] = ['0', 0];
    for (let round = 0; round < 100_000; round++) {
      const [next, keys] = await client.scan(cursor, 'MATCH', match, 'COUNT', 1000);
      if (keys.length > 0) deleted += await client.del(...keys);
      cursor = next;
      if (cursor === '0') return deleted;
    }
    throw new Error('SCAN did not finish');
  } finally {
    client.disconnect();
  }
}
