import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { CLI } from '../scripts/lib.mjs';
import { readKeys, redactUrl } from '../src/config.js';
import {
  accept,
  callTool,
  connectClient,
  expectStateRejected,
  freshKeys,
  type Json,
  PROTOCOL_VERSION,
  serviceUrl,
  startDemo,
  textOf,
  runCli,
  replayed,
} from './helpers.js';

const tempDirs: string[] = [];
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

describe('command line contract', () => {
  it('--help prints the usage with every flag and exits 0', async () => {
    const { code, stdout } = await runCli(['--help']);
    expect(code).toBe(0);
    for (const flag of [
      '--host',
      '--port',
      '--codec hmac|jwe|aead',
      '--store memory|sqlite|redis|postgres',
      '--sqlite-file',
      '--ttl-ms',
      '--fixtures conformance',
      '--stdio',
      '--log pretty|json|off',
      'MRTR_KEYS',
      'MRTR_DEMO_TOKENS',
      'REDIS_URL',
      'DATABASE_URL',
    ]) {
      expect(stdout).toContain(flag);
    }
  });

  it.each([
    [['--bogus'], 'Unknown option'],
    [['extra'], 'positional'],
    [['--codec', 'rot13'], '--codec must be one of hmac, jwe, aead'],
    [['--store', 'mongo'], '--store must be one of memory, sqlite, redis, postgres'],
    [['--port', '65536'], '--port must be between 0 and 65535'],
    [['--port', 'http'], '--port must be an integer'],
    [['--ttl-ms', '10'], '--ttl-ms must be between'],
    [['--sqlite-file', 'x.db'], '--sqlite-file needs --store sqlite'],
    [['--fixtures', 'everything'], '--fixtures must be "conformance"'],
    [['--log', 'verbose'], '--log must be one of pretty, json, off'],
    [['--port'], 'argument missing'],
  ])('rejects %j with exit code 2', async (args, message) => {
    const { code, stderr } = await runCli(args);
    expect(code).toBe(2);
    expect(stderr).toContain(message);
    // The help hint names the command as it was run (here `node <path of dist/cli.js>`), not an unknown bin.
    expect(stderr).toMatch(/^Run node \S*dist\/cli\.js --help for usage\.$/m);
  });

  it('names the command as it was run: MRTR_DEMO_COMMAND (what `pnpm demo` sets) in the usage and the hint', async () => {
    const help = await runCli(['--help'], { MRTR_DEMO_COMMAND: 'pnpm demo --' });
    expect(help.stdout).toMatch(/^Usage: pnpm demo -- \[--host/);
    const bad = await runCli(['--bogus'], { MRTR_DEMO_COMMAND: 'pnpm demo --' });
    expect(bad.stderr).toContain('Run pnpm demo -- --help for usage.');
  });

  it('rejects a bad MRTR_KEYS or MRTR_DEMO_TOKENS with exit code 2 without echoing secrets', async () => {
    const shortSecret = Buffer.alloc(16, 7).toString('base64url');
    const keys = await runCli(['--port', '0'], { MRTR_KEYS: `k1:${shortSecret}` });
    expect(keys.code).toBe(2);
    expect(keys.stderr).toContain('MRTR_KEYS is invalid');
    expect(keys.stderr).not.toContain(shortSecret);
    const tokens = await runCli(['--port', '0'], { MRTR_DEMO_TOKENS: 'alice:short' });
    expect(tokens.code).toBe(2);
    expect(tokens.stderr).toContain('MRTR_DEMO_TOKENS');
    expect(tokens.stderr).not.toContain('short\n');
  });

  it('fails with exit code 1 and one line when the backend is missing or dead', async () => {
    const pg = await runCli(['--port', '0', '--store', 'postgres'], { DATABASE_URL: '', MRTR_KEYS: undefined });
    expect(pg.code).toBe(1);
    // The fatal error prints alone: no warning about the ephemeral key or anonymous mode before it.
    expect(pg.stderr.trim()).toBe('mrtr-demo: --store postgres needs DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/test)');
    const deadPort = await freePort();
    const redis = await runCli(['--port', '0', '--store', 'redis'], { REDIS_URL: `redis://127.0.0.1:${deadPort}` });
    expect(redis.code).toBe(1);
    expect(redis.stderr).toContain('Redis does not answer');
  });

  it('fails with exit code 1 when the port is taken', async () => {
    const demo = await startDemo([], { env: { MRTR_KEYS: freshKeys() } });
    try {
      const taken = await runCli(['--port', String(demo.port)], { MRTR_KEYS: freshKeys() });
      expect(taken.code).toBe(1);
      expect(taken.stderr).toContain('cannot listen');
    } finally {
      await demo.stop();
    }
  });

  it('--port 0 prints the real port and the defaults; warns about the ephemeral key and anonymous mode; SIGINT and SIGTERM exit 0', async () => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      const demo = await startDemo([], { env: { MRTR_KEYS: undefined, MRTR_DEMO_TOKENS: undefined } });
      expect(demo.port).toBeGreaterThan(0);
      expect(demo.line).toBe(
        `mrtr-demo listening on http://127.0.0.1:${demo.port}/mcp (codec: hmac, store: memory (in-process, one instance), auth: anonymous)`,
      );
      const warnings = demo
        .stderr()
        .split('\n')
        .filter((line) => line.includes('warning:'));
      expect(warnings).toEqual([
        'mrtr-demo: warning: MRTR_KEYS is not set: an ephemeral key, so states do not survive a restart or reach another instance.',
        'mrtr-demo: warning: MRTR_DEMO_TOKENS is not set: no authentication, every caller is the principal "anonymous".',
      ]);
      // Anonymous mode works end to end.
      const anonymous = await connectClient(demo.url);
      const r1 = await callTool(anonymous.client, 'delete_files', { paths: ['a'] });
      const r2 = await callTool(
        anonymous.client,
        'delete_files',
        { paths: ['a'] },
        {
          inputResponses: { confirm: accept({ confirm: true }) },
          requestState: r1.requestState as string,
        },
      );
      expect(textOf(r2)).toContain('Deleted 1 file');
      await anonymous.close();
      expect(await demo.stop(signal)).toBe(0);
      expect(demo.stderr()).toContain(`received ${signal}, shutting down`);
    }
  });
});

