// The doctor route in Node (Request/Response are globals): what it refuses, and that a store failure leaves only its
// code. The same route over the real objects runs in workerd (compliance.test.ts, "the doctor route …").
import { MrtrError, type ReplayStore } from '@mrtr/core';
import { describe, expect, it } from 'vitest';
import { createDoctorRoute } from '../src/index.js';

const TOKEN = 'a-doctor-token-of-at-least-32-characters';
const NOW = Date.now();

function fakeStore(fail?: Error): ReplayStore & { consumed: string[] } {
  const seen = new Set<string>();
  const consumed: string[] = [];
  return {
    capabilities: { shared: true, keyExchange: false, clock: true, leases: false, epoch: true },
    consumed,
    async consume(id) {
      if (fail !== undefined) throw fail;
      consumed.push(id);
      if (seen.has(id)) return false;
      seen.add(id);
      return true;
    },
    time: async () => 1_700_000_000_000,
    ledgerEpoch: async () => 1_600_000_000_000,
    close: async () => {},
  };
}

const post = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) =>
  new Request('https://worker.example/.well-known/mrtr-doctor', { method: 'POST', headers, body: JSON.stringify(body) });
const ID = `doctor-${'x'.repeat(22)}`;

describe('createDoctorRoute', () => {
  it('refuses a token shorter than 32 characters and a store that is not one', () => {
    expect(() => createDoctorRoute({ store: fakeStore(), token: 'short' })).toThrow(RangeError);
    expect(() => createDoctorRoute({ store: {} as ReplayStore, token: TOKEN })).toThrow(TypeError);
  });

  it('answers the three probes with the store’s answers', async () => {
    const route = createDoctorRoute({ store: fakeStore(), token: TOKEN });
    const value = async (body: unknown) => ((await (await route(post(body))).json()) as { value: unknown }).value;
    expect(await value({ op: 'consume', id: ID, expiresAtMs: NOW + 60_000 })).toBe(true);
    expect(await value({ op: 'consume', id: ID, expiresAtMs: NOW + 60_000 })).toBe(false);
    expect(await value({ op: 'time' })).toBe(1_700_000_000_000);
    expect(await value({ op: 'ledgerEpoch' })).toBe(1_600_000_000_000);
  });

  it('refuses without the token (401), anything but POST (405) and anything but the probes (400); nothing reaches the store', async () => {
    const store = fakeStore();
    const route = createDoctorRoute({ store, token: TOKEN });
    const consume = { op: 'consume', id: ID, expiresAtMs: NOW + 60_000 };
    expect((await route(post(consume, {}))).status).toBe(401);
    expect((await route(post(consume, { authorization: `Bearer ${TOKEN.slice(0, -1)}` }))).status).toBe(401);
    expect((await route(post(consume, { authorization: TOKEN }))).status).toBe(401);
    expect((await route(new Request('https://worker.example/d', { headers: { authorization: `Bearer ${TOKEN}` } }))).status).toBe(405);
    for (const body of [
      { op: 'consume', id: 'a-real-state-jti', expiresAtMs: NOW + 60_000 }, // not a probe id
      { op: 'consume', id: `${ID}y`, expiresAtMs: NOW + 60_000 },
      { op: 'consume', id: ID, expiresAtMs: NOW + 6 * 60_000 }, // past the probes' lifetime
      { op: 'consume', id: ID, expiresAtMs: '1' },
      { op: 'claim', id: ID },
      [consume],
      { op: 'time', pad: 'x'.repeat(600) }, // over the body cap
    ]) {
      expect((await route(post(body))).status, JSON.stringify(body).slice(0, 60)).toBe(400);
    }
    expect(store.consumed).toEqual([]);
  });

  it('a store failure answers 503 with its code only (the cause stays in the Worker)', async () => {
    const cause = new Error('secret backend detail');
    const down = createDoctorRoute({ store: fakeStore(new MrtrError('ERR_STORE_UNAVAILABLE', { cause })), token: TOKEN });
    const response = await down(post({ op: 'consume', id: ID, expiresAtMs: NOW + 60_000 }));
    expect(response.status).toBe(503);
    expect(await response.text()).toBe('{"error":"ERR_STORE_UNAVAILABLE"}');
    const odd = createDoctorRoute({ store: fakeStore(new Error('secret backend detail')), token: TOKEN });
    expect(await (await odd(post({ op: 'consume', id: ID, expiresAtMs: NOW + 60_000 }))).text()).toBe('{"error":"ERR_STORE_UNAVAILABLE"}');
  });
});
