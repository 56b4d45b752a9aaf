import { MrtrError, StoreUnavailableError } from '../errors.js';
import type { ReplayStore } from '../interfaces.js';

/** How often a guard learns its store's ledger epoch again (a ledger lost and begun again since). */
const REFRESH_MS = 30_000;

/**
 * The store's ledger epoch as this guard knows it (a store that declares `epoch`), sealed in every state it mints
 * (`le`). Before the first mint the epoch is written where it is missing (`ledgerEpoch`), so a brand-new ledger serves
 * every state minted on it; it is learned again in the background every 30 s and before the next mint once a spend
 * found the ledger lost, so states minted after a loss are not refused for long.
 */
export interface LedgerEpoch {
  /** The epoch to seal, once known (`undefined` without an epoch, or before `ready`). */
  readonly value: number | undefined;
  /**
   * `undefined` when `value` may be sealed now; else a promise that learns it (a failure rejects
   * `ERR_STORE_UNAVAILABLE`: that mint fails closed, and the next one tries again).
   */
  ready(): Promise<void> | undefined;
  /** A spend found the ledger lost: learn the epoch again before the next mint. */
  lost(): void;
}

export function createLedgerEpoch(store: ReplayStore | undefined, epoch: boolean): LedgerEpoch {
  if (store === undefined || !epoch) return { value: undefined, ready: () => undefined, lost: () => {} };
  let value: number | undefined;
  let learnedAt = Number.NEGATIVE_INFINITY;
  let running: Promise<void> | undefined;
  const learn = async (): Promise<void> => {
    try {
      const answer = await store.ledgerEpoch!();
      if (typeof answer !== 'number' || !Number.isSafeInteger(answer) || answer < 0) {
        throw new TypeError('store.ledgerEpoch must resolve a non-negative safe integer');
      }
      value = answer;
      learnedAt = performance.now();
    } catch (cause) {
      throw MrtrError.is(cause) ? cause : new StoreUnavailableError({ cause });
    } finally {
      running = undefined;
    }
  };
  const start = (): Promise<void> => (running ??= learn());
  return {
    get value() {
      return value;
    },
    ready() {
      if (value === undefined) return start();
      if (running === undefined && performance.now() - learnedAt >= REFRESH_MS) start().catch(() => {});
      return undefined;
    },
    lost() {
      value = undefined;
    },
  };
}
