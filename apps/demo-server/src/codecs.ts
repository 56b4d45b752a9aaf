import type { KeyRing, StateCodec } from '@mrtr/core';
import type { CodecName } from './config.js';

/** Loads and builds the chosen codec (each codec package is only loaded when it is chosen). */
export async function createCodec(name: CodecName, keys: KeyRing): Promise<StateCodec> {
  switch (name) {
    case 'hmac': {
      const { createHmacCodec } = await import('@mrtr/codec-hmac');
      return createHmacCodec(keys);
    }
    case 'jwe': {
      const { createJweCodec } = await import('@mrtr/codec-jwe');
      return createJweCodec(keys);
    }
    case 'aead': {
      const { createAeadCodec } = await import('@mrtr/codec-aead');
      return createAeadCodec(keys);
    }
  }
}
