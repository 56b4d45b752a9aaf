import { describe, expect, it } from 'vitest';
import { AUDIENCE, K1, KEYS, mint, REQUEST, runCli, T0 } from './helpers.js';

const CODECS = ['hmac', 'jwe', 'aead'] as const;
const AT = (ms: number) => ['--now', new Date(T0 + ms).toISOString()];
const env = { MRTR_KEYS: KEYS };
const ARGS = JSON.stringify(REQUEST.arguments);
const FULL = ['--principal', 'alice', '--args', ARGS, '--audience', AUDIENCE];

/** Flips one character in the middle of the segment after the `n`-th dot. */
function tamper(token: string, segment: number): string {
  const parts = token.split('.');
  const s = parts[segment]!;
  const i = Math.floor(s.length / 2);
  parts[segment] = s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
  return parts.join('.');
}
const BODY_SEGMENT = { hmac: 2, jwe: 3, aead: 2 } as const;

describe('mrtr inspect without keys', () => {
  it('hmac: codec, format, kid, and the claims marked NOT VERIFIED', async () => {
    const token = await mint('hmac');
    const r = await runCli(['inspect', token, ...AT(60_000)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`token      hmac codec, format m1, kid "k2", ${token.length} characters`);
    expect(r.stdout).toContain('NOT VERIFIED');
    expect(r.stdout).toContain('request    tools/call delete_files');
    expect(r.stdout).toContain('audience   https://mcp.example.com/mcp');
    expect(r.stdout).toContain('issued     2026-01-15T12:00:00.000Z (1m ago)');
    expect(r.stdout).toContain('expires    2026-01-15T12:10:00.000Z (in 9m), lifetime 10m');
    expect(r.stdout).toContain('deadline   2026-01-15T12:30:00.000Z (in 29m) (flow deadline)');
    expect(r.stdout).toContain('data       19 bytes of JSON (--data shows it)');
    expect(r.stdout).not.toContain('confirmed');
    expect(r.stdout).not.toContain('alice');
  });

  it.each([
    ['jwe', 'JWE compact (alg dir, enc A256GCM)'],
    ['aead', 'x1'],
  ] as const)('%s: codec, format and kid; the claims are encrypted', async (codec, format) => {
    const token = await mint(codec);
    const r = await runCli(['inspect', token]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`token      ${codec} codec, format ${format}, kid "k2", ${token.length} characters, claims encrypted`);
    expect(r.stdout).toContain('claims     encrypted: set MRTR_KEYS to open them');
  });

  it('--data shows the payload; --json gives the same facts', async () => {
    const token = await mint('hmac', { data: { step: 'confirm' } });
    const r = await runCli(['inspect', token, '--data', '--json', ...AT(0)]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({ token: { codec: 'hmac', format: 'm1', kid: 'k2' }, verified: false, problem: null });
    expect(j.claims).toMatchObject({ aud: AUDIENCE, data: { step: 'confirm' }, flow: { round: 1 }, relative: { expiresIn: 600000 } });
  });

  it('reads the token from stdin with "-"', async () => {
    const token = await mint('aead');
    const r = await runCli(['inspect', '-'], { input: `${token}\n` });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('aead codec');
  });

  it.each([
    ['hello', /unrecognised, 5 characters\nproblem +not a token of any mrtr codec/],
    ['m1.k2.!!!.x', /problem +the body is not base64url JSON/],
    ['m1..abc.def', /problem +no valid kid after "m1."/],
    ['x1.bad kid.abc', /problem +no valid kid after "x1."/],
  ])('malformed %s → exit 1', async (token, message) => {
    const r = await runCli(['inspect', token]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(message);
  });
});

describe.each(CODECS)('mrtr inspect with MRTR_KEYS: %s', (codec) => {
  it('opens the token and accepts it for the request it was minted for', async () => {
    const token = await mint(codec);
    const r = await runCli(['inspect', token, ...FULL, ...AT(1000)], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('opened     integrity verified with key "k2" (the primary)');
    expect(r.stdout).toContain('args       matches sha256');
    expect(r.stdout).toContain('principal  matches "alice"');
    expect(r.stdout).toContain('verdict    ACCEPTED every check of the guard passes');
  });

  it('without a request: the claims, and the checks that could not run', async () => {
    const token = await mint(codec);
    const r = await runCli(['inspect', token, ...AT(0)], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('verdict    NOT REFUSED');
    expect(r.stdout).toContain(
      'not checked: principal (give --principal or --unauthenticated); arguments (give --args); audience (give --audience)',
    );
    // A check is listed as run or as not checked, never both (the verdict used to claim "audience" was checked).
    const verdict = r.stdout.split('\n').find((line) => line.includes('verdict'))!;
    expect(verdict).toContain('the checks run pass: integrity, expiry, binding (method, target), flow deadline and round');
    for (const unchecked of ['audience', 'principal', 'arguments']) expect(verdict).not.toContain(unchecked);
  });

  it('a token of an older key of the ring opens', async () => {
    const token = await mint(codec, { keys: K1 });
    const r = await runCli(['inspect', token, ...FULL, ...AT(0)], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('with key "k1" (an older key of the ring)');
  });

  it('tampered → ERR_STATE_INTEGRITY', async () => {
    const token = tamper(await mint(codec), BODY_SEGMENT[codec]);
    const r = await runCli(['inspect', token, ...AT(0)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      /verdict +REFUSED ERR_STATE_INTEGRITY: the (MAC|authentication tag) does not verify with key "k2": the token was modified/,
    );
  });

  it('expired → ERR_STATE_EXPIRED, by how long', async () => {
    const token = await mint(codec);
    const r = await runCli(['inspect', token, ...FULL, ...AT(600_000 + 5_000 + 125_000)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      'verdict    REFUSED ERR_STATE_EXPIRED: expired 2m 10s ago (exp 2026-01-15T12:10:00.000Z; refused since exp + 5 s skew)',
    );
    // Within the skew it is still accepted.
    const inSkew = await runCli(['inspect', token, ...FULL, ...AT(604_000)], { env });
    expect(inSkew.code).toBe(0);
  });

  it('another key → ERR_KEY_UNKNOWN naming the key; same kid, other secret → ERR_STATE_INTEGRITY', async () => {
    const other = await mint(codec, { keys: `zz:${'A'.repeat(42)}E` });
    const r = await runCli(['inspect', other, ...AT(0)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('REFUSED ERR_KEY_UNKNOWN: the token names key "zz", which is not in MRTR_KEYS (k2, k1)');
    const sameKid = await mint(codec, { keys: `k2:${'A'.repeat(42)}E` });
    const s = await runCli(['inspect', sameKid, ...AT(0)], { env });
    expect(s.code).toBe(1);
    expect(s.stdout).toContain('REFUSED ERR_STATE_INTEGRITY');
    expect(s.stdout).toContain('or "k2" in MRTR_KEYS is not the secret that sealed it');
  });

  it('--json: claims, binding and the verdict code', async () => {
    const token = await mint(codec);
    const r = await runCli(['inspect', token, '--json', '--principal', 'bob', ...AT(0)], { env });
    expect(r.code).toBe(1);
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({
      codec,
      verified: true,
      kid: 'k2',
      verdict: { accepted: false, code: 'ERR_STATE_PRINCIPAL' },
      binding: { principal: { name: 'bob', match: false } },
    });
    expect(j.claims.data).toBeUndefined();
    expect(j.claims.req).toMatchObject({ m: 'tools/call', t: 'delete_files' });
  });
});

describe('mrtr inspect: every refusal of the guard, with its reason', () => {
  it('ERR_STATE_AUDIENCE', async () => {
    const r = await runCli(['inspect', await mint('hmac'), '--audience', 'https://other.example', ...AT(0)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      'REFUSED ERR_STATE_AUDIENCE: minted for audience "https://mcp.example.com/mcp", the server\'s is "https://other.example"',
    );
  });

  it('ERR_STATE_PRINCIPAL; unauthenticated and authenticated principals never match', async () => {
    const r = await runCli(['inspect', await mint('jwe'), '--principal', 'mallory', ...AT(0)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('principal  differs: the tag is not "mallory"\'s for this audience');
    expect(r.stdout).toContain('REFUSED ERR_STATE_PRINCIPAL');
    const anon = await mint('hmac', { request: { principal: undefined }, unauthenticated: 'anonymous' });
    const ok = await runCli(['inspect', anon, '--unauthenticated', 'anonymous', '--args', ARGS, ...AT(0)], { env });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('principal  matches unauthenticated "anonymous"');
    const asUser = await runCli(['inspect', anon, '--principal', 'anonymous', ...AT(0)], { env });
    expect(asUser.code).toBe(1);
    expect(asUser.stdout).toContain('ERR_STATE_PRINCIPAL');
  });

  it('ERR_STATE_BINDING says which part differs (with or without a principal)', async () => {
    const token = await mint('aead');
    const r = await runCli(['inspect', token, '--principal', 'alice', '--method', 'prompts/get', '--target', 'other', ...AT(0)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      'REFUSED ERR_STATE_BINDING: minted for another request: method "tools/call" in the token, "prompts/get" in the request; target "delete_files" in the token, "other" in the request',
    );
    const args = await runCli(['inspect', token, '--args', '{"paths":["/etc"]}', ...AT(0)], { env });
    expect(args.code).toBe(1);
    expect(args.stdout).toContain('REFUSED ERR_STATE_BINDING: minted for another request: the arguments differ');
    // Argument key order does not matter (RFC 8785 canonical JSON).
    const reordered = await mint('hmac', { request: { arguments: { b: 1, a: [1, 2] } } });
    const same = await runCli(['inspect', reordered, '--principal', 'alice', '--args', '{"a":[1,2],"b":1}', ...AT(0)], { env });
    expect(same.code).toBe(0);
  });

  it('a principal without --args checks the principal only', async () => {
    const r = await runCli(['inspect', await mint('hmac'), '--principal', 'alice', ...AT(0)], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('not checked: arguments (give --args)');
    expect(r.stdout).toMatch(/verdict +NOT REFUSED the checks run pass: integrity, expiry, principal, binding \(method, target\), flow/);
  });

  it('ERR_FLOW_EXPIRED while the state itself is still valid', async () => {
    const token = await mint('hmac', { flowTtlMs: 60_000 });
    const r = await runCli(['inspect', token, ...FULL, ...AT(60_000 + 5_000 + 30_000)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("REFUSED ERR_FLOW_EXPIRED: the flow's deadline passed 35 s ago (2026-01-15T12:01:00.000Z, + 5 s skew)");
    const noRequest = await runCli(['inspect', token, ...AT(100_000)], { env });
    expect(noRequest.stdout).toContain('REFUSED ERR_FLOW_EXPIRED');
  });

  it('ERR_FLOW_ROUNDS against --max-rounds', async () => {
    const token = await mint('jwe', { rounds: 3 });
    const r = await runCli(['inspect', token, ...FULL, '--max-rounds', '2', ...AT(0)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('flow       id');
    expect(r.stdout).toContain('round 3 of at most 2');
    expect(r.stdout).toContain('REFUSED ERR_FLOW_ROUNDS: round 3 is past maxRounds 2');
  });

  it('ERR_STATE_EXPIRED for a state issued in the future', async () => {
    const r = await runCli(['inspect', await mint('hmac'), ...AT(-60_000)], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      'REFUSED ERR_STATE_EXPIRED: issued 1m in the future (2026-01-15T12:00:00.000Z): a clock is off by more than the 5 s skew',
    );
  });

  it('ERR_STATE_TOO_LARGE and ERR_STATE_MALFORMED', async () => {
    const big = await runCli(['inspect', '-'], { env, input: `m1.k2.${'A'.repeat(20_000)}.${'A'.repeat(43)}` });
    expect(big.code).toBe(1);
    expect(big.stdout).toContain("REFUSED ERR_STATE_TOO_LARGE: the token is 20050 characters; the hmac codec's cap is 16384");
    const junk = await runCli(['inspect', 'hello'], { env });
    expect(junk.code).toBe(1);
    expect(junk.stdout).toContain('REFUSED ERR_STATE_MALFORMED: not a token of any mrtr codec');
    const wrongCodec = await runCli(['inspect', await mint('hmac'), '--codec', 'aead'], { env });
    expect(wrongCodec.code).toBe(1);
    expect(wrongCodec.stdout).toContain('opened as aead (--codec)');
    expect(wrongCodec.stdout).toContain('REFUSED ERR_STATE_MALFORMED: not a well-formed aead token (it looks like hmac)');
    const truncated = await runCli(['inspect', (await mint('jwe')).slice(0, -5)], { env });
    expect(truncated.code).toBe(1);
    expect(truncated.stdout).toContain('ERR_STATE_MALFORMED');
  });

  it.each([
    [[], {}, /inspect needs a token/],
    [['a', 'b'], {}, /inspect takes one token/],
    [['t', '--codec', 'rot13'], {}, /--codec must be hmac, jwe or aead/],
    [['t', '--now', 'yesterday'], {}, /--now must be an ISO 8601/],
    [['t', '--args', '{nope'], {}, /--args must be JSON/],
    [['t', '--principal', 'a', '--unauthenticated', 'b'], {}, /not both/],
    [['t', '--max-rounds', '0'], {}, /--max-rounds must be between 1 and 1000/],
    [['t'], { MRTR_KEYS: 'k1:short' }, /MRTR_KEYS is invalid: KeyRing: secret of "k1" is not valid/],
    [['-'], {}, /the token is empty/],
  ])('usage error %# → exit 2', async (args, extraEnv, message) => {
    const r = await runCli(['inspect', ...args], { env: extraEnv });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(message);
  });
});
