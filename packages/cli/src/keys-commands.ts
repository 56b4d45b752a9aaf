import { parseKeySet, type ScheduledKey, scheduleRotation, toJwks } from '@mrtr/core/keys';
import { duration } from './time.js';
import {
  checkKeySet,
  checkRing,
  DEFAULT_KEEP,
  DEFAULT_PROPAGATION_MS,
  DEFAULT_SKEW_MS,
  DEFAULT_TTL_MS,
  dateKid,
  KID_PATTERN,
  newSecret,
  assertPlainKeyFile,
  planRotation,
  readKeySource,
  readKeysValue,
  type RingReport,
  splitEntries,
  writeKeyFile,
} from './keys.js';
import {
  colourEnabled,
  EXIT_BAD,
  EXIT_OK,
  intValue,
  type Io,
  parseCommand,
  render,
  statusLine,
  style,
  toned,
  UsageError,
  writeJson,
  writeLines,
} from './io.js';

export const KEYGEN_HELP = `Usage: mrtr keygen [--kid ID] [--bytes N] [--env | --jwks] [--json]

Prints a new key ring entry in the MRTR_KEYS format, "kid:<base64url secret>".

Options:
  --kid ID     key id, 1-32 characters of [A-Za-z0-9_-] (default: from today's date, e.g. k20261202)
  --bytes N    secret length in bytes, 32-1024 (default 32)
  --env        print "MRTR_KEYS=<entry>", ready for a .env file
  --jwks       print a JWK Set of one "oct" key instead: the key file a KeyProvider reads and
               "mrtr keys rotate --file" rotates
  --json       print {"kid", "bytes", "entry"} as JSON
  -h, --help   this help

A single entry is a complete MRTR_KEYS value. To add it to an existing ring, use "mrtr keys rotate".
Exit codes: 0 ok, 2 usage error.
`;

export async function keygen(io: Io, args: string[], now: () => number): Promise<number> {
  const parsed = parseCommand(io, args, KEYGEN_HELP, { strings: ['kid', 'bytes'], flags: ['env', 'jwks'] });
  if (parsed === undefined) return EXIT_OK;
  const { values, positionals } = parsed;
  if (positionals.length > 0) throw new UsageError(`keygen takes no arguments (got "${positionals[0]}")`);
  const kid = typeof values.kid === 'string' ? values.kid : dateKid(new Date(now()));
  if (!KID_PATTERN.test(kid)) throw new UsageError('--kid must be 1-32 characters of [A-Za-z0-9_-]');
  const bytes = intValue('bytes', values.bytes, 32, 32, 1024);
  if (values.jwks) {
    if (values.env || values.json) throw new UsageError('--jwks prints JSON already: not with --env or --json');
    writeJson(io, toJwks([{ kid, secret: newSecret(bytes) }]));
    return EXIT_OK;
  }
  const entry = `${kid}:${newSecret(bytes)}`;
  if (values.json) writeJson(io, { kid, bytes, entry });
  else io.stdout.write(values.env ? `MRTR_KEYS=${entry}\n` : `${entry}\n`);
  return EXIT_OK;
}

export const KEYS_HELP = `Usage: mrtr keys <check|rotate> [options]

Commands:
  check    validate a key set (MRTR_KEYS format or JWK Set): format, kids, secret sizes, duplicates,
           how many keys open, and each key's schedule
  rotate   --file: write a rotation schedule into a key file; else print the rollout steps for MRTR_KEYS

Both read the value from MRTR_KEYS, from stdin with "-", or from a key file with --file (never from
the command line).
Run "mrtr keys <command> --help" for its options.
`;

export const KEYS_CHECK_HELP = `Usage: mrtr keys check [- | --file PATH] [--json]

Validates a key set, from MRTR_KEYS, stdin or a key file, in either format:
- an MRTR_KEYS value ("kid:<secret>,kid2:<secret>", the first key seals, every key opens): each entry's
  format, kid, secret encoding (base64url or standard base64) and size (>= 32 bytes), duplicate kids
  and reused secrets;
- a JWK Set of "oct" keys (what "mrtr keygen --jwks" and "mrtr keys rotate --file" write), strictly,
  with each key's schedule: which key seals now, which are published ahead, when each one drops.
Prints one line per key, never a secret.

  -            read the value from stdin instead of MRTR_KEYS
  --file PATH  read a key file (JWK Set or MRTR_KEYS value)
  --json       print the report as JSON
  -h, --help  this help

Exit codes: 0 valid, 1 invalid, 2 usage error (no value given).
`;

