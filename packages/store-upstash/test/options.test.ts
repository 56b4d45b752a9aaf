import { describe, expect, it } from 'vitest';
import { createUpstashStore, createUpstashTaskStore } from '../src/index.js';

// No server needed: an unknown option is refused before any request.
const link = { url: 'https://upstash.invalid', token: 'token' };

describe('options of the Upstash stores', () => {
  it('an unknown option is refused, naming it and the closest known name', () => {
    expect(() => createUpstashStore({ ...link, comandTimeoutMs: 1 } as never)).toThrow(
      new TypeError('createUpstashStore: unknown option "comandTimeoutMs"; did you mean "commandTimeoutMs"?'),
    );
    expect(() => createUpstashTaskStore({ ...link, maxPerPrincipals: 1 } as never)).toThrow(
      new TypeError('createUpstashTaskStore: unknown option "maxPerPrincipals"; did you mean "maxPerPrincipal"?'),
    );
  });
});
