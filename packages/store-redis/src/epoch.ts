import { createHash } from 'node:crypto';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { evalScript } from './batching.js';
import { type RedisConnection, redisMs } from './connection.js';
import { hashSlot } from './hash-slot.js';
import { fail } from './lost-reply.js';

/**
 * The ledger epoch: when this ledger (prefix and namespace) began, by Redis's clock. A script that spends an id
 * (consume, claim) reads it in the same step and writes it with `TIME` when it is missing — a Redis restarted without
 * persistence, flushed, or failed over to an empty replica has lost it with the ids — and refuses a `mintedAtMs` before
 * it (`ERR_LEDGER_LOST`). The keys have no expiry, so no `volatile-*` policy evicts them. `ledgerEpoch` (see
 * {@link createEpochKeeper}) writes it where it is missing before a guard's first mint, and answers the value the guard
 * seals in its states (`mintedAtMs` at their spend).
 *
 * One Redis: one key, `<ledger>%e`; `ledgerEpoch` is one script (`GET`, else `SET` with `TIME`).
 *
 * A Cluster: a script touches one hash slot, and ids spread over all of them, so the epoch is kept per slot —
 * `<ledger>%e{<tag>}`, `<tag>` chosen so that the key lands in the slot (see {@link epochKeys}) — beside the ids it
 * covers: a master that restarts empty loses the epoch keys of exactly the slots whose ids it lost, and the next spend
 * in each writes a new one. `ledgerEpoch` must answer the latest of the 16384 copies without reading them all, so the
 * master key `<ledger>%e` is kept at their maximum:
 * - `ledgerEpoch` reads the master key. When it is missing (a new ledger, or its master lost it), it first writes every
 *   missing copy with one value (Redis's `TIME` when it began: a new ledger's parts all begin together, so a
 *   `mintedAtMs` before the answer is refused on every part) and reads the ones there, then raises the master key to
 *   the latest of them (compare-and-set, never lowered; it is created only here, after the copies, so no guard seals a
 *   value before every slot has its copy), and answers it;
 * - each spend script answers its slot's epoch; one later than what the store knows of the master key (a copy begun
 *   again after a loss, the first time a store sees it) raises the master key to it before the spend is answered (a
 *   failed raise is tried again by the next spend on that slot).
 * Bounds: until the master key is raised and a guard has learned it again (every 30 s, or after a refusal), states
 * sealed with the older value are refused on the slot begun again (`ERR_LEDGER_LOST`: fail closed), never accepted.
 * A master that lost its data loses the copies of all its slots: each begins again at its own first spend, and raises
 * the master key then, so a state sealed within one refresh before that spend is refused there too. The nodes' clocks
 * are assumed to agree to within the age of the ledger (a copy begun again must be later than the value the guards
 * sealed). Two stores creating the ledger at once may write different values to different slots (each keeps the
 * first); the answer is their latest, so a state sealed with it is accepted on every slot. A master that loses its
 * data while a creation pass still runs may have a copy written with the pass's older value.
 */
const INIT_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if v then return { 0, v } end
local t = redis.call('TIME')
v = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[1], v)
return { 1, v }`;
const INIT_SHA = createHash('sha1').update(INIT_SCRIPT).digest('hex');

/**
 * Raises the master key (`KEYS[1]`) to `ARGV[1]` when it holds less, never lowers it; creates it only when `ARGV[2]`
 * is `1` (`ledgerEpoch`, after the copies). Answers `{ 0, held }` (unchanged), `{ 1, raised }`, `{ 2, '' }` (missing,
 * not created) or `{ 3, created }`. Running it again answers `0` with the same value: safe to retry after a lost reply.
 */
const RAISE_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if not v then
  if ARGV[2] ~= '1' then return { 2, '' } end
  redis.call('SET', KEYS[1], ARGV[1])
  return { 3, ARGV[1] }
end
if tonumber(v) >= tonumber(ARGV[1]) then return { 0, v } end
redis.call('SET', KEYS[1], ARGV[1])
return { 1, ARGV[1] }`;
const RAISE_SHA = createHash('sha1').update(RAISE_SCRIPT).digest('hex');

