// The README's sessions are real: every `$ mrtr …` line in a ```console block is run (with `mrtr` on
// PATH as the built CLI) and its output compared with the lines under it, after masking what changes
// from run to run (secrets, tokens, ids, dates, timings, sizes). `UPDATE_README=1` rewrites the blocks
// with the actual output instead.
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI, DATABASE_URL, gateService, KEYS, mint, REDIS_URL } from './helpers.js';

const README = new URL('../README.md', import.meta.url);
const UPDATE = process.env.UPDATE_README === '1';

gateService('readme.test.ts (doctor session)', 'REDIS_URL');
gateService('readme.test.ts (doctor session)', 'DATABASE_URL');

interface Block {
  /** Index of the block's first line (the fence) in the README's lines. */
  start: number;
  end: number;
  commands: { command: string; output: string[] }[];
}

function blocks(text: string): Block[] {
  const lines = text.split('\n');
  const found: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] !== '```console') continue;
    const block: Block = { start: i, end: i, commands: [] };
    for (i++; i < lines.length && lines[i] !== '```'; i++) {
      const line = lines[i]!;
      if (line.startsWith('$ ')) block.commands.push({ command: line.slice(2), output: [] });
      else block.commands.at(-1)?.output.push(line);
    }
    block.end = i;
    found.push(block);
  }
  return found;
}

/** What varies between runs, replaced by placeholders. */
export function mask(line: string): string {
  return line
    .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3})?Z/g, '<time>')
    .replace(/\bk\d{8}(-\d+)?\b/g, 'k<date>')
    .replace(/[A-Za-z0-9_+/-]{16,}=*/g, '<b64>')
    .replace(/\d+ characters/g, '<n> characters')
    .replace(/\(\d+ bytes of JSON/g, '(<n> bytes of JSON')
    .replace(/(\d+(\.\d+)? ?(ms|s|m|h|d)\b ?)+/g, '<dur> ')
    .replace(/(<dur> (ahead of|behind)|in step with)/g, '<skew>');
}

const dir = mkdtempSync(join(tmpdir(), 'mrtr-readme-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
writeFileSync(join(dir, 'mrtr'), `#!/bin/sh\nexec "${process.execPath}" "${CLI}" "$@"\n`);
chmodSync(join(dir, 'mrtr'), 0o755);

function sh(command: string, env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', `${command} 2>&1`], { env, cwd: dir, timeout: 30_000 });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (_code, signal) => (signal === null ? resolve(out) : reject(new Error(`${command}: killed (${signal})`))));
  });
}

const T = Date.parse('2026-01-15T12:00:00.000Z');
const text = readFileSync(README, 'utf8');
const all = blocks(text);
const needsServices = (b: Block) => b.commands.some((c) => /^mrtr doctor( |$)/.test(c.command) && !c.command.includes('--store memory'));
const haveServices = REDIS_URL !== undefined && DATABASE_URL !== undefined;

describe('README sessions', () => {
  it('has sessions for every command', () => {
    const commands = all.flatMap((b) => b.commands.map((c) => c.command));
    for (const name of ['keygen', 'keys check', 'keys rotate', 'inspect', 'doctor']) {
      expect(commands.some((c) => c.includes(`mrtr ${name}`))).toBe(true);
    }
  });

  const updated = text.split('\n');
  const replacements: { start: number; end: number; lines: string[] }[] = [];

  it.for(all.map((b, i) => [i, b] as const))('block %i runs as shown', async ([, block], { skip }) => {
    if (needsServices(block) && !haveServices) skip('needs REDIS_URL and DATABASE_URL'); // gateService reports (or fails) it
    const env: Record<string, string> = {
      PATH: `${dir}:${process.env.PATH ?? ''}`,
      HOME: dir,
      MRTR_KEYS: KEYS,
      TOKEN: await mint('hmac', { now: T }),
      JWE_TOKEN: await mint('jwe', { now: T }),
      OTHER_TOKEN: await mint('aead', { now: T, keys: `old:${'A'.repeat(42)}E` }),
      ...(REDIS_URL === undefined ? {} : { REDIS_URL }),
      ...(DATABASE_URL === undefined ? {} : { DATABASE_URL }),
    };
    if (needsServices(block)) await sh('mrtr doctor --store postgres --codec hmac', env); // the table exists: a stable schema line
    const lines: string[] = [];
    for (const { command, output } of block.commands) {
      const actual = (await sh(command, env)).replace(/\n$/, '').split('\n');
      lines.push(`$ ${command}`, ...actual);
      if (!UPDATE) expect(actual.map(mask), `$ ${command}`).toEqual(output.map(mask));
    }
    replacements.push({ start: block.start + 1, end: block.end, lines });
  });

  if (UPDATE) {
    afterAll(() => {
      for (const r of replacements.sort((a, b) => b.start - a.start)) updated.splice(r.start, r.end - r.start, ...r.lines);
      writeFileSync(README, updated.join('\n'));
    });
  }
});
