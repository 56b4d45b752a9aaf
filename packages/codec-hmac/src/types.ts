import type { Awaitable, StateCodec } from '@mrtr/core';

/**
 * The HMAC codec, one type for every build: `seal` and `unseal` answer synchronously on the Node build
 * (`node:crypto`) and with a promise on the web build (WebCrypto), so `await` their results.
 */
export interface HmacCodec extends StateCodec {
  readonly id: 'hmac';
  readonly confidential: false;
  /** `seal` of claims given as their JSON text (`JSON.stringify(claims)`): the same token. */
  sealJson(json: string): Awaitable<string>;
}
