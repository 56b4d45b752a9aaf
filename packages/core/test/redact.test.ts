import { describe, expect, it } from 'vitest';
import { redactUrl } from '../src/entry-store.js';

describe('redactUrl', () => {
  it('keeps scheme, host, port and database; drops the user, the password, the query and the fragment', () => {
    expect(redactUrl('postgres://alice:hunter2@db.internal:5432/app?password=secret&sslpassword=xsslpw#frag')).toBe(
      'postgres://db.internal:5432/app',
    );
    expect(redactUrl('redis://:hunter2@127.0.0.1:6379/0?password=secret#frag')).toBe('redis://127.0.0.1:6379/0');
    expect(redactUrl('redis://127.0.0.1:6379')).toBe('redis://127.0.0.1:6379');
    expect(redactUrl('rediss://alice@[::1]:6380/?password=secret')).toBe('rediss://[::1]:6380');
    expect(redactUrl('postgresql:///app?host=/run/postgresql&password=secret')).toBe('postgresql:///app');
  });

  it('an unparsable URL is a fixed text, never the text itself', () => {
    for (const bad of ['not a url', 'hunter2', '://:hunter2@x', '']) expect(redactUrl(bad)).toBe('(unparsable URL)');
  });

  it('control and bidi characters come out percent-encoded', () => {
    expect(redactUrl('postgres://db/a\u001b[2K\u202eb')).toBe('postgres://db/a%1B[2K%E2%80%AEb');
  });
});
