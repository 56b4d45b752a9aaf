import { StoreUnavailableError } from '@mrtr/core/errors';
import { BackgroundError, withDeadline } from '@mrtr/core/store';
import type { Redis } from 'ioredis';
import { type RedisConnection, type RedisCommands, timedOut } from './connection.js';

/** How the store acts on the policy check (the parsed `evictionPolicyCheck` option; `'default'`: not set). */
export type EvictionPolicyMode = 'default' | 'warn' | 'refuse' | 'off' | 'accept-unknown';

/** Result of the start-up `maxmemory-policy` check. */
export type EvictionCheck =
  | { readonly status: 'safe'; readonly policy: string }
  | { readonly status: 'evicting'; readonly policy: string }
  | { readonly status: 'unknown'; readonly error: unknown };

/** Policies that never delete a key before its expiry. */
const SAFE_POLICIES = new Set(['noeviction']);

/** One field (`name:value`) of an `INFO` reply; `undefined` when absent. */
export function infoField(info: unknown, name: string): string | undefined {
  if (typeof info !== 'string') return undefined;
  const match = new RegExp(`^${name}:(.*)$`, 'm').exec(info);
  return match?.[1]?.trim();
}

/**
 * Reads `maxmemory-policy` with `CONFIG GET`; when that is refused (managed Redis, ACLs, a renamed `CONFIG`), from
 * `INFO memory` (`maxmemory_policy`). `unknown` when neither answers (the `CONFIG` error as `error`).
 */
