// watchKeyFile follows the path, not the inode: a key file replaced atomically (a temp file renamed over it, as
// `mrtr keys rotate --file` and most tools write it) is seen every time, with no refresh timer (`refreshMs: 0`).
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileKeySource, watchKeyFile } from '../src/node.js';
import { generateKey, KeyProvider } from '../src/index.js';
import { type ScheduledKey, toJwks } from '../src/entry-keys.js';

/** Polls `check` every 10 ms until it holds, for at most `limitMs` (a bound, not a window the outcome depends on). */
async function eventually(check: () => boolean, limitMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return true;
}

describe('watchKeyFile', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-watch-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('sees every atomic replacement of the key file (rename over it), with refreshMs: 0', async () => {
    const path = join(dir, 'keys.json');
    const keys: ScheduledKey[] = [{ kid: 'k0', secret: generateKey() }];
    const text = () => `${JSON.stringify(toJwks(keys), null, 2)}\n`;
    writeFileSync(path, text());
    const provider = await KeyProvider.create({ load: fileKeySource(path), refreshMs: 0 });
    const stop = watchKeyFile(provider, path);
    try {
      for (let n = 1; n <= 3; n++) {
        keys.unshift({ kid: `k${n}`, secret: generateKey() });
        const temp = join(dir, `.keys.json.${n}.tmp`);
        writeFileSync(temp, text());
        renameSync(temp, path);
        const seen = await eventually(() => provider.keys.current().primaryKid === `k${n}`);
        expect(seen, `replacement ${n} seen`).toBe(true);
      }
      // An in-place write after the replacements is still seen.
      keys.unshift({ kid: 'k4', secret: generateKey() });
      writeFileSync(path, text());
      expect(await eventually(() => provider.keys.current().primaryKid === 'k4')).toBe(true);
    } finally {
      stop();
      stop(); // idempotent
      provider.close();
    }
  });

  it('sees a Kubernetes secret update (the ..data link swapped), and refuses an empty path', async () => {
    const volume = mkdtempSync(join(dir, 'volume-'));
    const publish = (version: number, keys: ScheduledKey[]) => {
      mkdirSync(join(volume, `..v${version}`));
      writeFileSync(join(volume, `..v${version}`, 'keys.json'), `${JSON.stringify(toJwks(keys))}\n`);
      symlinkSync(`..v${version}`, join(volume, '..data_tmp'));
      renameSync(join(volume, '..data_tmp'), join(volume, '..data'));
    };
    const keys: ScheduledKey[] = [{ kid: 's0', secret: generateKey() }];
    publish(0, keys);
    const path = join(volume, 'keys.json');
    symlinkSync('..data/keys.json', path);
    const provider = await KeyProvider.create({ load: fileKeySource(path), refreshMs: 0 });
    const stop = watchKeyFile(provider, path);
    try {
      for (let n = 1; n <= 2; n++) {
        keys.unshift({ kid: `s${n}`, secret: generateKey() });
        publish(n, keys);
        expect(await eventually(() => provider.keys.current().primaryKid === `s${n}`), `update ${n} seen`).toBe(true);
      }
    } finally {
      stop();
      provider.close();
    }
    expect(() => watchKeyFile(provider, '')).toThrow(TypeError);
  });
});
