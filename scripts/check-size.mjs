#!/usr/bin/env node
// The shape's size rule (docs/architecture.md): no function in a package's or app's `src` longer than 150 lines (80 in
// packages/test-suite/src, whose groups read as a table of promises). Lines are counted from a function's first line
// to its last, nested functions included, so a giant cannot hide behind a wrapper. Prints the offenders, longest
// first; exit 1 when there is one. The giants still being split are listed in scripts/check-size.known.json with the
// size they had when listed: they may shrink, never grow, and a new one fails. `--report N` lists every function
// over N lines without failing.
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';
import { knownList, ROOT, sources, srcRoots } from './shape-lib.mjs';

const LIMIT = 150;
const LIMITS = { 'packages/test-suite/src/': 80 };
const KNOWN = knownList('check-size');
const reportAt = process.argv.includes('--report') ? Number(process.argv[process.argv.indexOf('--report') + 1]) : undefined;

const roots = srcRoots();

const found = [];
for (const root of roots) {
  for (const file of sources(root)) {
    const rel = path.relative(ROOT, file).split(path.sep).join('/');
    const limit = Object.entries(LIMITS).find(([prefix]) => rel.startsWith(prefix))?.[1] ?? LIMIT;
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node) => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
        const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
        const lines = last - first + 1;
        const name =
          node.name?.getText(source) ?? (ts.isVariableDeclaration(node.parent) ? node.parent.name.getText(source) : '(anonymous)');
        if (lines > (reportAt ?? limit)) found.push({ where: `${rel}:${first + 1}`, name, lines, limit });
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
}
found.sort((a, b) => b.lines - a.lines);
const keyOf = (f) => `${f.where.replace(/:\d+$/, '')}#${f.name}`;
if (reportAt !== undefined) {
  for (const f of found) console.log(`${String(f.lines).padStart(5)} lines  ${f.name}  ${f.where}`);
} else {
  const bad = found.filter((f) => !(keyOf(f) in KNOWN) || f.lines > KNOWN[keyOf(f)]);
  for (const f of bad) {
    const was = KNOWN[keyOf(f)];
    console.log(
      `${String(f.lines).padStart(5)} lines  ${f.name}  ${f.where} (limit ${f.limit}${was === undefined ? '' : `; listed at ${was}, it grew`})`,
    );
  }
  const gone = Object.keys(KNOWN).filter((key) => !found.some((f) => keyOf(f) === key));
  for (const key of gone) console.log(`note: ${key} is within its limit now: remove it from scripts/check-size.known.json`);
  const listed = found.length - bad.length;
  if (bad.length > 0 || gone.length > 0) {
    console.log(
      `check-size: ${bad.length} function(s) over their limit or grown, ${gone.length} stale entr${gone.length === 1 ? 'y' : 'ies'}`,
    );
    process.exitCode = 1;
  } else
    console.log(
      `check-size: no new function over ${LIMIT} lines (80 in packages/test-suite/src); ${listed} listed giant(s) still to split`,
    );
}
