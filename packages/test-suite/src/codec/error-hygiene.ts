import { generateKey, KeyRing, type MrtrError, type MrtrErrorCode, type StateCodec } from '@mrtr/core';
import { base64urlDecode, base64urlEncode } from '@mrtr/core/encoding';
import { KeyUnknownError, StateIntegrityError, StateMalformedError, StateTooLargeError } from '@mrtr/core/errors';
import { fail, ok, rejectsMrtr } from '../assert.js';
import { sampleClaims } from '../claims.js';
import { type CodecSuite, REJECTION_CODES } from './context.js';

/** The fixed message of each rejection code, from the concrete classes codecs are meant to throw. */
const FIXED_MESSAGES: Readonly<Record<string, string>> = {
  ERR_STATE_MALFORMED: new StateMalformedError().message,
  ERR_STATE_TOO_LARGE: new StateTooLargeError().message,
  ERR_STATE_INTEGRITY: new StateIntegrityError().message,
  ERR_KEY_UNKNOWN: new KeyUnknownError().message,
};

/** Shortest run of characters shared by an error's text and a secret that counts as a leak. */
const LEAK_WINDOW = 12;

interface RejectionCase {
  what: string;
  input: unknown;
  codes: readonly MrtrErrorCode[];
}

/**
 * A ring with a known secret, a codec on it, and inputs that reach every kind of rejection: wrong type,
 * oversize, unknown kid, wrong secret, tampered, truncated, extended and garbage. Each token carries a
 * marker in its payload and audience, so a leak of decoded claims is found as well as a leak of token text.
 */
async function rejectionCases(suite: CodecSuite) {
  const secret = generateKey();
  const keys = new KeyRing([{ kid: 'k1', secret }]);
  const codec = await suite.factory(keys);
  const marker = `PAYLOAD-${base64urlEncode(crypto.getRandomValues(new Uint8Array(12)))}`;
  const claims = sampleClaims({ secret: marker, list: [marker] }, { aud: `aud-${marker}` });
  const token = await codec.seal(claims);
  const middle = Math.floor(token.length / 2);
  const flipped = token.slice(0, middle) + String.fromCharCode(token.charCodeAt(middle) ^ 1) + token.slice(middle + 1);
  const stranger = await (await suite.factory(new KeyRing([{ kid: 'k9', secret: generateKey() }]))).seal(claims);
  const otherSecret = await (await suite.factory(new KeyRing([{ kid: 'k1', secret: generateKey() }]))).seal(claims);
  const cases: RejectionCase[] = [
    { what: 'a number', input: 42, codes: ['ERR_STATE_MALFORMED'] },
    { what: 'an object holding the token', input: { token }, codes: ['ERR_STATE_MALFORMED'] },
    {
      what: 'input over maxTokenBytes',
      input: `${token}.${marker.repeat(Math.ceil(codec.maxTokenBytes / marker.length))}`,
      codes: ['ERR_STATE_TOO_LARGE'],
    },
    { what: 'a token of a kid not in the ring', input: stranger, codes: ['ERR_KEY_UNKNOWN'] },
    { what: 'a token sealed with another secret', input: otherSecret, codes: ['ERR_STATE_INTEGRITY'] },
    { what: 'a token with a bit flipped', input: flipped, codes: REJECTION_CODES },
    { what: 'a truncated token', input: token.slice(0, -3), codes: REJECTION_CODES },
    { what: 'an extended token', input: `${token}${marker}`, codes: REJECTION_CODES },
    { what: 'garbage', input: `not a token: ${marker}`, codes: REJECTION_CODES },
  ];
  return { codec, cases, needles: [marker, secret, Buffer.from(base64urlDecode(secret) ?? []).toString('hex'), token] };
}

