import type { JsonValue, StateCodec } from '@mrtr/core';
import { isPromiseLike } from '@mrtr/core/codec';
import { fail, ok } from '../assert.js';
import { sampleClaims } from '../claims.js';
import { type CodecSuite, ring } from './context.js';

/** The cap asked of `factoryWithCap`: large input is measured at this length. */
export const LINEARITY_CAP = 65_536;
/** Small input is this many times shorter than large input (at least {@link SMALL_FLOOR} characters). */
const SIZE_RATIO = 64;
const SMALL_FLOOR = 256;
/** Largest accepted ratio of the per-character cost at the large size to the one at the small size. */
export const LINEARITY_FACTOR = 8;
/** Timed rounds per attempt (the fastest counts), and attempts before a shape fails. */
const ROUNDS = 5;
const ATTEMPTS = 3;
/** Aim of one timed round of large input, in ms (the call count is calibrated to it). */
const ROUND_MS = 4;

type Shape = { name: string; make: (length: number) => Promise<string> };

/** Opens `input` `calls` times and returns the elapsed ms; rejections are expected and ignored. */
async function timeOpens(codec: StateCodec, input: string, calls: number): Promise<number> {
  const start = performance.now();
  for (let i = 0; i < calls; i++) {
    try {
      const result = codec.unseal(input);
      if (isPromiseLike(result)) await Promise.resolve(result).catch(() => undefined);
    } catch {
      // a synchronous rejection: what most hostile inputs get
    }
  }
  return performance.now() - start;
}

/**
 * Per-character cost of opening `large` over that of opening `small`, from one run: the same number of
 * characters on both sides (so the small side is many calls, not noise), rounds alternating between the
 * sides, the fastest round of each side counting (load and GC only ever add time).
 */
async function costRatio(codec: StateCodec, small: string, large: string): Promise<number> {
  await timeOpens(codec, small, 4);
  await timeOpens(codec, large, 2);
  // The fastest of three probes: one preempted probe would calibrate the rounds too short.
  let probe = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 3; i++) probe = Math.min(probe, await timeOpens(codec, large, 1));
  probe = Math.max(probe, 0.01);
  const largeCalls = Math.min(32, Math.max(2, Math.round(ROUND_MS / probe)));
  const smallCalls = Math.max(1, Math.round((largeCalls * large.length) / small.length));
  let bestSmall = Number.POSITIVE_INFINITY;
  let bestLarge = Number.POSITIVE_INFINITY;
  for (let round = 0; round < ROUNDS; round++) {
    bestSmall = Math.min(bestSmall, (await timeOpens(codec, small, smallCalls)) / (smallCalls * small.length));
    bestLarge = Math.min(bestLarge, (await timeOpens(codec, large, largeCalls)) / (largeCalls * large.length));
  }
  // A clock that cannot see the small side (0 ms) must not make any ratio pass or fail by accident.
  return bestLarge / Math.max(bestSmall, Number.MIN_VALUE);
}

/** Seals claims whose payload `make(k)` grows with `k`, choosing `k` so the token is near `target` characters. */
async function tokenNear(codec: StateCodec, target: number, make: (k: number) => JsonValue): Promise<string> {
  const seal = async (k: number): Promise<string> => codec.seal(sampleClaims(make(k)));
  const base = await seal(0);
  if (base.length >= target) return base;
  const probe = await seal(64);
  const perUnit = Math.max(1e-6, (probe.length - base.length) / 64);
  let k = Math.floor((target * 0.97 - base.length) / perUnit);
  for (;;) {
    if (k <= 0) return base;
    try {
      const token = await seal(k);
      if (token.length <= target) return token;
    } catch {
      // too large to seal: fewer
    }
    k = Math.floor(k * 0.95);
  }
}

const manyValues = (k: number): JsonValue => ({
  items: Array.from({ length: k }, (_, i) => ({ id: i, name: `item-${i}`, ok: i % 3 === 0, tags: ['a', 'b'] })),
});
const oneString = (k: number): JsonValue => ({ blob: 'ab3-'.repeat(k) });
/**
 * Another base64url character in place of `token[at]`: the input stays well-formed, so it is refused by the
 * integrity check, never by a cheap scan of its characters (flipping a bit of 'A', 'a', '-' or '_' gives a
 * character outside the alphabet, which made the cost of a shape depend on the token's random bytes).
 */
