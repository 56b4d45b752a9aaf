import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { blocks: [{ heading: 'Without the SDK', file: 'examples/guard.ts' }] });

// The store is created and the state minted in the same millisecond: the state carries the ledger epoch it was
// minted on, so a brand-new ledger serves it.
it('the quick start runs: the first open is accepted, the replay is refused', async () => {
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/guard.js');
    expect(log.mock.calls).toEqual([[{ confirmed: false }], ['ERR_STATE_REPLAYED']]);
  } finally {
    log.mockRestore();
  }
});
