import type { Awaitable } from '../crypto/awaitable.js';
import type { OutcomeDropReason } from '../events.js';
import type { Admission, AdmitOptions, OpenedState } from '../guard/types.js';
import type { SpendOptions } from '../interfaces.js';
import type { JsonValue } from '../protocol.js';

type Opened = OpenedState;

/**
 * What the claim builds on from the spend step (`guard/spend.ts`): the ledger entry of a state, what a spend tells the
 * store, what a refusal means here, `consume`, and whether an outcome may be kept.
 */
export interface Ledger {
  /** The id and expiry a state is consumed under (shared with the guard's `consume`). */
  readonly entry: (state: Opened) => { id: string; expiresAtMs: number };
  /** What `consume` and `claim` tell the store besides the id (the state's mint time, for a store with an epoch). */
  readonly spendOptions: (state: Opened) => SpendOptions | undefined;
  /** What a store's refusal of a spend means here (clock skew, a lost ledger learned again). */
  readonly refusal: (error: unknown) => unknown;
  /** The guard's `consume`, for stores that do not record outcomes and for states whose outcomes are not kept. */
  readonly consume: (state: Opened) => Promise<void>;
  /** Whether the outcome of a state may be recorded and returned (not under the shared unauthenticated principal, unless opted in). */
  readonly recordable: (state: Opened) => Awaitable<boolean>;
}

/**
 * The claim of a state: `Admission` for its attempt. `holder` is the principal's tag for this instance's bounds (its
 * outcome budget and waiting retries, whichever key sealed the state); `dropped` is told, once, why an outcome its
 * `record` was given was not kept (the guard's `outcome.dropped`).
 */
export type Claim = <S extends Opened>(
  state: S,
  answers: JsonValue,
  holder: string,
  options?: AdmitOptions,
  dropped?: Dropped,
) => Promise<Admission<S>>;

/** Told why a recorded outcome was not kept, and its sealed length when it was sealed. */
export type Dropped = (reason: OutcomeDropReason, outcomeBytes: number | undefined) => void;
