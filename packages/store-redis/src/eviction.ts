import { BackgroundError, StoreUnavailableError, withDeadline } from '@mrtr/core/authoring';
import type { Redis } from 'ioredis';
import { type RedisConnection, type RedisCommands, timedOut } from './connection.js';

/** Result of the start-up `maxmemory-policy` check. */
export type EvictionCheck =
  | { readonly status: 'safe'; readonly policy: string }
  | { readonly status: 'evicting'; readonly policy: string }
  | { readonly status: 'unknown'; readonly error: unknown };

/** Policies that never delete a key before its expiry. */
const SAFE_POLICIES = new Set(['noeviction']);

/** Reads `maxmemory-policy`; `unknown` when `CONFIG` is refused or the reply is not understood. */
async function readEvictionPolicy(commands: RedisCommands, timeoutMs: number): Promise<EvictionCheck> {
  try {
    const reply = await withDeadline(commands.config('GET', 'maxmemory-policy'), timeoutMs, timedOut);
    // RESP2: ['maxmemory-policy', 'noeviction']; a Cluster answers per node the same way.
    const flat = Array.isArray(reply) ? reply.flat(2) : [];
    const index = flat.indexOf('maxmemory-policy');
    const policy = index >= 0 ? flat[index + 1] : undefined;
    if (typeof policy !== 'string') return { status: 'unknown', error: new Error('CONFIG GET maxmemory-policy gave no value') };
    return { status: SAFE_POLICIES.has(policy) ? 'safe' : 'evicting', policy };
  } catch (error) {
    return { status: 'unknown', error };
  }
}

/** The `maxmemory-policy` check of one store and the gate `'refuse'` puts before its writes. */
export interface EvictionGuard {
  /** Runs the check now (one at a time) and resolves its result; warns through `warn` in `'warn'` mode. */
  check(): Promise<EvictionCheck>;
  /** `undefined` when a write may go now; else a promise that resolves when it may, or rejects `ERR_STORE_UNAVAILABLE`. */
  gate(): Promise<void> | undefined;
}

/** Start-up check of maxmemory-policy: eviction could drop consumed ids before they expire. */
export function createEvictionGuard(
  connection: RedisConnection,
  evictionPolicyCheck: 'default' | 'warn' | 'refuse' | 'off',
  commandTimeoutMs: number,
  warn: (error: BackgroundError) => void,
): EvictionGuard {
  const { client, commands, owned } = connection;
  let policy: EvictionCheck | undefined;
  let checking: Promise<EvictionCheck> | undefined;
  let warned: string | undefined;
  const checkEvictionPolicy = (): Promise<EvictionCheck> => {
    checking ??= readEvictionPolicy(commands, commandTimeoutMs).then((result) => {
      checking = undefined;
      policy = result;
      const message =
        result.status === 'evicting'
          ? `@mrtr/store-redis: Redis maxmemory-policy is "${result.policy}": under memory pressure it can delete consumed ids before they expire, and those states could then be used again. Use "noeviction" or a dedicated Redis.${evictionPolicyCheck === 'default' ? ' Every consume and claim is refused (ERR_STORE_UNAVAILABLE) until it is.' : ''}`
          : result.status === 'unknown'
            ? `@mrtr/store-redis: could not read Redis maxmemory-policy (${String((result.error as Error)?.message ?? result.error)}); make sure it is "noeviction", then set evictionPolicyCheck: 'off'.`
            : undefined;
      const reported = evictionPolicyCheck === 'warn' || evictionPolicyCheck === 'default';
      if (message !== undefined && message !== warned && reported) {
        warned = message;
        warn(
          result.status === 'evicting'
            ? new BackgroundError('STORE_EVICTION_POLICY', message)
            : new BackgroundError('STORE_EVICTION_POLICY_UNKNOWN', message, { cause: (result as { error: unknown }).error }),
        );
      }
      return result;
    });
    return checking;
  };
  if (owned && evictionPolicyCheck !== 'off') {
    (client as Redis).on('ready', () => void checkEvictionPolicy());
  }
  /**
   * `'refuse'`: consumes wait for a check that says `noeviction`; while it does not, every consume fails (and
   * re-checks). The default: the same, except that a policy that cannot be read lets them through (warned).
   */
  const policyGate = (): Promise<void> | undefined => {
    if (evictionPolicyCheck === 'off') return undefined;
    if (evictionPolicyCheck === 'warn') {
      if (!owned && policy === undefined) void checkEvictionPolicy();
      return undefined;
    }
    if (policy?.status === 'safe') return undefined;
    if (evictionPolicyCheck === 'default' && policy?.status === 'unknown' && checking === undefined) return undefined;
    return (checking ?? checkEvictionPolicy()).then((result) => {
      if (result.status === 'safe' || (evictionPolicyCheck === 'default' && result.status === 'unknown')) return;
      const cause =
        result.status === 'evicting'
          ? new Error(
              `Redis maxmemory-policy is "${result.policy}" (evicting); refused by evictionPolicyCheck: ${evictionPolicyCheck === 'refuse' ? "'refuse'" : 'default (set "noeviction")'}`,
            )
          : new Error("Redis maxmemory-policy could not be read; refused by evictionPolicyCheck: 'refuse'", { cause: result.error });
      throw new StoreUnavailableError({ cause });
    });
  };

  return { check: checkEvictionPolicy, gate: policyGate };
}
