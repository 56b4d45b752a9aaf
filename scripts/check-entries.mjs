#!/usr/bin/env node
// The shape's entry-point rule (docs/architecture.md): no public entry point (a package's `exports` subpath) offers
// more than 40 names, types included, counted on the built declarations (run after `pnpm build`, as the root `lint`
// is). The entries still being split are listed in scripts/check-entries.known.json with their count when listed:
// they may shrink, never grow, and a new one over 40 fails. `--report` prints every entry's count.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';
import { knownList, ROOT } from './shape-lib.mjs';

const LIMIT = 40;
const KNOWN = knownList('check-entries');

/** The declaration file a subpath's import condition points at (publishConfig.exports: the published face). */
const typesOf = (target) => (typeof target === 'string' ? undefined : (target.types ?? Object.values(target).map(typesOf).find(Boolean)));

const entries = [];
for (const dir of readdirSync(path.join(ROOT, 'packages')).sort()) {
  const file = path.join(ROOT, 'packages', dir, 'package.json');
  if (!existsSync(file)) continue;
  const manifest = JSON.parse(readFileSync(file, 'utf8'));
  if (manifest.private) continue;
  for (const [subpath, target] of Object.entries(manifest.publishConfig?.exports ?? manifest.exports)) {
    const types = typesOf(typeof target === 'string' ? target : (target.import ?? target));
    if (types !== undefined) entries.push({ name: `${manifest.name}${subpath.slice(1)}`, file: path.join(ROOT, 'packages', dir, types) });
  }
}
const missing = entries.filter((e) => !existsSync(e.file));
if (missing.length > 0) {
  console.log(`check-entries: build first (pnpm build): no ${missing.map((e) => path.relative(ROOT, e.file)).join(', ')}`);
  process.exit(1);
}
const options = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true, skipLibCheck: true };
const program = ts.createProgram(
  entries.map((e) => e.file),
  options,
);
const checker = program.getTypeChecker();
const problems = [];
for (const entry of entries) {
  const symbol = checker.getSymbolAtLocation(program.getSourceFile(entry.file));
  const count = symbol === undefined ? 0 : checker.getExportsOfModule(symbol).length;
  const listed = KNOWN[entry.name];
  if (process.argv.includes('--report')) console.log(`${String(count).padStart(4)}  ${entry.name}`);
  if (count > LIMIT && (listed === undefined || count > listed)) {
    problems.push(`${entry.name}: ${count} names (limit ${LIMIT}${listed === undefined ? '' : `; listed at ${listed}, it grew`})`);
  }
  if (listed !== undefined && count <= LIMIT)
    problems.push(`${entry.name} is within ${LIMIT} names now: remove it from scripts/check-entries.known.json`);
}
for (const line of problems) console.log(line);
if (problems.length > 0) process.exitCode = 1;
else console.log(`check-entries: no new entry point over ${LIMIT} names; ${Object.keys(KNOWN).length} listed still to split`);
