// temporary profiling script (not committed)
import { setupGuards, checkGuards } from './dist/guard.js';
const [which = 'jwe', ms = '4000'] = process.argv.slice(2);
const setup = await setupGuards();
const report = await checkGuards(setup);
const row = setup.rows.find((r) => r.id === which);
const token = report.tokens[`${which}|400|100`];
const req = { method: 'tools/call', target: 'delete_files', arguments: setup.args['100'], principal: 'user-7f3a9c2e@example.com' };
async function loop(fn, dur) { const t0 = performance.now(); let n = 0; while (performance.now() - t0 < dur) { for (let i = 0; i < 1000; i++) await fn(); n += 1000; } return n / ((performance.now() - t0) / 1000); }
await loop(() => row.guard.open(token, req), 500);
const rounds = [];
for (let r = 0; r < 3; r++) {
  const g = await loop(() => row.guard.open(token, req), Number(ms) / 6);
  const c = await loop(() => row.codec.open(token), Number(ms) / 6);
  rounds.push((g / c).toFixed(2));
  console.log(which, 'guard open', g.toFixed(0), 'codec open', c.toFixed(0), 'ratio', (g / c).toFixed(2));
}
