import { MrtrError, type ReplayStore } from '@mrtr/core';
import { fail, ok, rejectsMrtr } from './assert.js';
import type { TestFn } from './types.js';

export interface StoreComplianceOptions {
  /**
   * A fake clock the store was built on. Without it the expiry tests sleep in real time for about
   * `ttlMs` twice.
   */
  clock?: { now(): number; advance(ms: number): void | Promise<void> };
  /** Real-time TTL for the expiry tests when there is no fake clock. @default 1000 */
  ttlMs?: number;
  /** A store pointed at a backend that does not answer; its consume must reject with ERR_STORE_UNAVAILABLE. */
  unreachable?: () => ReplayStore | Promise<ReplayStore>;
  /** Concurrent consumers of one id; values below 64 are raised to 64. @default 64 */
  parallel?: number;
  /** Stores made by two factory calls with one namespace share one ledger (false for in-process stores). @default true */
  sharedBackend?: boolean;
  /** Label used in test names. @default "store" */
  name?: string;
  /** Per-test timeout in ms. @default 30_000 */
  timeoutMs?: number;
}

export type StoreFactory = (options: { namespace: string }) => ReplayStore | Promise<ReplayStore>;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
let sequence = 0;
const uniqueId = (tag: string) => `${tag}:${process.pid}:${Date.now().toString(36)}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;

/** The single-use contract of a `ReplayStore`: `storeCompliance(it, ({ namespace }) => createMyStore({ namespace }))`. */
export function storeCompliance(it: TestFn, factory: StoreFactory, options: StoreComplianceOptions = {}): void {
  const label = options.name ?? 'store';
  const timeout = options.timeoutMs ?? 30_000;
  const parallel = Math.max(64, options.parallel ?? 64);
  const ttlMs = options.ttlMs ?? 1000;
  const clock = options.clock;
  const now = () => (clock ? clock.now() : Date.now());
  const test = (name: string, fn: () => Promise<void>): void => it(`${label} compliance: ${name}`, fn, timeout);

  const withStore = async (fn: (store: ReplayStore, namespace: string) => Promise<void>): Promise<void> => {
    const namespace = uniqueId('ns');
    const store = await factory({ namespace });
    try {
      await fn(store, namespace);
    } finally {
      await store.close();
    }
  };

  test('consume is true the first time and false every later time', async () => {
    await withStore(async (store) => {
      const id = uniqueId('first');
      const exp = now() + 60_000;
      ok((await store.consume(id, exp)) === true, 'the first consume must resolve true');
      for (let i = 0; i < 3; i++) ok((await store.consume(id, exp)) === false, 'a later consume must resolve false');
      ok((await store.consume(`${id}x`, exp)) === true, 'another id is independent');
    });
  });

  test('accepts long and unicode ids as distinct keys', async () => {
    await withStore(async (store) => {
      const exp = now() + 60_000;
      const long = `${uniqueId('long')}:${'a'.repeat(300)}`;
      ok((await store.consume(long, exp)) === true, 'a long id must be accepted');
      ok((await store.consume(long.slice(0, -1), exp)) === true, 'a prefix of an id is a different id');
      const unicode = `${uniqueId('u')}:ünï:😀`;
      ok((await store.consume(unicode, exp)) === true, 'a unicode id must be accepted');
      ok((await store.consume(unicode, exp)) === false, 'a unicode id must be single-use');
    });
  });

  test(`${parallel} parallel consumes of one id give exactly one true`, async () => {
    await withStore(async (store) => {
      for (let round = 0; round < 3; round++) {
        const id = uniqueId('race');
        const exp = now() + 60_000;
        const results = await Promise.all(Array.from({ length: parallel }, () => store.consume(id, exp)));
        const trues = results.filter((r) => r === true).length;
        ok(trues === 1, `expected exactly one true, got ${trues}`);
        ok(results.every((r) => r === true || r === false), 'every consume must resolve a boolean');
      }
    });
  });

  test('an id stays consumed until its expiresAtMs and is consumable again after it', async () => {
    await withStore(async (store) => {
      const id = uniqueId('exp');
      const start = now();
      const ttl = clock ? 60_000 : ttlMs;
      const exp = start + ttl;
      ok((await store.consume(id, exp)) === true, 'first consume must be true');
      if (clock) await clock.advance(ttl - 1);
      else await sleep(Math.floor(ttl / 2));
      ok(now() < exp, 'test clock must still be before expiry');
      ok((await store.consume(id, exp)) === false, 'an id must not expire before expiresAtMs');
      if (clock) {
        // The guard accepts a state up to and including its expiry, so the id is live at exactly expiresAtMs.
        await clock.advance(1);
        ok(now() === exp, 'test clock must be at expiry');
        ok((await store.consume(id, exp)) === false, 'an id must still be live at exactly expiresAtMs');
        await clock.advance(1);
      }
      else await sleep(exp - Date.now() + Math.max(250, ttl));
      ok(now() > exp, 'test clock must be past expiry');
      ok((await store.consume(id, now() + ttl)) === true, 'an expired id must be consumable again');
      ok((await store.consume(id, now() + ttl)) === false, 'and single-use again');
    });
  });

  test('namespaces do not collide', async () => {
    const id = uniqueId('ns-shared-id');
    const exp = now() + 60_000;
    const a = await factory({ namespace: uniqueId('nsA') });
    const b = await factory({ namespace: uniqueId('nsB') });
    try {
      ok((await a.consume(id, exp)) === true, 'namespace A: first consume true');
      ok((await b.consume(id, exp)) === true, 'namespace B: the same id is independent');
      ok((await a.consume(id, exp)) === false, 'namespace A: second consume false');
    } finally {
      await a.close();
      await b.close();
    }
  });

  if (options.sharedBackend !== false) {
    test('two instances on one namespace share the ledger', async () => {
      const namespace = uniqueId('shared');
      const a = await factory({ namespace });
      const b = await factory({ namespace });
      try {
        const id = uniqueId('fleet');
        const exp = now() + 60_000;
        ok((await a.consume(id, exp)) === true, 'instance A consumes first');
        ok((await b.consume(id, exp)) === false, 'instance B must see the id as used');
      } finally {
        await a.close();
        await b.close();
      }
    });
  }

  test('rejects invalid arguments with TypeError/RangeError, never true', async () => {
    await withStore(async (store) => {
      const bad: [unknown, unknown][] = [
        ['', now() + 1000],
        [42, now() + 1000],
        [undefined, now() + 1000],
        [uniqueId('bad'), Number.NaN],
        [uniqueId('bad'), Number.POSITIVE_INFINITY],
        [uniqueId('bad'), '123'],
      ];
      for (const [id, exp] of bad) {
        let outcome: unknown;
        try {
          outcome = await store.consume(id as string, exp as number);
        } catch (error) {
          ok(error instanceof TypeError || error instanceof RangeError, `misuse must throw TypeError/RangeError (got ${String(error)})`);
          continue;
        }
        fail(`consume(${String(id)}, ${String(exp)}) must throw, resolved ${String(outcome)}`);
      }
    });
  });

  test('close() is idempotent and a closed store never accepts', async () => {
    const store = await factory({ namespace: uniqueId('close') });
    ok((await store.consume(uniqueId('c'), now() + 60_000)) === true, 'an open store consumes');
    await store.close();
    await store.close();
    const error = await rejectsMrtr(() => store.consume(uniqueId('after-close'), now() + 60_000), 'consume after close');
    ok(MrtrError.is(error), 'consume after close must reject with a MrtrError');
  });

  if (options.unreachable) {
    const unreachable = options.unreachable;
    test('an unreachable backend gives ERR_STORE_UNAVAILABLE, never true', async () => {
      const store = await unreachable();
      try {
        for (let i = 0; i < 3; i++) {
          await rejectsMrtr(() => store.consume(uniqueId('down'), Date.now() + 60_000), 'consume on a dead backend', [
            'ERR_STORE_UNAVAILABLE',
          ]);
        }
      } finally {
        await store.close();
      }
    });
  }
}
