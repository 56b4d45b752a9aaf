// Key sources: MRTR_KEYS text, a JWK Set of oct keys (strict), the environment (fail closed), HKDF derivation from an
// application's own secret, and a key file re-read when it changes.
import { hkdfSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileKeySource } from '../src/node.js';
import { generateKey, KeyRing, keysFromEnv } from '../src/index.js';
import { deriveKey, parseJwks, parseKeySet, toJwks } from '../src/entry-keys.js';

const secret = () => randomBytes(32).toString('base64url');
const jwk = (over: Record<string, unknown> = {}) => ({ kty: 'oct', kid: 'k1', k: secret(), ...over });

describe('parseKeySet', () => {
  it('reads MRTR_KEYS (first seals) and a JWK Set text alike; an empty value is an error, never an empty ring', () => {
    const [a, b] = [secret(), secret()];
    expect(parseKeySet(`k2:${a}, k1:${b}`).map((k) => k.kid)).toEqual(['k2', 'k1']);
    const set = JSON.stringify({ keys: [{ kty: 'oct', kid: 'k2', k: a, nbf: 1_900_000_000 }] });
    expect(parseKeySet(`  ${set}\n`)).toEqual([{ kid: 'k2', secret: expect.any(Uint8Array), notBefore: 1_900_000_000_000 }]);
    for (const empty of ['', '  ', ',', '\n']) {
      expect(() => (empty.trim() === '' ? parseKeySet(empty) : new KeyRing(parseKeySet(empty)))).toThrow(RangeError);
    }
    expect(() => parseKeySet(42 as never)).toThrow(TypeError);
  });
});

describe('parseJwks', () => {
  it('reads oct keys with kid, and nbf/exp in seconds as the schedule in ms', () => {
    const keys = parseJwks({
      keys: [jwk({ kid: 'a', nbf: 100.5, exp: 200 }) as never, jwk({ kid: 'b', alg: 'HS256', use: 'sig' }) as never],
    });
    expect(keys.map((k) => [k.kid, k.notBefore, k.notAfter])).toEqual([
      ['a', 100_500, 200_000],
      ['b', undefined, undefined],
    ]);
  });

  it('refuses, with a labelled error and never the secret, everything but a set of oct keys', () => {
    const k = secret();
    const bad: [unknown, typeof TypeError | typeof RangeError][] = [
      ['not json', TypeError],
      ['[]', TypeError],
      [{ keys: {} }, TypeError],
      [{ keys: [], extra: 1 }, TypeError],
      [{ keys: [jwk({ kty: 'RSA' })] }, TypeError],
      [{ keys: [jwk({ kid: undefined })] }, TypeError],
      [{ keys: [jwk({ k: `${k}=` })] }, TypeError],
      [{ keys: [jwk({ k: k.replace(/./, '+') })] }, TypeError],
      [{ keys: [jwk({ k: randomBytes(31).toString('base64url') })] }, RangeError],
      [{ keys: [jwk({ d: 'x' })] }, TypeError],
      [{ keys: [jwk({ nbf: '1' })] }, TypeError],
      [{ keys: [jwk({ exp: -1 })] }, TypeError],
      [{ keys: [jwk({ key_ops: [1] })] }, TypeError],
      [{ keys: [null] }, TypeError],
      [{ keys: Array.from({ length: 65 }, (_, i) => jwk({ kid: `k${i}` })) }, RangeError],
      ['x'.repeat(70_000), RangeError],
    ];
    for (const [input, type] of bad) {
      const text = typeof input === 'string' ? input : JSON.stringify(input);
      let error: unknown;
      try {
        parseJwks(text);
      } catch (e) {
        error = e;
      }
      expect(error, text.slice(0, 80)).toBeInstanceOf(type);
      expect(String((error as Error).message)).not.toContain(k);
    }
    // Validation of the ring itself (duplicate kid, nbf after exp) happens where keys are used.
    expect(() => new KeyRing(parseJwks({ keys: [jwk(), jwk()] as never }))).toThrow(/duplicate kid/);
  });

  it('toJwks writes what parseJwks reads', () => {
    const keys = [
      { kid: 'k2', secret: generateKey(), notBefore: 1_900_000_000_000, notAfter: 1_900_000_900_000 },
      { kid: 'k1', secret: randomBytes(32) },
    ];
    const back = parseJwks(JSON.stringify(toJwks(keys)));
    expect(back.map((k) => [k.kid, k.notBefore, k.notAfter])).toEqual([
      ['k2', 1_900_000_000_000, 1_900_000_900_000],
      ['k1', undefined, undefined],
    ]);
    expect(Buffer.from(back[1]!.secret as Uint8Array).equals(keys[1]!.secret as Buffer)).toBe(true);
  });
});

