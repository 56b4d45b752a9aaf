import { describe, expect, it } from 'vitest';
import { createObservability, escapeForTerminal, truncateQuoted } from '../src/observe.js';
import { freshKeys, startDemo } from './helpers.js';

// Review finding (issue 19, item 5): SDK rejection messages quote params.name / params.uri and went raw to
// stderr, also under --log json: escape sequences could draw a fake line (e.g. "ACCEPTED") on an operator's terminal.
const EVIL = `x\u001b[2K\r\u001b[32mmrtr-demo: ACCEPTED\u009b31m\u202e\u2066\u200f\u061c${'A'.repeat(500)}`;
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

describe('demo log injection', () => {
  it('escapes control and bidi characters and cuts quoted text at 200 characters, marked', () => {
    expect(escapeForTerminal('a\u001bb\u0085c\u202ed\u2069e\u200ef\u061cg\nh')).toBe(
      'a\\u001bb\\u0085c\\u202ed\\u2069e\\u200ef\\u061cg\\u000ah',
    );
    const cut = truncateQuoted(`the body carries params.name="${'B'.repeat(300)}" but`);
    expect(cut).toBe(`the body carries params.name="${'B'.repeat(200)}…[+100 chars]" but`);
    for (const log of ['pretty', 'json', 'off'] as const) {
      const lines: string[] = [];
      const o = createObservability({ log, write: (line) => lines.push(line) });
      o.error(new Error(`Rejected inbound request (name-header-mismatch): params.name="${EVIL}" but the Mcp-Name header names "other"`));
      expect(lines).toHaveLength(1);
      expect(lines[0]).not.toMatch(UNSAFE);
      expect(lines[0]).toContain('…[+');
      if (log === 'json') {
        const line = JSON.parse(lines[0]!) as Record<string, unknown>;
        expect(line).toMatchObject({ level: 'error', msg: 'error' });
        expect(line.error).toContain(`params.name="${EVIL.slice(0, 200)}…[+`);
      } else {
        expect(lines[0]).toMatch(/^mrtr-demo: error: Rejected inbound request/);
      }
    }
  });

  it('a real SDK rejection quoting a hostile params.name reaches stderr escaped, as a JSON field under --log json', async () => {
    for (const log of ['json', 'pretty']) {
      const demo = await startDemo(['--log', log], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' } });
      try {
        const body = {
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: {
            name: EVIL,
            arguments: {},
            _meta: {
              'io.modelcontextprotocol/protocolVersion': '2026-07-28',
              'io.modelcontextprotocol/clientInfo': { name: 'x', version: '1' },
              'io.modelcontextprotocol/clientCapabilities': {},
            },
          },
        };
        const response = await fetch(demo.url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': '2026-07-28',
            'mcp-method': 'tools/call',
            'mcp-name': 'other',
          },
          body: JSON.stringify(body),
        });
        await response.text();
        // Wait for the log line (an event, not a time window).
        while (!demo.stderr().includes('name-header-mismatch')) await new Promise((r) => setTimeout(r, 20));
        const line = demo
          .stderr()
          .split('\n')
          .find((l) => l.includes('name-header-mismatch'))!;
        expect(line).not.toMatch(UNSAFE);
        expect(line).toContain('…[+');
        if (log === 'json') expect(JSON.parse(line)).toMatchObject({ level: 'error', msg: 'error' });
      } finally {
        expect(await demo.stop()).toBe(0);
      }
    }
  });
});
