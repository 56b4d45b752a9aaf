// temporary profiling script (not committed)
import { setupE2e } from './dist/e2e.js';
const which = process.argv[2];
const setup = await setupE2e({});
const row = setup.rows.find((r) => r.id === which);
const flow = () => row.client.callTool({ name: 'delete_files', arguments: { path: '/srv/app/tmp/cache-1' } });
for (let i = 0; i < 300; i++) await flow();
const t0 = performance.now(); let n = 0;
while (performance.now() - t0 < Number(process.argv[3] ?? 4000)) { await flow(); n++; }
console.log("FLOWS", n); console.log(which, (n / ((performance.now() - t0) / 1000)).toFixed(0), 'flows/s');
await setup.close();
