// workerd module worker: GET /?codec=hmac runs the matrix for that codec and answers with its lines.
import { runMatrix } from './matrix.js';

export default {
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const only = url.searchParams.getAll('codec');
    const lines: string[] = [];
    try {
      const results = await runMatrix((line) => lines.push(line), only);
      const failed = results.reduce((n, r) => n + r.failed, 0);
      const passed = results.reduce((n, r) => n + r.passed, 0);
      lines.push(`${passed} passed, ${failed} failed`);
    } catch (error) {
      lines.push(`ERROR ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    }
    return new Response(`${lines.join('\n')}\n`, { headers: { 'content-type': 'text/plain; charset=utf-8' } });
  },
};
