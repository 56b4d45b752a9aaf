import type { StateCodec } from '@mrtr/core';

/**
 * The AEAD codec, one type for every build: `seal` and `unseal` answer synchronously on the Node build and with a
 * promise on the web build (WebCrypto key derivation), so `await` their results.
 */
export interface AeadCodec extends StateCodec {
  readonly id: 'aead';
  readonly confidential: true;
}
