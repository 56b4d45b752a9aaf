// The bundled client (`pnpm demo:client`, dist/client.js) against a demo started here, on each codec.
import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { dropProxy, effects, freshKeys, type RunningDemo, startDemo } from './helpers.js';

const run = promisify(execFile);
const CLIENT = fileURLToPath(new URL('../dist/client.js', import.meta.url));

function runClient(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 60_000,
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLIENT, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the client did not exit within ${timeoutMs} ms\n${out}\n${err}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

const demos: RunningDemo[] = [];
afterAll(async () => {
  for (const demo of demos) expect(await demo.stop()).toBe(0);
});

describe('pnpm demo:client', () => {
  it.each(['hmac', 'jwe', 'aead'])('drives every flow to its end on --codec %s and prints a timeline per flow', async (codec) => {
    const demo = await startDemo(['--codec', codec], {
      env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '', MRTR_DEMO_CONNECT_WAIT_MS: '1' },
    });
    demos.push(demo);
    const { code, out, err } = await runClient(['--url', demo.url]);
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(out).toContain('8/8 flow(s) completed in 18 round(s)');
    for (const name of [
      'delete_files',
      'deploy',
      'summarize',
      'list_workspace',
      'connect_account',
      'incident_report',
      'runbook://{service}',
      'rollout',
    ]) {
      expect(out).toContain(` ${name} `);
    }
    // rollout: the environment round, then a task followed with tasks/get; its approval answered with tasks/update.
    expect(out).toMatch(/ {2}2 {2}→ task \S+… \(working; tasks\/get every \d+ ms\)/);
    expect(out).toContain('↳ input_required');
    expect(out).toContain('answers approve_rollout (form: approve) with tasks/update');
    expect(out).toMatch(/✓ completed: Rolled web release \S+ out to production: 10 of 10 instances\./);
    expect(out).toContain('Deployed web to production');
    expect(out).toContain('Connected your github account');
    expect(out).toMatch(/page \/connect\/\S+ completed \(HTTP 200\)/);
    // Every interim round names the codec and the key that sealed the state, and its size.
    expect(out).toMatch(new RegExp(`state \\d+ B \\(${codec}, kid k2\\)`));
    expect(out).not.toContain('✗');
    // Every rejection the server logged would mean a round went wrong.
    expect(demo.stderr()).not.toContain('rejected');
  });

  it('sends the bearer token, also to the connect page, and --tool runs one flow', async () => {
    const token = 'alice-token-0123456789abcdef';
    const demo = await startDemo([], {
      env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${token}`, MRTR_DEMO_CONNECT_WAIT_MS: '1' },
    });
    demos.push(demo);
    const denied = await runClient(['--url', demo.url, '--tool', 'delete_files']);
    expect(denied.code).toBe(1);
    expect(denied.err).toContain('cannot reach');
    expect(denied.err).toContain('pass --token <token>');
    const one = await runClient(['--', '--url', demo.url, '--tool', 'connect_account', '--token', token]);
    expect(one.code).toBe(0);
    expect(one.out).toContain('1/1 flow(s) completed in 2 round(s)');
    expect(one.out).not.toContain('delete_files');
    const env = await runClient(['--url', demo.url, '--tool', 'runbook'], { MRTR_DEMO_TOKEN: token });
    expect(env.code).toBe(0);
    expect(env.out).toContain('# web runbook (production)');
    const task = await runClient(['--url', demo.url, '--tool', 'rollout', '--token', token]);
    expect(task.code).toBe(0);
    expect(task.out).toContain('1/1 flow(s) completed in 2 round(s)');
    expect(task.out).toContain('✓ completed: Rolled web release');
  });

  it('re-sends each lost response through @mrtr/client: deploy completes once through a proxy that drops every 2nd tool-call response', async () => {
    const demo = await startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' } });
    demos.push(demo);
    const proxy = await dropProxy([new URL(demo.url)], 2);
    try {
      const { code, out, err } = await runClient(['--url', proxy.url.href, '--tool', 'deploy']);
      expect(err).toBe('');
      expect(code).toBe(0);
      // Rounds 2, 3 and 4 each lost their first response; each re-send was answered from the record.
      expect(out).toContain('1/1 flow(s) completed in 4 round(s)');
      expect(out).toMatch(/ {2}4 {2}✓ complete: Deployed web to production .* \(replayed from the record\)/);
      expect(proxy.stats).toEqual({ toolCalls: 7, dropped: 3, replayed: 3 });
      expect(await effects(demo, 'deploy')).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('answers usage errors with exit code 2 and --help with 0', async () => {
    const bad = await runClient(['--tool', 'nope']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--tool must be one of delete_files, deploy');
    const help = await runClient(['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toContain('Usage: pnpm demo:client');
  });
});

describe("the demo README's raw curl round", () => {
  it('runs as written against a running demo and gets an InputRequiredResult', async () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.startsWith('curl -sS'));
    expect(block).toBeDefined();
    const demo = await startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' } });
    demos.push(demo);
    const command = block!.replaceAll('http://127.0.0.1:3000/mcp', demo.url);
    expect(command).not.toBe(block);
    const { stdout } = await run('sh', ['-c', command], { timeout: 30_000 });
    const message = JSON.parse(stdout) as { result: Record<string, unknown> };
    expect(message.result.resultType).toBe('input_required');
    expect(Object.keys(message.result.inputRequests as object)).toEqual(['confirm']);
    expect(String(message.result.requestState)).toMatch(/^m1\.k2\./);
  });
});