describe('SQLite store', () => {
  it('two instances sharing MRTR_KEYS and one SQLite file: round 1 on A, round 2 on B; replay refused on A', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mrtr-demo-test-'));
    tempDirs.push(dir);
    const file = join(dir, 'replay.sqlite');
    // One namespace for the fleet: startDemo gives each instance its own otherwise, and two ledgers in one file would
    // each run the round once (the store's epoch check now refuses that: the state was minted on A's ledger).
    const env = { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '', MRTR_DEMO_NAMESPACE: `sqlite-fleet-${process.pid}-${Date.now()}` };
    const args = ['--store', 'sqlite', '--sqlite-file', file, '--codec', 'jwe'];
    const [a, b] = await Promise.all([startDemo(args, { env }), startDemo(args, { env })]);
    try {
      expect(a.line).toContain(`store: sqlite (${file})`);
      const onA = await connectClient(a.url);
      const onB = await connectClient(b.url);
      const toolArgs = { paths: ['x/y'] };
      const r1 = await callTool(onA.client, 'delete_files', toolArgs);
      const retry = { inputResponses: { confirm: accept({ confirm: true }) }, requestState: r1.requestState as string };
      const done = await callTool(onB.client, 'delete_files', toolArgs, retry);
      expect(textOf(done)).toContain('Deleted 1 file');
      // The identical retry on A gets B's recorded result from the shared file; other answers are a replay.
      expect(await callTool(onA.client, 'delete_files', toolArgs, retry)).toEqual(replayed(done));
      await expectStateRejected(
        callTool(onA.client, 'delete_files', toolArgs, { ...retry, inputResponses: { confirm: accept({ confirm: false }) } }),
      );
      await Promise.all([onA.close(), onB.close()]);
    } finally {
      expect(await Promise.all([a.stop(), b.stop()])).toEqual([0, 0]);
    }
  });
});

