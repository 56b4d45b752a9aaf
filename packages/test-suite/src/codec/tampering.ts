import fc from 'fast-check';
import type { CodecSuite } from './context.js';

/** Every modification of a genuine token is rejected: bit flips, truncation, segments, base64url spelling, fuzzed mutations. */
export function tamperingProperties(suite: CodecSuite): void {
  for (const register of [bitFlips, truncationAndExtension, segmentSwaps, nonCanonicalBase64url, structuredMutations]) register(suite);
}

function bitFlips(suite: CodecSuite): void {
  const { label, report, setup, test, expectRejected } = suite;
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
}

function truncationAndExtension(suite: CodecSuite): void {
  const { label, report, setup, test, expectRejected } = suite;
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
}

function segmentSwaps(suite: CodecSuite): void {
  const { label, report, setup, test, expectRejected } = suite;
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
}

function nonCanonicalBase64url(suite: CodecSuite): void {
  const { label, report, setup, test, expectRejected } = suite;
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
}

function structuredMutations(suite: CodecSuite): void {
  const { fuzzRuns, label, report, setup, test, expectRejected } = suite;
  test(`rejects ${fuzzRuns} structured mutations with MrtrErrors only`, async () => {
    const { codec, tokens } = await setup();
    let count = 0;
    const mutation = mutations();
    await fc.assert(
      fc.asyncProperty(fc.nat(), fc.array(mutation, { minLength: 1, maxLength: 4 }), async (which, ops) => {
        const original = tokens[which % tokens.length]!;
        let t = original;
        for (const m of ops) t = mutate(t, m, tokens);
        // A mutation that rebuilds one of the genuine tokens (e.g. by transplanting every segment) is not hostile.
        fc.pre(!tokens.includes(t));
        count++;
        await expectRejected(codec, t, 'structured mutation');
      }),
      { numRuns: fuzzRuns, maxSkipsPerRun: 100 },
    );
    report(`[${label}] structured mutations rejected: ${count}`);
  });
}

/** The structured mutations of a token the fuzzed property applies (one to four each run). */
function mutations() {
  return fc.oneof(
    fc.record({ op: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
    fc.record({ op: fc.constant('set' as const), at: fc.nat(), char: fc.string({ minLength: 1, maxLength: 1 }) }),
    fc.record({ op: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 40 }) }),
    fc.record({ op: fc.constant('insert' as const), at: fc.nat(), text: fc.string({ minLength: 1, maxLength: 40 }) }),
    fc.record({ op: fc.constant('dupSegment' as const), at: fc.nat() }),
    fc.record({ op: fc.constant('swapSegments' as const), at: fc.nat(), other: fc.nat() }),
    fc.record({ op: fc.constant('transplant' as const), at: fc.nat(), from: fc.nat() }),
  );
}

type Mutation = ReturnType<typeof mutations> extends fc.Arbitrary<infer M> ? M : never;

/** `t` with the mutation `m` applied (a transplant takes its segment from one of `tokens`). */
function mutate(t: string, m: Mutation, tokens: readonly string[]): string {
  const at = t.length === 0 ? 0 : m.at % t.length;
  const segs = t.split('.');
  switch (m.op) {
    case 'flip':
      return t.length === 0 ? t : t.slice(0, at) + String.fromCharCode(t.charCodeAt(at) ^ (1 << m.bit)) + t.slice(at + 1);
    case 'set':
      return t.slice(0, at) + m.char + t.slice(at + 1);
    case 'delete':
      return t.slice(0, at) + t.slice(at + m.length);
    case 'insert':
      return t.slice(0, at) + m.text + t.slice(at);
    case 'dupSegment':
      segs.splice(m.at % segs.length, 0, segs[m.at % segs.length]!);
      return segs.join('.');
    case 'swapSegments': {
      const i = m.at % segs.length;
      const j = m.other % segs.length;
      [segs[i], segs[j]] = [segs[j]!, segs[i]!];
      return segs.join('.');
    }
    case 'transplant': {
      const donor = tokens[m.from % tokens.length]!.split('.');
      const i = m.at % segs.length;
      segs[i] = donor[i % donor.length]!;
      return segs.join('.');
    }
  }
}