const substitute = (token: string, at: number): string => token.slice(0, at) + (token[at] === 'A' ? 'B' : 'A') + token.slice(at + 1);
const flipMiddle = (token: string): string => substitute(token, Math.floor(token.length / 2));
const flipLast = (token: string): string => substitute(token, token.length - 1);

/**
 * No check of `open` is super-linear in the input's length: the per-character cost of opening input
 * near the size cap is within {@link LINEARITY_FACTOR}× of that of small input, for invalid input of
 * several shapes and for genuine tokens. Measured as ratios within one run, never as absolute times.
 */
export function linearityProperties(suite: CodecSuite): void {
  const { factory, factoryWithCap, label, report, test } = suite;

  const measuredCodec = async (): Promise<StateCodec> => {
    const keys = ring('k1');
    if (factoryWithCap === undefined) return factory(keys);
    const codec = await factoryWithCap(keys, LINEARITY_CAP);
    ok(
      codec.maxTokenBytes === LINEARITY_CAP,
      `factoryWithCap(keys, ${LINEARITY_CAP}) must build a codec with that maxTokenBytes (got ${codec.maxTokenBytes})`,
    );
    return codec;
  };

  const check = async (codec: StateCodec, shapes: Shape[], kind: string): Promise<void> => {
    const large = codec.maxTokenBytes;
    const small = Math.max(SMALL_FLOOR, Math.floor(large / SIZE_RATIO));
    const lines: string[] = [];
    for (const shape of shapes) {
      const smallInput = await shape.make(small);
      const largeInput = await shape.make(large);
      ok(largeInput.length <= codec.maxTokenBytes, `${shape.name}: the large input must fit the cap`);
      ok(largeInput.length >= 4 * smallInput.length, `${shape.name}: the large input must be much longer than the small one`);
      let ratio = Number.POSITIVE_INFINITY;
      for (let attempt = 0; attempt < ATTEMPTS && ratio > LINEARITY_FACTOR; attempt++) {
        ratio = Math.min(ratio, await costRatio(codec, smallInput, largeInput));
      }
      lines.push(`${shape.name} ${smallInput.length}→${largeInput.length}: ×${ratio.toFixed(2)}`);
      if (ratio > LINEARITY_FACTOR) {
        fail(
          `${kind} "${shape.name}": a character costs ${ratio.toFixed(1)}× more at ${largeInput.length} characters than at ` +
            `${smallInput.length} (limit ${LINEARITY_FACTOR}×): some check is super-linear in the token's length`,
        );
      }
    }
    report(`[${label}] per-character cost ratios (${kind}, cap ${large}): ${lines.join('; ')}`);
  };

  test(`rejects invalid input near the cap at a per-character cost within ${LINEARITY_FACTOR}× of small input`, async () => {
    const codec = await measuredCodec();
    const genuine = await codec.seal(sampleClaims({ n: 1 }));
    const secondDot = genuine.indexOf('.', genuine.indexOf('.') + 1);
    const head = genuine.slice(0, secondDot + 1);
    const pad = (text: string, length: number): string => text.repeat(Math.ceil(length / text.length)).slice(0, length);
    await check(
      codec,
      [
        { name: 'letters', make: async (n) => pad('A', n) },
        { name: 'many segments', make: async (n) => pad('AbC.', n) },
        { name: 'genuine prefix then letters', make: async (n) => head + pad('Ab9_', n - head.length) },
        { name: 'non-ASCII', make: async (n) => pad('é', n) },
        { name: 'genuine token, middle character changed', make: async (n) => flipMiddle(await tokenNear(codec, n, manyValues)) },
        { name: 'genuine token, last character changed', make: async (n) => flipLast(await tokenNear(codec, n, oneString)) },
      ],
      'invalid input',
    );
  });

  test(`opens genuine tokens near the cap at a per-character cost within ${LINEARITY_FACTOR}× of small tokens`, async () => {
    const codec = await measuredCodec();
    await check(
      codec,
      [
        { name: 'many small values', make: (n) => tokenNear(codec, n, manyValues) },
        { name: 'one long string', make: (n) => tokenNear(codec, n, oneString) },
      ],
      'genuine tokens',
    );
  });
}
