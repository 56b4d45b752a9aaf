// workerd module worker without any compatibility flag (no Node APIs at all): the guard program for each
// codec on the web build. GET / answers one `GUARD` line per codec.
import { CODECS, guardProgram, sealKind } from './guard.js';
import { collector, runTests } from './runner.js';

export default {
  async fetch(): Promise<Response> {
    const lines: string[] = [];
    for (const [name, factory] of Object.entries(CODECS)) {
      try {
        const { it, tests } = collector();
        guardProgram(it, name, factory);
        const kind = await sealKind(factory);
        const result = await runTests(tests, (line) => lines.push(line));
        lines.push(`GUARD ${name} seal=${kind} passed=${result.passed} failed=${result.failed}`);
      } catch (error) {
        lines.push(`GUARD ${name} ERROR ${error instanceof Error ? error.message : String(error)}`);
      }
    }
    return new Response(`${lines.join('\n')}\n`, { headers: { 'content-type': 'text/plain; charset=utf-8' } });
  },
};
