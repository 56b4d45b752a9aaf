// The test Worker: runs one registered test per request (`POST /run?name=…`) and answers its result as JSON;
// `GET /tests` lists them. Bundled by the Node test and served by workerd with the real Durable Object.
import type { DurableObjectStateLike, SqlStorageLike } from '../../src/index.js';
import { createDoctorRoute, createDurableObjectStore, MrtrStoreObject as RealStoreObject } from '../../src/index.js';
import { clock, DOCTOR_TOKEN, registerTests, type TestEnv } from './tests.js';

/**
 * The store's object on the tests' clock (the same isolate as the test Worker). `POST /test/lose-epoch` deletes the
 * epoch row and every id, as storage lost under a running object would (the next spend starts a new epoch);
 * `POST /test/epoch` answers the epoch row as it is (`null` when missing), writing nothing.
 */
export class MrtrStoreObject extends RealStoreObject {
  readonly #sql: SqlStorageLike;
  constructor(state: DurableObjectStateLike, env?: unknown) {
    super(state, env, { now: clock.now });
    this.#sql = state.storage.sql;
  }
  override async fetch(request: Request): Promise<Response> {
    const path = new URL(request.url).pathname;
    if (path === '/test/epoch') {
      const row = this.#sql.exec("SELECT v FROM mrtr_meta WHERE k = 'epoch'").toArray()[0];
      return Response.json({ epoch: row === undefined ? null : Number(row.v) });
    }
    if (path !== '/test/lose-epoch') return super.fetch(request);
    this.#sql.exec("DELETE FROM mrtr_meta WHERE k = 'epoch'");
    this.#sql.exec('DELETE FROM mrtr_ids');
    this.#sql.exec("UPDATE mrtr_meta SET v = 0 WHERE k IN ('ids', 'outcome_bytes')");
    return Response.json({ lost: true });
  }
}

/** The object of the BROKEN namespace: every request fails, as a store whose backend cannot be reached. */
export class BrokenObject {
  async fetch(): Promise<Response> {
    throw new Error('this object is down');
  }
}

interface Registered {
  fn: () => Promise<void> | void;
  timeout: number;
}
const tests = new Map<string, Registered>();
let current: TestEnv | undefined;
registerTests(
  (name, fn, timeout) => {
    if (tests.has(name)) throw new Error(`duplicate test name: ${name}`);
    tests.set(name, { fn, timeout: timeout ?? 30_000 });
  },
  () => {
    if (current === undefined) throw new Error('no env');
    return current;
  },
);

export default {
  async fetch(request: Request, env: TestEnv): Promise<Response> {
    current = env;
    const url = new URL(request.url);
    // The doctor route over the real objects, as a Worker mounts it (what `mrtr doctor --store cloudflare` calls).
    if (url.pathname === '/doctor')
      return createDoctorRoute({ store: createDurableObjectStore({ objects: env.STORE, namespace: 'doctor' }), token: DOCTOR_TOKEN })(
        request,
      );
    if (url.pathname === '/tests') return Response.json([...tests.keys()]);
    if (url.pathname !== '/run') return new Response('ok');
    const name = url.searchParams.get('name') ?? '';
    const test = tests.get(name);
    if (test === undefined) return Response.json({ ok: false, error: `no test named ${name}` });
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        Promise.resolve().then(test.fn),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`timed out after ${test.timeout} ms`)), test.timeout);
        }),
      ]);
      return Response.json({ ok: true });
    } catch (error) {
      return Response.json({
        ok: false,
        error: error instanceof Error ? `${error.name}: ${error.message}\n${error.stack ?? ''}` : String(error),
      });
    } finally {
      clearTimeout(timer);
    }
  },
};
