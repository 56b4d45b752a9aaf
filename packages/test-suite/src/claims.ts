import type { JsonValue, KeyRing, StateCodec } from '@mrtr/core';
import { CLAIMS_VERSION, type StateClaims } from '@mrtr/core/codec';
import { base64urlDecode, base64urlEncode, randomBytes, utf8Decode, utf8Encode } from '@mrtr/core/encoding';
import { StateMalformedError } from '@mrtr/core/errors';

/** Claims shaped as the guard mints them, with a fresh jti and flow id. */
export function sampleClaims<P extends JsonValue>(data: P, overrides: Partial<StateClaims<P>> = {}): StateClaims<P> {
  const now = Date.now();
  return {
    v: CLAIMS_VERSION,
    iat: now,
    exp: now + 600_000,
    jti: base64urlEncode(randomBytes(16)),
    aud: 'https://mcp.example.com/mcp',
    sub: base64urlEncode(randomBytes(16)),
    req: { m: 'tools/call', t: 'delete_files', d: base64urlEncode(randomBytes(32)) },
    flow: { id: base64urlEncode(randomBytes(16)), round: 1, deadline: now + 1_800_000 },
    data,
    ...overrides,
  };
}

/** Payloads every codec must round-trip exactly. */
export function samplePayloads(): JsonValue[] {
  return [
    null,
    0,
    -1.5e-7,
    'plain',
    { tool: 'delete_files', args: { paths: ['/tmp/a', '/tmp/b'] }, step: 1, answers: { confirm: true } },
    { unicode: 'ünïcødé ✓ 😀 \u2028 \u0000 end', nested: [[[{ deep: [1, 2, { x: null }] }]]], empty: {}, list: [] },
    { big: 'x'.repeat(3000), numbers: [0, 1, -1, 2 ** 53 - 1, -(2 ** 53 - 1), 0.1, 1e300, -1e-300] },
    JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}},"toString":"data"}') as JsonValue,
  ];
}

/** Claims as base64url JSON, no integrity: enough to drive a guard over the store under test (never for real use). */
export function plainCodec(keys: KeyRing): StateCodec {
  return {
    id: 'plain',
    confidential: false,
    maxTokenBytes: 65_536,
    keys,
    seal: (claims) => `p.${base64urlEncode(utf8Encode(JSON.stringify(claims)))}`,
    unseal: (token) => {
      const bytes = token.startsWith('p.') ? base64urlDecode(token.slice(2)) : undefined;
      if (bytes === undefined) throw new StateMalformedError();
      return { claims: JSON.parse(utf8Decode(bytes)), kid: keys.primaryKid };
    },
  };
}
