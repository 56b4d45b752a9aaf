import type { OpenedToken, StateClaims, StateCodec } from '@mrtr/core';

/** The AEAD codec of the Node build: a `StateCodec` whose `seal` and `open` are synchronous. */
export interface AeadCodec extends StateCodec {
  readonly id: 'aead';
  readonly confidential: true;
  seal(claims: StateClaims): string;
  open(token: string): OpenedToken;
}

/** The AEAD codec of the web build (every runtime but Node): `seal` and `open` return promises. */
export interface AeadWebCodec extends StateCodec {
  readonly id: 'aead';
  readonly confidential: true;
  seal(claims: StateClaims): Promise<string>;
  open(token: string): Promise<OpenedToken>;
}
