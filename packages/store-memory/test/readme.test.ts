import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { blocks: [{ heading: 'Without the SDK', file: 'examples/guard.ts' }] });

// KNOWN FAILURE, to be fixed in core: the guard passes a store with an epoch `mintedAtMs = iat − clockSkewMs`, so a
// state minted within clockSkewMs (5 s) after a ledger began is refused ERR_LEDGER_LOST — here, the store is created
// and the state minted in the same millisecond. `it.fails` keeps the defect visible: it fails once core is fixed,
// and is then put back to `it`.
it.fails('the quick start runs: the first open is accepted, the replay is refused', async () => {
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/guard.js');
    expect(log.mock.calls).toEqual([[{ confirmed: false }], ['ERR_STATE_REPLAYED']]);
  } finally {
    log.mockRestore();
  }
});
