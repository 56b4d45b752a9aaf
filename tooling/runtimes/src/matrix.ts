import { codecCompliance } from '@mrtr/test-suite';
import { CAPPED, CODECS, guardProgram, sealKind } from './guard.js';
import { type RunResult, collector, runTests } from './runner.js';

export interface CodecResult extends RunResult {
  codec: string;
  seal: 'sync' | 'async';
  ms: number;
}

/** Runs the compliance suite and the guard program for each codec; prints one `RESULT` line per codec. */
export async function runMatrix(log: (line: string) => void, only?: readonly string[]): Promise<CodecResult[]> {
  const results: CodecResult[] = [];
  for (const [name, factory] of Object.entries(CODECS)) {
    if (only !== undefined && only.length > 0 && !only.includes(name)) continue;
    const started = Date.now();
    const { it, tests } = collector();
    // The suite's default fuzz runs (10,000 per property; it allows no fewer). Its report lines ("… rejected:
    // N") are summed into one count of hostile inputs, to keep the output to one line per codec.
    let hostile = 0;
    const report = (line: string): void => {
      const m = /rejected: (\d+)/.exec(line);
      if (m) hostile += Number(m[1]);
      // The linearity ratios: shown when a run fails (run.mjs prints a failing run's output).
      else if (line.includes('per-character cost')) log(`  ${line}`);
    };
    codecCompliance(it, factory, { name, report, factoryWithCap: CAPPED[name]! });
    guardProgram(it, name, factory);
    const kind = await sealKind(factory);
    const result = await runTests(tests, log);
    const ms = Date.now() - started;
    results.push({ codec: name, seal: kind, ms, ...result });
    log(`RESULT ${name} seal=${kind} passed=${result.passed} failed=${result.failed} hostile=${hostile} ms=${ms}`);
  }
  return results;
}
