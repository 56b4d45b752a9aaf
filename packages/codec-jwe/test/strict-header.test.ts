import { KeyRing, generateKey } from '@mrtr/core';
import { CompactEncrypt } from 'jose';
import { describe, expect, it } from 'vitest';
import { createCodecWithEngine } from '../src/codec.js';
import { engine as nodeEngine } from '../src/engine/node.js';
import type { JweEngine } from '../src/engine/types.js';
import { engine as webEngine } from '../src/engine/web.js';
import { b64, cekOf, claimsOf, countingEngine, handToken, jwtOf, mrtrErrorOf } from './helpers.js';

const engines: [string, JweEngine<unknown>][] = [
  ['node', nodeEngine as JweEngine<unknown>],
  ['web (jose)', webEngine as JweEngine<unknown>],
];

const ALLOWED = '{"alg":"dir","enc":"A256GCM","kid":"k1"}';

/** Header texts that must be refused with ERR_STATE_MALFORMED before decryption. */
const FORBIDDEN_HEADERS: [string, string][] = [
  ['alg A256KW', '{"alg":"A256KW","enc":"A256GCM","kid":"k1"}'],
  ['alg none', '{"alg":"none","enc":"A256GCM","kid":"k1"}'],
  ['alg DIR (case)', '{"alg":"DIR","enc":"A256GCM","kid":"k1"}'],
  ['alg with a space', '{"alg":"dir ","enc":"A256GCM","kid":"k1"}'],
  ['alg missing', '{"enc":"A256GCM","kid":"k1"}'],
  ['alg not a string', '{"alg":["dir"],"enc":"A256GCM","kid":"k1"}'],
  ['enc A128GCM', '{"alg":"dir","enc":"A128GCM","kid":"k1"}'],
  ['enc A256CBC-HS512', '{"alg":"dir","enc":"A256CBC-HS512","kid":"k1"}'],
  ['enc lower case', '{"alg":"dir","enc":"a256gcm","kid":"k1"}'],
  ['enc missing', '{"alg":"dir","kid":"k1"}'],
  ['kid missing', '{"alg":"dir","enc":"A256GCM"}'],
  ['kid a number', '{"alg":"dir","enc":"A256GCM","kid":1}'],
  ['kid null', '{"alg":"dir","enc":"A256GCM","kid":null}'],
  ['zip DEF', '{"alg":"dir","enc":"A256GCM","kid":"k1","zip":"DEF"}'],
  ['crit empty', '{"alg":"dir","enc":"A256GCM","kid":"k1","crit":[]}'],
  ['crit with a member', '{"alg":"dir","enc":"A256GCM","kid":"k1","crit":["exp"],"exp":1}'],
  ['typ JWT', '{"alg":"dir","enc":"A256GCM","kid":"k1","typ":"JWT"}'],
  ['cty JWT', '{"alg":"dir","enc":"A256GCM","kid":"k1","cty":"JWT"}'],
  ['jku', '{"alg":"dir","enc":"A256GCM","kid":"k1","jku":"https://attacker.example/jwks"}'],
  ['jwk object', '{"alg":"dir","enc":"A256GCM","kid":"k1","jwk":{"kty":"oct","k":"AAAA"}}'],
  ['extra member', '{"alg":"dir","enc":"A256GCM","kid":"k1","x":"y"}'],
  ['duplicate kid', '{"alg":"dir","enc":"A256GCM","kid":"k1","kid":"k1"}'],
  ['duplicate kid (second wins in JSON.parse)', '{"alg":"dir","enc":"A256GCM","kid":"k9","kid":"k1"}'],
  ['duplicate alg (second wins in JSON.parse)', '{"alg":"A256KW","alg":"dir","enc":"A256GCM","kid":"k1"}'],
  ['duplicate enc', '{"alg":"dir","enc":"A128GCM","enc":"A256GCM","kid":"k1"}'],
  ['duplicate via an escape', '{"alg":"dir","enc":"A256GCM","kid":"k1","\\u006bid":"k1"}'],
  ['escaped value', '{"alg":"\\u0064ir","enc":"A256GCM","kid":"k1"}'],
  ['escaped kid', '{"alg":"dir","enc":"A256GCM","kid":"k\\u0031"}'],
  ['non-ASCII member', '{"alg":"dir","enc":"A256GCM","kid":"k1","é":"x"}'],
  ['non-ASCII kid', '{"alg":"dir","enc":"A256GCM","kid":"kı"}'],
  ['byte order mark', '\ufeff{"alg":"dir","enc":"A256GCM","kid":"k1"}'],
  ['trailing garbage', '{"alg":"dir","enc":"A256GCM","kid":"k1"}x'],
  ['trailing comma', '{"alg":"dir","enc":"A256GCM","kid":"k1",}'],
  ['two objects', '{"alg":"dir","enc":"A256GCM","kid":"k1"}{}'],
  ['array', '[{"alg":"dir","enc":"A256GCM","kid":"k1"}]'],
  ['string', '"dir"'],
  ['empty object', '{}'],
  ['empty text', ''],
  ['single quotes', "{'alg':'dir','enc':'A256GCM','kid':'k1'}"],
  ['control character in a value', '{"alg":"dir","enc":"A256GCM","kid":"k1\\n"}'],
  ['raw control character in a value', '{"alg":"dir","enc":"A256GCM","kid":"k1\u0001"}'],
];

