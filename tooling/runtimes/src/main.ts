// Entry for Node, Bun and Deno: `<runtime> matrix.mjs [codec…]`. Exits 1 on any failure.
import { runMatrix } from './matrix.js';

declare const Deno: { args: string[]; exit(code: number): never } | undefined;
declare const process: { argv: string[]; exit(code: number): never } | undefined;

const args = typeof Deno !== 'undefined' ? Deno.args : typeof process !== 'undefined' ? process.argv.slice(2) : [];
const exit = (code: number): never => (typeof Deno !== 'undefined' ? Deno.exit(code) : process!.exit(code));

const results = await runMatrix((line) => console.log(line), args);
const failed = results.reduce((n, r) => n + r.failed, 0);
const passed = results.reduce((n, r) => n + r.passed, 0);
console.log(`${passed} passed, ${failed} failed`);
exit(failed > 0 || results.length === 0 ? 1 : 0);
