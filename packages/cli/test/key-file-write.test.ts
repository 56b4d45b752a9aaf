import { chmodSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKey } from '@mrtr/core';
import { parseJwks, toJwks } from '@mrtr/core/keys';
import { afterAll, describe, expect, it } from 'vitest';
import { temporaryName, writeKeyFile } from '../src/keys.js';
import { runCli } from './helpers.js';

// Review findings (issue 41): `keys rotate --file F` wrote every secret to the guessable `F.<pid>.tmp` without an
// exclusive create (a planted file left the key file world-readable, a planted link received every secret), and it
// printed a key file's member names raw on stderr (an escape sequence drew a fake "ok") where `keys check` escapes them.

const dir = mkdtempSync(join(tmpdir(), 'mrtr-cli-keyfile-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let seq = 0;
const fresh = (name: string) => join(dir, `${++seq}-${name}`);

const SECRET_TEXT = `${JSON.stringify(toJwks([{ kid: 'k1', secret: generateKey() }]))}\n`;
const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

/** A victim file a planted link points at, and what it must still hold afterwards. */
function victim(): string {
  const path = fresh('victim.txt');
  writeFileSync(path, 'victim content\n', { mode: 0o644 });
  return path;
}

/** The key file afterwards: a plain file (not a link), owner-only, holding exactly what was written. */
function expectKeyFile(path: string, text: string): void {
  expect(lstatSync(path).isSymbolicLink()).toBe(false);
  expect(lstatSync(path).isFile()).toBe(true);
  expect(mode(path)).toBe('600');
  expect(readFileSync(path, 'utf8')).toBe(text);
}

describe('writeKeyFile: the temporary file is created exclusively, never through a link (issue 41 item 1)', () => {
  it('a file planted at the old temporary name (F.<pid>.tmp, mode 0644) is neither used nor changed; the key file ends 0600', async () => {
    const path = fresh('keys.json');
    writeFileSync(path, 'old\n', { mode: 0o600 });
    const planted = `${path}.${process.pid}.tmp`;
    writeFileSync(planted, 'planted\n', { mode: 0o644 });
    chmodSync(planted, 0o644);
    await writeKeyFile(path, SECRET_TEXT);
    expectKeyFile(path, SECRET_TEXT);
    expect(readFileSync(planted, 'utf8')).toBe('planted\n');
    expect(mode(planted)).toBe('644');
  });

  it('a link planted at the old temporary name receives no secret: its target keeps its content', async () => {
    const path = fresh('keys.json');
    writeFileSync(path, 'old\n', { mode: 0o600 });
    const target = victim();
    const planted = `${path}.${process.pid}.tmp`;
    symlinkSync(target, planted);
    await writeKeyFile(path, SECRET_TEXT);
    expectKeyFile(path, SECRET_TEXT);
    expect(readFileSync(target, 'utf8')).toBe('victim content\n');
    expect(lstatSync(planted).isSymbolicLink()).toBe(true);
  });

  it('a file or a link planted at the random name drawn is skipped (exclusive create): nothing written into or through it', async () => {
    const path = fresh('keys.json');
    const plantedFile = `${path}.planted-file.tmp`;
    const plantedLink = `${path}.planted-link.tmp`;
    const target = victim();
    writeFileSync(plantedFile, 'planted\n', { mode: 0o644 });
    chmodSync(plantedFile, 0o644);
    symlinkSync(target, plantedLink);
    const drawn: string[] = [];
    const names = [plantedLink, plantedFile];
    await writeKeyFile(path, SECRET_TEXT, (p) => {
      const name = names.shift() ?? temporaryName(p);
      drawn.push(name);
      return name;
    });
    expect(drawn.slice(0, 2)).toEqual([plantedLink, plantedFile]);
    expect(drawn).toHaveLength(3);
    expectKeyFile(path, SECRET_TEXT);
    expect(readFileSync(target, 'utf8')).toBe('victim content\n');
    expect(lstatSync(plantedLink).isSymbolicLink()).toBe(true);
    expect(readFileSync(plantedFile, 'utf8')).toBe('planted\n');
    expect(mode(plantedFile)).toBe('644');
  });

  it('when every name drawn is taken it fails closed: the key file and the link target are untouched', async () => {
    const path = fresh('keys.json');
    writeFileSync(path, 'old\n', { mode: 0o600 });
    const target = victim();
    const planted = `${path}.always.tmp`;
    symlinkSync(target, planted);
    await expect(writeKeyFile(path, SECRET_TEXT, () => planted)).rejects.toThrow(/cannot create a temporary file/);
    expect(readFileSync(path, 'utf8')).toBe('old\n');
    expect(readFileSync(target, 'utf8')).toBe('victim content\n');
  });

  it('a key file that is a link is refused, not replaced: the link and its target stay as they were', async () => {
    const target = victim();
    const link = fresh('link.json');
    symlinkSync(target, link);
    await expect(writeKeyFile(link, SECRET_TEXT)).rejects.toThrow(/is a symbolic link/);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readFileSync(target, 'utf8')).toBe('victim content\n');
  });

  it('temporary names are random, in the key file directory, and none is left behind', async () => {
    const path = fresh('keys.json');
    const a = temporaryName(path);
    const b = temporaryName(path);
    expect(a).not.toBe(b);
    expect(a.startsWith(`${path}.`)).toBe(true);
    expect(a).not.toContain(String(process.pid));
    await writeKeyFile(path, SECRET_TEXT);
    expect(readdirSync(dir).filter((f) => f.startsWith(path.slice(dir.length + 1)) && f.endsWith('.tmp'))).toEqual([]);
  });
});

describe('mrtr keys rotate --file refuses a key file that is a symbolic link (issue 41 item 1)', () => {
  it('exit 2 with a clear error; the link stays a link and the file it points at is unchanged', async () => {
    const real = fresh('real.json');
    writeFileSync(real, SECRET_TEXT, { mode: 0o600 });
    const link = fresh('link.json');
    symlinkSync(real, link);
    const r = await runCli(['keys', 'rotate', '--file', link, '--kid', 'k2']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('is a symbolic link');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readFileSync(real, 'utf8')).toBe(SECRET_TEXT);
    // The real file rotates.
    const ok = await runCli(['keys', 'rotate', '--file', real, '--kid', 'k2']);
    expect(ok.code).toBe(0);
    expect(parseJwks(readFileSync(real, 'utf8')).map((k) => k.kid)).toEqual(['k2', 'k1']);
    expect(mode(real)).toBe('600');
  });
});

/** Any control or bidi character but the newline that ends a line. */
const UNSAFE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
const withoutColour = (text: string) => text.replace(/\u001b\[\d+m/g, '');
const MEMBER = '\u001b[32mok';
const MEMBER_ESCAPED = '\\u001b[32mok';

describe('mrtr keys rotate --file prints what it quotes from the file escaped, as keys check does (issue 41 item 2)', () => {
  const jwk = toJwks([{ kid: 'k1', secret: generateKey() }]).keys[0]!;
  const cases = [
    { where: 'in the set', set: { keys: [jwk], [MEMBER]: 1 } },
    { where: 'in a key', set: { keys: [{ ...jwk, [MEMBER]: 1 }] } },
  ];

  for (const { where, set } of cases) {
    it(`a member name holding an escape sequence (${where}): escaped on stderr, in colour or not; the same text keys check shows`, async () => {
      const path = fresh('evil.json');
      writeFileSync(path, JSON.stringify(set), { mode: 0o600 });
      for (const env of [{}, { FORCE_COLOR: '1' }]) {
        const r = await runCli(['keys', 'rotate', '--file', path], { env });
        expect(r.code).toBe(1);
        expect(withoutColour(r.stderr)).not.toMatch(UNSAFE);
        expect(r.stderr).not.toContain(MEMBER);
        expect(r.stderr).toContain(`"${MEMBER_ESCAPED}"`);
        const check = await runCli(['keys', 'check', '--file', path], { env });
        expect(check.stdout).toContain(`"${MEMBER_ESCAPED}"`);
      }
      const j = await runCli(['keys', 'rotate', '--file', path, '--json']);
      expect(j.code).toBe(1);
      expect(j.stdout).not.toMatch(UNSAFE);
      expect(JSON.parse(j.stdout).problems.join(' ')).toContain(MEMBER);
    });
  }

  it('a key file name holding an escape sequence is escaped in the report of a rotation', async () => {
    const path = join(dir, `k\u001b[2K\u001b[1Gok\u202e.json`);
    writeFileSync(path, SECRET_TEXT, { mode: 0o600 });
    const r = await runCli(['keys', 'rotate', '--file', path, '--kid', 'k2']);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(UNSAFE);
    expect(r.stdout).toContain('k\\u001b[2K\\u001b[1Gok\\u202e.json');
  });
});