// Issue 19 item 6: redactUrl masked only the userinfo password, so the start line printed `?password=`,
// `?sslpassword=`, the user and the fragment. Now a store is named by scheme, host, port and database only.
describe('the start line names a store by scheme, host, port and database only (issue 19 item 6)', () => {
  it('redactUrl drops the user, the password, the query and the fragment; an unparsable URL is a placeholder', () => {
    expect(redactUrl('postgres://alice:hunter2@db.internal:5432/app?password=secret&sslpassword=xsslpw#frag')).toBe(
      'postgres://db.internal:5432/app',
    );
    expect(redactUrl('redis://:hunter2@127.0.0.1:6379/0?password=secret#frag')).toBe('redis://127.0.0.1:6379/0');
    expect(redactUrl('redis://127.0.0.1:6379')).toBe('redis://127.0.0.1:6379');
    expect(redactUrl('rediss://alice@[::1]:6380/?password=secret')).toBe('rediss://[::1]:6380');
    expect(redactUrl('postgresql:///app?host=/run/postgresql&password=secret')).toBe('postgresql:///app');
    for (const bad of ['hunter2', 'postgres://alice:hunter2@[bad/db', 'redis://h\u001b[2K\u202e:1/x'])
      expect(redactUrl(bad)).toBe('(unparsable URL)');
    // What is printed is printable ASCII: controls and non-ASCII in the path are percent-encoded.
    expect(redactUrl('postgres://db/a\u001b[2K\u202eb')).toBe('postgres://db/a%1B[2K%E2%80%AEb');
  });

  for (const backend of [
    { store: 'redis', env: 'REDIS_URL', db: '/0' },
    { store: 'postgres', env: 'DATABASE_URL', db: undefined },
  ] as const) {
    const service = serviceUrl(backend.env);
    if (service.error !== undefined) {
      it(`start line on ${backend.store}`, () => {
        throw new Error(service.error);
      });
      continue;
    }
    if (service.skip !== undefined) console.warn(`skipping the ${backend.store} start-line test: ${service.skip}`);

    it.skipIf(service.url === undefined)(
      `--store ${backend.store}: no password, user, query or fragment of ${backend.env} in the start line`,
      async () => {
        const base = new URL(service.url as string);
        // The server's real password when it has one (a query password overrides the userinfo one in pg and ioredis).
        const password = base.password === '' ? 'hunter2' : decodeURIComponent(base.password);
        const url = new URL(base.toString());
        if (backend.store === 'postgres' && url.username === '') url.username = 'postgres';
        url.password = encodeURIComponent(password);
        if (backend.db !== undefined) url.pathname = backend.db;
        url.searchParams.append('password', password);
        url.searchParams.append('sslpassword', 'xsslpw');
        url.hash = 'frag';
        const demo = await startDemo(['--store', backend.store], { env: { MRTR_KEYS: freshKeys(), [backend.env]: url.toString() } });
        try {
          expect(demo.line).toContain(`, store: ${backend.store} (${base.protocol}//${base.host}${url.pathname}), auth: `);
          for (const text of [demo.line, demo.stderr()]) {
            for (const secret of [password, encodeURIComponent(password), 'sslpassword', 'xsslpw', '#frag', '?', '@'])
              expect(text).not.toContain(secret);
          }
        } finally {
          await demo.stop();
        }
      },
    );
  }
});

