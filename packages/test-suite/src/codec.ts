import {
  KeyRing,
  type MrtrErrorCode,
  type StateClaims,
  type StateCodec,
  base64urlDecode,
  base64urlEncode,
  canonicalJson,
  generateKey,
} from '@mrtr/core';
import fc from 'fast-check';
import { fail, ok, rejectsMrtr } from './assert.js';
import { sampleClaims, samplePayloads } from './claims.js';
import type { TestFn } from './types.js';

export interface CodecComplianceOptions {
  /** Label used in test names. @default the codec's `id` once created, else "codec" */
  name?: string;
  /** fast-check runs per property; values below 10,000 are raised to 10,000. @default 10_000 */
  fuzzRuns?: number;
  /** Per-test timeout in ms. @default 120_000 */
  timeoutMs?: number;
  /** Receives a line per test with the number of hostile inputs it ran (for reports). @default console.info */
  report?: (line: string) => void;
}

export type CodecFactory = (keys: KeyRing) => StateCodec | Promise<StateCodec>;

const MIN_FUZZ_RUNS = 10_000;
const REJECTION_CODES: readonly MrtrErrorCode[] = [
  'ERR_STATE_MALFORMED',
  'ERR_STATE_INTEGRITY',
  'ERR_KEY_UNKNOWN',
  'ERR_STATE_TOO_LARGE',
];

const ring = (...kids: string[]): KeyRing => new KeyRing(kids.map((kid) => ({ kid, secret: generateKey() })));

function deepClaimsEqual(actual: StateClaims, expected: StateClaims): boolean {
  return canonicalJson(actual) === canonicalJson(expected);
}

/**
 * The security contract of a `StateCodec`. Every property is always on: no option switches one off.
 * Call it from a test file: `codecCompliance(it, (keys) => createMyCodec({ keys }))`.
 */
