import fc from 'fast-check';
import { ok, rejectsMrtr } from '../assert.js';
import type { CodecSuite } from './context.js';

/** Input that was never a token: hostile strings and values, oversize input, arbitrary strings. */
export function hostileInputProperties(suite: CodecSuite): void {
  const { fuzzRuns, label, report, setup, test, expectRejected } = suite;
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
    await expectRejected(codec, a + 'A'.repeat(max + 1 - a.length), 'valid token padded to maxTokenBytes + 1', ['ERR_STATE_TOO_LARGE']);
    await expectRejected(codec, '\u0000'.repeat(max + 1), 'garbage of maxTokenBytes + 1', ['ERR_STATE_TOO_LARGE']);
    await expectRejected(codec, 'A'.repeat(1024 * 1024), '1 MiB input', ['ERR_STATE_TOO_LARGE']);
    await expectRejected(codec, `${a}.${'x'.repeat(1024 * 1024)}`, '1 MiB input with a valid prefix', ['ERR_STATE_TOO_LARGE']);
    const atCap = await rejectsMrtr(() => codec.unseal('A'.repeat(max)), 'input of exactly maxTokenBytes');
    ok(atCap.code !== 'ERR_STATE_TOO_LARGE', 'input of exactly maxTokenBytes must not be refused as too large');
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
}
