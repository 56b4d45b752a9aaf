import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_BODY_BYTES, MAX_JSON_DEPTH } from '../src/http.js';
import {
  accept,
  callTool,
  type Connected,
  connectClient,
  freshKeys,
  PROTOCOL_VERSION,
  type RunningDemo,
  runCli,
  startDemo,
  textOf,
} from './helpers.js';

/**
 * Findings 2 and 3 against the spawned CLI: the body cap still fits the largest legitimate request, a
 * deeply nested body is refused without credentials (anonymous mode) before parsing, and the new flags.
 */

let demo: RunningDemo;
let client: Connected;

beforeAll(async () => {
  demo = await startDemo(['--max-connections', '64'], { env: { MRTR_KEYS: freshKeys() } });
  client = await connectClient(demo.url);
});

afterAll(async () => {
  await client?.close();
  expect(await demo?.stop()).toBe(0);
});

function post(body: string): Promise<Response> {
  return fetch(demo.url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL_VERSION,
      'mcp-method': 'tools/call',
    },
    body,
  });
}

describe('body cap and nesting cap on the running demo', () => {
  it('the largest legitimate request (delete_files: 100 paths of 1,024 three-byte characters) completes both rounds', async () => {
    const paths = Array.from({ length: 100 }, (_, i) => `${String(i).padStart(3, '0')}${'€'.repeat(1021)}`);
    const args = { paths };
    expect(Buffer.byteLength(JSON.stringify(args))).toBeGreaterThan(300_000);
    const r1 = await callTool(client.client, 'delete_files', args);
    expect(r1.resultType).toBe('input_required');
    const state = r1.requestState as string;
    const round2 = JSON.stringify({
      params: { arguments: args, requestState: state, inputResponses: { confirm: accept({ confirm: true }) } },
    });
    expect(Buffer.byteLength(round2)).toBeLessThan(MAX_BODY_BYTES - 4096);
    const r2 = await callTool(client.client, 'delete_files', args, {
      inputResponses: { confirm: accept({ confirm: true }) },
      requestState: state,
    });
    expect(textOf(r2)).toContain('Deleted 100 files');
  });

  it('answers a deeply nested body with -32700 (anonymous caller), and the body cap with 413', async () => {
    const deep = await post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":${'['.repeat(100_000)}${']'.repeat(100_000)}}`);
    expect(deep.status).toBe(400);
    const body = (await deep.json()) as { error: { code: number; message: string } };
    expect(body.error.code).toBe(-32700);
    expect(body.error.message).toContain(String(MAX_JSON_DEPTH));
    expect((await post(' '.repeat(MAX_BODY_BYTES + 1))).status).toBe(413);
  });
});

describe('new flags and help text', () => {
  it('--help documents --max-connections, the connect-link settings and the 5 s clock skew past exp', async () => {
    const { code, stdout } = await runCli(['--help']);
    expect(code).toBe(0);
    expect(stdout).toContain('--max-connections N');
    expect(stdout).toContain('MRTR_DEMO_CONNECT_MAX_PENDING');
    expect(stdout).toContain('MRTR_DEMO_CONNECT_LINK_TTL_MS');
    expect(stdout).toMatch(/tolerates 5 s of clock skew[^\n]*\n?[^\n]*exp/);
  });

  it('rejects an out-of-range --max-connections and bad connect-link settings with exit code 2', async () => {
    for (const value of ['0', '70000', 'many']) {
      const { code, stderr } = await runCli(['--max-connections', value]);
      expect(code, value).toBe(2);
      expect(stderr).toContain('--max-connections');
    }
    for (const [name, value] of [
      ['MRTR_DEMO_CONNECT_MAX_PENDING', '0'],
      ['MRTR_DEMO_CONNECT_MAX_PENDING', '101'],
      ['MRTR_DEMO_CONNECT_LINK_TTL_MS', '10'],
      ['MRTR_DEMO_CONNECT_LINK_TTL_MS', 'soon'],
    ] as const) {
      const { code, stderr } = await runCli([], { [name]: value });
      expect(code, `${name}=${value}`).toBe(2);
      expect(stderr).toContain(name);
    }
  });
});
