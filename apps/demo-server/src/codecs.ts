import type { CodecFactory, KeyRing } from '@mrtr/core';
import type { CodecName } from './config.js';

export interface DemoCodec {
  /** The codec's factory: the guard builds the codec on the ring in force (rebuilt when a key file rotates it). */
  factory: CodecFactory;
  /** The codec's id (the metrics' label), read from a codec built on the ring in force at start. */
  id: string;
}

/** Loads the chosen codec's factory (each codec package is only loaded when it is chosen). */
export async function loadCodec(name: CodecName, keys: KeyRing): Promise<DemoCodec> {
  const factory = await codecFactory(name);
  return { factory, id: factory(keys.current()).id };
}

async function codecFactory(name: CodecName): Promise<CodecFactory> {
  switch (name) {
    case 'hmac':
      return (await import('@mrtr/codec-hmac')).createHmacCodec;
    case 'jwe':
      return (await import('@mrtr/codec-jwe')).createJweCodec;
    case 'aead':
      return (await import('@mrtr/codec-aead')).createAeadCodec;
  }
}
