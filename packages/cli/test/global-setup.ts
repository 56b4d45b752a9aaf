import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// The tests run the built CLI as a child process. `turbo run test` builds the dependencies only, so
// build this package here when dist/cli.js is missing or older than a source file.
export default function setup(): void {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const mtime = (path: string): number => {
    try {
      return statSync(path).mtimeMs;
    } catch {
      return 0;
    }
  };
  const built = mtime(`${root}dist/cli.js`);
  // Every file under src (src/doctor/ too), recursively.
  const sources = readdirSync(`${root}src`, { recursive: true, encoding: 'utf8' }).map((f) => mtime(`${root}src/${f}`));
  const newest = Math.max(...sources, mtime(`${root}package.json`));
  if (built >= newest) return;
  execFileSync('pnpm', ['exec', 'tsup', '--silent'], { cwd: root, stdio: 'inherit', timeout: 120_000 });
}