async function readEvictionPolicy(commands: RedisCommands, timeoutMs: number): Promise<EvictionCheck> {
  let configError: unknown;
  try {
    const reply = await withDeadline(commands.config('GET', 'maxmemory-policy'), timeoutMs, timedOut);
    // RESP2: ['maxmemory-policy', 'noeviction']; a Cluster answers per node the same way.
    const flat = Array.isArray(reply) ? reply.flat(2) : [];
    const index = flat.indexOf('maxmemory-policy');
    const policy = index >= 0 ? flat[index + 1] : undefined;
    if (typeof policy === 'string') return { status: SAFE_POLICIES.has(policy) ? 'safe' : 'evicting', policy };
    configError = new Error('CONFIG GET maxmemory-policy gave no value');
  } catch (error) {
    configError = error;
  }
  try {
    const policy = infoField(await withDeadline(commands.info('memory'), timeoutMs, timedOut), 'maxmemory_policy');
    if (policy !== undefined && policy !== '') return { status: SAFE_POLICIES.has(policy) ? 'safe' : 'evicting', policy };
  } catch {
    // Neither: the CONFIG error says why.
  }
  return { status: 'unknown', error: configError };
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
  evictionPolicyCheck: EvictionPolicyMode,
  commandTimeoutMs: number,
  warn: (error: BackgroundError) => void,
  onStart: () => void,
): EvictionGuard {
  const { client, commands, owned } = connection;
  // `onStart` (the persistence report, the epoch): on every `ready` of an owned client, before the first write of an injected one.
  let started = false;
  let policy: EvictionCheck | undefined;
  let checking: Promise<EvictionCheck> | undefined;
  let warned: string | undefined;
  const checkEvictionPolicy = (): Promise<EvictionCheck> => {
    checking ??= readEvictionPolicy(commands, commandTimeoutMs).then((result) => {
      checking = undefined;
      policy = result;
      const message =
        result.status === 'evicting'
          ? `@mrtr/store-redis: Redis maxmemory-policy is "${result.policy}": under memory pressure it can delete consumed ids before they expire, and those states could then be used again. Use "noeviction" or a dedicated Redis.${evictionPolicyCheck === 'default' || evictionPolicyCheck === 'accept-unknown' ? ' Every consume and claim is refused (ERR_STORE_UNAVAILABLE) until it is.' : ''}`
          : result.status === 'unknown'
            ? `@mrtr/store-redis: could not read Redis maxmemory-policy (CONFIG GET and INFO memory: ${String((result.error as Error)?.message ?? result.error)}); make sure it is "noeviction", then set evictionPolicyCheck: 'accept-unknown' (or 'off').${evictionPolicyCheck === 'default' ? ' Every consume and claim is refused (ERR_STORE_UNAVAILABLE) until it can be read.' : ''}`
            : undefined;
      const reported = evictionPolicyCheck !== 'refuse' && evictionPolicyCheck !== 'off';
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
  if (owned) {
    (client as Redis).on('ready', () => {
      if (evictionPolicyCheck !== 'off') void checkEvictionPolicy();
      onStart();
    });
  }
  /**
   * `'refuse'` and the default: consumes wait for a check that says `noeviction`; while it does not, every consume
   * fails (and re-checks). `'accept-unknown'`: the same, except that a policy that cannot be read lets them through
   * (warned).
   */
  const policyGate = (): Promise<void> | undefined => {
    if (!owned && !started) {
      started = true;
      onStart();
    }
    if (evictionPolicyCheck === 'off') return undefined;
    if (evictionPolicyCheck === 'warn') {
      if (!owned && policy === undefined) void checkEvictionPolicy();
      return undefined;
    }
    if (policy?.status === 'safe') return undefined;
    if (evictionPolicyCheck === 'accept-unknown' && policy?.status === 'unknown' && checking === undefined) return undefined;
    return (checking ?? checkEvictionPolicy()).then((result) => {
      if (result.status === 'safe' || (evictionPolicyCheck === 'accept-unknown' && result.status === 'unknown')) return;
      const cause =
        result.status === 'evicting'
          ? new Error(
              `Redis maxmemory-policy is "${result.policy}" (evicting); refused by evictionPolicyCheck: ${evictionPolicyCheck === 'default' ? 'default (set "noeviction")' : `'${evictionPolicyCheck}'`}`,
            )
          : new Error(
              `Redis maxmemory-policy could not be read; refused by evictionPolicyCheck: ${evictionPolicyCheck === 'default' ? "default (set 'accept-unknown' once you know it is noeviction)" : "'refuse'"}`,
              { cause: result.error },
            );
      throw new StoreUnavailableError({ cause });
    });
  };

  return { check: checkEvictionPolicy, gate: policyGate };
}

/**
 * What `INFO persistence` (and `CONFIG GET save`, when allowed) says of the server's persistence: `rdb` (snapshots
 * configured, or seen saving) and `aof` (append-only file on); `undefined` where it cannot tell. `volatile`: both off — a
 * restart empties the ledger (the epoch check then refuses every state minted before, `ERR_LEDGER_LOST`).
 */
export type PersistenceCheck =
  | { readonly status: 'persistent' | 'volatile' | 'unknown'; readonly rdb: boolean | undefined; readonly aof: boolean | undefined }
  | { readonly status: 'unknown'; readonly error: unknown };

/** Reads the server's persistence (see {@link PersistenceCheck}); never rejects. */
export async function readPersistence(commands: RedisCommands, timeoutMs: number): Promise<PersistenceCheck> {
  let info: unknown;
  try {
    info = await withDeadline(commands.info('persistence'), timeoutMs, timedOut);
  } catch (error) {
    return { status: 'unknown', error };
  }
  // A Cluster answers INFO from one node: what it says stands for the others (they share a configuration, as a rule).
  const aofField = infoField(info, 'aof_enabled');
  const aof = aofField === undefined ? undefined : aofField === '1';
  let rdb: boolean | undefined;
  try {
    const reply = await withDeadline(commands.config('GET', 'save'), timeoutMs, timedOut);
    const flat = Array.isArray(reply) ? reply.flat(2) : [];
    const index = flat.indexOf('save');
    if (index >= 0 && typeof flat[index + 1] === 'string') rdb = (flat[index + 1] as string).trim() !== '';
  } catch {
    // CONFIG refused: only a save seen in INFO tells.
  }
  if (
    rdb === undefined &&
    (Number(infoField(info, 'rdb_saves') ?? 0) > 0 || (infoField(info, 'rdb_last_bgsave_time_sec') ?? '-1') !== '-1')
  ) {
    rdb = true;
  }
  const status = aof === true || rdb === true ? 'persistent' : aof === false && rdb === false ? 'volatile' : 'unknown';
  return { status, rdb, aof };
}

/** The start-up report of {@link readPersistence} (once per distinct answer): `undefined` when persistent. */
export function persistenceWarning(result: PersistenceCheck): BackgroundError | undefined {
  if (result.status === 'persistent') return undefined;
  if (result.status === 'volatile') {
    return new BackgroundError(
      'STORE_NOT_PERSISTENT',
      '@mrtr/store-redis: Redis persists nothing (RDB snapshots and AOF are off): a restart empties the ledger. Spent states are then refused by the epoch check (ERR_LEDGER_LOST) only when the guard passes mintedAtMs; turn on AOF (appendonly yes) to keep the ledger.',
    );
  }
  const error = 'error' in result ? result.error : undefined;
  return new BackgroundError(
    'STORE_PERSISTENCE_UNKNOWN',
    `@mrtr/store-redis: could not tell whether Redis persists its data (INFO persistence${error === undefined ? `: rdb ${String(result.status === 'unknown' && 'rdb' in result ? result.rdb : undefined)}, aof ${String('aof' in result ? result.aof : undefined)}` : `: ${String((error as Error)?.message ?? error)}`}); a restart without persistence empties the ledger.`,
    error === undefined ? undefined : { cause: error },
  );
}
