import { randomBytes } from 'node:crypto';
import { constants as fsConstants, type Stats } from 'node:fs';
import { type FileHandle, lstat, open, readFile, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { KeyRing } from '@mrtr/core';
import { base64urlDecode } from '@mrtr/core/encoding';
import { MIN_KEY_BYTES, parseKeySet, type ScheduledKey } from '@mrtr/core/keys';
import { duration } from './time.js';
import { type Io, UsageError } from './io.js';

export const KID_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;
const STANDARD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** The guard's defaults (`createStateGuard`): one round's state lives 10 min, 5 s of clock skew is tolerated. */
export const DEFAULT_TTL_MS = 600_000;
export const DEFAULT_SKEW_MS = 5_000;
/** Default of `keys rotate --keep`: the new primary and the previous one. */
export const DEFAULT_KEEP = 2;

/** A key id from the date: `k20261202`, suffixed `-2`, `-3`, … when taken. */
export function dateKid(now: Date, taken: ReadonlySet<string> = new Set()): string {
  const base = `k${now.toISOString().slice(0, 10).replaceAll('-', '')}`;
  if (!taken.has(base)) return base;
  for (let i = 2; ; i++) if (!taken.has(`${base}-${i}`)) return `${base}-${i}`;
}

/** A fresh secret of `bytes` random bytes as unpadded base64url. */
export function newSecret(bytes: number): string {
  return randomBytes(bytes).toString('base64url');
}

export interface EntryReport {
  /** Position in the value, 1-based. */
  index: number;
  kid: string | undefined;
  role: 'primary' | 'opens' | undefined;
  encoding: 'base64url' | 'base64' | undefined;
  bytes: number | undefined;
  problems: string[];
  warnings: string[];
}

export interface RingReport {
  ok: boolean;
  entries: EntryReport[];
  /** Problems of the value as a whole (empty value, core's own refusal). */
  problems: string[];
  warnings: string[];
  primaryKid: string | undefined;
  /** Keys that can open a state (every valid key of a valid ring). */
  openers: number;
}

function decodeSecret(text: string): { bytes: Uint8Array; encoding: 'base64url' | 'base64' } | undefined {
  if (/[+/=]/.test(text)) {
    if (!STANDARD_BASE64.test(text)) return undefined;
    const bytes = base64urlDecode(text.replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_'));
    return bytes === undefined ? undefined : { bytes, encoding: 'base64' };
  }
  const bytes = base64urlDecode(text);
  return bytes === undefined ? undefined : { bytes, encoding: 'base64url' };
}

/**
 * Checks an `MRTR_KEYS` value entry by entry (every problem, not only the first), then asks core's own
 * `KeyRing.parse` for the verdict. Never puts a secret in a message.
 */
export function checkRing(text: string): RingReport {
  const problems: string[] = [];
  const warnings: string[] = [];
  const entries: EntryReport[] = [];
  const parts = text.split(',');
  const seenKids = new Set<string>();
  const seenSecrets = new Map<string, string>();
  let empty = 0;
  for (const raw of parts) {
    const part = raw.trim();
    if (part.length === 0) {
      empty++;
      continue;
    }
    const entry: EntryReport = {
      index: entries.length + 1,
      kid: undefined,
      role: undefined,
      encoding: undefined,
      bytes: undefined,
      problems: [],
      warnings: [],
    };
    entries.push(entry);
    const colon = part.indexOf(':');
    if (colon <= 0) {
      entry.problems.push('not "kid:<secret>" (no kid before a colon)');
      continue;
    }
    const kid = part.slice(0, colon);
    const secret = part.slice(colon + 1).trim();
    if (KID_PATTERN.test(kid)) entry.kid = kid;
    else entry.problems.push('kid must be 1-32 characters of [A-Za-z0-9_-]');
    if (entry.kid !== undefined) {
      if (seenKids.has(kid)) entry.problems.push(`duplicate kid "${kid}"`);
      seenKids.add(kid);
    }
    const decoded = decodeSecret(secret);
    if (decoded === undefined) {
      entry.problems.push('secret is not valid base64url or standard base64');
      continue;
    }
    entry.encoding = decoded.encoding;
    entry.bytes = decoded.bytes.length;
    if (decoded.bytes.length < MIN_KEY_BYTES) {
      entry.problems.push(`secret is ${decoded.bytes.length} bytes; at least ${MIN_KEY_BYTES} are required`);
    }
    const fingerprint = Buffer.from(decoded.bytes).toString('hex');
    const twin = seenSecrets.get(fingerprint);
    if (twin !== undefined) entry.warnings.push(`same secret as "${twin}": one secret under two kids`);
    else seenSecrets.set(fingerprint, entry.kid ?? `entry ${entry.index}`);
  }
  if (entries.length === 0) problems.push('no key: the value is empty');
  if (empty > 0 && entries.length > 0) warnings.push(`${empty} empty entr${empty === 1 ? 'y' : 'ies'} (stray comma) ignored`);
  const entryProblems = entries.some((e) => e.problems.length > 0);
  let ring: KeyRing | undefined;
  try {
    ring = KeyRing.parse(text);
  } catch (error) {
    // Core's messages name the kid, never the secret.
    if (!entryProblems && entries.length > 0) problems.push(`core refuses it: ${error instanceof Error ? error.message : String(error)}`);
  }
  const ok = ring !== undefined && !entryProblems && problems.length === 0;
  if (ok) for (const [i, e] of entries.entries()) e.role = i === 0 ? 'primary' : 'opens';
  return {
    ok,
    entries,
    problems,
    warnings: [...warnings, ...entries.flatMap((e) => e.warnings.map((w) => `${e.kid ?? `entry ${e.index}`}: ${w}`))],
    primaryKid: ok ? ring!.primaryKid : undefined,
    openers: ok ? ring!.kids.length : 0,
  };
}

/** The `MRTR_KEYS` value a command works on: stdin for `-`, else the environment. */
export async function readKeysValue(io: Io, positional: string | undefined, command: string): Promise<{ text: string; source: string }> {
  if (positional === '-') return { text: (await io.readStdin()).trim(), source: 'stdin' };
  if (positional !== undefined) {
    throw new UsageError(
      `${command} takes no key value on the command line (it would land in shell history); use MRTR_KEYS or "-" for stdin`,
    );
  }
  const value = io.env.MRTR_KEYS;
  if (value === undefined || value === '') {
    throw new UsageError(`${command}: MRTR_KEYS is not set; set it, or pipe the value and pass "-"`);
  }
  return { text: value.trim(), source: 'MRTR_KEYS' };
}

export interface RotationStep {
  step: 1 | 2 | 3;
  title: string;
  why: string;
  value: string;
  kids: string[];
  primary: string;
  /** Keys removed by this step. */
  dropped: string[];
  /** Least time to wait after the previous step is on every instance. */
  waitMs: number;
}

export interface RotationPlan {
  newKid: string;
  bytes: number;
  keep: number;
  ttlMs: number;
  skewMs: number;
  steps: RotationStep[];
  /** The ring at the end of the rotation (step 3's value). */
  next: string;
}

/** The three-step rotation of a valid ring (entries as `kid:secret`, primary first). */
export function planRotation(
  entries: readonly { kid: string; secret: string }[],
  newKey: { kid: string; secret: string; bytes: number },
  keep: number,
  ttlMs: number,
  skewMs: number,
): RotationPlan {
  const fmt = (list: readonly { kid: string; secret: string }[]) => list.map((e) => `${e.kid}:${e.secret}`).join(',');
  const oldPrimary = entries[0]!.kid;
  const step1 = [...entries, newKey];
  const step2 = [newKey, ...entries];
  const step3 = step2.slice(0, keep);
  const dropped = step2.slice(keep).map((e) => e.kid);
  // The last state the old primary sealed may come from an instance whose clock runs `skewMs` ahead (its exp is
  // skewMs late), and an instance accepts it until its own clock passes exp + skewMs: ttl + 2 × skew in all.
  const waitMs = ttlMs + 2 * skewMs;
  const steps: RotationStep[] = [
    {
      step: 1,
      title: `add ${newKey.kid} on every instance as a NON-primary key (${oldPrimary} still seals)`,
      why: `nothing is sealed with ${newKey.kid} yet, so instances that have not updated are unaffected; once this is everywhere, every instance can open what ${newKey.kid} will seal`,
      value: fmt(step1),
      kids: step1.map((e) => e.kid),
      primary: oldPrimary,
      dropped: [],
      waitMs: 0,
    },
    {
      step: 2,
      title: `only when step 1 is on every instance: make ${newKey.kid} the primary`,
      why: `instances seal with ${newKey.kid} as they update; an instance still on step 1 opens those states (it has the key), and ${oldPrimary} stays in the ring to open the states it sealed`,
      value: fmt(step2),
      kids: step2.map((e) => e.kid),
      primary: newKey.kid,
      dropped: [],
      waitMs: 0,
    },
    {
      step: 3,
      title:
        dropped.length === 0
          ? `nothing to drop (--keep ${keep} keeps all ${step2.length} keys); the ring stays as in step 2`
          : `when step 2 has been on every instance for ${duration(waitMs)} (ttl ${duration(ttlMs)} + 2 × skew ${duration(skewMs)}): drop ${dropped.join(', ')}`,
      why:
        dropped.length === 0
          ? 'every key is kept for opening'
          : `every round re-seals with the primary and a state is accepted for at most ttl + 2 × skew after it was sealed (its exp may come from a clock running skew ahead, and it is accepted until exp + skew), so once ${newKey.kid} has been the only key sealing for ${duration(waitMs)} no live state was sealed by ${dropped.join(' or ')}; dropping earlier refuses such states with ERR_KEY_UNKNOWN`,
      value: fmt(step3),
      kids: step3.map((e) => e.kid),
      primary: newKey.kid,
      dropped,
      waitMs: dropped.length === 0 ? 0 : waitMs,
    },
  ];
  return { newKid: newKey.kid, bytes: newKey.bytes, keep, ttlMs, skewMs, steps, next: fmt(step3) };
}

/** Splits a valid value into its entries (`KeyRing.parse` has accepted it). */
export function splitEntries(text: string): { kid: string; secret: string }[] {
  return text
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p.length > 0)
    .map((p) => {
      const colon = p.indexOf(':');
      return { kid: p.slice(0, colon), secret: p.slice(colon + 1).trim() };
    });
}

/** Default of `keys rotate --propagation-ms`: 15 min, three times a `KeyProvider`'s default refresh (5 min). */
export const DEFAULT_PROPAGATION_MS = 900_000;

/** Where a keys command reads its key set: `--file PATH`, stdin (`-`), or MRTR_KEYS. */
export async function readKeySource(
  io: Io,
  positional: string | undefined,
  file: string | undefined,
  command: string,
): Promise<{ text: string; source: string }> {
  if (file === undefined) return readKeysValue(io, positional, command);
  if (positional !== undefined) throw new UsageError(`${command}: give --file or "-", not both`);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new UsageError(`${command}: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  return { text: text.trim(), source: file };
}

export interface ScheduledEntry {
  kid: string;
  bytes: number;
  /** What the key does at the time of the check. */
  state: 'seals' | 'opens' | 'published' | 'gone';
  sealsFrom: string | undefined;
  dropsAt: string | undefined;
}

export interface KeySetReport {
  ok: boolean;
  format: 'jwks';
  keys: ScheduledEntry[];
  problems: string[];
  primaryKid: string | undefined;
}

const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());

/** Checks a JWK Set (core's `parseKeySet` is the verdict) and tells what each key does at `now`. Never a secret. */
export function checkKeySet(text: string, now: number): KeySetReport {
  let keys: ScheduledKey[];
  try {
    keys = parseKeySet(text);
    new KeyRing(keys); // duplicate kids, sizes
    for (const k of keys) {
      if (k.notBefore !== undefined && k.notAfter !== undefined && !(k.notBefore < k.notAfter)) {
        throw new RangeError(`notBefore of "${k.kid}" must be before its notAfter`);
      }
    }
  } catch (error) {
    // Core's messages name the kid at most, never the secret.
    return {
      ok: false,
      format: 'jwks',
      keys: [],
      problems: [error instanceof Error ? error.message : String(error)],
      primaryKid: undefined,
    };
  }
  let sealer: ScheduledKey | undefined;
  for (const k of keys) {
    const active = (k.notBefore ?? Number.NEGATIVE_INFINITY) <= now && now < (k.notAfter ?? Number.POSITIVE_INFINITY);
    if (active && (sealer === undefined || (k.notBefore ?? Number.NEGATIVE_INFINITY) > (sealer.notBefore ?? Number.NEGATIVE_INFINITY))) {
      sealer = k;
    }
  }
  const entries = keys.map((k): ScheduledEntry => {
    const gone = k.notAfter !== undefined && now >= k.notAfter;
    const later = k.notBefore !== undefined && now < k.notBefore;
    return {
      kid: k.kid,
      bytes: (k.secret as Uint8Array).length,
      state: gone ? 'gone' : k === sealer ? 'seals' : later ? 'published' : 'opens',
      sealsFrom: iso(k.notBefore),
      dropsAt: iso(k.notAfter),
    };
  });
  const problems = sealer === undefined ? ['no key may seal now: every key starts later or is gone (ERR_KEYS_UNAVAILABLE)'] : [];
  return { ok: problems.length === 0, format: 'jwks', keys: entries, problems, primaryKid: sealer?.kid };
}

/**
 * Refuses a key file that is not a plain file: a symbolic link (a rotation would replace the link, or, read through
 * it, rotate a file somewhere else) or a device, FIFO or directory. A missing file is fine (it is created).
 */
export async function assertPlainKeyFile(path: string, command: string): Promise<void> {
  let stats: Stats;
  try {
    stats = await lstat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new UsageError(`${command}: cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  if (stats.isSymbolicLink()) {
    throw new UsageError(`${command}: ${path} is a symbolic link; refusing to write a key file through it (pass the real file)`);
  }
  if (!stats.isFile()) throw new UsageError(`${command}: ${path} is not a regular file`);
}

/** Exclusive create (never an existing file, never through a link), write only. */
const CREATE_FLAGS = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | (fsConstants.O_NOFOLLOW ?? 0);
/** Names tried before giving up: a clash of 128 random bits is an attack or a broken random source. */
const TEMPORARY_ATTEMPTS = 4;

/** A fresh temporary name beside `path` (same directory, so the rename is atomic), unguessable. */
export const temporaryName = (path: string): string => `${path}.${randomBytes(16).toString('hex')}.tmp`;

/**
 * Writes `text` to `path` atomically, readable by its owner only (0600): into a new file created exclusively under an
 * unguessable name beside it (never an existing file or a link planted there), synced, renamed over `path` (rename
 * replaces a link at `path`, it never writes through it; a link there is refused first), then the directory synced.
 * `nameFor` is for tests.
 */
export async function writeKeyFile(path: string, text: string, nameFor: (path: string) => string = temporaryName): Promise<void> {
  await assertPlainKeyFile(path, 'keys rotate');
  const { handle, temporary } = await createTemporary(path, nameFor);
  try {
    await handle.writeFile(text, 'utf8');
    await handle.chmod(0o600); // the umask may have narrowed it; never wider
    await handle.sync();
    await handle.close();
    await rename(temporary, path);
  } catch (error) {
    await handle.close().catch(() => undefined);
    await unlink(temporary).catch(() => undefined);
    throw error;
  }
  await syncDirectory(dirname(path));
}

async function createTemporary(path: string, nameFor: (path: string) => string): Promise<{ handle: FileHandle; temporary: string }> {
  for (let attempt = 1; ; attempt++) {
    const temporary = nameFor(path);
    try {
      return { handle: await open(temporary, CREATE_FLAGS, 0o600), temporary };
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== 'EEXIST' && code !== 'ELOOP') || attempt >= TEMPORARY_ATTEMPTS) {
        throw new UsageError(`keys rotate: cannot create a temporary file beside ${path}: ${code ?? 'error'}`);
      }
    }
  }
}

/** Makes the rename durable (POSIX; Windows cannot open a directory, and its rename is durable on its own). */
async function syncDirectory(directory: string): Promise<void> {
  if (process.platform === 'win32') return;
  const handle = await open(directory, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
