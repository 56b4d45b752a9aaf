import type { OpenedToken, StateClaims, StateCodec } from '@mrtr/core';

/** The HMAC codec of the Node build: a `StateCodec` whose `seal` and `open` are synchronous. */
export interface HmacCodec extends StateCodec {
  readonly id: 'hmac';
  readonly confidential: false;
  seal(claims: StateClaims): string;
  open(token: string): OpenedToken;
}

/** The HMAC codec of the web build (every runtime but Node): `seal` and `open` return promises. */
export interface HmacWebCodec extends StateCodec {
  readonly id: 'hmac';
  readonly confidential: false;
  seal(claims: StateClaims): Promise<string>;
  open(token: string): Promise<OpenedToken>;
}
