// storeCompliance and taskStoreCompliance against the real Durable Object, inside workerd: the test Worker
// (test/workerd/suite-worker.ts) runs each suite test when asked by name; here each is an ordinary vitest test that
// asks for its result. The names come from registering the same tests here (test/workerd/tests.ts), and the
// Worker's own list must be the same: no test can go missing without failing.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleWorker, findWorkerd, fixture, freePort, REQUIRE_SERVICES, startWorkerd, type Workerd, workDir } from './workerd/harness.js';
import { DOCTOR_TOKEN, registerTests } from './workerd/tests.js';

const names: string[] = [];
registerTests(
  (name) => void names.push(name),
  () => {
    throw new Error('listing only');
  },
);

const found = findWorkerd();

// SQLite-backed objects need on-disk storage (workerd refuses SQL with inMemory): a folder of the run's own.
const config = (port: number, dir: string) => `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "suite", worker = .suite), (name = "disk", disk = (path = ${JSON.stringify(dir)}, writable = true))],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "suite")],
);
const suite :Workerd.Worker = (
  modules = [(name = "worker", esModule = embed "suite-worker.mjs")],
  compatibilityDate = "2025-09-01",
  compatibilityFlags = ["nodejs_compat"],
  durableObjectNamespaces = [
    (className = "MrtrStoreObject", uniqueKey = "mrtr-store-test", enableSql = true),
    (className = "BrokenObject", uniqueKey = "mrtr-broken-test", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [
    (name = "STORE", durableObjectNamespace = "MrtrStoreObject"),
    (name = "BROKEN", durableObjectNamespace = "BrokenObject"),
  ],
);
`;

if ('problem' in found) {
  if (REQUIRE_SERVICES) {
    it('workerd is required (MRTR_REQUIRE_SERVICES=1)', () => {
      throw new Error(found.problem);
    });
  } else {
    console.warn(`[store-cloudflare] compliance.test.ts: skipped, ${found.problem}`);
    it.skip(`workerd: ${found.problem}`, () => {});
  }
} else {
  describe('inside workerd', () => {
    let workerd: Workerd | undefined;
    let base = '';
    beforeAll(async () => {
      const dir = workDir();
      await bundleWorker(fixture('suite-worker.ts'), join(dir, 'suite-worker.mjs'));
      const port = await freePort();
      mkdirSync(join(dir, 'objects'));
      base = `http://127.0.0.1:${port}`;
      workerd = await startWorkerd(found.bin, dir, config(port, join(dir, 'objects')), `${base}/`);
    }, 120_000);
    afterAll(async () => {
      await workerd?.stop();
    });

    it('the Worker registered exactly the tests listed here', async () => {
      const listed = (await (await fetch(`${base}/tests`)).json()) as string[];
      expect(listed).toEqual(names);
      expect(names.length).toBeGreaterThan(40);
    });

    it("the doctor route answers the doctor's probes with the real objects' answers, and nothing without the token", async () => {
      const ask = (body: unknown, token = DOCTOR_TOKEN) =>
        fetch(`${base}/doctor`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const value = async (body: unknown) => {
        const response = await ask(body);
        expect(response.status).toBe(200);
        return ((await response.json()) as { value: unknown }).value;
      };
      const time = (await value({ op: 'time' })) as number;
      expect(Number.isSafeInteger(time)).toBe(true);
      const id = `doctor-${'A'.repeat(21)}${Date.now() % 10}`;
      expect(await value({ op: 'consume', id, expiresAtMs: time + 60_000 })).toBe(true);
      expect(await value({ op: 'consume', id, expiresAtMs: time + 60_000 })).toBe(false);
      const epoch = (await value({ op: 'ledgerEpoch' })) as number;
      expect(epoch).toBeGreaterThan(0);
      expect(epoch).toBeLessThanOrEqual((await value({ op: 'time' })) as number);
      const refused = await ask({ op: 'consume', id: `doctor-${'B'.repeat(22)}`, expiresAtMs: time + 60_000 }, `${DOCTOR_TOKEN}x`);
      expect(refused.status).toBe(401);
      expect((await ask({ op: 'consume', id: 'a-state-id', expiresAtMs: time + 60_000 })).status).toBe(400);
    });

    for (const name of names) {
      it(name, async () => {
        const response = await fetch(`${base}/run?name=${encodeURIComponent(name)}`, { method: 'POST' });
        const result = (await response.json()) as { ok: boolean; error?: string };
        if (!result.ok) throw new Error(`${result.error}\n--- workerd log ---\n${workerd?.log().slice(-2000)}`);
        expect(result.ok).toBe(true);
      });
    }
  });
}
