// The playground's server side: the page's files (strict CSP, no inline script), its config, and GET /rejections
// (the codes of the caller's own rejections, bounded, never a token, key or argument).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RejectionLog } from '../src/rejections.js';
import {
  accept,
  callTool,
  type Connected,
  connectClient,
  expectStateRejected,
  freshKeys,
  type RunningDemo,
  runCli,
  startDemo,
  tamper,
  textOf,
} from './helpers.js';

const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdefgh';

let demo: RunningDemo;
let alice: Connected;

beforeAll(async () => {
  demo = await startDemo(['--codec', 'aead', '--ttl-ms', '2000'], {
    env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${ALICE},bob:${BOB}` },
  });
  alice = await connectClient(demo.url, { token: ALICE });
});

afterAll(async () => {
  await alice?.close();
  expect(await demo?.stop()).toBe(0);
});

const get = (path: string, token?: string) =>
  fetch(`${demo.origin}${path}`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });

describe('the playground page', () => {
  it('serves the page, its bundle and its stylesheet under a strict CSP (scripts only from this origin)', async () => {
    expect(demo.stdout()).toContain(`playground: ${demo.origin}/`);
    const page = await get('/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    const html = await page.text();
    expect(html).toContain('<script type="module" src="/playground.js"></script>');
    // No inline script or style: every <script> has a src, no style attribute, no on* handler.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/\sstyle=|\son[a-z]+=/);
    const js = await get('/playground.js');
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await js.text()).length).toBeGreaterThan(10_000);
    expect((await get('/playground.css')).headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect((await get('/favicon.ico')).status).toBe(204);
    expect((await fetch(`${demo.origin}/`, { method: 'POST' })).status).toBe(405);
  });

  it('tells the page the codec, the lifetime and the auth mode, nothing secret', async () => {
    const config = (await (await get('/playground.json')).json()) as Record<string, unknown>;
    expect(config).toEqual({
      codec: 'aead',
      ttlMs: 2000,
      skewMs: 5000,
      auth: 'bearer',
      mcpPath: '/mcp',
      endpoints: [{ codec: 'aead', path: '/mcp' }],
    });
    // One codec: no per-codec paths.
    expect((await fetch(`${demo.origin}/mcp/aead`, { method: 'POST', headers: { authorization: `Bearer ${ALICE}` } })).status).toBe(404);
  });
});

describe('--codec all', () => {
  it('serves hmac, jwe and aead on their own paths (and hmac on /mcp), each sealing with its codec; not with --stdio', async () => {
    const all = await startDemo(['--codec', 'all'], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' } });
    try {
      expect(all.line).toContain('codec: all (hmac on /mcp/hmac, jwe on /mcp/jwe, aead on /mcp/aead; hmac on /mcp too)');
      const config = (await (await fetch(`${all.origin}/playground.json`)).json()) as Record<string, unknown>;
      expect(config.endpoints).toEqual([
        { codec: 'hmac', path: '/mcp/hmac' },
        { codec: 'jwe', path: '/mcp/jwe' },
        { codec: 'aead', path: '/mcp/aead' },
      ]);
      const prefixes: Record<string, RegExp> = {
        '/mcp': /^m1\./,
        '/mcp/hmac': /^m1\./,
        '/mcp/jwe': /^ey[^.]+\.\.[^.]+\.[^.]+\.[^.]+$/,
        '/mcp/aead': /^x1\./,
      };
      for (const [path, pattern] of Object.entries(prefixes)) {
        const client = await connectClient(`${all.origin}${path}`);
        try {
          const r1 = await callTool(client.client, 'delete_files', { paths: ['a'] });
          expect(String(r1.requestState), path).toMatch(pattern);
          const r2 = await callTool(
            client.client,
            'delete_files',
            { paths: ['a'] },
            { inputResponses: { confirm: accept({ confirm: true }) }, requestState: r1.requestState as string },
          );
          expect(textOf(r2), path).toContain('Deleted 1 file');
        } finally {
          await client.close();
        }
      }
      expect((await fetch(`${all.origin}/mcp/other`, { method: 'POST' })).status).toBe(404);
    } finally {
      expect(await all.stop()).toBe(0);
    }
    const stdio = await runCli(['--codec', 'all', '--stdio']);
    expect(stdio.code).toBe(2);
    expect(stdio.stderr).toContain('--codec all serves three HTTP endpoints; it cannot be used with --stdio');
  });
});

describe('GET /rejections', () => {
  it("needs the same bearer token as /mcp and lists only the caller's own codes, without tokens or arguments", async () => {
    expect((await get('/rejections')).status).toBe(401);
    expect((await get('/rejections', 'not-a-token-0123456789')).status).toBe(401);
    expect((await fetch(`${demo.origin}/rejections`, { method: 'POST', headers: { authorization: `Bearer ${ALICE}` } })).status).toBe(405);
    const args = { paths: ['secret/argument-value.txt'] };
    const r1 = await callTool(alice.client, 'delete_files', args);
    const state = r1.requestState as string;
    await expectStateRejected(
      callTool(alice.client, 'delete_files', args, { inputResponses: { confirm: accept({ confirm: true }) }, requestState: tamper(state) }),
    );
    await expectStateRejected(callTool(alice.client, 'delete_files', { paths: ['other'] }, { requestState: state }));
    const response = await get('/rejections', ALICE);
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const text = await response.text();
    const { rejections } = JSON.parse(text) as { rejections: { seq: number; code: string; method: string; target: string }[] };
    expect(rejections.map((r) => [r.code, r.method, r.target])).toEqual([
      ['ERR_STATE_INTEGRITY', 'tools/call', 'delete_files'],
      ['ERR_STATE_BINDING', 'tools/call', 'delete_files'],
    ]);
    expect(rejections[1]!.seq).toBeGreaterThan(rejections[0]!.seq);
    for (const secret of [state.slice(3, 40), ALICE, 'argument-value', 'alice']) expect(text).not.toContain(secret);
    // Bob sees none of Alice's.
    expect(JSON.parse(await (await get('/rejections', BOB)).text())).toEqual({ rejections: [] });
  });
});

describe('RejectionLog', () => {
  it('keeps the newest entries per principal and a bounded number of principals (least recently rejected go first)', () => {
    let now = 1_000;
    const log = new RejectionLog(3, 2, () => now++);
    for (let i = 0; i < 5; i++) log.record('a', { code: 'ERR_STATE_INTEGRITY', method: 'tools/call', target: 'deploy' });
    expect(log.recent('a').map((r) => r.seq)).toEqual([3, 4, 5]);
    log.record('b', { code: 'ERR_STATE_EXPIRED', method: 'prompts/get', target: 'incident_report' });
    log.record('a', { code: 'ERR_STATE_REPLAYED', method: 'tools/call', target: 'deploy' });
    log.record('c', { code: 'ERR_STATE_BINDING', method: 'tools/call', target: 'deploy' }); // b gives way, not a
    expect(log.recent('b')).toEqual([]);
    expect(log.recent('a').map((r) => r.code)).toEqual(['ERR_STATE_INTEGRITY', 'ERR_STATE_INTEGRITY', 'ERR_STATE_REPLAYED']);
    expect(log.recent('c')).toEqual([{ seq: 8, at: 1_007, code: 'ERR_STATE_BINDING', method: 'tools/call', target: 'deploy' }]);
  });

  it('records nothing without a principal and keeps only public parts: a resource by its scheme, odd names dropped', () => {
    const log = new RejectionLog();
    log.record(undefined, { code: 'ERR_STATE_INTEGRITY', method: 'tools/call', target: 'deploy' });
    log.record('a', { code: 'ERR_STATE_BINDING', method: 'resources/read', target: 'runbook://secret-service' });
    log.record('a', { code: 'not a code', method: 'evil/method', target: 'x'.repeat(65) });
    expect(log.recent('a').map(({ code, method, target }) => ({ code, method, target }))).toEqual([
      { code: 'ERR_STATE_BINDING', method: 'resources/read', target: 'runbook://…' },
      { code: 'ERR_UNKNOWN', method: 'other', target: undefined },
    ]);
    expect(() => new RejectionLog(0)).toThrow(RangeError);
  });
});