describe.each(engines)('strict protected header (%s engine)', (_name, baseEngine) => {
  const setup = () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const counting = countingEngine(baseEngine);
    const codec = createCodecWithEngine(counting.engine, keys);
    const claims = claimsOf({ step: 1 });
    const plaintext = JSON.stringify(jwtOf(claims));
    return { keys, codec, claims, plaintext, cek: cekOf(keys), decrypts: counting.decrypts };
  };

  it('opens the hand-built control token with the allowed header (the tags below are valid)', async () => {
    const { codec, claims, plaintext, cek, decrypts } = setup();
    const opened = await codec.unseal(handToken(cek, { header: ALLOWED, plaintext }));
    expect(opened.kid).toBe('k1');
    expect(opened.claims).toEqual(claims);
    expect(decrypts()).toBe(1);
  });

  it('accepts the allowed members in another order and with JSON white space', async () => {
    const { codec, claims, plaintext, cek } = setup();
    for (const header of [
      '{"kid":"k1","enc":"A256GCM","alg":"dir"}',
      '{"enc":"A256GCM","alg":"dir","kid":"k1"}',
      ' { "alg" : "dir" ,\n\t"enc":"A256GCM",\r\n"kid":"k1" } ',
    ]) {
      expect((await codec.unseal(handToken(cek, { header, plaintext }))).claims).toEqual(claims);
    }
  });

  it.each(FORBIDDEN_HEADERS)('refuses %s before decryption', async (_label, header) => {
    const { codec, plaintext, cek, decrypts } = setup();
    await mrtrErrorOf(() => codec.unseal(handToken(cek, { header, plaintext })), 'ERR_STATE_MALFORMED');
    expect(decrypts()).toBe(0);
  });

  it('refuses jose-made tokens with zip, typ or an extra member, before decryption', async () => {
    const { codec, plaintext, cek, decrypts } = setup();
    const headers = [
      { alg: 'dir', enc: 'A256GCM', kid: 'k1', zip: 'DEF' },
      { alg: 'dir', enc: 'A256GCM', kid: 'k1', typ: 'JWT' },
      { alg: 'dir', enc: 'A256GCM', kid: 'k1', cty: 'JWT' },
      { alg: 'dir', enc: 'A256GCM', kid: 'k1', 'urn:example:extra': true },
    ];
    for (const header of headers) {
      const token = await new CompactEncrypt(new TextEncoder().encode(plaintext)).setProtectedHeader(header).encrypt(cek);
      await mrtrErrorOf(() => codec.unseal(token), 'ERR_STATE_MALFORMED');
    }
    expect(decrypts()).toBe(0);
  });

  it('refuses an unknown kid with ERR_KEY_UNKNOWN before decryption, a forbidden header first with ERR_STATE_MALFORMED', async () => {
    const { codec, plaintext, cek, decrypts } = setup();
    for (const kid of ['k2', 'K1', 'k1 ', '', 'x'.repeat(33), '__proto__', 'constructor', 'hasOwnProperty']) {
      const header = JSON.stringify({ alg: 'dir', enc: 'A256GCM', kid });
      await mrtrErrorOf(() => codec.unseal(handToken(cek, { header, plaintext })), 'ERR_KEY_UNKNOWN');
    }
    const badAndUnknown = '{"alg":"dir","enc":"A256GCM","kid":"k2","zip":"DEF"}';
    await mrtrErrorOf(() => codec.unseal(handToken(cek, { header: badAndUnknown, plaintext })), 'ERR_STATE_MALFORMED');
    expect(decrypts()).toBe(0);
  });

  it('requires an empty encrypted-key segment, a 12-byte IV and a 16-byte tag, before decryption', async () => {
    const { codec, plaintext, cek, decrypts } = setup();
    const variants = [
      handToken(cek, { header: ALLOWED, plaintext, encryptedKey: 'AAAA' }),
      handToken(cek, { header: ALLOWED, plaintext, encryptedKey: b64(cek) }),
      handToken(cek, { header: ALLOWED, plaintext, ivBytes: 16 }),
      handToken(cek, { header: ALLOWED, plaintext, ivBytes: 8 }),
      handToken(cek, { header: ALLOWED, plaintext, tagBytes: 12 }),
      handToken(cek, { header: ALLOWED, plaintext, tagBytes: 15 }),
      handToken(cek, { header: ALLOWED, plaintext, tagBytes: 4 }),
    ];
    for (const token of variants) await mrtrErrorOf(() => codec.unseal(token), 'ERR_STATE_MALFORMED');
    expect(decrypts()).toBe(0);
  });

  it('requires canonical base64url in every segment, before decryption', async () => {
    const { codec, plaintext, cek, decrypts } = setup();
    const good = handToken(cek, { header: ALLOWED, plaintext });
    expect((await codec.unseal(good)).kid).toBe('k1');
    expect(decrypts()).toBe(1);
    const [h, , iv, ct, tag] = good.split('.') as [string, string, string, string, string];
    // Each of these decodes to the same bytes with a lenient decoder (Buffer, atob) but is not canonical.
    const stray = (s: string): string => {
      // Set unused low bits in the last character (22 chars → 4 spare bits, 16 chars → none).
      const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
      const last = alphabet.indexOf(s.at(-1)!);
      return s.slice(0, -1) + alphabet[last | 1];
    };
    const variants = [
      [`${h}=`, '', iv, ct, tag],
      [h, '', `${iv}==`, ct, tag],
      [h, '', iv.replace(/-/g, '+').replace(/_/g, '/'), ct, tag],
      [h, '', iv, ct, stray(tag)],
      [h, '', iv, ct, `${tag}==`],
      [h, '', iv, `${ct}=`, tag],
      [h, '', iv, ct.length % 4 === 0 ? `${ct}A` : stray(ct), tag],
      [h, '', iv, '', tag],
      [h, '', iv, ct, `${tag.slice(0, -1)}+`],
    ]
      .map((segments) => segments.join('.'))
      .filter((token) => token !== good);
    expect(variants.length).toBeGreaterThanOrEqual(8);
    for (const token of variants) await mrtrErrorOf(() => codec.unseal(token), 'ERR_STATE_MALFORMED');
    expect(decrypts()).toBe(1); // only the control token above
  });

  it('refuses a ring key that did not seal with ERR_STATE_INTEGRITY, after the header passed', async () => {
    const { codec, plaintext, decrypts } = setup();
    const otherCek = new Uint8Array(32).fill(1);
    await mrtrErrorOf(() => codec.unseal(handToken(otherCek, { header: ALLOWED, plaintext })), 'ERR_STATE_INTEGRITY');
    expect(decrypts()).toBe(1);
  });

  it('refuses authentic plaintext that is not UTF-8, not JSON or not the claims shape', async () => {
    const { codec, claims, cek } = setup();
    const jwt = jwtOf(claims);
    const bad: (Uint8Array | string)[] = [
      new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]),
      new Uint8Array([0x22, 0xed, 0xa0, 0x80, 0x22]), // UTF-8-encoded lone surrogate
      'not json',
      '',
      'null',
      '[]',
      JSON.stringify({ ...jwt, iss: 'me' }),
      JSON.stringify({ ...jwt, aud: [jwt['aud']] }),
      JSON.stringify({ ...jwt, iat: String(jwt['iat']) }),
      JSON.stringify({ ...jwt, iat: 1.0005 }),
      JSON.stringify({ ...jwt, iat: -1 }),
      JSON.stringify({ ...jwt, exp: 1e300 }),
      JSON.stringify({ ...jwt, mrtr: undefined }),
      JSON.stringify({ ...jwt, mrtr: { ...(jwt['mrtr'] as object), v: 2 } }),
      JSON.stringify({ ...jwt, mrtr: { ...(jwt['mrtr'] as object), extra: 1 } }),
      JSON.stringify({ ...jwt, mrtr: { ...(jwt['mrtr'] as object), req: { ...claims.req, x: 1 } } }),
      JSON.stringify({ ...jwt, mrtr: { ...(jwt['mrtr'] as object), flow: { ...claims.flow, round: 0 } } }),
      `{"__proto__":{},${JSON.stringify(jwt).slice(1)}`,
    ];
    for (const plaintext of bad) {
      const token = handToken(cek, { header: ALLOWED, plaintext });
      await mrtrErrorOf(() => codec.unseal(token), 'ERR_STATE_MALFORMED');
    }
    // Control: the same construction with the exact claims set opens.
    expect((await codec.unseal(handToken(cek, { header: ALLOWED, plaintext: JSON.stringify(jwt) }))).claims).toEqual(claims);
  });
});