describe('--stdio', () => {
  it('serves MCP on stdio (stdout carries only JSON-RPC) with the fixed local principal; connect pages stay on HTTP', async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, '--stdio', '--fixtures', 'conformance'],
      env: { ...(process.env as Record<string, string>), MRTR_KEYS: freshKeys() },
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const client = new Client(
      { name: 'stdio-e2e', version: '1.0.0' },
      {
        versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
        capabilities: { elicitation: { form: {}, url: {} } },
        inputRequired: { autoFulfill: false },
      },
    );
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toContain('test_input_required_result_multi_round');
      const args = { paths: ['stdio/file'] };
      const r1 = await callTool(client, 'delete_files', args);
      expect(r1.resultType).toBe('input_required');
      const retry = { inputResponses: { confirm: accept({ confirm: true }) }, requestState: r1.requestState as string };
      const done = await callTool(client, 'delete_files', args, retry);
      expect(textOf(done)).toContain('Deleted 1 file');
      expect(await callTool(client, 'delete_files', args, retry)).toEqual(replayed(done));
      await expectStateRejected(
        callTool(client, 'delete_files', args, { ...retry, inputResponses: { confirm: accept({ confirm: false }) } }),
      );

      const c1 = await callTool(client, 'connect_account', { provider: 'github' });
      const url = String(((c1.inputRequests as Record<string, Json>).connect!.params as Json).url);
      const origin = /connect pages on (http:\/\/\S+)\/connect\//.exec(stderr)?.[1];
      expect(origin).toBeDefined();
      expect(url.startsWith(`${origin}/connect/`)).toBe(true);
      const page = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'decision=connect',
      });
      expect(page.status).toBe(200);
      const c2 = await callTool(
        client,
        'connect_account',
        { provider: 'github' },
        {
          inputResponses: { connect: { action: 'accept' } },
          requestState: c1.requestState as string,
        },
      );
      expect(textOf(c2)).toContain('Connected your github account');
      expect(stderr).toContain('serving MCP on stdio');
    } finally {
      await client.close();
    }
  });
});

describe('2025-era clients', () => {
  it('over stdio: the SDK legacy shim turns the input_required result into a real elicitation request', async () => {
    const client = new Client({ name: 'legacy-stdio', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
    const asked: Json[] = [];
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params as Json);
      return { action: 'accept', content: { confirm: true } } as never;
    });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI, '--stdio'],
        env: { ...(process.env as Record<string, string>), MRTR_KEYS: freshKeys() },
        stderr: 'ignore',
      }),
    );
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2025-11-25');
      const result = (await client.callTool({ name: 'delete_files', arguments: { paths: ['old/file'] } })) as Json;
      expect(textOf(result)).toContain('Deleted 1 file');
      expect(asked).toHaveLength(1);
      expect(String(asked[0]!.message)).toContain('old/file');
    } finally {
      await client.close();
    }
  });

  it('over HTTP: served on a session, the SDK legacy shim asks the question and the tool completes', async () => {
    const demo = await startDemo([], { env: { MRTR_KEYS: freshKeys() } });
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const client = new Client({ name: 'legacy-http', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
    const asked: Json[] = [];
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params as Json);
      return { action: 'accept', content: { confirm: true } } as never;
    });
    const transport = new StreamableHTTPClientTransport(new URL(demo.url));
    try {
      await client.connect(transport);
      expect(client.getNegotiatedProtocolVersion()).toBe('2025-11-25');
      expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/);
      const result = (await client.callTool({ name: 'delete_files', arguments: { paths: ['x'] } })) as Json;
      expect(textOf(result)).toContain('Deleted 1 file');
      expect(asked).toHaveLength(1);
      expect(String(asked[0]!.message)).toContain('x');
    } finally {
      await client.close();
      expect(await demo.stop()).toBe(0);
    }
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

