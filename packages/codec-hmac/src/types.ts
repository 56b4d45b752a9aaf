import type { Awaitable, OpenedToken, StateCodec } from '@mrtr/core';

/**
 * The HMAC codec, one type for every build: `seal` and `unseal` answer synchronously on the Node build
 * (`node:crypto`) and with a promise on the web build (WebCrypto), so `await` their results.
 */
export interface HmacCodec extends StateCodec {
  readonly id: 'hmac';
  readonly confidential: false;
  /** @deprecated The former name of `unseal` (kept for one release). */
  open(token: string): Awaitable<OpenedToken>;
}

/** @deprecated One type for both builds now: use {@link HmacCodec}. Removed in the next minor release. */
export type HmacWebCodec = HmacCodec;
