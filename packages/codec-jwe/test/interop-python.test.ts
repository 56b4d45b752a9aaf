import { spawnSync } from 'node:child_process';
import { generateKey, KeyRing } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { base64urlEncode, canonicalJson } from '@mrtr/core/encoding';
import { sampleClaims } from '@mrtr/test-suite';
import { describe, expect, it } from 'vitest';
import { decodeClaims, encodeClaims } from '../src/claims.js';
import { createCodecWithEngine } from '../src/codec.js';
import { engine as nodeEngine } from '../src/engine/node.js';
import type { JweEngine } from '../src/engine/types.js';
import { engine as webEngine } from '../src/engine/web.js';
import { JWE_KEY_PURPOSE } from '../src/index.js';

// Interop beyond JavaScript: Python's jwcrypto (Debian package python3-jwcrypto) opens what the codec
// seals given the CEK, and the codec opens what jwcrypto seals. /usr/bin/python3, not whatever python3
// is first on PATH (a pyenv python does not see Debian's packages). Without jwcrypto the tests skip
// with a printed reason, unless MRTR_REQUIRE_SERVICES=1, where that fails (scripts/ci-runtimes.sh
// installs the package).
const PYTHON = process.env.MRTR_PYTHON ?? '/usr/bin/python3';
const REQUIRE_SERVICES = process.env.MRTR_REQUIRE_SERVICES === '1';

const probe = spawnSync(
  PYTHON,
  ['-c', 'import jwcrypto, sys; sys.stdout.write(jwcrypto.__version__ if hasattr(jwcrypto, "__version__") else "?")'],
  {
    encoding: 'utf8',
    timeout: 20_000,
  },
);
const available = probe.status === 0;
const reason = probe.error ? `${PYTHON}: ${probe.error.message}` : (probe.stderr || '').trim().split('\n').pop();

// Reads {k, kid, tokens, plaintexts} on stdin; answers {opened: [{header, payload}], sealed: [token]}.
const SCRIPT = `
import json, sys
from jwcrypto import jwe, jwk
from jwcrypto.common import json_encode
req = json.load(sys.stdin)
key = jwk.JWK(kty="oct", k=req["k"])
out = {"opened": [], "sealed": []}
for token in req["tokens"]:
    o = jwe.JWE(algs=["dir", "A256GCM"])
    o.deserialize(token, key=key)
    out["opened"].append({"header": o.jose_header, "payload": o.payload.decode("utf-8")})
for text in req["plaintexts"]:
    e = jwe.JWE(text.encode("utf-8"), json_encode({"alg": "dir", "enc": "A256GCM", "kid": req["kid"]}))
    e.add_recipient(key)
    out["sealed"].append(e.serialize(compact=True))
sys.stdout.write(json.dumps(out))
`;

interface PythonAnswer {
  opened: { header: Record<string, unknown>; payload: string }[];
  sealed: string[];
}

function python(request: { k: string; kid: string; tokens: string[]; plaintexts: string[] }): PythonAnswer {
  const result = spawnSync(PYTHON, ['-c', SCRIPT], { input: JSON.stringify(request), encoding: 'utf8', timeout: 60_000 });
  if (result.status !== 0) throw new Error(`python3 jwcrypto failed (${result.status}): ${result.stderr || result.error?.message}`);
  return JSON.parse(result.stdout) as PythonAnswer;
}

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

if (!available) {
  if (REQUIRE_SERVICES) {
    it('Python jwcrypto is required (MRTR_REQUIRE_SERVICES=1) but cannot be imported', () => {
      throw new Error(`${PYTHON} -c "import jwcrypto" failed (${reason}); install the Debian package python3-jwcrypto`);
    });
  } else {
    console.warn(
      `[codec-jwe] interop-python.test.ts: skipped because ${PYTHON} cannot import jwcrypto (${reason}); apt-get install python3-jwcrypto`,
    );
  }
}

describe.runIf(available).each(engines)('interop with Python jwcrypto (%s engine)', (_name, engine) => {
  it('jwcrypto opens every token the codec seals, and the codec opens every token jwcrypto seals', async () => {
    const keys = new KeyRing([
      { kid: 'k2', secret: generateKey() },
      { kid: 'k1', secret: generateKey() },
    ]);
    const codec = createCodecWithEngine(engine, keys);
    const cek = keys.subkeySync('k2', JWE_KEY_PURPOSE, 32)!;
    const claims: StateClaims[] = payloads.map((data) => sampleClaims(data));
    const tokens: string[] = [];
    for (const c of claims) tokens.push(await codec.seal(c));
    const answer = python({ k: base64urlEncode(cek), kid: 'k2', tokens, plaintexts: claims.map((c) => encodeClaims(c)) });

    // Python → what the codec sealed: the header as written, the JWT claims set the codec encodes.
    expect(answer.opened).toHaveLength(claims.length);
    answer.opened.forEach(({ header, payload }, i) => {
      expect(header).toEqual({ alg: 'dir', enc: 'A256GCM', kid: 'k2' });
      expect(canonicalJson(decodeClaims(payload))).toBe(canonicalJson(claims[i]));
    });

    // The codec → what Python sealed (its own IVs, its own header spelling).
    expect(answer.sealed).toHaveLength(claims.length);
    for (const [i, token] of answer.sealed.entries()) {
      expect(token.split('.')).toHaveLength(5);
      const opened = await codec.unseal(token);
      expect(opened.kid).toBe('k2');
      expect(canonicalJson(opened.claims)).toBe(canonicalJson(claims[i]));
    }
  });

  it('a token Python sealed and then altered is refused', async () => {
    const keys = KeyRing.generate('k1');
    const codec = createCodecWithEngine(engine, keys);
    const cek = keys.subkeySync('k1', JWE_KEY_PURPOSE, 32)!;
    const claims = sampleClaims({ step: 1 });
    const [token] = python({ k: base64urlEncode(cek), kid: 'k1', tokens: [], plaintexts: [encodeClaims(claims)] }).sealed;
    const parts = token!.split('.');
    const ciphertext = parts[3]!;
    parts[3] = (ciphertext[0] === 'A' ? 'B' : 'A') + ciphertext.slice(1);
    await expect(Promise.resolve().then(() => codec.unseal(parts.join('.')))).rejects.toMatchObject({ code: 'ERR_STATE_INTEGRITY' });
  });
});
