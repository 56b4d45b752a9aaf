import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, ProtocolError } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { generateKey } from '@mrtr/core';
import { buildSync } from 'esbuild';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { INVALID_STATE_MESSAGE } from '../src/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const bundle = join(here, '.tmp', 'stdio-server.mjs');

beforeAll(() => {
  mkdirSync(dirname(bundle), { recursive: true });
  // Bundle only our sources; packages stay external and resolve from this package's node_modules.
  buildSync({
    entryPoints: [join(here, 'fixtures', 'stdio-server.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    outfile: bundle,
    logLevel: 'warning',
  });
}, 60_000);

const keys = `k1:${generateKey()}`;
const clients: Client[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

async function start(modern: boolean, autoFulfill: boolean) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bundle],
    env: { ...(process.env as Record<string, string>), MRTR_KEYS: keys },
    stderr: 'pipe',
  });
  const stderr: string[] = [];
  transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const client = new Client(
    { name: 'stdio-e2e', version: '1.0.0' },
    {
      ...(modern && { versionNegotiation: { mode: 'auto' as const } }),
      capabilities: { elicitation: { form: {} } },
      inputRequired: { autoFulfill },
    },
  );
  client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { ok: true } }));
  clients.push(client);
  await client.connect(transport);
  const rejects = () =>
    stderr
      .join('')
      .split('\n')
      .filter((line) => line.startsWith('REJECT '))
      .map((line) => JSON.parse(line.slice(7)) as { code: string });
  return { client, rejects };
}

describe('over stdio (serveStdio + StdioClientTransport)', () => {
  it('2026-07-28 client, manual mode: interim result, tampered retry → -32602, untampered retry completes, identical retry gets the same result', async () => {
    const { client, rejects } = await start(true, false);
    expect(client.getProtocolEra()).toBe('modern');
    const call = (extra: Record<string, unknown> = {}) =>
      client.request(
        { method: 'tools/call', params: { name: 'delete_files', arguments: { path: '/s' }, ...extra } as never },
        { allowInputRequired: true },
      ) as Promise<Record<string, unknown>>;
    const r1 = await call();
    expect(r1.resultType).toBe('input_required');
    expect(Object.keys(r1.inputRequests as object)).toEqual(['confirm']);
    const yes = { confirm: { action: 'accept', content: { ok: true } } };
    const error = await call({ inputResponses: yes, requestState: `${r1.requestState as string}-TAMPERED` }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProtocolError);
    expect([(error as ProtocolError).code, (error as ProtocolError).message]).toEqual([-32602, INVALID_STATE_MESSAGE]);
    const done = await call({ inputResponses: yes, requestState: r1.requestState });
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /s in round 2' }]);
    // An identical retry (the response was lost) gets the same answer; the same state with other answers is a replay.
    const retry = await call({ inputResponses: yes, requestState: r1.requestState });
    expect(retry).toEqual({ ...done, _meta: { ...(done._meta as object), 'dev.mrtr/replayed': true } });
    const no = { confirm: { action: 'accept', content: { ok: false } } };
    const replay = await call({ inputResponses: no, requestState: r1.requestState }).catch((e: unknown) => e);
    expect((replay as ProtocolError).code).toBe(-32602);
    await client.close();
    expect(rejects().map((r) => r.code)).toEqual(['ERR_STATE_MALFORMED', 'ERR_STATE_REPLAYED']);
  });

  it('2026-07-28 client with auto-fulfil completes', async () => {
    const { client } = await start(true, true);
    const result = await client.callTool({ name: 'delete_files', arguments: { path: '/t' } });
    expect(result.content).toEqual([{ type: 'text', text: 'Deleted /t in round 2' }]);
  });

  it('a 2025-era client is served through the SDK legacy shim, with the sealed state verified on re-entry', async () => {
    const { client, rejects } = await start(false, true);
    expect(client.getProtocolEra()).toBe('legacy');
    let elicited = 0;
    client.setRequestHandler('elicitation/create', async () => {
      elicited++;
      return { action: 'accept', content: { ok: true } };
    });
    const result = await client.callTool({ name: 'delete_files', arguments: { path: '/legacy' } });
    expect(result.content).toEqual([{ type: 'text', text: 'Deleted /legacy in round 2' }]);
    // The shim sent a real server→client elicitation/create request.
    expect(elicited).toBe(1);
    await client.close();
    expect(rejects()).toEqual([]);
  });
});
