import { createAeadCodec } from '@mrtr/codec-aead';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { createJweCodec } from '@mrtr/codec-jwe';
import { type CodecFactory, KeyRing, MrtrError, type StateCodec, createStateGuard } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';

export const CODECS: Record<string, CodecFactory> = {
  hmac: createHmacCodec,
  jwe: createJweCodec,
  aead: createAeadCodec,
};

/** The same codecs with a chosen `maxTokenBytes` (the suite's linearity properties measure at 64 KiB). */
export const CAPPED: Record<string, (keys: KeyRing, maxTokenBytes: number) => StateCodec> = {
  hmac: (keys, maxTokenBytes) => createHmacCodec(keys, { maxTokenBytes }),
  jwe: (keys, maxTokenBytes) => createJweCodec(keys, { maxTokenBytes }),
  aead: (keys, maxTokenBytes) => createAeadCodec(keys, { maxTokenBytes }),
};

/** How the codec answers: synchronously (the Node builds) or with promises (the web builds). */
export async function sealKind(factory: CodecFactory): Promise<'sync' | 'async'> {
  const codec = factory(KeyRing.generate());
  let answer: unknown;
  try {
    answer = codec.open('not a token');
  } catch {
    return 'sync';
  }
  if (!(answer instanceof Promise)) throw new Error('open accepted "not a token"');
  await answer.then(
    () => {
      throw new Error('open accepted "not a token"');
    },
    () => {},
  );
  return 'async';
}

const expectCode = async (fn: () => Promise<unknown>, code: string, what: string): Promise<void> => {
  try {
    await fn();
  } catch (error) {
    if (MrtrError.is(error) && error.code === code) return;
    throw new Error(`${what}: expected ${code}, got ${MrtrError.is(error) ? error.code : String(error)}`);
  }
  throw new Error(`${what}: was accepted, expected ${code}`);
};

/** The guard program: mint → open → replay rejected → tamper rejected, with the memory store. */
export function guardProgram(it: (name: string, fn: () => Promise<void>) => void, name: string, factory: CodecFactory): void {
  it(`${name} guard: mint → open → replay rejected → tamper rejected`, async () => {
    const keys = KeyRing.generate('k1');
    const guard = createStateGuard({ keys, codec: factory, store: createMemoryStore(), audience: 'https://mcp.example.com/mcp' });
    const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
    const token = await guard.mint({ confirmed: false, note: 'ünïcødé ✓ 😀' }, request);
    const opened = await guard.open(token, request);
    if (opened.data.note !== 'ünïcødé ✓ 😀' || opened.data.confirmed !== false || opened.flow.round !== 1) {
      throw new Error(`opened the wrong data: ${JSON.stringify(opened.data)}`);
    }
    await expectCode(() => guard.open(token, request), 'ERR_STATE_REPLAYED', 'replay');
    const fresh = await guard.mint({ confirmed: true }, request);
    // Flip one character in the middle of the token (a valid base64url character for another).
    const at = Math.floor(fresh.length / 2);
    const tampered = fresh.slice(0, at) + (fresh[at] === 'A' ? 'B' : 'A') + fresh.slice(at + 1);
    try {
      await guard.open(tampered, request);
      throw new Error('tamper: was accepted');
    } catch (error) {
      if (!MrtrError.is(error) || !['ERR_STATE_INTEGRITY', 'ERR_STATE_MALFORMED'].includes(error.code)) throw error;
    }
    // The untampered token still opens once (the tampered one consumed nothing).
    await guard.open(fresh, request);
  });
}
