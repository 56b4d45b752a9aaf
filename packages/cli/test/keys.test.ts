import { createHmacCodec } from '@mrtr/codec-hmac';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createStateGuard, generateKey, KeyProvider, KeyRing } from '@mrtr/core';
import { parseJwks, type ScheduledKey, toJwks } from '@mrtr/core/keys';
import { afterAll, describe, expect, it } from 'vitest';
import { K1, K2, KEYS, REQUEST, runCli } from './helpers.js';

const ENTRY = /^([A-Za-z0-9_-]{1,32}):([A-Za-z0-9_-]+)$/;

describe('mrtr keygen', () => {
  it('prints one MRTR_KEYS entry with a date-based kid and a 32-byte secret that core accepts', async () => {
    const r = await runCli(['keygen']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const line = r.stdout.trim();
    const [, kid, secret] = ENTRY.exec(line)!;
    expect(kid).toMatch(/^k\d{8}$/);
    expect(Buffer.from(secret!, 'base64url')).toHaveLength(32);
    expect(KeyRing.parse(line).primaryKid).toBe(kid);
  });

  it('takes --kid and --bytes, and --env prints MRTR_KEYS=… for a .env file', async () => {
    const r = await runCli(['keygen', '--kid', 'prod-1', '--bytes', '48', '--env']);
    expect(r.code).toBe(0);
    const m = /^MRTR_KEYS=prod-1:([A-Za-z0-9_-]+)\n$/.exec(r.stdout);
    expect(Buffer.from(m![1]!, 'base64url')).toHaveLength(48);
  });

  it('--json prints kid, bytes and entry; two runs never repeat a secret', async () => {
    const [a, b] = await Promise.all([runCli(['keygen', '--json']), runCli(['keygen', '--json'])]);
    const ja = JSON.parse(a.stdout);
    const jb = JSON.parse(b.stdout);
    expect(ja).toEqual({ kid: expect.stringMatching(/^k\d{8}$/), bytes: 32, entry: expect.stringMatching(ENTRY) });
    expect(ja.entry).not.toBe(jb.entry);
  });

  it.each([
    [['--kid', 'bad kid'], /--kid must be/],
    [['--kid', 'x'.repeat(33)], /--kid must be/],
    [['--bytes', '16'], /--bytes must be between 32 and 1024/],
    [['--bytes', 'lots'], /--bytes must be an integer/],
    [['--nope'], /Unknown option '--nope'/],
    [['extra'], /keygen takes no arguments/],
  ])('usage error %j → exit 2', async (args, message) => {
    const r = await runCli(['keygen', ...args]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(message);
  });
});

describe('mrtr keys check', () => {
  it('a valid ring: one line per key, how many keys open, which one seals; never a secret', async () => {
    const r = await runCli(['keys', 'check'], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('k2             32 bytes, base64url; primary: seals and opens');
    expect(r.stdout).toContain('k1             32 bytes, base64; opens only');
    expect(r.stdout).toContain('valid (MRTR_KEYS): 2 keys can open, "k2" seals');
    expect(r.stdout).not.toContain(K2.slice(3, 20));
    expect(r.stdout).not.toContain(K1.slice(3, 20));
  });

  it('reads the value from stdin with "-"', async () => {
    const r = await runCli(['keys', 'check', '-'], { input: `${K1}\n` });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('valid (stdin): 1 key can open, "k1" seals');
  });

  it('reports every problem: short secret, bad encoding, bad kid, duplicate kid, missing colon → exit 1', async () => {
    const short = Buffer.alloc(16, 1).toString('base64url');
    const value = `a:${short},b:not*base64,bad kid:${K2.slice(3)},k1:${K2.slice(3)},${K1},nocolon,`;
    const r = await runCli(['keys', 'check'], { env: { MRTR_KEYS: value } });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/fail +a +16 bytes, base64url; secret is 16 bytes; at least 32 are required/);
    expect(r.stdout).toMatch(/fail +b +secret is not valid base64url or standard base64/);
    expect(r.stdout).toMatch(/fail +entry 3 +32 bytes, base64url; kid must be 1-32 characters/);
    expect(r.stdout).toMatch(/fail +k1 +32 bytes, base64; duplicate kid "k1"/);
    expect(r.stdout).toMatch(/fail +entry 6 +not "kid:<secret>"/);
    expect(r.stdout).toMatch(/warn +ring +1 empty entry \(stray comma\) ignored/);
    expect(r.stdout).toMatch(/fail +ring +invalid \(MRTR_KEYS\)/);
    expect(r.stdout).not.toContain(short);
  });

  it('warns when one secret serves two kids (still valid)', async () => {
    const r = await runCli(['keys', 'check'], { env: { MRTR_KEYS: `${K2},k3:${K2.slice(3)}` } });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/warn +k3 +32 bytes, base64url; opens only; same secret as "k2"/);
  });

  it('--json gives the report', async () => {
    const r = await runCli(['keys', 'check', '--json'], { env: { MRTR_KEYS: `${K2},k2:${K1.slice(3)}` } });
    expect(r.code).toBe(1);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ ok: false, source: 'MRTR_KEYS', openers: 0 });
    expect(report.entries[1].problems).toEqual(['duplicate kid "k2"']);
  });

  it('an empty value is invalid', async () => {
    const r = await runCli(['keys', 'check', '-'], { input: ' , ' });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('no key: the value is empty');
  });

  it.each([
    [[], {}, /MRTR_KEYS is not set/],
    [[KEYS], { MRTR_KEYS: KEYS }, /no key value on the command line/],
    [['-', '-'], {}, /at most one argument/],
  ])('usage error %# → exit 2', async (args, env, message) => {
    const r = await runCli(['keys', 'check', ...args], { env });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });
});