export async function keysCheck(io: Io, args: string[], now: () => number = Date.now): Promise<number> {
  const parsed = parseCommand(io, args, KEYS_CHECK_HELP, { strings: ['file'] });
  if (parsed === undefined) return EXIT_OK;
  const { values, positionals } = parsed;
  if (positionals.length > 1) throw new UsageError('keys check takes at most one argument, "-"');
  const file = typeof values.file === 'string' ? values.file : undefined;
  const { text, source } = await readKeySource(io, positionals[0], file, 'keys check');
  if (text.startsWith('{')) return checkJwks(io, text, source, values.json === true, now());
  const report = checkRing(text);
  if (values.json) {
    writeJson(io, { source, ...report });
    return report.ok ? EXIT_OK : EXIT_BAD;
  }
  const s = style(colourEnabled(io.stdout, io.env));
  const out: string[] = [];
  for (const e of report.entries) {
    const name = e.kid ?? `entry ${e.index}`;
    const size = e.bytes === undefined ? '' : `${e.bytes} bytes, ${e.encoding}`;
    if (e.problems.length > 0) out.push(statusLine(s, 'fail', name, [size, ...e.problems].filter(Boolean).join('; ')));
    else {
      const role =
        e.role === 'primary' ? 'primary: seals and opens' : e.role === 'opens' ? 'opens only' : 'entry fine, but the ring is invalid';
      out.push(
        statusLine(
          s,
          e.role === undefined ? 'info' : e.warnings.length > 0 ? 'warn' : 'ok',
          name,
          `${size}; ${role}${e.warnings.length > 0 ? `; ${e.warnings.join('; ')}` : ''}`,
        ),
      );
    }
  }
  for (const p of report.problems) out.push(statusLine(s, 'fail', 'ring', p));
  const general = report.warnings.filter((w) => w.includes('empty entr'));
  for (const w of general) out.push(statusLine(s, 'warn', 'ring', w));
  if (report.ok) {
    out.push(
      statusLine(
        s,
        'ok',
        'ring',
        `valid (${source}): ${report.openers} key${report.openers === 1 ? '' : 's'} can open, "${report.primaryKid}" seals`,
      ),
    );
  } else if (report.problems.length === 0) {
    out.push(statusLine(s, 'fail', 'ring', `invalid (${source}): fix the entries above`));
  }
  writeLines(io.stdout, out);
  return report.ok ? EXIT_OK : EXIT_BAD;
}

export const KEYS_ROTATE_HELP = `Usage: mrtr keys rotate --file PATH [--kid ID] [--bytes N] [--propagation-ms MS] [--ttl-ms MS] [--skew-ms MS] [--json]
       mrtr keys rotate [-] [--kid ID] [--bytes N] [--keep N] [--ttl-ms MS] [--skew-ms MS] [--json]

With --file (a key file read by every replica's KeyProvider): writes the rotation into the file as a
schedule, no restart and no manual steps. The new key is published now and starts sealing at
now + --propagation-ms on every replica at once (within the clock skew); the keys in the file stop
opening ttl + 2 × skew after that. Keys already gone are removed. The file is written as a JWK Set
(atomically, mode 0600; a key file that is a symbolic link is refused); nothing secret is printed.
--propagation-ms must exceed the providers' refreshMs plus the clock skew (default ${DEFAULT_PROPAGATION_MS}, 15 min:
three times the default refresh).

Reads the current MRTR_KEYS value and prints the rotation to a new primary key as three rollout
steps, each with its full MRTR_KEYS value (the output contains secrets: treat it like the value):

  1. add the new key on every instance as a NON-primary key (the current primary still seals);
  2. when step 1 is everywhere, make the new key the primary (the old keys still open);
  3. when step 2 has been everywhere for ttl + 2 × skew, drop the keys past --keep.

Why step 1: an instance still on the old ring cannot open a state sealed with a key it does not
have (ERR_KEY_UNKNOWN). Deploying step 2 directly is only safe with a single instance.

Options:
  -             read the current value from stdin instead of MRTR_KEYS
  --kid ID      id of the new key (default: from today's date, made unique in the ring)
  --bytes N     size of the new secret, 32-1024 (default 32)
  --keep N      keys left after step 3, the new primary included, 1-32 (default ${DEFAULT_KEEP}: the new primary
                and the previous one. The previous primary stays so that step 2 can be rolled back
                without refusals; older keys have not sealed since an earlier rotation, and with
                rotations further apart than ttl + 2 × skew no live state needs them. Every key kept is one
                more secret that can forge states if it leaks)
  --ttl-ms MS   the guard's ttlMs (default ${DEFAULT_TTL_MS}, the guard's default)
  --skew-ms MS  the guard's clockSkewMs (default ${DEFAULT_SKEW_MS}, the guard's default)
  --json        print the plan as JSON
  -h, --help    this help

Exit codes: 0 ok, 1 the current value is invalid, 2 usage error.
`;

