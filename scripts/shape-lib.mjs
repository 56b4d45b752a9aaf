// What the shape checks (check-size, check-entries, check-cycles) share: the repository root, their lists of what is
// still to be fixed, and the TypeScript sources of every package's and app's `src`.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The `known` list of `scripts/<name>.known.json`. */
export const knownList = (name) => JSON.parse(readFileSync(path.join(ROOT, `scripts/${name}.known.json`), 'utf8')).known;

/** Every `packages/*\/src` and `apps/*\/src` folder. */
export const srcRoots = () =>
  ['packages', 'apps'].flatMap((top) =>
    readdirSync(path.join(ROOT, top))
      .map((name) => path.join(ROOT, top, name, 'src'))
      .filter((dir) => statSync(dir, { throwIfNoEntry: false })?.isDirectory()),
  );

/** The TypeScript files under `dir` (declarations left out). */
export function* sources(dir) {
  for (const name of readdirSync(dir)) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) yield* sources(full);
    else if (/\.(ts|tsx|mts)$/.test(name) && !name.endsWith('.d.ts')) yield full;
  }
}
