import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { createAeadCodec } from '@mrtr/codec-aead';
import { describe, expect, it } from 'vitest';
import { INVALID_STATE_MESSAGE } from '../src/index.js';
import { callTool, connect, fixture } from './harness.js';

/**
 * The adapter relies on one behaviour of `@modelcontextprotocol/server` 2.4 that its types do not promise:
 * `McpServer` passes an input-required-shaped tool result through untouched, and the SDK's MRTR seam reads
 * its `inputRequests` first, so a getter that throws a `ProtocolError` there surfaces as a JSON-RPC error
 * (see `escapeToWire` in src/wire.ts). Without it a rejected state on `tools/call` would come back as an
 * `isError` tool result carrying the error text. These tests fail loudly if an SDK release changes that.
 */
const SDK_CHANGED =
  'SDK contract broken: a rejected state on tools/call no longer surfaces as a JSON-RPC error. ' +
  '@modelcontextprotocol/server changed how McpServer passes input_required results through; ' +
  'revisit escapeToWire in src/wire.ts before widening the peer range.';

describe('the SDK behaviour the adapter depends on', () => {
  it('runs against the pinned SDK minor (peer range ~2.4.0)', () => {
    // The SDK does not export its package.json: find it from its resolved entry point.
    const entry = createRequire(import.meta.url).resolve('@modelcontextprotocol/server');
    const sdkPackage = new URL('../package.json', pathToFileURL(entry));
    const sdkVersion = (JSON.parse(readFileSync(sdkPackage, 'utf8')) as { version: string }).version;
    const peer = (
      JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { peerDependencies: Record<string, string> }
    ).peerDependencies['@modelcontextprotocol/server'];
    expect(peer).toBe('~2.4.0');
    expect(sdkVersion.startsWith('2.4.'), `tested with ${sdkVersion}, peer range ${peer}`).toBe(true);
  });

  it('surfaces a rejected tools/call state as the JSON-RPC error -32602, not as an isError result', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/a' });
    let outcome: unknown;
    try {
      outcome = await callTool(client, 'delete_files', { path: '/a' }, { requestState: `${r1.requestState as string}x` });
    } catch (error) {
      outcome = error;
    }
    const error = outcome as { code?: unknown; message?: unknown; isError?: unknown };
    expect(error.isError, SDK_CHANGED).toBeUndefined();
    expect([error.code, error.message], SDK_CHANGED).toEqual([-32602, INVALID_STATE_MESSAGE]);
    expect(f.effects).toEqual([]);
  });

  // Review finding: a lone-surrogate answer on the AEAD codec returned the codec's own message to the client,
  // and onReject was not called for the seal failure. Such an answer is now invalid (the question is asked
  // again), and a state the codec still cannot seal is a generic -32603 reported as ERR_SEAL_FAILED.
  it('treats a lone-surrogate answer as invalid and a failed seal as an opaque server fault', async () => {
    const f = fixture({ codec: createAeadCodec });
    const client = await connect(f);
    const r1 = await callTool(client, 'keep_text', { text: 'fine' });
    const bad = { note: { action: 'accept', content: { note: 'x\ud800' } } };
    const r2 = await callTool(client, 'keep_text', { text: 'fine' }, { requestState: r1.requestState as string, inputResponses: bad });
    expect(r2.resultType).toBe('input_required');
    expect(Object.keys(r2.inputRequests as object)).toEqual(['note']);
    const good = { note: { action: 'accept', content: { note: 'ok' } } };
    const r3 = await callTool(client, 'keep_text', { text: 'fine' }, { requestState: r2.requestState as string, inputResponses: good });
    expect(r3.content).toEqual([{ type: 'text', text: 'fine: ok' }]);
    expect(f.rejects).toEqual([]);
    let failure: { code?: unknown; message?: unknown } = {};
    try {
      await callTool(client, 'keep_text', { text: 'x\ud800' });
    } catch (error) {
      failure = error as typeof failure;
    }
    expect([failure.code, failure.message]).toEqual([-32603, 'Internal error']);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_SEAL_FAILED']);
  });
});
