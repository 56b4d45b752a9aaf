import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Builds dist/cli.js once before the tests spawn it (the workspace packages must be built already). */
export default function setup(): void {
  const appDir = fileURLToPath(new URL('..', import.meta.url));
  execFileSync('npx', ['tsup', '--silent'], { cwd: appDir, stdio: 'inherit' });
}
