import type { StoreCapabilities } from './interfaces.js';

/**
 * The capabilities of a shared store that declares them all, for store authors: other processes share its ledger,
 * outcomes are recorded within `limits` (its `maxOutcomeBytes` and `outcomeBudgetBytes`), and it keeps the fleet
 * check's exchange, a clock of its own, leases and a ledger epoch. `capacity`: the most ids it holds at once, when a
 * count bounds it.
 */
export function fullStoreCapabilities(
  limits: { readonly maxOutcomeBytes: number; readonly outcomeBudgetBytes: number },
  capacity?: number,
): StoreCapabilities {
  const { maxOutcomeBytes, outcomeBudgetBytes } = limits;
  return {
    shared: true,
    ...(capacity === undefined ? {} : { capacity }),
    outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
    keyExchange: true,
    clock: true,
    leases: true,
    epoch: true,
  };
}