describe('mrtr keys rotate', () => {
  const parseSteps = (stdout: string) => [...stdout.matchAll(/^ {2}MRTR_KEYS=(.+)$/gm)].map((m) => m[1]!);

  it('prints three steps with real values: new key non-primary, then primary, then the oldest dropped (--keep 2)', async () => {
    const r = await runCli(['keys', 'rotate', '--kid', 'k3'], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(0);
    const [step1, step2, step3] = parseSteps(r.stdout);
    const kids = (v: string) => KeyRing.parse(v).kids;
    expect(kids(step1!)).toEqual(['k2', 'k1', 'k3']);
    expect(kids(step2!)).toEqual(['k3', 'k2', 'k1']);
    expect(kids(step3!)).toEqual(['k3', 'k2']);
    expect(step1!.startsWith(`${K2},${K1},k3:`)).toBe(true);
    expect(r.stdout).toContain('Step 1: add k3 on every instance as a NON-primary key (k2 still seals)');
    expect(r.stdout).toContain('Step 2: only when step 1 is on every instance: make k3 the primary');
    expect(r.stdout).toContain('Step 3: when step 2 has been on every instance for 10m 10s (ttl 10m + 2 × skew 5 s): drop k1');
    expect(r.stdout).toContain(`Next value (after step 3): MRTR_KEYS=${step3}`);
    expect(r.stdout).toMatch(/contain secrets/);
  });

  it('the steps are safe: at every step, every ring opens what every other live ring seals', async () => {
    const r = await runCli(['keys', 'rotate', '--kid', 'k3', '--json'], { env: { MRTR_KEYS: KEYS } });
    const plan = JSON.parse(r.stdout);
    const rings = [KEYS, ...plan.steps.map((s: { value: string }) => s.value)];
    // During a rollout two neighbouring rings are live at once: each must open the other's tokens.
    for (let i = 0; i + 1 < rings.length - 1; i++) {
      for (const [a, b] of [
        [rings[i], rings[i + 1]],
        [rings[i + 1], rings[i]],
      ]) {
        const sealer = createStateGuard({ keys: KeyRing.parse(a), codec: createHmacCodec, audience: 'x' });
        const opener = createStateGuard({ keys: KeyRing.parse(b), codec: createHmacCodec, audience: 'x' });
        await expect(opener.verify(await sealer.mint({}, REQUEST), REQUEST)).resolves.toBeDefined();
      }
    }
    // Skipping step 1 is what the output warns about: the old ring cannot open the new primary's tokens.
    const sealer = createStateGuard({ keys: KeyRing.parse(rings[2]), codec: createHmacCodec, audience: 'x' });
    const old = createStateGuard({ keys: KeyRing.parse(KEYS), codec: createHmacCodec, audience: 'x' });
    await expect(old.verify(await sealer.mint({}, REQUEST), REQUEST)).rejects.toMatchObject({ code: 'ERR_KEY_UNKNOWN' });
    expect(plan).toMatchObject({ ok: true, newKid: 'k3', keep: 2, ttlMs: 600000, skewMs: 5000 });
    expect(plan.steps.map((s: { waitMs: number }) => s.waitMs)).toEqual([0, 0, 610000]);
    expect(plan.steps[2].dropped).toEqual(['k1']);
  });

  // Review finding (issue 19, item 8): the wait was ttl + skew, one skew short. The last state the old primary
  // sealed can come from an instance whose clock runs one skew ahead, and an instance on time accepts it until
  // exp + skew by its own clock: ttl + 2 × skew after it was sealed. Dropping the key earlier refuses it.
  it('step 3 waits ttl + 2 × skew: long enough for a state sealed by an instance running one skew ahead', async () => {
    const ttlMs = 60_000;
    const skewMs = 4_000;
    const r = await runCli(['keys', 'rotate', '--kid', 'k3', '--ttl-ms', String(ttlMs), '--skew-ms', String(skewMs), '--json'], {
      env: { MRTR_KEYS: KEYS },
    });
    const plan = JSON.parse(r.stdout);
    const waitMs = plan.steps[2].waitMs as number;
    expect(waitMs).toBe(ttlMs + 2 * skewMs);
    // Real time 0: the last instance still sealing with k2 (step 1's ring) runs skewMs ahead.
    let real = 0;
    const ahead = createStateGuard({
      keys: KeyRing.parse(plan.steps[0].value),
      codec: createHmacCodec,
      audience: 'x',
      ttlMs,
      clockSkewMs: skewMs,
      now: () => real + skewMs,
    });
    const onTime = createStateGuard({
      keys: KeyRing.parse(plan.steps[1].value),
      codec: createHmacCodec,
      audience: 'x',
      ttlMs,
      clockSkewMs: skewMs,
      now: () => real,
    });
    const state = await ahead.mint({}, REQUEST);
    // Accepted until the printed wait ends (so no shorter wait is safe), refused 1 ms later.
    real = waitMs;
    await expect(onTime.verify(state, REQUEST)).resolves.toMatchObject({ kid: 'k2' });
    real = waitMs + 1;
    await expect(onTime.verify(state, REQUEST)).rejects.toMatchObject({ code: 'ERR_STATE_EXPIRED' });
    expect(waitMs).toBeGreaterThan(ttlMs + skewMs);
  });

  it('--keep, --ttl-ms and --skew-ms shape step 3; a date kid is made unique', async () => {
    const r = await runCli(['keys', 'rotate', '--keep', '1', '--ttl-ms', '60000', '--skew-ms', '0', '--json'], { env: { MRTR_KEYS: K2 } });
    const plan = JSON.parse(r.stdout);
    expect(plan.newKid).toMatch(/^k\d{8}$/);
    expect(plan.steps[2]).toMatchObject({ dropped: ['k2'], waitMs: 60000, kids: [plan.newKid] });
    const again = await runCli(['keys', 'rotate', '--json'], { env: { MRTR_KEYS: plan.steps[1].value } });
    expect(JSON.parse(again.stdout).newKid).toBe(`${plan.newKid}-2`);
    const keepAll = await runCli(['keys', 'rotate', '--keep', '5'], { env: { MRTR_KEYS: KEYS } });
    expect(keepAll.stdout).toContain('nothing to drop (--keep 5 keeps all 3 keys)');
  });

  it('reads stdin with "-"', async () => {
    const r = await runCli(['keys', 'rotate', '-', '--kid', 'n', '--json'], { input: K1 });
    expect(JSON.parse(r.stdout).steps[1].kids).toEqual(['n', 'k1']);
  });

  it('an invalid current value → exit 1 with the reasons', async () => {
    const r = await runCli(['keys', 'rotate'], { env: { MRTR_KEYS: 'k1:short' } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/the current value \(MRTR_KEYS\) is invalid: k1: secret is not valid base64url/);
    const j = await runCli(['keys', 'rotate', '--json'], { env: { MRTR_KEYS: `${K1},${K1}` } });
    expect(j.code).toBe(1);
    expect(JSON.parse(j.stdout)).toEqual({ ok: false, source: 'MRTR_KEYS', problems: ['k1: duplicate kid "k1"'] });
  });

  it.each([
    [['--kid', 'k2'], /--kid "k2" is already in the ring/],
    [['--kid', 'no way'], /--kid must be/],
    [['--keep', '0'], /--keep must be between 1 and 32/],
    [['--ttl-ms=-5'], /--ttl-ms must be an integer/],
    [['--skew-ms', '700000'], /--skew-ms must be between 0 and 600000/],
  ])('usage error %j → exit 2', async (args, message) => {
    const r = await runCli(['keys', 'rotate', ...args], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('needs a value: no MRTR_KEYS → exit 2', async () => {
    const r = await runCli(['keys', 'rotate']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/MRTR_KEYS is not set/);
  });
});

describe('key files (JWK Sets): keygen --jwks, keys check --file, keys rotate --file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-cli-keys-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('keygen --jwks prints a JWK Set of one oct key that core reads', async () => {
    const r = await runCli(['keygen', '--jwks', '--kid', 'j1', '--bytes', '48']);
    expect(r.code).toBe(0);
    const keys = parseJwks(r.stdout);
    expect(keys).toHaveLength(1);
    expect(keys[0]!.kid).toBe('j1');
    expect(keys[0]!.secret).toHaveLength(48);
    expect((await runCli(['keygen', '--jwks', '--env'])).code).toBe(2);
  });

  it('keys check reads a JWK Set from MRTR_KEYS, stdin and --file, with each key schedule; never a secret', async () => {
    const path = join(dir, 'check.json');
    const now = Date.now();
    const set = toJwks([
      { kid: 'k3', secret: generateKey(), notBefore: now + 3_600_000 },
      { kid: 'k2', secret: generateKey(), notAfter: now + 7_200_000 },
      { kid: 'k1', secret: generateKey(), notAfter: now - 1 },
    ]);
    const text = JSON.stringify(set);
    writeFileSync(path, text);
    for (const run of [
      runCli(['keys', 'check', '--file', path]),
      runCli(['keys', 'check', '-'], { input: text }),
      runCli(['keys', 'check'], { env: { MRTR_KEYS: text } }),
    ]) {
      const r = await run;
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/k3 .*published: opens, seals later; seals from /);
      expect(r.stdout).toMatch(/k2 .*seals now and opens; drops at /);
      expect(r.stdout).toMatch(/k1 .*gone: neither seals nor opens/);
      expect(r.stdout).toMatch(/valid JWK Set .*: 2 keys can open, "k2" seals/);
      for (const jwk of set.keys) expect(r.stdout).not.toContain(jwk.k.slice(0, 12));
    }
    const json = JSON.parse((await runCli(['keys', 'check', '--file', path, '--json'])).stdout);
    expect(json).toMatchObject({ ok: true, format: 'jwks', primaryKid: 'k2', source: path });
    // No key may seal now: invalid, exit 1.
    writeFileSync(path, JSON.stringify(toJwks([{ kid: 'k4', secret: generateKey(), notBefore: now + 3_600_000 }])));
    const later = await runCli(['keys', 'check', '--file', path]);
    expect(later.code).toBe(1);
    expect(later.stdout).toContain('no key may seal now');
    // Strict: an asymmetric member or a short key is refused, naming neither secret.
    writeFileSync(path, JSON.stringify({ keys: [{ ...set.keys[1], d: 'x' }] }));
    expect((await runCli(['keys', 'check', '--file', path])).code).toBe(1);
    expect((await runCli(['keys', 'check', '--file', join(dir, 'absent.json')])).code).toBe(2);
  });

  it('keys rotate --file writes the schedule into the file: publish now, seal from now + propagation, drop ttl + 2 × skew later', async () => {
    const path = join(dir, 'rotate.json');
    writeFileSync(path, `k1:${generateKey()}\n`); // an MRTR_KEYS value becomes a JWK Set
    const before = Date.now();
    const r = await runCli([
      'keys',
      'rotate',
      '--file',
      path,
      '--kid',
      'k2',
      '--propagation-ms',
      '60000',
      '--ttl-ms',
      '20000',
      '--skew-ms',
      '1000',
    ]);
    const after = Date.now();
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('k2 (32 bytes): published now, seals from ');
    expect((statSync(path).mode & 0o777).toString(8)).toBe('600');
    const keys = parseJwks(readFileSync(path, 'utf8'));
    expect(keys.map((k) => k.kid)).toEqual(['k2', 'k1']);
    const [k2, k1] = keys as [ScheduledKey, ScheduledKey];
    expect(k2.notBefore).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 60_000 - 1000);
    expect(k2.notBefore).toBeLessThanOrEqual(after + 60_000);
    expect(k2.notAfter).toBeUndefined();
    expect(k1.notAfter! - k2.notBefore!).toBe(20_000 + 2 * 1_000);
    for (const key of keys)
      expect(r.stdout).not.toContain(
        Buffer.from(key.secret as Uint8Array)
          .toString('base64url')
          .slice(0, 12),
      );
    // A second rotation keeps k1's earlier drop and gives k2 one.
    const again = JSON.parse((await runCli(['keys', 'rotate', '--file', path, '--kid', 'k3', '--json'])).stdout);
    expect(again).toMatchObject({
      ok: true,
      newKid: 'k3',
      drops: [{ kid: 'k2' }, { kid: 'k1', at: new Date(k1.notAfter!).toISOString() }],
    });
    // The file is what KeyProvider reads.
    const provider = await KeyProvider.create({ load: () => readFileSync(path, 'utf8'), refreshMs: 0 });
    expect(provider.keys.primaryKid).toBe('k1');
    expect((await runCli(['keys', 'rotate', '--file', path, '--kid', 'k3'])).code).toBe(2);
    expect((await runCli(['keys', 'rotate', '--propagation-ms', '5'], { env: { MRTR_KEYS: KEYS } })).code).toBe(2);
  });
});