export async function keysRotate(io: Io, args: string[], now: () => number): Promise<number> {
  const parsed = parseCommand(io, args, KEYS_ROTATE_HELP, {
    strings: ['kid', 'bytes', 'keep', 'ttl-ms', 'skew-ms', 'propagation-ms', 'file'],
  });
  if (parsed === undefined) return EXIT_OK;
  const { values, positionals } = parsed;
  if (positionals.length > 1) throw new UsageError('keys rotate takes at most one argument, "-"');
  if (typeof values.file === 'string') return rotateFile(io, values, values.file, now);
  if (values['propagation-ms'] !== undefined) throw new UsageError('--propagation-ms needs --file');
  const keep = intValue('keep', values.keep, DEFAULT_KEEP, 1, 32);
  const bytes = intValue('bytes', values.bytes, 32, 32, 1024);
  const ttlMs = intValue('ttl-ms', values['ttl-ms'], DEFAULT_TTL_MS, 1, 365 * 86_400_000);
  const skewMs = intValue('skew-ms', values['skew-ms'], DEFAULT_SKEW_MS, 0, 600_000);
  if (typeof values.kid === 'string' && !KID_PATTERN.test(values.kid))
    throw new UsageError('--kid must be 1-32 characters of [A-Za-z0-9_-]');
  const { text, source } = await readKeysValue(io, positionals[0], 'keys rotate');
  const report = checkRing(text);
  const s = style(colourEnabled(io.stdout, io.env));
  if (!report.ok) {
    const reasons = ringProblems(report);
    if (values.json) writeJson(io, { ok: false, source, problems: reasons });
    else
      writeLines(io.stderr, [
        render(s, toned('fail', 'error'), `: the current value (${source}) is invalid: ${reasons.join('; ')}`),
        'Run "mrtr keys check" for details.',
      ]);
    return EXIT_BAD;
  }
  const entries = splitEntries(text);
  const taken = new Set(entries.map((e) => e.kid));
  const kid = typeof values.kid === 'string' ? values.kid : dateKid(new Date(now()), taken);
  if (taken.has(kid)) throw new UsageError(`--kid "${kid}" is already in the ring`);
  const plan = planRotation(entries, { kid, secret: newSecret(bytes), bytes }, keep, ttlMs, skewMs);
  if (values.json) {
    writeJson(io, { ok: true, source, ...plan });
    return EXIT_OK;
  }
  const out = [
    render(
      s,
      `Rotation of the ring from ${source} (${entries.map((e) => e.kid).join(', ')}; "${entries[0]!.kid}" seals) to the new primary "${kid}" (${bytes} bytes).`,
    ),
    render(s, toned('warn', 'The values below contain secrets: store them like MRTR_KEYS itself.')),
    '',
  ];
  for (const step of plan.steps) {
    out.push(render(s, toned('bold', `Step ${step.step}: ${step.title}`)));
    out.push(render(s, `  MRTR_KEYS=${step.value}`));
    out.push(render(s, toned('dim', `  keys ${step.kids.join(', ')}; "${step.primary}" seals`)));
    out.push(render(s, `  Why: ${step.why}.`));
    out.push('');
  }
  out.push(render(s, `Next value (after step 3): MRTR_KEYS=${plan.next}`));
  out.push(
    render(
      s,
      toned(
        'dim',
        'Single instance: step 2 can be deployed directly (the ring changes at the restart). With several instances, skipping step 1 makes instances not yet updated refuse states sealed with the new key (ERR_KEY_UNKNOWN) for as long as the rollout takes.',
      ),
    ),
  );
  writeLines(io.stdout, out);
  return EXIT_OK;
}

/** `keys check` of a JWK Set: one line per key with its schedule. */
function checkJwks(io: Io, text: string, source: string, json: boolean, now: number): number {
  const report = checkKeySet(text, now);
  if (json) {
    writeJson(io, { source, ...report });
    return report.ok ? EXIT_OK : EXIT_BAD;
  }
  const s = style(colourEnabled(io.stdout, io.env));
  const out: string[] = [];
  for (const k of report.keys) {
    const when = [k.sealsFrom && `seals from ${k.sealsFrom}`, k.dropsAt && `drops at ${k.dropsAt}`].filter(Boolean).join(', ');
    const what =
      k.state === 'seals'
        ? 'seals now and opens'
        : k.state === 'published'
          ? 'published: opens, seals later'
          : k.state === 'opens'
            ? 'opens only'
            : 'gone: neither seals nor opens';
    out.push(statusLine(s, k.state === 'gone' ? 'warn' : 'ok', k.kid, `${k.bytes} bytes; ${what}${when ? `; ${when}` : ''}`));
  }
  for (const p of report.problems) out.push(statusLine(s, 'fail', 'ring', p));
  if (report.ok) {
    const open = report.keys.filter((k) => k.state !== 'gone').length;
    out.push(
      statusLine(s, 'ok', 'ring', `valid JWK Set (${source}): ${open} key${open === 1 ? '' : 's'} can open, "${report.primaryKid}" seals`),
    );
  }
  writeLines(io.stdout, out);
  return report.ok ? EXIT_OK : EXIT_BAD;
}

