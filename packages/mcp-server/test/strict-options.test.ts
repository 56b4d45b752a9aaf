import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMemoryTaskStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import { createHttpHandler } from '../src/http/index.js';
import { createMrtr } from '../src/index.js';

const base = { keys: KeyRing.generate(), codec: createHmacCodec, audience: 'https://strict.test' };

describe('the adapter refuses an unknown option, naming it and the closest known name', () => {
  it('createMrtr: its own options, the guard options it passes on, and tasks', () => {
    expect(() => createMrtr({ ...base, recordOutcome: false } as never)).toThrow(
      new TypeError('createMrtr: unknown option "recordOutcome"; did you mean "recordOutcomes"?'),
    );
    expect(() => createMrtr({ ...base, maxRound: 3 } as never)).toThrow(
      new TypeError('createMrtr: unknown option "maxRound"; did you mean "maxRounds"?'),
    );
    // The guard's nested options reach the guard as they are (none dropped on the way).
    expect(() => createMrtr({ ...base, unauthenticated: { principal: 'local', recordOutcome: true } } as never)).toThrow(
      new TypeError('createStateGuard: unauthenticated: unknown option "recordOutcome"; did you mean "recordOutcomes"?'),
    );
    expect(() => createMrtr({ ...base, tasks: { store: createMemoryTaskStore(), ttlMS: 5_000 } } as never)).toThrow(
      new TypeError('createMrtr: tasks: unknown option "ttlMS"; did you mean "ttlMs"?'),
    );
  });

  it('createHttpHandler and its sessions', () => {
    const factory = () => new McpServer({ name: 'strict', version: '1.0.0' });
    expect(() => createHttpHandler(factory, { allowedHost: ['localhost'] } as never)).toThrow(
      new TypeError('createHttpHandler: unknown option "allowedHost"; did you mean "allowedHosts"?'),
    );
    expect(() => createHttpHandler(factory, { sessions: { maxPerUsr: 2 } } as never)).toThrow(
      new TypeError('createHttpHandler: sessions: unknown option "maxPerUsr"; did you mean "maxPerUser"?'),
    );
  });
});