describe('readKeys', () => {
  // One secret per kid for the whole block: a key file may add and drop kids, never change a kid's secret.
  const secrets = new Map<string, string>();
  const secret = (kid: string) => {
    if (!secrets.has(kid)) secrets.set(kid, randomBytes(32).toString('base64url'));
    return secrets.get(kid) as string;
  };
  const jwks = (...kids: string[]) => JSON.stringify({ keys: kids.map((kid) => ({ kty: 'oct', kid, k: secret(kid) })) });
  const tempFile = () => {
    const dir = mkdtempSync(join(tmpdir(), 'mrtr-demo-keys-'));
    tempDirs.push(dir);
    return join(dir, 'keys.json');
  };

  it('generates an ephemeral key only when MRTR_KEYS is unset: set but empty is an error, never a random key', async () => {
    const unset = await readKeys({});
    expect(unset.ephemeral).toBe(true);
    expect(unset.keys.ephemeral).toBe(true);
    for (const empty of ['', '  ', '\n']) await expect(readKeys({ MRTR_KEYS: empty })).rejects.toThrow(/set but empty/);
  });

  it('takes MRTR_KEYS as a JWK Set, as docs/keys.md lists it (was: "kid must be 1-32 characters")', async () => {
    const setting = await readKeys({ MRTR_KEYS: jwks('2026-12', '2026-11') });
    expect(setting.ephemeral).toBe(false);
    expect(setting.keys.current().kids).toEqual(['2026-12', '2026-11']);
    setting.close();
  });

  it('follows a scheduled JWK Set in MRTR_KEYS: a key seals from its notBefore on, without a restart', async () => {
    const now = Math.floor(Date.now() / 1000);
    const scheduled = {
      keys: [
        { kty: 'oct', kid: 'next', k: secret('next'), nbf: now + 3600 },
        { kty: 'oct', kid: 'now', k: secret('now') },
      ],
    };
    const setting = await readKeys({ MRTR_KEYS: JSON.stringify(scheduled) });
    expect(setting.keys.current().primaryKid).toBe('now');
    setting.close();
  });

  it('--keys-file: read at start and again after an atomic replacement (a rotation without a restart)', async () => {
    const file = tempFile();
    writeFileSync(file, jwks('k1'));
    const setting = await readKeys({}, file);
    try {
      expect(setting.ephemeral).toBe(false);
      expect(setting.keys.current().kids).toEqual(['k1']);
      // What `mrtr keys rotate --file` does: a new file renamed over the old one.
      const next = `${file}.next`;
      writeFileSync(next, jwks('k2', 'k1'));
      renameSync(next, file);
      await vi.waitFor(() => expect(setting.keys.current().primaryKid).toBe('k2'), { timeout: 30_000, interval: 20 });
    } finally {
      setting.close();
    }
  });

  it('--keys-file: both sources, a missing file or a bad one are usage errors that never echo a secret', async () => {
    const file = tempFile();
    await expect(readKeys({ MRTR_KEYS: jwks('k1') }, file)).rejects.toThrow(/both given/);
    await expect(readKeys({}, file)).rejects.toThrow(/--keys-file .*keys\.json is invalid: .*ENOENT/);
    const short = Buffer.alloc(16, 7).toString('base64url');
    writeFileSync(file, JSON.stringify({ keys: [{ kty: 'oct', kid: 'k1', k: short }] }));
    const bad = await readKeys({}, file).catch((error: Error) => error);
    expect(bad).toBeInstanceOf(Error);
    expect((bad as Error).message).toMatch(/is invalid/);
    expect((bad as Error).message).not.toContain(short);
  });

  it('the demo starts with MRTR_KEYS as a JWK Set and with --keys-file', async () => {
    const file = tempFile();
    writeFileSync(file, jwks('filekey'));
    for (const [args, env] of [
      [[], { MRTR_KEYS: jwks('envkey') }],
      [['--keys-file', file], {}],
    ] as const) {
      const demo = await startDemo([...args], { env });
      try {
        expect(demo.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
        expect(demo.stderr()).not.toContain('ephemeral');
      } finally {
        // Stopped the moment it says it listens: its signal handlers are in place by then (was: killed by SIGTERM).
        expect(await demo.stop()).toBe(0);
      }
    }
  });
});