/** `keys rotate --file`: the rotation written into the key file as a schedule. */
async function rotateFile(io: Io, values: Record<string, string | boolean | undefined>, file: string, now: () => number): Promise<number> {
  if (values.keep !== undefined) throw new UsageError('--keep is for the printed plan; with --file old keys drop on their schedule');
  const bytes = intValue('bytes', values.bytes, 32, 32, 1024);
  const ttlMs = intValue('ttl-ms', values['ttl-ms'], DEFAULT_TTL_MS, 1, 365 * 86_400_000);
  const skewMs = intValue('skew-ms', values['skew-ms'], DEFAULT_SKEW_MS, 0, 600_000);
  const propagationMs = intValue('propagation-ms', values['propagation-ms'], DEFAULT_PROPAGATION_MS, 0, 30 * 86_400_000);
  if (typeof values.kid === 'string' && !KID_PATTERN.test(values.kid))
    throw new UsageError('--kid must be 1-32 characters of [A-Za-z0-9_-]');
  await assertPlainKeyFile(file, 'keys rotate');
  const { text } = await readKeySource(io, undefined, file, 'keys rotate');
  const t = now();
  const report = text.startsWith('{') ? checkKeySet(text, t) : undefined;
  let current: ScheduledKey[];
  if (report !== undefined) {
    if (!report.ok) return rotateRefused(io, values.json === true, file, report.problems);
    current = parseKeySet(text);
  } else {
    const ring = checkRing(text);
    if (!ring.ok) return rotateRefused(io, values.json === true, file, ringProblems(ring));
    current = parseKeySet(text);
  }
  const taken = new Set(current.map((k) => k.kid));
  const kid = typeof values.kid === 'string' ? values.kid : dateKid(new Date(t), taken);
  if (taken.has(kid)) throw new UsageError(`--kid "${kid}" is already in the key set`);
  const next = scheduleRotation(current, { kid, secret: newSecret(bytes) }, { now: t, propagationMs, ttlMs, clockSkewMs: skewMs });
  await writeKeyFile(file, `${JSON.stringify(toJwks(next), null, 2)}\n`);
  const sealsFrom = new Date(next[0]!.notBefore!).toISOString();
  const drops = next.slice(1).map((k) => ({ kid: k.kid, at: new Date(k.notAfter!).toISOString() }));
  const removed = current.filter((k) => !next.some((n) => n.kid === k.kid)).map((k) => k.kid);
  if (values.json) {
    writeJson(io, { ok: true, file, newKid: kid, bytes, sealsFrom, drops, removed, propagationMs, ttlMs, skewMs });
    return EXIT_OK;
  }
  const s = style(colourEnabled(io.stdout, io.env));
  const out = [
    `Wrote the rotation to ${file} (a JWK Set; no secret printed):`,
    `  ${kid} (${bytes} bytes): published now, seals from ${sealsFrom} on every replica`,
    ...drops.map(
      (d) => `  ${d.kid}: stops opening at ${d.at} (ttl ${duration(ttlMs)} + 2 × skew ${duration(skewMs)} after ${kid} starts sealing)`,
    ),
    ...removed.map((r) => `  ${r}: removed (already gone)`),
  ].map((line) => render(s, line));
  out.push(
    render(
      s,
      toned(
        'dim',
        `Every replica's KeyProvider must read the file within ${duration(propagationMs)} (its refreshMs plus the clock skew must be less); "mrtr keys check --file ${file}" shows the schedule.`,
      ),
    ),
  );
  writeLines(io.stdout, out);
  return EXIT_OK;
}

/** Every problem of an invalid ring, each entry's prefixed with its kid or position. */
function ringProblems(ring: RingReport): string[] {
  return [...ring.problems, ...ring.entries.flatMap((e) => e.problems.map((p) => `${e.kid ?? `entry ${e.index}`}: ${p}`))];
}

/** A refused key file: the reasons quote the file (a member name, a kid), so they are escaped like every line. */
function rotateRefused(io: Io, json: boolean, file: string, reasons: string[]): number {
  if (json) writeJson(io, { ok: false, source: file, problems: reasons });
  else {
    const s = style(colourEnabled(io.stderr, io.env));
    writeLines(io.stderr, [
      render(s, toned('fail', 'error'), `: the key file ${file} is invalid: ${reasons.join('; ')}`),
      render(s, `Run "mrtr keys check --file ${file}" for details.`),
    ]);
  }
  return EXIT_BAD;
}
