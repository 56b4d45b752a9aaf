#!/usr/bin/env node
// The shape's import rule (docs/architecture.md): no import circle between the files of a package's `src`, type-only
// imports included (a circle of types still ties the files into one unit). Relative imports only: packages depend on
// each other in one direction by construction. Circles still being untied are listed in
// scripts/check-cycles.known.json (the files of each, sorted); a new circle, or a listed one that gained a file, fails.
import { readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';
import { knownList, ROOT, sources, srcRoots } from './shape-lib.mjs';

const KNOWN = knownList('check-cycles');

/** The relative imports and re-exports of `file` (type-only ones too), resolved to files. */
function importsOf(file) {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false);
  const out = [];
  for (const node of source.statements) {
    const spec = (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier;
    if (!spec || !ts.isStringLiteral(spec) || !spec.text.startsWith('.')) continue;
    const base = path.resolve(path.dirname(file), spec.text.replace(/\.js$/, ''));
    const hit = [`${base}.ts`, `${base}.tsx`, path.join(base, 'index.ts')].find((f) => statSync(f, { throwIfNoEntry: false })?.isFile());
    if (hit) out.push(hit);
  }
  return out;
}

/** Strongly connected components of more than one file (Tarjan), each as sorted repo-relative paths. */
function circles(files) {
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  const index = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const found = [];
  let next = 0;
  const visit = (v) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) === index.get(v)) {
      const part = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        part.push(path.relative(ROOT, w).split(path.sep).join('/'));
      } while (w !== v);
      if (part.length > 1) found.push(part.sort());
    }
  };
  for (const f of files) if (!index.has(f)) visit(f);
  return found;
}

const problems = [];
const matched = new Set();
for (const src of srcRoots()) {
  for (const circle of circles([...sources(src)])) {
    const known = KNOWN.find((k) => circle.every((f) => k.includes(f)));
    if (known === undefined) problems.push(`import circle: ${circle.join(' → ')}`);
    else matched.add(known);
  }
}
for (const known of KNOWN)
  if (!matched.has(known)) problems.push(`listed circle ${known.join(' → ')} is gone: remove it from scripts/check-cycles.known.json`);
const listed = matched.size;
for (const line of problems) console.log(line);
if (problems.length > 0) process.exitCode = 1;
else console.log(`check-cycles: no new import circle; ${listed} listed still to untie`);
