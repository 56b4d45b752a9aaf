import { createSecretKey } from 'node:crypto';
import { generateKey, KeyRing } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { CompactEncrypt, EncryptJWT, compactDecrypt, decodeProtectedHeader, jwtDecrypt } from 'jose';
import { describe, expect, it } from 'vitest';
import { createCodecWithEngine } from '../src/codec.js';
import { encryptWithIv, engine as nodeEngine } from '../src/engine/node.js';
import type { JweEngine } from '../src/engine/types.js';
import { engine as webEngine } from '../src/engine/web.js';
import { headerFor } from '../src/header.js';
import { createJweCodec } from '../src/index.js';
import { cekOf, claimsOf, jwtOf } from './helpers.js';

const ring = () =>
  new KeyRing([
    { kid: 'k2', secret: generateKey() },
    { kid: 'k1', secret: generateKey() },
  ]);

const payloads = [
  { step: 1, answers: { confirm: true } },
  { text: 'ünïcødé ✓ 😀 \u2028 \u0000', list: [1, -2.5, 1e300, null], nested: { a: { b: [] } } },
  JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{}}}'),
  'x'.repeat(4000),
  null,
];

const engines: [string, JweEngine<unknown>][] = [
  ['node', nodeEngine as JweEngine<unknown>],
  ['web (jose)', webEngine as JweEngine<unknown>],
];

describe.each(engines)('interop with jose (%s engine)', (_name, engine) => {
  it('every token it seals decrypts with jose compactDecrypt and jwtDecrypt given the CEK', async () => {
    const keys = ring();
    const codec = createCodecWithEngine(engine, keys);
    const cek = cekOf(keys, 'k2');
    for (const data of payloads) {
      const claims = claimsOf(data);
      const token = await codec.seal(claims);
      expect(decodeProtectedHeader(token)).toEqual({ alg: 'dir', enc: 'A256GCM', kid: 'k2' });
      const { plaintext, protectedHeader } = await compactDecrypt(token, cek, {
        keyManagementAlgorithms: ['dir'],
        contentEncryptionAlgorithms: ['A256GCM'],
      });
      expect(protectedHeader).toEqual({ alg: 'dir', enc: 'A256GCM', kid: 'k2' });
      expect(JSON.parse(new TextDecoder().decode(plaintext))).toEqual(jwtOf(claims));
      const jwt = await jwtDecrypt(token, cek, {
        audience: claims.aud,
        subject: claims.sub,
        keyManagementAlgorithms: ['dir'],
        contentEncryptionAlgorithms: ['A256GCM'],
      });
      expect(jwt.payload).toEqual(jwtOf(claims));
      expect(jwt.payload.exp! * 1000).toBe(claims.exp);
      expect(jwt.payload.iat! * 1000).toBe(claims.iat);
    }
  });

  it('jose rejects its tokens under another key', async () => {
    const keys = ring();
    const codec = createCodecWithEngine(engine, keys);
    const token = await codec.seal(claimsOf({ n: 1 }));
    await expect(compactDecrypt(token, cekOf(keys, 'k1'))).rejects.toMatchObject({ code: 'ERR_JWE_DECRYPTION_FAILED' });
  });

  it('opens what jose CompactEncrypt produces with the allowed header, for every kid in the ring', async () => {
    const keys = ring();
    const codec = createCodecWithEngine(engine, keys);
    for (const kid of ['k2', 'k1']) {
      for (const data of payloads) {
        const claims = claimsOf(data);
        const token = await new CompactEncrypt(new TextEncoder().encode(JSON.stringify(jwtOf(claims))))
          .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid })
          .encrypt(cekOf(keys, kid));
        const opened = await codec.unseal(token);
        expect(opened.kid).toBe(kid);
        expect(opened.claims).toEqual(claims);
      }
    }
  });

  it('opens what jose EncryptJWT produces (claims set built with the JWT setters, header in any member order)', async () => {
    const keys = ring();
    const codec = createCodecWithEngine(engine, keys);
    const claims = claimsOf({ tool: 'delete_files', args: { paths: ['/tmp/a'] } }, { iat: 1_767_225_600_123, exp: 1_767_226_200_999 });
    const headers = [
      { alg: 'dir', enc: 'A256GCM', kid: 'k1' },
      { kid: 'k1', enc: 'A256GCM', alg: 'dir' },
    ];
    for (const header of headers) {
      const token = await new EncryptJWT({ mrtr: { v: claims.v, req: claims.req, flow: claims.flow, data: claims.data } })
        .setProtectedHeader(header)
        .setIssuedAt(claims.iat / 1000)
        .setExpirationTime(claims.exp / 1000)
        .setJti(claims.jti)
        .setAudience(claims.aud)
        .setSubject(claims.sub)
        .encrypt(cekOf(keys, 'k1'));
      const opened = await codec.unseal(token);
      expect(opened).toEqual({ kid: 'k1', claims });
    }
  });

  it('opens tokens of the other engine (node ⇄ web)', async () => {
    const keys = ring();
    const codec = createCodecWithEngine(engine, keys);
    const other = createCodecWithEngine((engine === nodeEngine ? webEngine : nodeEngine) as JweEngine<unknown>, keys);
    const claims = claimsOf({ cross: true });
    expect((await other.unseal(await codec.seal(claims))).claims).toEqual(claims);
    expect((await codec.unseal(await other.seal(claims))).claims).toEqual(claims);
  });
});

describe('byte compatibility of the node:crypto path', () => {
  it('produces exactly the bytes jose produces for the same key, IV, header and plaintext', async () => {
    const keys = ring();
    const cek = cekOf(keys, 'k2');
    const header = headerFor('k2');
    for (const data of payloads) {
      const plaintext = JSON.stringify(jwtOf(claimsOf(data)));
      const iv = randomBytes(12);
      const ours = encryptWithIv(createSecretKey(cek), header, plaintext, iv);
      const theirs = await new CompactEncrypt(new TextEncoder().encode(plaintext))
        .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: 'k2' })
        .setInitializationVector(iv)
        .encrypt(cek);
      expect(ours).toBe(theirs);
    }
  });

  it('the public codec seals with the node engine: synchronous, and the header is the one jose writes', () => {
    const keys = ring();
    const codec = createJweCodec(keys);
    const claims = claimsOf({ sync: true });
    const token = codec.seal(claims);
    expect(typeof token).toBe('string');
    const segments = (token as string).split('.');
    expect(segments).toHaveLength(5);
    expect(segments[0]).toBe(base64urlEncode(new TextEncoder().encode('{"alg":"dir","enc":"A256GCM","kid":"k2"}')));
    expect(segments[1]).toBe('');
    expect(segments[2]).toHaveLength(16);
    expect(segments[4]).toHaveLength(22);
    // README: 96 + ceil(4n/3) characters for an n-byte claims set and a 2-character kid.
    const n = Buffer.byteLength(JSON.stringify(jwtOf(claims)));
    expect((token as string).length).toBe(96 + Math.ceil((4 * n) / 3));
    const opened = codec.unseal(token as string) as { claims: StateClaims; kid: string };
    expect(opened).toEqual({ kid: 'k2', claims });
  });
});
