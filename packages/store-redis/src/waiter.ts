import type { BatchEntry } from '@mrtr/core/store';

/** One consume waiting for its batch. */
export interface Waiter extends BatchEntry<boolean> {
  readonly key: string;
  /** `expiresAtMs`, rounded up (the key is kept until it plus the extra retention). */
  readonly exp: number;
  /** `mintedAtMs`, or `undefined` (no epoch check). */
  readonly minted: number | undefined;
}
