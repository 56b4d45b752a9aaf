import type { ReplayStore } from '@mrtr/core';
import { type OutcomeStoreLimits, storeCapabilities } from '@mrtr/core/store';
import { clockGroup } from './store/clock.js';
import { type StoreSuite, uniqueId } from './store/context.js';
import { epochGroup } from './store/epoch.js';
import { fingerprintsGroup } from './store/fingerprints.js';
import { guardGroup } from './store/guard.js';
import { leaseGroup } from './store/leases.js';
import type { StoreComplianceOptions, StoreFactory } from './store/options.js';
import { outcomesGroup } from './store/outcomes.js';
import { singleUseGroup } from './store/single-use.js';
import type { TestFn } from './types.js';

export type { LossyStore, StoreComplianceOptions, StoreFactory } from './store/options.js';

/** The single-use contract of a `ReplayStore`: `storeCompliance(it, ({ namespace }) => createMyStore({ namespace }))`. */
export function storeCompliance(it: TestFn, factory: StoreFactory, options: StoreComplianceOptions = {}): void {
  const label = options.name ?? 'store';
  const timeout = options.timeoutMs ?? 30_000;
  const parallel = Math.max(64, options.parallel ?? 64);
  const ttlMs = options.ttlMs ?? 1000;
  const clock = options.clock;
  const now = () => (clock ? clock.now() : Date.now());
  const test = (name: string, fn: () => Promise<void>): void => it(`${label} compliance: ${name}`, fn, timeout);

  // The outcome bounds go only to a store that records outcomes (another refuses them as unknown options): declared, or
  // read off a store built on the defaults, once.
  let records: Promise<boolean> | undefined;
  const recordsOutcomes = (): Promise<boolean> =>
    (records ??=
      options.outcomes !== undefined
        ? Promise.resolve(options.outcomes)
        : (async () => {
            const store = await factory({ namespace: uniqueId('ns') });
            try {
              return storeCapabilities(store).outcomes !== undefined;
            } finally {
              await store.close();
            }
          })());
  const withStore = async (
    fn: (store: ReplayStore, namespace: string) => Promise<void>,
    limits: OutcomeStoreLimits = {},
  ): Promise<void> => {
    const namespace = uniqueId('ns');
    const store = await factory({ namespace, ...(Object.keys(limits).length > 0 && (await recordsOutcomes()) ? limits : {}) });
    try {
      await fn(store, namespace);
    } finally {
      await store.close();
    }
  };

  /** Two instances, on the given namespaces (one shared namespace by default), closed afterwards. */
  const withTwo = async (
    fn: (a: ReplayStore, b: ReplayStore) => Promise<void>,
    namespaces: [string, string] = [uniqueId('shared'), ''],
  ): Promise<void> => {
    const a = await factory({ namespace: namespaces[0] });
    const b = await factory({ namespace: namespaces[1] === '' ? namespaces[0] : namespaces[1] });
    try {
      await fn(a, b);
    } finally {
      await a.close();
      await b.close();
    }
  };

  const suite: StoreSuite = { label, factory, options, clock, now, test, withStore, withTwo, parallel, ttlMs };
  singleUseGroup(suite);
  outcomesGroup(suite);
  fingerprintsGroup(suite);
  guardGroup(suite);
  // The groups of the capabilities a store declares (clock, leases, epoch): see StoreCapabilities in @mrtr/core.
  clockGroup(suite);
  leaseGroup(suite);
  epochGroup(suite);
}
