import { createHash } from 'node:crypto';
import { evalScript } from './batching.js';
import type { RedisConnection } from './connection.js';
import { hashSlot } from './hash-slot.js';

/**
 * The ledger epoch: when this ledger (prefix and namespace) began, by Redis's clock. A script that spends an id
 * (consume, claim) reads it in the same step and writes it with `TIME` when it is missing — a Redis restarted without
 * persistence, flushed, or failed over to an empty replica has lost it with the ids — and refuses a `mintedAtMs` before
 * it (`ERR_LEDGER_LOST`). The keys have no expiry, so no `volatile-*` policy evicts them.
 *
 * One Redis: one key, `<ledger>%e`. A Cluster: a script touches one hash slot, and ids spread over all of them, so the
 * epoch is kept per slot — `<ledger>%e{<tag>}`, `<tag>` chosen so that the key lands in the slot (see
 * {@link epochKeys}) — beside the ids it covers: a master that restarts empty loses the epoch keys of exactly the slots
 * whose ids it lost, and the next spend in each writes a new one. Slot copies must exist before the ledger is used, or
 * the first spend in a slot would start an epoch after states already minted: the store that creates the ledger (its
 * `SET NX` of the master key `<ledger>%e` wins, see {@link initEpoch}) writes all 16384 copies with that same epoch
 * (`SET NX`: a copy already there, older or written since a loss, is kept). Copies are never written with an older
 * epoch than the master's creation, so a loss is never hidden.
 */
const INIT_SCRIPT = `
local v = redis.call('GET', KEYS[1])
if v then return { 0, v } end
local t = redis.call('TIME')
v = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[1], v)
return { 1, v }`;
const INIT_SHA = createHash('sha1').update(INIT_SCRIPT).digest('hex');

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

/**
 * Start-up: writes the ledger's epoch (`<base>%e`, with `TIME`) when it is missing. On a Cluster, the store that wrote
 * it writes every slot's copy with the same value (`SET NX`). Resolves the epoch (epoch ms) and whether this
 * call began the ledger. A failure rejects: the scripts still write a missing epoch by themselves.
 */
export async function initEpoch(connection: RedisConnection, base: string): Promise<{ epochMs: number; created: boolean }> {
  const reply = (await evalScript(connection, INIT_SCRIPT, INIT_SHA, [`${base}%e`], 1)) as [number, string];
  const created = reply[0] === 1;
  const isCluster = (connection.client as { isCluster?: unknown }).isCluster === true;
  if (created && isCluster) {
    const slots = epochKeys(base);
    const keys = new Set<string>();
    for (let slot = 0; slot < SLOTS; slot++) keys.add(slots(slot));
    // Routed by ioredis, a few thousand at a time (a Cluster pipeline would have to stay on one node).
    const set = connection.client as unknown as { set(key: string, value: string, nx: 'NX'): Promise<unknown> };
    const all = [...keys];
    for (let i = 0; i < all.length; i += 2048) {
      await connection.bounded(Promise.all(all.slice(i, i + 2048).map((key) => set.set(key, reply[1], 'NX'))));
    }
  }
  return { epochMs: Number(reply[1]), created };
}
