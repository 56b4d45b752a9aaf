// Runs examples/guard.ts (the README's program without the SDK) as a program: on an SQLite file always, and on
// PostgreSQL (in a throwaway schema, through `options=-c search_path=…`) when DATABASE_URL is set.
import { execFile } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { generateKey } from '@mrtr/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { bundle, DATABASE_URL, postgresSkipReason, removeBundles, skipPostgres, tempDir } from './helpers.js';

const run = promisify(execFile);
const dir = tempDir();
afterAll(() => {
  removeBundles();
  rmSync(dir, { recursive: true, force: true });
});

async function runQuickstart(env: Record<string, string>) {
  const script = await bundle('examples/guard.ts');
  const { DATABASE_URL: _omit, ...base } = process.env;
  return run(process.execPath, [script], {
    cwd: dir,
    env: { ...base, MRTR_KEYS: `k1:${generateKey()}`, ...env },
    timeout: 30_000,
  });
}

postgresSkipReason('quickstart.test.ts');

describe('examples/guard.ts', () => {
  it('runs on SQLite: first use accepted, replay refused, the file is created', async () => {
    const { stdout } = await runQuickstart({});
    expect(stdout.trim().split('\n')).toEqual(['{ confirmed: false }', 'ERR_STATE_REPLAYED']);
    expect(existsSync(join(dir, 'mrtr-replay.db'))).toBe(true);
  });

  it.skipIf(skipPostgres)('runs on PostgreSQL: first use accepted, replay refused', async () => {
    const url = DATABASE_URL as string;
    const schema = `mrtr_qs_${process.pid}_${Date.now().toString(36)}`;
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await admin.query(`CREATE SCHEMA "${schema}"`);
      const scoped = new URL(url);
      scoped.searchParams.set('options', `-c search_path=${schema}`);
      const { stdout } = await runQuickstart({ DATABASE_URL: scoped.toString() });
      expect(stdout.trim().split('\n')).toEqual(['{ confirmed: false }', 'ERR_STATE_REPLAYED']);
      const rows = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".mrtr_replay`);
      expect(rows.rows[0].n).toBe(1);
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
  });
});
