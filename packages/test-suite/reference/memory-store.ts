import type { ReplayStore } from '@mrtr/core';
import { StoreFullError, StoreUnavailableError } from '@mrtr/core/errors';
import { optionsObject } from '@mrtr/core/options';

export interface ExampleMemoryStoreOptions {
  /** Most ids held at once; when full, `consume` fails closed with `ERR_STORE_FULL`. @default 100_000 */
  maxEntries?: number;
  /** The clock (ms), for tests. @default Date.now */
  now?: () => number;
}

/** A single-process `ReplayStore` on a `Map` of id → expiresAtMs. Not shared between processes. */
export function createExampleMemoryStore(options?: ExampleMemoryStoreOptions): ReplayStore {
  // An unknown option (a misspelt `maxEntrys`) is a TypeError naming it, never silently ignored.
  const { maxEntries = 100_000, now = Date.now } = optionsObject('createExampleMemoryStore', options, { maxEntries: true, now: true });
  const ids = new Map<string, number>();
  let closed = false;
  const sweep = (at: number): void => {
    for (const [id, expiresAtMs] of ids) if (expiresAtMs < at) ids.delete(id);
  };
  return {
    // What it does beyond `consume`: nothing (no outcomes, no clock of its own, no leases, no epoch).
    capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
    // No `await` between the check and the write: no other consume can come between them (atomic first use).
    async consume(id: string, expiresAtMs: number): Promise<boolean> {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('consume: id must be a non-empty string');
      if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs))
        throw new TypeError('consume: expiresAtMs must be a finite number');
      if (closed) throw new StoreUnavailableError(); // never `true` when it cannot record
      const at = now();
      const held = ids.get(id);
      if (held !== undefined && held >= at) return false; // live up to and including its expiry
      if (held === undefined && ids.size >= maxEntries) sweep(at);
      if (held === undefined && ids.size >= maxEntries) throw new StoreFullError();
      ids.set(id, expiresAtMs);
      return true;
    },
    async close(): Promise<void> {
      closed = true; // idempotent: a second close changes nothing
      ids.clear();
    },
  };
}
