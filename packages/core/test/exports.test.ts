import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import * as adapter from '../src/entry-adapter.js';
import * as codec from '../src/entry-codec.js';
import * as encoding from '../src/entry-encoding.js';
import * as errors from '../src/entry-errors.js';
import * as events from '../src/entry-events.js';
import * as keys from '../src/entry-keys.js';
import * as options from '../src/entry-options.js';
import * as store from '../src/entry-store.js';
import * as tasks from '../src/entry-tasks.js';
import * as core from '../src/index.js';
import * as nodeEntry from '../src/node.js';

// The public surface is pinned, one audience per entry point: a widening (or narrowing) of any entry is a visible diff here.
describe('exported names', () => {
  it('@mrtr/core holds what application authors use: the guard, the key ring and provider, MrtrError to catch', () => {
    expect(Object.keys(core).sort()).toEqual(['KeyProvider', 'KeyRing', 'MrtrError', 'createStateGuard', 'generateKey', 'keysFromEnv']);
  });

  it('@mrtr/core/errors holds every error class and the code lists', () => {
    expect(Object.keys(errors).sort()).toEqual([
      'CapabilityMissingError',
      'ClockSkewError',
      'FlowExpiredError',
      'FlowRoundsError',
      'IdempotencyKeyConflictError',
      'KeyConflictError',
      'KeyMismatchError',
      'KeySourceError',
      'KeyUnknownError',
      'KeysUnavailableError',
      'LedgerLostError',
      'MRTR_ERROR_CODES',
      'MRTR_REJECTION_CODES',
      'OutcomeUnknownError',
      'PrincipalRequiredError',
      'QuotaExceededError',
      'RoundInProgressError',
      'SealFailedError',
      'StateAudienceError',
      'StateBindingError',
      'StateExpiredError',
      'StateIntegrityError',
      'StateMalformedError',
      'StatePrincipalError',
      'StateReplayedError',
      'StateTooLargeError',
      'StoreFullError',
      'StoreUnavailableError',
      'TaskLimitError',
      'isServerFault',
    ]);
  });

  it('@mrtr/core/events holds the event types and the emitters an integration shares with the guard', () => {
    expect(Object.keys(events).sort()).toEqual(['createEventSink', 'createFlowTagger', 'safeEmitter']);
  });

  it('@mrtr/core/keys holds key sets, JWK Sets, derived keys and rotation schedules', () => {
    expect(Object.keys(keys).sort()).toEqual([
      'MAX_RING_KEYS',
      'MIN_KEY_BYTES',
      'deriveKey',
      'parseJwks',
      'parseKeySet',
      'scheduleRotation',
      'toJwks',
    ]);
  });

  it('@mrtr/core/node holds the key sources that need Node APIs', () => {
    expect(Object.keys(nodeEntry).sort()).toEqual(['fileKeySource', 'watchKeyFile']);
  });

  it('@mrtr/core/codec holds what codec authors use', () => {
    expect(Object.keys(codec).sort()).toEqual([
      'CLAIMS_VERSION',
      'andThen',
      'assertStateClaims',
      'codecFormat',
      'isPromiseLike',
      'isStateClaims',
      'parseCodecOptions',
      'readTokenPrefix',
    ]);
  });

  it('@mrtr/core/store holds what replay store authors use', () => {
    expect(Object.keys(store).sort()).toEqual([
      'BackgroundError',
      'DEFAULT_MAX_OUTCOME_BYTES',
      'DEFAULT_OUTCOME_BUDGET_BYTES',
      'MAX_FINGERPRINT_MISSES',
      'MAX_FLEET_KEYS',
      'OUTCOME_STORE_LIMIT_OPTIONS',
      'applyKeyFingerprintOffer',
      'checkLeaseMs',
      'checkOwner',
      'createBatcher',
      'fleetKeysFull',
      'fullStoreCapabilities',
      'ownerValues',
      'parseKeyFingerprintOffer',
      'parseOutcomeStoreLimits',
      'redactUrl',
      'storeCapabilities',
      'withDeadline',
    ]);
  });

  it('@mrtr/core/tasks holds the task store contract and its helpers', () => {
    expect(Object.keys(tasks).sort()).toEqual([
      'TASK_STORE_LIMIT_OPTIONS',
      'TASK_UPDATE_OPTIONS',
      'asTaskRecord',
      'assertTaskChange',
      'assertTaskCreateArguments',
      'assertTaskUpdateArguments',
      'isTerminalStatus',
      'parseTaskStoreLimits',
      'parseTaskUpdateOptions',
      'roomFromAtLeast',
      'runTaskUpdate',
      'taskExpiresAt',
    ]);
  });

  it('@mrtr/core/adapter holds what adapters over a protocol SDK use', () => {
    expect(Object.keys(adapter).sort()).toEqual([
      'STATE_GUARD_OPTIONS',
      'createPrincipalTagger',
      'isIdempotencyKey',
      'keyTtlMs',
      'principalPolicy',
    ]);
  });

  it('@mrtr/core/options holds the option validators', () => {
    expect(Object.keys(options).sort()).toEqual([
      'boolOption',
      'fnOption',
      'intOption',
      'isObject',
      'oneOfOption',
      'optionsObject',
      'rejectUnknownOptions',
      'stringOption',
    ]);
  });

  it('@mrtr/core/encoding holds base64url, UTF-8, canonical JSON, random bytes and a bounded stream read', () => {
    expect(Object.keys(encoding).sort()).toEqual([
      'base64urlDecode',
      'base64urlEncode',
      'canonicalJson',
      'isCanonicalBase64url',
      'randomBytes',
      'readWithin',
      'utf8Decode',
      'utf8Encode',
    ]);
  });

  it('has one error class per code and the code set derives from the same list', () => {
    const codes = Object.values(errors as Record<string, unknown>)
      .filter((v) => typeof v === 'function' && (v as { code?: unknown }).code !== undefined)
      .map((v) => (v as { code: string }).code);
    expect(codes.sort()).toEqual([...errors.MRTR_ERROR_CODES].sort());
  });

  it('gives every exported name a one-line TSDoc', () => {
    const sources = [
      'errors',
      'guard/guard',
      'interfaces',
      'keys/keys',
      'keys/provider',
      'keys/sources',
      'keys/fleet',
      'node',
      'claims',
      'codec-options',
      'guard/principal',
      'util/json',
      'util/random',
      'util/token',
      'protocol',
      'util/deadline',
      'tasks/tasks',
      'tasks/options',
      'util/batcher',
      'util/validate',
      'crypto/awaitable',
    ]
      .map((f) => readFileSync(new URL(`../src/${f}.ts`, import.meta.url), 'utf8'))
      .join('\n');
    const undocumented: string[] = [];
    const entries = [core, errors, events, keys, nodeEntry, codec, store, tasks, adapter, options, encoding];
    for (const name of entries.flatMap((entry) => Object.keys(entry))) {
      const at = new RegExp(`export (?:declare )?(?:async )?(?:function|class|const|interface|type) ${name}\\b`).exec(sources);
      if (at === null) continue; // re-exported under another file's name
      const before = sources.slice(0, at.index).trimEnd();
      if (!before.endsWith('*/')) undocumented.push(name);
    }
    expect(undocumented).toEqual([]);
  });
});

