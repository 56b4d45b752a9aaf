// Rotation without a restart or a coordinator: two replicas (two providers, two guards, clocks 3 s apart) read one
// key file under continuous load while `scheduleRotation` (what `mrtr keys rotate --file` writes) publishes k2 and
// retires k1. Every state minted by one replica is opened by the other; none is refused, and none is sealed by a key
// whose notBefore the sealing replica's clock has not reached.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileKeySource } from '../src/node.js';
import { createStateGuard, generateKey, KeyProvider, type OpenedState } from '../src/index.js';
import { parseJwks, type ScheduledKey, scheduleRotation, toJwks } from '../src/entry-keys.js';
import { fakeClock, req, testCodec, testStore } from './helpers.js';

/** A small deterministic PRNG (mulberry32): the same run every time. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('a fleet rotating through one key file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-fleet-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('switches every replica within the clock skew: no state refused, none sealed before its key is active', async () => {
    const ttlMs = 20_000;
    const clockSkewMs = 5_000;
    const propagationMs = 30_000;
    const drift = 3_000; // replica B's clock runs this far ahead of A's (within clockSkewMs)
    const path = join(dir, 'keys.json');
    const write = (keys: ScheduledKey[]) => writeFileSync(path, `${JSON.stringify(toJwks(keys), null, 2)}\n`);
    write([{ kid: 'k1', secret: generateKey() }]);

    const clock = fakeClock();
    const clocks = { a: clock.now, b: () => clock.now() + drift };
    const store = testStore(clock.now);
    const replica = async (now: () => number) => {
      const provider = await KeyProvider.create({ load: fileKeySource(path), refreshMs: 0, now });
      const guard = createStateGuard({ keys: provider.keys, codec: testCodec, store, audience: 'fleet', ttlMs, clockSkewMs, now });
      return { provider, guard, now };
    };
    const a = await replica(clocks.a);
    const b = await replica(clocks.b);
    const replicas = [a, b] as const;

    const random = prng(36);
    const rotateAt = clock.now() + 20_000;
    let rotated = false;
    let notBefore = Number.POSITIVE_INFINITY;
    let dropAt = Number.POSITIVE_INFINITY;
    /** When each replica reads the file after the rotation: both inside the propagation window. */
    const refreshAt = [rotateAt + 1_000, rotateAt + 20_000];
    const refreshed = [false, false];

    interface Pending {
      token: string;
      dueAt: number;
      by: number;
      round: number;
    }
    let pending: Pending[] = [];
    const sealed = { k1: 0, k2: 0 };
    const mintOn = async (index: number, previous?: OpenedState) => {
      const r = replicas[index]!;
      const token = await r.guard.mint({ n: index }, req(), previous === undefined ? undefined : { continues: previous });
      const kid = token.slice(0, token.indexOf('.'));
      // Never sealed by a key that is not active yet by the sealing replica's clock, nor by one that should have stopped.
      if (kid === 'k2') expect(r.now()).toBeGreaterThanOrEqual(notBefore);
      else expect(r.now() < notBefore).toBe(true);
      sealed[kid as 'k1' | 'k2']++;
      // Presented to the other replica after up to ttl − skew.
      pending.push({ token, dueAt: clock.now() + Math.floor(random() * (ttlMs - clockSkewMs)), by: 1 - index, round: 1 });
    };

    const stepMs = 250;
    const steps = 800; // 200 s: rotation at 20 s, k2 seals from 50 s, k1 gone at 80 s
    let opened = 0;
    for (let step = 0; step < steps; step++) {
      clock.advance(stepMs);
      const t = clock.now();
      if (!rotated && t >= rotateAt) {
        const current = parseJwks(await fileKeySource(path)());
        const next = scheduleRotation(current, { kid: 'k2', secret: generateKey() }, { now: t, propagationMs, ttlMs, clockSkewMs });
        write(next);
        notBefore = next[0]!.notBefore!;
        dropAt = next[1]!.notAfter!;
        rotated = true;
      }
      for (const i of [0, 1]) {
        if (rotated && !refreshed[i] && t >= refreshAt[i]!) {
          expect(await replicas[i]!.provider.refresh()).toBe(true);
          refreshed[i] = true;
        }
      }
      await mintOn(step % 2);
      const due = pending.filter((p) => p.dueAt <= t);
      pending = pending.filter((p) => p.dueAt > t);
      for (const p of due) {
        const r = replicas[p.by]!;
        const state = await r.guard.open(p.token, req()); // throws (and fails the test) on any refusal
        opened++;
        if (state.flow.round < 4 && random() < 0.5) await mintOn(p.by, state);
      }
    }
    // Everything still pending opens too.
    for (const p of pending) {
      await replicas[p.by]!.guard.open(p.token, req());
      opened++;
    }
    expect(refreshed).toEqual([true, true]);
    expect(sealed.k1).toBeGreaterThan(50);
    expect(sealed.k2).toBeGreaterThan(50);
    expect(opened).toBe(sealed.k1 + sealed.k2);
    expect(clock.now()).toBeGreaterThan(dropAt);
    // k1 is gone from both rings once its notAfter has passed.
    expect(a.provider.keys.kids).toEqual(['k2']);
    expect(b.provider.keys.kids).toEqual(['k2']);
  });

  it('scheduleRotation publishes now, seals from now + propagation, drops the old keys ttl + 2 × skew later', () => {
    const keys = scheduleRotation(
      [
        { kid: 'k1', secret: generateKey(), notAfter: 5_000 },
        { kid: 'k0', secret: generateKey(), notAfter: 1_000 },
        { kid: 'k9', secret: generateKey(), notAfter: 10 },
      ],
      { kid: 'k2', secret: generateKey() },
      { now: 100, propagationMs: 1_000, ttlMs: 2_000, clockSkewMs: 500 },
    );
    expect(keys.map((k) => [k.kid, k.notBefore, k.notAfter])).toEqual([
      ['k2', 1_100, undefined],
      ['k1', undefined, 4_100],
      ['k0', undefined, 1_000],
    ]);
    expect(() =>
      scheduleRotation(
        [{ kid: 'k2', secret: generateKey() }],
        { kid: 'k2', secret: generateKey() },
        {
          now: 0,
          propagationMs: 0,
          ttlMs: 1,
          clockSkewMs: 0,
        },
      ),
    ).toThrow(TypeError);
  });
});
