import { expect, it, vi } from 'vitest';
import { startMcpStandIn } from '../../../scripts/mcp-stand-in.mjs';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { benchMarkers: false });

it('the quick start runs against the stand-in server the publish check uses: answers the question, prints the result', async () => {
  const standIn = await startMcpStandIn();
  vi.stubEnv('MCP_URL', standIn.url);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/quickstart.js');
    expect(log.mock.calls).toEqual([[[{ type: 'text', text: 'Deployed prod' }], false]]);
  } finally {
    log.mockRestore();
    vi.unstubAllEnvs();
    await standIn.close();
  }
});
