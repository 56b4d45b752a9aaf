import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import * as authoring from '../src/authoring.js';
import * as core from '../src/index.js';
import * as nodeEntry from '../src/node.js';

// The public surface is pinned: a widening (or narrowing) of either entry is a visible diff here.
describe('exported names', () => {
  it('@mrtr/core holds what application authors use', () => {
    expect(Object.keys(core).sort()).toEqual([
      'CapabilityMissingError',
      'ClockSkewError',
      'FlowExpiredError',
      'FlowRoundsError',
      'IdempotencyKeyConflictError',
      'KeyConflictError',
      'KeyMismatchError',
      'KeyProvider',
      'KeyRing',
      'KeySourceError',
      'KeyUnknownError',
      'KeysUnavailableError',
      'LedgerLostError',
      'MRTR_ERROR_CODES',
      'MRTR_REJECTION_CODES',
      'MrtrError',
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
      'createStateGuard',
      'deriveKey',
      'generateKey',
      'isServerFault',
      'keysFromEnv',
      'parseJwks',
      'parseKeySet',
      'scheduleRotation',
      'toJwks',
    ]);
  });

  it('@mrtr/core/node holds the key sources that need Node APIs', () => {
    expect(Object.keys(nodeEntry).sort()).toEqual(['fileKeySource', 'watchKeyFile']);
  });

  it('@mrtr/core/authoring holds what codec, store and integration authors use', () => {
    expect(Object.keys(authoring).sort()).toEqual([
      'BackgroundError',
      'CLAIMS_VERSION',
      'CapabilityMissingError',
      'ClockSkewError',
      'DEFAULT_MAX_OUTCOME_BYTES',
      'DEFAULT_OUTCOME_BUDGET_BYTES',
      'FlowExpiredError',
      'FlowRoundsError',
      'IdempotencyKeyConflictError',
      'KeyConflictError',
      'KeyMismatchError',
      'KeySourceError',
      'KeyUnknownError',
      'KeysUnavailableError',
      'LedgerLostError',
      'MAX_FINGERPRINT_MISSES',
      'MAX_FLEET_KEYS',
      'MAX_RING_KEYS',
      'MIN_KEY_BYTES',
      'OUTCOME_STORE_LIMIT_OPTIONS',
      'OutcomeUnknownError',
      'PrincipalRequiredError',
      'QuotaExceededError',
      'RoundInProgressError',
      'STATE_GUARD_OPTIONS',
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
      'TASK_STORE_LIMIT_OPTIONS',
      'TASK_UPDATE_OPTIONS',
      'TaskLimitError',
      'andThen',
      'applyKeyFingerprintOffer',
      'asTaskRecord',
      'assertStateClaims',
      'assertTaskChange',
      'assertTaskCreateArguments',
      'assertTaskUpdateArguments',
      'base64urlDecode',
      'base64urlEncode',
      'boolOption',
      'canonicalJson',
      'checkFleetKeys',
      'checkLeaseMs',
      'checkOwner',
      'codecFormat',
      'createBatcher',
      'createEventSink',
      'createFlowTagger',
      'createPrincipalTagger',
      'fleetKeysFull',
      'fnOption',
      'fullStoreCapabilities',
      'intOption',
      'isCanonicalBase64url',
      'isIdempotencyKey',
      'isObject',
      'isPromiseLike',
      'isStateClaims',
      'isTerminalStatus',
      'keyFingerprint',
      'keyTtlMs',
      'oneOfOption',
      'optionsObject',
      'ownerValues',
      'parseCodecOptions',
      'parseKeyFingerprintOffer',
      'parseOutcomeStoreLimits',
      'parseTaskStoreLimits',
      'parseTaskUpdateOptions',
      'principalPolicy',
      'randomBytes',
      'readTokenPrefix',
      'redactUrl',
      'rejectUnknownOptions',
      'roomFromAtLeast',
      'runTaskUpdate',
      'safeEmitter',
      'storeCapabilities',
      'stringOption',
      'taskExpiresAt',
      'utf8Decode',
      'utf8Encode',
      'withDeadline',
    ]);
  });

  it('has one error class per code and the code set derives from the same list', () => {
    const codes = Object.values(authoring as Record<string, unknown>)
      .filter((v) => typeof v === 'function' && (v as { code?: unknown }).code !== undefined)
      .map((v) => (v as { code: string }).code);
    expect(codes.sort()).toEqual([...core.MRTR_ERROR_CODES].sort());
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
    for (const name of [...Object.keys(core), ...Object.keys(authoring), ...Object.keys(nodeEntry)]) {
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
    const esm = (await import(/* @vite-ignore */ built('authoring.js'))) as typeof authoring;
    const esmCore = (await import(/* @vite-ignore */ built('index.js'))) as typeof core;
    const require = createRequire(import.meta.url);
    const cjs = require(fileURLToPath(built('authoring.cjs'))) as typeof authoring;
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
