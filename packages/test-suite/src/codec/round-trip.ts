import { base64urlDecode, base64urlEncode } from '@mrtr/core/encoding';
import { fail, ok } from '../assert.js';
import { sampleClaims, samplePayloads } from '../claims.js';
import { type CodecSuite, deepClaimsEqual, ring } from './context.js';

/** What a sealed token carries and how it comes back: facts, exact round trips, fleets, randomness, confidentiality. */
export function roundTripProperties(suite: CodecSuite): void {
  for (const register of [
    declaresItsFacts,
    roundTripsClaimsExactly,
    roundTripsTheLedgerEpoch,
    keepsProtoKeysAsData,
    opensAcrossInstances,
    sealsWithFreshRandomness,
    hidesClaimBytesWhenConfidential,
  ])
    register(suite);
}

function declaresItsFacts(suite: CodecSuite): void {
  const { factory, test } = suite;
  test('declares its facts', async () => {
    const codec = await factory(ring('k1'));
    ok(typeof codec.id === 'string' && codec.id.length > 0, 'id must be a non-empty string');
    ok(typeof codec.confidential === 'boolean', 'confidential must be a boolean');
    ok(Number.isSafeInteger(codec.maxTokenBytes) && codec.maxTokenBytes > 0, 'maxTokenBytes must be a positive integer');
    ok(codec.maxTokenBytes < 1024 * 1024, 'maxTokenBytes must be below 1 MiB');
  });
}

function roundTripsClaimsExactly(suite: CodecSuite): void {
  const { factory, test } = suite;
  test('round-trips claims exactly, with the primary kid', async () => {
    const keys = ring('k1', 'k0');
    const codec = await factory(keys);
    for (const payload of samplePayloads()) {
      const claims = sampleClaims(payload);
      const token = await codec.seal(claims);
      ok(typeof token === 'string' && /^[\x21-\x7e]+$/.test(token), 'token must be non-empty printable ASCII');
      ok(token.length <= codec.maxTokenBytes, 'a sealed token must fit maxTokenBytes');
      const opened = await codec.unseal(token);
      ok(opened.kid === 'k1', `opened kid must be the primary key's (got ${String(opened.kid)})`);
      ok(deepClaimsEqual(opened.claims, claims), 'opened claims must equal the sealed claims exactly');
    }
  });
}

function roundTripsTheLedgerEpoch(suite: CodecSuite): void {
  const { factory, test } = suite;
  test("round-trips the store's ledger epoch (le) when the claims carry one, and no le when they do not", async () => {
    const codec = await factory(ring('k1'));
    const withEpoch = sampleClaims({ step: 1 }, { le: 1_800_000_000_123 });
    const opened = await codec.unseal(await codec.seal(withEpoch));
    ok(opened.claims.le === 1_800_000_000_123, `le must come back exactly (got ${String(opened.claims.le)})`);
    ok(deepClaimsEqual(opened.claims, withEpoch), 'opened claims must equal the sealed claims exactly');
    const without = await codec.unseal(await codec.seal(sampleClaims({ step: 1 })));
    ok(!Object.hasOwn(without.claims, 'le'), 'claims without le must come back without it');
  });
}

function keepsProtoKeysAsData(suite: CodecSuite): void {
  const { factory, test } = suite;
  test('keeps __proto__ and constructor payload keys as plain data', async () => {
    const codec = await factory(ring('k1'));
    const payload = JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}');
    const opened = await codec.unseal(await codec.seal(sampleClaims(payload)));
    const data = opened.claims.data as Record<string, unknown>;
    ok(Object.getPrototypeOf(data) === Object.prototype, 'payload object must keep Object.prototype');
    ok(Object.hasOwn(data, '__proto__'), '__proto__ must come back as an own data property');
    ok(({} as Record<string, unknown>).polluted === undefined, 'Object.prototype must not be polluted');
    ok((data as { polluted?: unknown }).polluted === undefined, 'payload must not gain inherited properties');
  });
}

function opensAcrossInstances(suite: CodecSuite): void {
  const { factory, test } = suite;
  test('opens a token sealed by another instance with the same keys', async () => {
    const keys = ring('k1');
    const sealer = await factory(keys);
    const opener = await factory(keys);
    const claims = sampleClaims({ shared: 'fleet' });
    const opened = await opener.unseal(await sealer.seal(claims));
    if (opened.kid !== 'k1' || !deepClaimsEqual(opened.claims, claims)) fail('instances sharing a key ring must interoperate');
  });
}

function sealsWithFreshRandomness(suite: CodecSuite): void {
  const { factory, test } = suite;
  test('seals with fresh randomness (confidential codecs: two seals of the same claims differ)', async () => {
    const codec = await factory(ring('k1'));
    const claims = sampleClaims({ same: true });
    const first = await codec.seal(claims);
    const second = await codec.seal(claims);
    ok(deepClaimsEqual((await codec.unseal(first)).claims, claims), 'the first seal must open');
    ok(deepClaimsEqual((await codec.unseal(second)).claims, claims), 'the second seal must open');
    if (codec.confidential) ok(first !== second, 'a confidential codec must use a fresh nonce per seal');
    const other = await codec.seal({ ...claims, jti: base64urlEncode(new Uint8Array(16).fill(7)) });
    ok(other !== first, 'a different jti must give a different token');
  });
}

function hidesClaimBytesWhenConfidential(suite: CodecSuite): void {
  const { factory, test } = suite;
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
}

/** `sealJson`, a codec's optional one-pass seal of claims already in JSON (a recorded outcome's): the token `seal` makes. */
export function sealJsonProperties(suite: CodecSuite): void {
  const { factory, test } = suite;
  test('sealJson (when the codec has it) seals the JSON text of claims to a token that opens to those claims', async () => {
    const codec = await factory(ring('k1', 'k0'));
    if (codec.sealJson === undefined) return;
    for (const payload of samplePayloads()) {
      const claims = sampleClaims(payload);
      const json = JSON.stringify(claims);
      const token = await codec.sealJson(json);
      ok(typeof token === 'string' && /^[\x21-\x7e]+$/.test(token), 'token must be non-empty printable ASCII');
      ok(token.length <= codec.maxTokenBytes, 'a sealed token must fit maxTokenBytes');
      const opened = await codec.unseal(token);
      ok(opened.kid === 'k1', `opened kid must be the primary key's (got ${String(opened.kid)})`);
      ok(deepClaimsEqual(opened.claims, claims), 'claims sealed from their JSON must open exactly');
      // A codec without randomness makes the very token of seal(claims).
      const once = await codec.seal(claims);
      if (!codec.confidential && once === (await codec.seal(claims))) {
        ok(token === once, 'sealJson(JSON.stringify(claims)) must be the token seal(claims) makes');
      }
    }
    const tooLarge = JSON.stringify(sampleClaims({ pad: 'x'.repeat(codec.maxTokenBytes) }));
    let code: unknown;
    try {
      await codec.sealJson(tooLarge);
    } catch (error) {
      code = (error as { code?: unknown }).code;
    }
    ok(code === 'ERR_STATE_TOO_LARGE', `sealJson of claims past maxTokenBytes must throw ERR_STATE_TOO_LARGE (got ${String(code)})`);
  });
}
