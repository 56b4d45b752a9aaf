import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import * as path from 'node:path';

/** What a user installs with one published package: its runtime dependencies and the bytes on disk. */
export interface PackageFacts {
  /** Runtime `dependencies` (peers such as `@mrtr/core` are counted once, separately). */
  dependencies: string[];
  /** Bytes of the package's published files plus every runtime dependency's installed package, deduplicated. */
  installBytes: number;
}

function dirBytes(dir: string, seen: Set<string>): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules') continue;
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) total += dirBytes(file, seen);
    else if (entry.isFile() && !seen.has(file)) {
      seen.add(file);
      total += statSync(file).size;
    }
  }
  return total;
}

/** The root folder of `name` as installed for the package in `fromDir`. */
function packageRoot(name: string, fromDir: string): string | undefined {
  let dir = path.join(fromDir, 'node_modules', name);
  if (!existsSync(dir)) {
    const parent = path.dirname(fromDir);
    return parent === fromDir ? undefined : packageRoot(name, parent);
  }
  dir = realpathSync(dir);
  return dir;
}

function addDependency(name: string, fromDir: string, seen: Set<string>, roots: Set<string>): number {
  const root = packageRoot(name, fromDir);
  if (root === undefined || roots.has(root)) return 0;
  roots.add(root);
  let total = dirBytes(root, seen);
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
  for (const dep of Object.keys(pkg.dependencies ?? {})) total += addDependency(dep, root, seen, roots);
  return total;
}

/** Facts of `packages/<name>`, read from its package.json and the installed workspace (not typed by hand). */
export function packageFacts(repoDir: string, name: string): PackageFacts {
  const dir = path.join(repoDir, 'packages', name);
  const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
    files?: string[];
    dependencies?: Record<string, string>;
  };
  const seen = new Set<string>();
  let installBytes = statSync(path.join(dir, 'package.json')).size;
  for (const entry of pkg.files ?? []) {
    const file = path.join(dir, entry);
    if (!existsSync(file)) continue;
    installBytes += statSync(file).isDirectory() ? dirBytes(file, seen) : statSync(file).size;
  }
  const dependencies = Object.keys(pkg.dependencies ?? {}).sort();
  const roots = new Set<string>();
  for (const dep of dependencies) installBytes += addDependency(dep, dir, seen, roots);
  return { dependencies, installBytes };
}