export function codecCompliance(it: TestFn, factory: CodecFactory, options: CodecComplianceOptions = {}): void {
  const fuzzRuns = Math.max(MIN_FUZZ_RUNS, options.fuzzRuns ?? MIN_FUZZ_RUNS);
  const timeout = options.timeoutMs ?? 120_000;
  const report = options.report ?? ((line: string) => console.info(line));
  const label = options.name ?? 'codec';
  const test = (name: string, fn: () => Promise<void>): void => it(`${label} compliance: ${name}`, fn, timeout);

  const setup = async (): Promise<{ keys: KeyRing; codec: StateCodec; tokens: string[] }> => {
    const keys = ring('k1');
    const codec = await factory(keys);
    const tokens = [
      await codec.seal(sampleClaims({ step: 1, answers: { confirm: true } })),
      await codec.seal(sampleClaims({ text: 'ünïcødé ✓ 😀', list: [1, 2, 3], nested: { a: { b: null } } })),
      await codec.seal(sampleClaims('x')),
    ];
    return { keys, codec, tokens };
  };
  const expectRejected = (codec: StateCodec, input: unknown, context: string, codes = REJECTION_CODES) =>
    rejectsMrtr(() => codec.open(input as string), context, codes);

  test('declares its facts', async () => {
    const codec = await factory(ring('k1'));
    ok(typeof codec.id === 'string' && codec.id.length > 0, 'id must be a non-empty string');
    ok(typeof codec.confidential === 'boolean', 'confidential must be a boolean');
    ok(Number.isSafeInteger(codec.maxTokenBytes) && codec.maxTokenBytes > 0, 'maxTokenBytes must be a positive integer');
    ok(codec.maxTokenBytes < 1024 * 1024, 'maxTokenBytes must be below 1 MiB');
  });

  test('round-trips claims exactly, with the primary kid', async () => {
    const keys = ring('k1', 'k0');
    const codec = await factory(keys);
    for (const payload of samplePayloads()) {
      const claims = sampleClaims(payload);
      const token = await codec.seal(claims);
      ok(typeof token === 'string' && /^[\x21-\x7e]+$/.test(token), 'token must be non-empty printable ASCII');
      ok(token.length <= codec.maxTokenBytes, 'a sealed token must fit maxTokenBytes');
      const opened = await codec.open(token);
      ok(opened.kid === 'k1', `opened kid must be the primary key's (got ${String(opened.kid)})`);
      ok(deepClaimsEqual(opened.claims, claims), 'opened claims must equal the sealed claims exactly');
    }
  });

  test('keeps __proto__ and constructor payload keys as plain data', async () => {
    const codec = await factory(ring('k1'));
    const payload = JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}');
    const opened = await codec.open(await codec.seal(sampleClaims(payload)));
    const data = opened.claims.data as Record<string, unknown>;
    ok(Object.getPrototypeOf(data) === Object.prototype, 'payload object must keep Object.prototype');
    ok(Object.hasOwn(data, '__proto__'), '__proto__ must come back as an own data property');
    ok(({} as Record<string, unknown>).polluted === undefined, 'Object.prototype must not be polluted');
    ok((data as { polluted?: unknown }).polluted === undefined, 'payload must not gain inherited properties');
  });

  test('rejects every single-bit flip of every byte', async () => {
    const { codec, tokens } = await setup();
    let count = 0;
    for (const token of tokens) {
      for (let i = 0; i < token.length; i++) {
        const c = token.charCodeAt(i);
        for (let bit = 0; bit < 8; bit++) {
          const mutated = token.slice(0, i) + String.fromCharCode(c ^ (1 << bit)) + token.slice(i + 1);
          await expectRejected(codec, mutated, `bit ${bit} of byte ${i} flipped`);
          count++;
        }
      }
    }
    report(`[${label}] bit flips rejected: ${count}`);
  });

  test('rejects truncation, extension and concatenation', async () => {
    const { codec, tokens } = await setup();
    const [a, b] = tokens as [string, string];
    let count = 0;
    for (let n = 0; n < a.length; n++) {
      await expectRejected(codec, a.slice(0, n), `prefix of length ${n}`);
      await expectRejected(codec, a.slice(a.length - n), `suffix of length ${n}`);
      count += 2;
    }
    for (const extended of [
      `${a}A`,
      `${a}.`,
      `${a}=`,
      `${a}==`,
      `${a} `,
      `${a}\n`,
      ` ${a}`,
      `.${a}`,
      `${a}.${a}`,
      a + a,
      a + b,
      `${a}.${b}`,
      `${a}${a.slice(-1)}`,
    ]) {
      await expectRejected(codec, extended, 'extended or concatenated token');
      count++;
    }
    report(`[${label}] truncations/extensions rejected: ${count}`);
  });

  test('rejects swapped and transplanted segments', async () => {
    const { codec, tokens } = await setup();
    const [a, b] = tokens as [string, string];
    let count = 0;
    for (const sep of ['.', '~', '-', '_']) {
      const segs = a.split(sep);
      if (segs.length < 2) continue;
      for (let i = 0; i < segs.length; i++) {
        for (let j = i + 1; j < segs.length; j++) {
          const swapped = [...segs];
          [swapped[i], swapped[j]] = [swapped[j]!, swapped[i]!];
          const text = swapped.join(sep);
          if (text !== a) {
            await expectRejected(codec, text, `segments ${i} and ${j} swapped`);
            count++;
          }
        }
        const dropped = segs.filter((_, k) => k !== i).join(sep);
        await expectRejected(codec, dropped, `segment ${i} dropped`);
        count++;
      }
      const other = b.split(sep);
      if (other.length === segs.length) {
        for (let i = 0; i < segs.length; i++) {
          const spliced = [...segs];
          spliced[i] = other[i]!;
          const text = spliced.join(sep);
          // Transplanting the segment that holds everything (e.g. the one ciphertext) rebuilds a genuine token.
          if (text !== a && !tokens.includes(text)) {
            await expectRejected(codec, text, `segment ${i} taken from another token`);
            count++;
          }
        }
      }
    }
    report(`[${label}] segment swaps/transplants rejected: ${count}`);
  });

  test('rejects non-canonical base64url (stray bits in the last character of a segment)', async () => {
    const { codec, tokens } = await setup();
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    let count = 0;
    for (const token of tokens) {
      let offset = 0;
      for (const segment of token.split('.')) {
        const unusedBits = segment.length % 4 === 2 ? 0x0f : segment.length % 4 === 3 ? 0x03 : 0;
        const value = alphabet.indexOf(segment.at(-1) ?? '');
        if (unusedBits !== 0 && value >= 0) {
          // Each of these texts decodes to the same bytes under a lenient decoder.
          for (let bits = 1; bits <= unusedBits; bits++) {
            const at = offset + segment.length - 1;
            const mutated = token.slice(0, at) + alphabet[value ^ bits] + token.slice(at + 1);
            await expectRejected(codec, mutated, 'non-canonical base64url');
            count++;
          }
        }
        offset += segment.length + 1;
      }
    }
    report(`[${label}] non-canonical base64url variants rejected: ${count}`);
  });

  test('rejects a token sealed with another secret under the same kid', async () => {
    const codecA = await factory(ring('k1'));
    const codecB = await factory(ring('k1'));
    const token = await codecA.seal(sampleClaims({ n: 1 }));
    await expectRejected(codecB, token, 'wrong key', ['ERR_STATE_INTEGRITY']);
  });

  test('rejects a token whose kid is not in the ring with ERR_KEY_UNKNOWN', async () => {
    const sealer = await factory(ring('k9'));
    const opener = await factory(ring('k1'));
    await expectRejected(opener, await sealer.seal(sampleClaims({ n: 1 })), 'unknown kid', ['ERR_KEY_UNKNOWN']);
  });

  test('supports rotation by kid', async () => {
    const k1 = { kid: 'k1', secret: generateKey() };
    const k2 = { kid: 'k2', secret: generateKey() };
    const old = await factory(new KeyRing([k1]));
    const rotated = await factory(new KeyRing([k2, k1]));
    const retired = await factory(new KeyRing([k2]));
    const claims = sampleClaims({ rotation: true });
    const oldToken = await old.seal(claims);
    const openedOld = await rotated.open(oldToken);
    ok(openedOld.kid === 'k1' && deepClaimsEqual(openedOld.claims, claims), 'an old kid must open while in the ring');
    const newToken = await rotated.seal(claims);
    ok((await rotated.open(newToken)).kid === 'k2', 'the primary key must seal');
    ok((await retired.open(newToken)).kid === 'k2', 'a token of the new primary must open after the old key is removed');
    await expectRejected(retired, oldToken, 'old kid after removal', ['ERR_KEY_UNKNOWN']);
    await expectRejected(old, newToken, 'new kid before it is known', ['ERR_KEY_UNKNOWN']);
  });

  test('rejects empty, non-ASCII, whitespace and non-string input', async () => {
    const { codec, tokens } = await setup();
    const a = tokens[0]!;
    await expectRejected(codec, '', 'empty string', ['ERR_STATE_MALFORMED', 'ERR_STATE_TOO_LARGE']);
    const hostile: unknown[] = [
      ' ',
      '.',
      '..',
      '....',
      'é',
      '\u0000',
      `${a.slice(0, 10)}é${a.slice(11)}`,
      `${a.slice(0, 10)}\u{1F600}${a.slice(12)}`,
      a.replace(/[A-Za-z]/, (ch) => (ch === 'A' ? 'Ａ' : 'Ａ')),
      '\ud800',
      `${a}\ud800`,
      a.toUpperCase() === a ? a.toLowerCase() : a.toUpperCase(),
    ];
    for (const input of hostile) await expectRejected(codec, input, 'hostile string');
    for (const input of [undefined, null, 0, 42, true, {}, [], [a], { token: a }, new Uint8Array([1, 2]), Buffer.from(a)]) {
      await expectRejected(codec, input, `non-string input (${Object.prototype.toString.call(input)})`, ['ERR_STATE_MALFORMED']);
    }
  });

  test('refuses input over maxTokenBytes before decoding (ERR_STATE_TOO_LARGE)', async () => {
    const { codec, tokens } = await setup();
    const max = codec.maxTokenBytes;
    const a = tokens[0]!;
    await expectRejected(codec, 'A'.repeat(max + 1), 'maxTokenBytes + 1', ['ERR_STATE_TOO_LARGE']);
    await expectRejected(codec, a + 'A'.repeat(max + 1 - a.length), 'valid token padded to maxTokenBytes + 1', [
      'ERR_STATE_TOO_LARGE',
    ]);
    await expectRejected(codec, '\u0000'.repeat(max + 1), 'garbage of maxTokenBytes + 1', ['ERR_STATE_TOO_LARGE']);
    await expectRejected(codec, 'A'.repeat(1024 * 1024), '1 MiB input', ['ERR_STATE_TOO_LARGE']);
    await expectRejected(codec, `${a}.${'x'.repeat(1024 * 1024)}`, '1 MiB input with a valid prefix', ['ERR_STATE_TOO_LARGE']);
    const atCap = await rejectsMrtr(() => codec.open('A'.repeat(max)), 'input of exactly maxTokenBytes');
    ok(atCap.code !== 'ERR_STATE_TOO_LARGE', 'input of exactly maxTokenBytes must not be refused as too large');
  });

  test('seals with fresh randomness (confidential codecs: two seals of the same claims differ)', async () => {
    const codec = await factory(ring('k1'));
    const claims = sampleClaims({ same: true });
    const first = await codec.seal(claims);
    const second = await codec.seal(claims);
    ok(deepClaimsEqual((await codec.open(first)).claims, claims), 'the first seal must open');
    ok(deepClaimsEqual((await codec.open(second)).claims, claims), 'the second seal must open');
    if (codec.confidential) ok(first !== second, 'a confidential codec must use a fresh nonce per seal');
    const other = await codec.seal({ ...claims, jti: base64urlEncode(new Uint8Array(16).fill(7)) });
    ok(other !== first, 'a different jti must give a different token');
  });

  test('hides every claim byte when confidential', async () => {
    const codec = await factory(ring('k1'));
    const marker = `M${base64urlEncode(crypto.getRandomValues(new Uint8Array(18)))}`;
    const claims = sampleClaims(
      { secret: marker, list: [marker] },
      { aud: `aud-${marker}`, req: { m: 'tools/call', t: `tool-${marker}`, d: base64urlEncode(new Uint8Array(32)) } },
    );
    const token = await codec.seal(claims);
    const needles: string[] = [];
    const markerBytes = new TextEncoder().encode(marker);
    for (let shift = 0; shift < 3; shift++) {
      const encoded = base64urlEncode(new Uint8Array([...new Uint8Array(shift), ...markerBytes]));
      needles.push(encoded.slice(4, 20));
    }
    const leaks =
      token.includes(marker) ||
      needles.some((needle) => token.includes(needle)) ||
      token
        .split(/[^A-Za-z0-9_-]/)
        .map((segment) => {
          // Try every alignment: a leak may start mid-segment.
          for (let offset = 0; offset < 4; offset++) {
            const part = segment.slice(offset);
            const trimmed = part.slice(0, part.length - (part.length % 4 === 1 ? 1 : 0));
            const bytes = base64urlDecode(trimmed) ?? Buffer.from(trimmed, 'base64url');
            if (Buffer.from(bytes).includes(Buffer.from(markerBytes))) return true;
          }
          return false;
        })
        .some(Boolean);
    if (codec.confidential) {
      ok(!leaks, 'a confidential codec must not reveal payload bytes in the token');
    } else {
      ok(leaks, 'a codec that declares confidential: false is expected to carry readable claims (declare the truth)');
    }
  });

  test(`rejects ${fuzzRuns} arbitrary strings with MrtrErrors only`, async () => {
    const { codec } = await setup();
    let count = 0;
    const alphabet = fc.constantFrom(...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~ =+/'.split(''));
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string({ unit: 'binary', maxLength: 600 }), fc.string({ unit: alphabet, maxLength: 600 })),
        async (input) => {
          count++;
          await expectRejected(codec, input, 'arbitrary string');
        },
      ),
      { numRuns: fuzzRuns },
    );
    report(`[${label}] arbitrary strings rejected: ${count}`);
  });

  test(`rejects ${fuzzRuns} structured mutations with MrtrErrors only`, async () => {
    const { codec, tokens } = await setup();
    let count = 0;
    const mutation = fc.oneof(
      fc.record({ op: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
      fc.record({ op: fc.constant('set' as const), at: fc.nat(), char: fc.string({ minLength: 1, maxLength: 1 }) }),
      fc.record({ op: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 40 }) }),
      fc.record({ op: fc.constant('insert' as const), at: fc.nat(), text: fc.string({ minLength: 1, maxLength: 40 }) }),
      fc.record({ op: fc.constant('dupSegment' as const), at: fc.nat() }),
      fc.record({ op: fc.constant('swapSegments' as const), at: fc.nat(), other: fc.nat() }),
      fc.record({ op: fc.constant('transplant' as const), at: fc.nat(), from: fc.nat() }),
    );
    await fc.assert(
      fc.asyncProperty(fc.nat(), fc.array(mutation, { minLength: 1, maxLength: 4 }), async (which, ops) => {
        const original = tokens[which % tokens.length]!;
        let t = original;
        for (const m of ops) {
          const at = t.length === 0 ? 0 : m.at % t.length;
          const segs = t.split('.');
          switch (m.op) {
            case 'flip':
              t = t.length === 0 ? t : t.slice(0, at) + String.fromCharCode(t.charCodeAt(at) ^ (1 << m.bit)) + t.slice(at + 1);
              break;
            case 'set':
              t = t.slice(0, at) + m.char + t.slice(at + 1);
              break;
            case 'delete':
              t = t.slice(0, at) + t.slice(at + m.length);
              break;
            case 'insert':
              t = t.slice(0, at) + m.text + t.slice(at);
              break;
            case 'dupSegment':
              segs.splice(m.at % segs.length, 0, segs[m.at % segs.length]!);
              t = segs.join('.');
              break;
            case 'swapSegments': {
              const i = m.at % segs.length;
              const j = m.other % segs.length;
              [segs[i], segs[j]] = [segs[j]!, segs[i]!];
              t = segs.join('.');
              break;
            }
            case 'transplant': {
              const donor = tokens[m.from % tokens.length]!.split('.');
              const i = m.at % segs.length;
              segs[i] = donor[i % donor.length]!;
              t = segs.join('.');
              break;
            }
          }
        }
        // A mutation that rebuilds one of the genuine tokens (e.g. by transplanting every segment) is not hostile.
        fc.pre(!tokens.includes(t));
        count++;
        await expectRejected(codec, t, 'structured mutation');
      }),
      { numRuns: fuzzRuns, maxSkipsPerRun: 100 },
    );
    report(`[${label}] structured mutations rejected: ${count}`);
  });

  test('opens a token sealed by another instance with the same keys', async () => {
    const keys = ring('k1');
    const sealer = await factory(keys);
    const opener = await factory(keys);
    const claims = sampleClaims({ shared: 'fleet' });
    const opened = await opener.open(await sealer.seal(claims));
    if (opened.kid !== 'k1' || !deepClaimsEqual(opened.claims, claims)) fail('instances sharing a key ring must interoperate');
  });
}