describe('keysFromEnv', () => {
  it('fails closed: unset is an error unless an ephemeral key is asked for; set but empty is always an error', () => {
    expect(() => keysFromEnv({})).toThrow(/MRTR_KEYS is not set/);
    const ephemeral = keysFromEnv({}, { unset: 'ephemeral' });
    expect(ephemeral.ephemeral).toBe(true);
    for (const empty of ['', '   ', '\n']) {
      expect(() => keysFromEnv({ MRTR_KEYS: empty })).toThrow(/set but empty/);
      expect(() => keysFromEnv({ MRTR_KEYS: empty }, { unset: 'ephemeral' })).toThrow(/set but empty/);
    }
    const ring = keysFromEnv({ MRTR_KEYS: `k2:${secret()},k1:${secret()}` });
    expect([ring.primaryKid, ring.ephemeral]).toEqual(['k2', false]);
    expect(keysFromEnv({ KEYS: JSON.stringify({ keys: [jwk({ kid: 'j1' })] }) }, { name: 'KEYS' }).kids).toEqual(['j1']);
    expect(() => keysFromEnv({ MRTR_KEYS: JSON.stringify({ keys: [jwk({ nbf: 1 })] }) })).toThrow(/KeyProvider/);
    expect(() => keysFromEnv({}, { unset: 'random' as never })).toThrow(TypeError);
  });
});

describe('deriveKey', () => {
  it('is HKDF-SHA256 of the app secret under a label: stable, separated per label, never the secret itself', async () => {
    const appSecret = randomBytes(48).toString('hex');
    const a = await deriveKey(appSecret, { kid: 'd1', label: 'mrtr/2026-12' });
    const expected = new Uint8Array(hkdfSync('sha256', Buffer.from(appSecret), 'mrtr/derived-key/v1', 'mrtr/2026-12', 32));
    expect(a).toEqual({ kid: 'd1', secret: expected });
    const again = await deriveKey(Buffer.from(appSecret), { kid: 'd1', label: 'mrtr/2026-12' });
    expect(again.secret).toEqual(a.secret);
    const other = await deriveKey(appSecret, { kid: 'd2', label: 'mrtr/2027-01' });
    expect(other.secret).not.toEqual(a.secret);
    expect(new KeyRing([a]).primaryKid).toBe('d1');
    expect(() => deriveKey('short password', { kid: 'd1', label: 'x' })).toThrow(RangeError);
    expect(() => deriveKey(appSecret, { kid: 'd1', label: '' })).toThrow(TypeError);
  });
});

describe('fileKeySource', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-keys-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads the file, and again only when it changed', async () => {
    const path = join(dir, 'keys.json');
    const first = JSON.stringify(toJwks([{ kid: 'k1', secret: generateKey() }]));
    writeFileSync(path, first);
    utimesSync(path, 1_700_000_000, 1_700_000_000);
    const load = fileKeySource(path);
    expect(await load()).toBe(first);
    // Unchanged size, mtime and inode: not read again (same-length text written, then the mtime put back).
    writeFileSync(path, first.replace(/"k1"/, '"k9"'));
    utimesSync(path, 1_700_000_000, 1_700_000_000);
    expect(await load()).toBe(first);
    const second = `k2:${generateKey()},k1:${generateKey()}`;
    writeFileSync(path, second);
    expect(await load()).toBe(second);
    await expect(fileKeySource(join(dir, 'absent'))()).rejects.toThrow();
    expect(() => fileKeySource('')).toThrow(TypeError);
  });
});
