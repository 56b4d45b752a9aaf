/**
 * Where a server is, for a message or a log line: scheme, host, port and database (the path) only, e.g.
 * `postgres://u:pw@db:5432/app?sslpassword=x#f` → `postgres://db:5432/app`. The user, the password, the query (where
 * `?password=` and `?sslpassword=` travel) and the fragment are left out; an unparsable URL is the fixed text
 * `(unparsable URL)`, never the text itself. The result is percent-encoded by the URL serializer; escape it again
 * where it reaches a terminal.
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname === '/' ? '' : parsed.pathname}`;
  } catch {
    return '(unparsable URL)';
  }
}
