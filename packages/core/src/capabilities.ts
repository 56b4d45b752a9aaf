import type { ReplayStore, StoreCapabilities } from './interfaces.js';

/** The capabilities of a store that declares none beyond `consume` (an in-process ledger, no outcomes). */
export const NO_CAPABILITIES: StoreCapabilities = Object.freeze({
  shared: false,
  keyExchange: false,
  clock: false,
  leases: false,
  epoch: false,
});

/** The methods each capability brings; a store that declares one must have them. */
const METHODS = {
  outcomes: ['claim', 'record'],
  keyExchange: ['keyFingerprints'],
  clock: ['time'],
  leases: ['renew', 'release'],
  epoch: ['ledgerEpoch'],
} as const;

const checked = new WeakMap<object, StoreCapabilities>();

const flag = (caps: Record<string, unknown>, name: string): boolean => {
  const value = caps[name] ?? false;
  if (typeof value !== 'boolean') throw new TypeError(`store.capabilities.${name} must be a boolean`);
  return value;
};

const safeInt = (value: unknown, name: string, min: 0 | 1): number => {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new TypeError(`store.capabilities.${name} must be a safe integer of at least ${min}`);
  }
  return value;
};

/**
 * What a store declared it can do, checked once per store (cached): every flag a boolean, the bounds safe
 * integers, and the methods of every declared capability present (`outcomes`: `claim` and `record`; `keyExchange`:
 * `keyFingerprints`; `clock`: `time`; `leases`: `renew` and `release`, and `outcomes`; `epoch`: `ledgerEpoch`). A labelled `TypeError` when
 * the declaration is missing or does not match the store. Core, the adapter and `@mrtr/test-suite` read capabilities
 * only through this, never by the shape of the store.
 */
export function storeCapabilities(store: ReplayStore): StoreCapabilities {
  if (store === null || typeof store !== 'object') throw new TypeError('store must be an object implementing ReplayStore');
  const known = checked.get(store);
  if (known !== undefined) return known;
  const caps = (store as { capabilities?: unknown }).capabilities;
  if (caps === null || typeof caps !== 'object') {
    throw new TypeError('store.capabilities must be an object that declares what the store does (see StoreCapabilities)');
  }
  const declared = caps as Record<string, unknown>;
  let outcomes: StoreCapabilities['outcomes'];
  if (declared.outcomes !== undefined && declared.outcomes !== false) {
    const o = declared.outcomes as Record<string, unknown> | null;
    if (o === null || typeof o !== 'object') throw new TypeError('store.capabilities.outcomes must be an object or absent');
    outcomes = Object.freeze({
      maxOutcomeBytes: safeInt(o.maxOutcomeBytes, 'outcomes.maxOutcomeBytes', 0),
      outcomeBudgetBytes: safeInt(o.outcomeBudgetBytes, 'outcomes.outcomeBudgetBytes', 0),
    });
  }
  const result: StoreCapabilities = Object.freeze({
    shared: flag(declared, 'shared'),
    ...(declared.capacity === undefined ? {} : { capacity: safeInt(declared.capacity, 'capacity', 1) }),
    ...(outcomes === undefined ? {} : { outcomes }),
    keyExchange: flag(declared, 'keyExchange'),
    clock: flag(declared, 'clock'),
    leases: flag(declared, 'leases'),
    epoch: flag(declared, 'epoch'),
  });
  if (result.leases && result.outcomes === undefined) throw new TypeError('store.capabilities.leases needs outcomes (claim and record)');
  const has = (name: string) => typeof (store as unknown as Record<string, unknown>)[name] === 'function';
  if (!has('consume')) throw new TypeError('store.consume must be a function');
  for (const [capability, methods] of Object.entries(METHODS)) {
    const on = capability === 'outcomes' ? result.outcomes !== undefined : result[capability as 'clock'];
    for (const method of methods) {
      if (on && !has(method)) throw new TypeError(`store.capabilities.${capability} is declared but store.${method} is not a function`);
    }
  }
  checked.set(store, result);
  return result;
}