// The dual-package hazard: an error thrown by the CommonJS build must still be recognised by the ESM build
// (and the reverse), or `catch (e) { if (e instanceof MrtrError) … }` silently misses real errors.
describe('the ESM and CJS builds recognise each other', () => {
  it('MrtrError, its subclasses and KeyRing, by brand', async () => {
    // The built files, by computed URL: type-checking this file needs no build (the tests do: turbo.json).
    const built = (file: string): string => new URL(`../dist/${file}`, import.meta.url).href;
    const esm = (await import(/* @vite-ignore */ built('errors.js'))) as typeof errors;
    const esmCore = (await import(/* @vite-ignore */ built('index.js'))) as typeof core;
    const require = createRequire(import.meta.url);
    const cjs = require(fileURLToPath(built('errors.cjs'))) as typeof errors;
    const cjsCore = require(fileURLToPath(built('index.cjs'))) as typeof core;
    expect(cjsCore.MrtrError).not.toBe(esmCore.MrtrError);
    const fromCjs = new cjs.StateReplayedError();
    const fromEsm = new esm.StoreUnavailableError();
    expect(fromCjs).toBeInstanceOf(esmCore.MrtrError);
    expect(fromCjs).toBeInstanceOf(esm.StateReplayedError);
    expect(fromCjs).not.toBeInstanceOf(esm.StoreUnavailableError);
    expect(esmCore.MrtrError.is(fromCjs)).toBe(true);
    expect(cjsCore.MrtrError.is(fromEsm)).toBe(true);
    expect(fromEsm).toBeInstanceOf(cjs.StoreUnavailableError);
    expect(cjsCore.KeyRing.generate()).toBeInstanceOf(esmCore.KeyRing);
    expect(new Error('x')).not.toBeInstanceOf(esmCore.MrtrError);
  });
});

// Review finding: three processes started from one Node startup snapshot printed the same randomBytes(24),
// because the pool filled while the snapshot was built was carried into every process started from it.
describe('the random pool and startup snapshots', () => {
  it('processes started from one snapshot draw different bytes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mrtr-snapshot-'));
    const entry = join(dir, 'entry.ts');
    writeFileSync(
      entry,
      `import { startupSnapshot } from 'node:v8';
import { randomBytes } from ${JSON.stringify(new URL('../src/util/random.ts', import.meta.url).pathname)};
randomBytes(24); // fill the pool while the snapshot is built
startupSnapshot.setDeserializeMainFunction(() => {
  process.stdout.write(Buffer.from(randomBytes(24)).toString('hex'));
});
`,
    );
    const bundle = join(dir, 'entry.cjs');
    // The node build of core (#crypto → node:crypto), as one CommonJS file: what a snapshot entry must be.
    await build({ entryPoints: [entry], bundle: true, platform: 'node', format: 'cjs', outfile: bundle, logLevel: 'silent' });
    const blob = join(dir, 'snap.blob');
    execFileSync(process.execPath, ['--snapshot-blob', blob, '--build-snapshot', bundle], { cwd: dir, timeout: 60_000 });
    const outputs = [1, 2, 3].map(() =>
      execFileSync(process.execPath, ['--snapshot-blob', blob], { cwd: dir, encoding: 'utf8', timeout: 60_000 }),
    );
    for (const out of outputs) expect(out).toMatch(/^[0-9a-f]{48}$/);
    expect(new Set(outputs).size).toBe(3);
  });
});
