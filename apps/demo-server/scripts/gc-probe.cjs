// Preloaded into the demo by scripts/load.mjs (node --expose-gc --require scripts/gc-probe.cjs): on SIGUSR2 it runs
// two full garbage collections and prints the process's memory on stderr as one line,
//   mrtr-gc-probe <seq> {"rss":…,"heapUsed":…,"external":…,"arrayBuffers":…}
// so that the load test compares memory the process still holds, not how far V8 happened to let its heap grow
// since its last collection. Test instrumentation only: the demo itself never loads this file.
'use strict';
let seq = 0;
process.on('SIGUSR2', () => {
  seq += 1;
  if (typeof globalThis.gc === 'function') {
    globalThis.gc();
    globalThis.gc();
  }
  const { rss, heapUsed, external, arrayBuffers } = process.memoryUsage();
  process.stderr.write(
    `mrtr-gc-probe ${seq} ${JSON.stringify({ rss, heapUsed, external, arrayBuffers, gc: typeof globalThis.gc === 'function' })}\n`,
  );
});