/** A slot's copy (`KEYS[1]`): written as `ARGV[1]` when missing, else kept; answers `{ created, value }`. */
const COPY_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if v then return { 0, v } end
redis.call('SET', KEYS[1], ARGV[1])
return { 1, ARGV[1] }`;
const COPY_SHA = createHash('sha1').update(COPY_SCRIPT).digest('hex');

const SLOTS = 16_384;
const tables = new Map<string, string[] | string>();

/**
 * The epoch key of each hash slot for a ledger whose keys start with `base`: `base%e{<n>}` with the first `n` (base 36)
 * that lands in the slot (found once per ledger name, about 170000 CRC16s). When `base` pins every key to one slot (a
 * `{tag}` of its own), that one key.
 */
export function epochKeys(base: string): (slot: number) => string {
  let table = tables.get(base);
  if (table === undefined) {
    const found: string[] = new Array(SLOTS);
    let filled = 0;
    const seen = new Set<number>();
    for (let n = 0; n < 4_000_000 && filled < SLOTS; n++) {
      const key = `${base}%e{${n.toString(36)}}`;
      const slot = hashSlot(key);
      seen.add(slot);
      if (found[slot] === undefined) {
        found[slot] = key;
        filled++;
      }
      if (n === 999 && seen.size === 1) break; // the prefix's own hash tag decides the slot
    }
    table = filled === 1 ? (found.find((k) => k !== undefined) as string) : found;
    tables.set(base, table);
  }
  const known = table;
  return (slot) => (typeof known === 'string' ? known : (known[slot] as string));
}

/** The epoch key of an id's key, for a ledger whose keys start with `base`. */
export function epochKeyOf(base: string, isCluster: boolean): (key: string) => string {
  if (!isCluster) return () => `${base}%e`;
  let slots: ((slot: number) => string) | undefined;
  return (key) => {
    slots ??= epochKeys(base);
    return slots(hashSlot(key));
  };
}

/** Keeps the ledger's epoch for one store: `ledgerEpoch`, and the master key at its maximum on a Cluster. */
export interface EpochKeeper {
  /** `ReplayStore.ledgerEpoch`: written where missing, the latest epoch answered (see above). Concurrent calls share one. */
  ledgerEpoch(): Promise<number>;
  /**
   * A spend script's report of its slot's epoch (a Cluster): one later than the master key as this store knows it
   * raises the master key. Never rejects (a failed raise is tried again by the next spend that reports it).
   */
  saw(epoch: unknown): Promise<void>;
}

/** How a new epoch came: the ledger began (`'began'`), or a part of it (a Cluster's slot) began again (`'part'`). */
export type NewEpoch = (epochMs: number, how: 'began' | 'part') => void;

const CHUNK = 512;

/** One call of a script returning `{ flag, value }`. */
async function pair(connection: RedisConnection, script: string, sha: string, args: (string | number)[]): Promise<[number, string]> {
  const reply = await evalScript(connection, script, sha, args, 1);
  if (!Array.isArray(reply) || typeof reply[0] !== 'number' || typeof reply[1] !== 'string') {
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to the ledger epoch script') });
  }
  return [reply[0], reply[1]];
}

/**
 * Writes every slot's copy where it is missing, with one value `at` (`SET` where no key: a copy there is kept), and
 * answers the latest copy: a Cluster's ledger without its master key. Routed by ioredis, a few hundred at a time (a
 * Cluster pipeline would have to stay on one node).
 */
async function latestCopy(connection: RedisConnection, base: string, at: number): Promise<number> {
  const slots = epochKeys(base);
  const keys = new Set<string>();
  for (let slot = 0; slot < SLOTS; slot++) keys.add(slots(slot));
  const all = [...keys];
  let latest = at;
  for (let i = 0; i < all.length; i += CHUNK) {
    const replies = await Promise.all(all.slice(i, i + CHUNK).map((key) => pair(connection, COPY_SCRIPT, COPY_SHA, [key, at])));
    for (const [, value] of replies) latest = Math.max(latest, Number(value));
  }
  return latest;
}

export function createEpochKeeper(connection: RedisConnection, base: string, isCluster: boolean, onNew: NewEpoch): EpochKeeper {
  const master = `${base}%e`;
  /** The master key's value as this store last read or raised it. */
  let known: number | undefined;
  let running: Promise<number> | undefined;
  let raising: { value: number; done: Promise<void> } | undefined;
  const learn = (value: number): number => {
    if (!Number.isSafeInteger(value) || value < 0) throw new StoreUnavailableError({ cause: new Error('the ledger epoch is not a time') });
    known = Math.max(known ?? 0, value);
    return value;
  };

  const read = async (): Promise<number> => {
    if (!isCluster) {
      const [created, value] = await pair(connection, INIT_SCRIPT, INIT_SHA, [master]);
      if (created === 1) onNew(Number(value), 'began');
      return learn(Number(value));
    }
    const held = await connection.bounded(connection.commands.get(master));
    if (typeof held === 'string') return learn(Number(held));
    const at = redisMs(await connection.bounded(connection.commands.time()));
    const [state, value] = await pair(connection, RAISE_SCRIPT, RAISE_SHA, [master, await latestCopy(connection, base, at), 1]);
    if (state === 3) onNew(Number(value), 'began');
    return learn(Number(value));
  };

  const ledgerEpoch = (): Promise<number> => {
    running ??= read()
      .catch(fail)
      .finally(() => {
        running = undefined;
      });
    return running;
  };

  const raise = async (value: number): Promise<void> => {
    try {
      const [state, held] = await pair(connection, RAISE_SCRIPT, RAISE_SHA, [master, value, 0]);
      if (state === 2) return; // no master key: the next ledgerEpoch writes it from every copy
      learn(Number(held));
      if (state === 1) onNew(value, 'part');
    } catch {
      // The next spend that reports this epoch tries again; meanwhile older states are refused there (fail closed).
    }
  };

  const saw = (epoch: unknown): Promise<void> => {
    if (!isCluster) return Promise.resolve();
    const value = Number(epoch);
    if (!Number.isSafeInteger(value) || (known !== undefined && value <= known)) return Promise.resolve();
    if (raising !== undefined && value <= raising.value) return raising.done;
    const done = raise(value).finally(() => {
      if (raising?.done === done) raising = undefined;
    });
    raising = { value, done };
    return done;
  };

  return { ledgerEpoch, saw };
}
