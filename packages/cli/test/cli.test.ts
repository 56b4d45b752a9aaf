import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CLI, KEYS, runCli } from './helpers.js';

const ESC = '\u001b[';
const version = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

describe('mrtr: help, version, usage errors', () => {
  it('no command: the help on stderr, exit 2', async () => {
    const r = await runCli([]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('Usage: mrtr <command> [options]');
    expect(r.stderr).toContain('Exit codes: 0 ok, 1 the thing checked is bad, 2 usage error.');
  });

  it.each([
    [['--help'], 'Usage: mrtr <command> [options]'],
    [['-h'], 'Usage: mrtr <command> [options]'],
    [['help'], 'Usage: mrtr <command> [options]'],
    [['keygen', '--help'], 'Usage: mrtr keygen [--kid ID] [--bytes N] [--env | --jwks] [--json]'],
    [['help', 'keygen'], 'Usage: mrtr keygen'],
    [['keys', '--help'], 'Usage: mrtr keys <check|rotate> [options]'],
    [['keys', 'check', '--help'], 'Usage: mrtr keys check [- | --file PATH] [--json]'],
    [['help', 'keys', 'check'], 'Usage: mrtr keys check'],
    [['keys', 'rotate', '-h'], 'Usage: mrtr keys rotate --file PATH'],
    [['inspect', '--help'], 'Usage: mrtr inspect <token|-> [options]'],
    [['doctor', '--help'], 'Usage: mrtr doctor [--codec NAME] [--store NAME] [options]'],
  ])('%j → help on stdout, exit 0', async (args, first) => {
    const r = await runCli(args);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout.startsWith(first)).toBe(true);
    if (args[0] !== 'keys' || args.length > 2) expect(r.stdout).toMatch(/Exit codes: 0 /);
  });

  it('--version prints the package version', async () => {
    for (const flag of ['--version', '-v']) {
      const r = await runCli([flag]);
      expect(r.code).toBe(0);
      expect(r.stdout).toBe(`${version}\n`);
    }
  });

  it.each([
    [['frobnicate'], /unknown command "frobnicate"/],
    [['help', 'frobnicate'], /no help for "frobnicate"/],
    [['keys'], /Usage: mrtr keys/],
    [['keys', 'burn'], /unknown command "keys burn"/],
    [['keys', 'check', '--loud'], /Unknown option '--loud'/],
    [['inspect', 'x', '--json=yes'], /--json/],
  ])('%j → exit 2 on stderr', async (args, message) => {
    const r = await runCli(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(message);
  });
});

describe('colour: only on a terminal, never with NO_COLOR', () => {
  it('piped output has no escape codes', async () => {
    const r = await runCli(['keys', 'check'], { env: { MRTR_KEYS: KEYS } });
    expect(r.stdout).not.toContain(ESC);
  });

  it('FORCE_COLOR turns colour on; NO_COLOR wins over it', async () => {
    const forced = await runCli(['keys', 'check'], { env: { MRTR_KEYS: KEYS, FORCE_COLOR: '1' } });
    expect(forced.stdout).toContain(`${ESC}32mok  ${ESC}39m`);
    const off = await runCli(['keys', 'check'], { env: { MRTR_KEYS: KEYS, FORCE_COLOR: '1', NO_COLOR: '1' } });
    expect(off.stdout).not.toContain(ESC);
  });

  const inPty = (env: Record<string, string>): Promise<string> =>
    new Promise((resolve, reject) => {
      // util-linux `script` gives the child a pseudo-terminal, so stdout.isTTY is true.
      execFile(
        'script',
        ['-qec', `${process.execPath} ${CLI} keys check`, '/dev/null'],
        { env: { PATH: process.env.PATH ?? '', MRTR_KEYS: KEYS, ...env }, timeout: 20_000 },
        (error, stdout) => (error !== null && (error as { code?: unknown }).code === 'ENOENT' ? reject(error) : resolve(stdout)),
      );
    });

  it('on a terminal: colour; on a terminal with NO_COLOR: none', async () => {
    let tty: string;
    try {
      tty = await inPty({});
    } catch {
      console.warn('[cli] cli.test.ts: the terminal colour test skipped: util-linux `script` is not available');
      return;
    }
    expect(tty).toContain(`${ESC}32m`);
    expect(await inPty({ NO_COLOR: '1' })).not.toContain(ESC);
  });
});