/** Everything an error says about itself: message, stack, cause (recursively) and own properties. */
function errorTexts(error: unknown, depth = 0): string[] {
  if (depth > 4 || error === undefined || error === null) return [];
  if (typeof error !== 'object') return [String(error)];
  const texts: string[] = [];
  const record = error as { message?: unknown; stack?: unknown; cause?: unknown };
  for (const value of [record.message, record.stack]) if (typeof value === 'string') texts.push(value);
  for (const name of Object.getOwnPropertyNames(error)) {
    if (name === 'message' || name === 'stack' || name === 'cause') continue;
    const value = (error as Record<string, unknown>)[name];
    texts.push(typeof value === 'object' && value !== null ? safeJson(value) : String(value));
  }
  if ('cause' in record) texts.push(...errorTexts(record.cause, depth + 1));
  return texts;
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    return String(value);
  }
}

/** The first run of {@link LEAK_WINDOW} characters of `text` that stands in `secret`, if any. */
function sharedRun(text: string, secret: string): string | undefined {
  for (let i = 0; i + LEAK_WINDOW <= text.length; i++) {
    const run = text.slice(i, i + LEAK_WINDOW);
    if (secret.includes(run)) return run;
  }
  return undefined;
}

async function rejectionOf(codec: StateCodec, c: RejectionCase): Promise<MrtrError> {
  const before = Error.stackTraceLimit;
  try {
    return await rejectsMrtr(() => codec.unseal(c.input as string), c.what, c.codes);
  } finally {
    const after = Error.stackTraceLimit;
    // Put it back first, so one broken codec does not change what the rest of the run sees.
    Error.stackTraceLimit = before;
    ok(after === before, `${c.what}: unseal changed Error.stackTraceLimit from ${before} to ${after}`);
  }
}

/**
 * Rejections are driven by whoever sends a token, so they are cheap and say nothing: the concrete class
 * of their code with its fixed message, no stack trace, a fresh object each time, and no token, payload
 * or key text anywhere in the error.
 */
export function errorHygieneProperties(suite: CodecSuite): void {
  const { label, report, test } = suite;

  test('rejects with the concrete MrtrError class of each code, its fixed message and no stack trace', async () => {
    const { codec, cases } = await rejectionCases(suite);
    for (const c of cases) {
      const error = await rejectionOf(codec, c);
      const type = error.constructor as { code?: unknown; name?: unknown };
      ok(
        type.code === error.code,
        `${c.what}: threw ${String(type.name)} for ${error.code}, not the concrete class of that code (throw the classes of @mrtr/core/errors)`,
      );
      ok(error.name === type.name, `${c.what}: error.name must be its class name (got ${error.name})`);
      ok(
        error.message === FIXED_MESSAGES[error.code],
        `${c.what}: message must be the fixed message of ${error.code} (got "${error.message}")`,
      );
      const frames = typeof error.stack === 'string' ? error.stack.split('\n').filter((line) => /^\s+at /.test(line)) : [];
      ok(frames.length === 0, `${c.what}: a rejection must carry no stack trace (found ${frames.length} frames)`);
    }
    report(`[${label}] rejections checked for class, message and stack: ${cases.length}`);
  });

  test('rejects with a fresh error object every time', async () => {
    const { codec, cases } = await rejectionCases(suite);
    const seen = new Set<MrtrError>();
    for (const c of cases) {
      for (let round = 0; round < 2; round++) {
        const error = await rejectionOf(codec, c);
        if (seen.has(error))
          fail(`${c.what}: the same error object was thrown twice (a shared error keeps whatever a caller attaches to it)`);
        seen.add(error);
      }
    }
  });

  test('puts no token, payload or key text into a rejection (message, stack, cause, own properties)', async () => {
    const { codec, cases, needles } = await rejectionCases(suite);
    let checked = 0;
    for (const c of cases) {
      const error = await rejectionOf(codec, c);
      const secrets = [...needles, typeof c.input === 'string' ? c.input : safeJson(c.input)];
      for (const text of errorTexts(error)) {
        for (const secret of secrets) {
          const run = sharedRun(text, secret);
          if (run !== undefined) fail(`${c.what}: the ${error.code} error repeats input, payload or key text ("${run}")`);
          checked++;
        }
      }
    }
    report(`[${label}] error texts checked for leaks: ${checked}`);
  });
}
