// Issue 22: the codec method is `unseal` now; a codec written before it (with `open` only) is still checked, through
// its `open`, for one release.
import { KeyRing, type OpenOnlyCodec } from '@mrtr/core';
import { describe, expect, it } from 'vitest';
import { createExampleHmacCodec } from '../reference/hmac-codec.js';
import { sampleClaims } from '../src/index.js';
import { withUnseal } from '../src/codec/context.js';

describe('a codec with the deprecated open only', () => {
  it('is called through its open, and a codec with unseal is used as it is', async () => {
    const keys = KeyRing.generate('k1');
    const current = createExampleHmacCodec(keys);
    expect(withUnseal(current)).toBe(current);
    const { unseal, ...rest } = current;
    const legacy: OpenOnlyCodec = { ...rest, open: (token) => unseal(token) };
    const wrapped = withUnseal(legacy);
    const claims = sampleClaims({ n: 1 });
    const token = await wrapped.seal(claims);
    expect((await wrapped.unseal(token)).claims).toEqual(claims);
    expect(wrapped.keys).toBe(keys);
    expect(wrapped.maxTokenBytes).toBe(current.maxTokenBytes);
  });
});
