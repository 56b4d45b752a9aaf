import {
  checkRing,
  DEFAULT_KEEP,
  DEFAULT_SKEW_MS,
  DEFAULT_TTL_MS,
  dateKid,
  KID_PATTERN,
  newSecret,
  planRotation,
  readKeysValue,
  splitEntries,
} from './keys.js';
import {
  COMMON_OPTIONS,
  colourEnabled,
  EXIT_BAD,
  EXIT_OK,
  intValue,
  type Io,
  parse,
  statusLine,
  style,
  UsageError,
  writeJson,
} from './io.js';

export const KEYGEN_HELP = `Usage: mrtr keygen [--kid ID] [--bytes N] [--env] [--json]

Prints a new key ring entry in the MRTR_KEYS format, "kid:<base64url secret>".

Options:
  --kid ID     key id, 1-32 characters of [A-Za-z0-9_-] (default: from today's date, e.g. k20261202)
  --bytes N    secret length in bytes, 32-1024 (default 32)
  --env        print "MRTR_KEYS=<entry>", ready for a .env file
  --json       print {"kid", "bytes", "entry"} as JSON
  -h, --help   this help

A single entry is a complete MRTR_KEYS value. To add it to an existing ring, use "mrtr keys rotate".
Exit codes: 0 ok, 2 usage error.
`;

export async function keygen(io: Io, args: string[], now: () => number): Promise<number> {
  const { values, positionals } = parse(
    args,
    { ...COMMON_OPTIONS, kid: { type: 'string' }, bytes: { type: 'string' }, env: { type: 'boolean' } },
    true,
  );
  if (values.help) {
    io.stdout.write(KEYGEN_HELP);
    return EXIT_OK;
  }
  if (positionals.length > 0) throw new UsageError(`keygen takes no arguments (got "${positionals[0]}")`);
  const kid = typeof values.kid === 'string' ? values.kid : dateKid(new Date(now()));
  if (!KID_PATTERN.test(kid)) throw new UsageError('--kid must be 1-32 characters of [A-Za-z0-9_-]');
  const bytes = intValue('bytes', values.bytes, 32, 32, 1024);
  const entry = `${kid}:${newSecret(bytes)}`;
  if (values.json) writeJson(io, { kid, bytes, entry });
  else io.stdout.write(values.env ? `MRTR_KEYS=${entry}\n` : `${entry}\n`);
  return EXIT_OK;
}

export const KEYS_HELP = `Usage: mrtr keys <check|rotate> [options]

Commands:
  check    validate an MRTR_KEYS value: format, kids, secret sizes, duplicates, how many keys open
  rotate   print the next value and the rollout steps for a new primary key

Both read the value from MRTR_KEYS, or from stdin with "-" (never from the command line).
Run "mrtr keys <command> --help" for its options.
`;

export const KEYS_CHECK_HELP = `Usage: mrtr keys check [-] [--json]

Validates an MRTR_KEYS value ("kid:<secret>,kid2:<secret>", the first key seals, every key opens):
each entry's format, kid, secret encoding (base64url or standard base64) and size (>= 32 bytes),
duplicate kids and reused secrets. Prints one line per key, never a secret.

  -           read the value from stdin instead of MRTR_KEYS
  --json      print the report as JSON
  -h, --help  this help

Exit codes: 0 valid, 1 invalid, 2 usage error (no value given).
`;

export async function keysCheck(io: Io, args: string[]): Promise<number> {
  const { values, positionals } = parse(args, { ...COMMON_OPTIONS }, true);
  if (values.help) {
    io.stdout.write(KEYS_CHECK_HELP);
    return EXIT_OK;
  }
  if (positionals.length > 1) throw new UsageError('keys check takes at most one argument, "-"');
  const { text, source } = await readKeysValue(io, positionals[0], 'keys check');
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
  io.stdout.write(`${out.join('\n')}\n`);
  return report.ok ? EXIT_OK : EXIT_BAD;
}

export const KEYS_ROTATE_HELP = `Usage: mrtr keys rotate [-] [--kid ID] [--bytes N] [--keep N] [--ttl-ms MS] [--skew-ms MS] [--json]

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
  const { values, positionals } = parse(
    args,
    {
      ...COMMON_OPTIONS,
      kid: { type: 'string' },
      bytes: { type: 'string' },
      keep: { type: 'string' },
      'ttl-ms': { type: 'string' },
      'skew-ms': { type: 'string' },
    },
    true,
  );
  if (values.help) {
    io.stdout.write(KEYS_ROTATE_HELP);
    return EXIT_OK;
  }
  if (positionals.length > 1) throw new UsageError('keys rotate takes at most one argument, "-"');
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
    const reasons = [...report.problems, ...report.entries.flatMap((e) => e.problems.map((p) => `${e.kid ?? `entry ${e.index}`}: ${p}`))];
    if (values.json) writeJson(io, { ok: false, source, problems: reasons });
    else
      io.stderr.write(
        `${s.fail('error')}: the current value (${source}) is invalid: ${reasons.join('; ')}\nRun "mrtr keys check" for details.\n`,
      );
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
    `Rotation of the ring from ${source} (${entries.map((e) => e.kid).join(', ')}; "${entries[0]!.kid}" seals) to the new primary "${kid}" (${bytes} bytes).`,
    s.warn('The values below contain secrets: store them like MRTR_KEYS itself.'),
    '',
  ];
  for (const step of plan.steps) {
    out.push(s.bold(`Step ${step.step}: ${step.title}`));
    out.push(`  MRTR_KEYS=${step.value}`);
    out.push(s.dim(`  keys ${step.kids.join(', ')}; "${step.primary}" seals`));
    out.push(`  Why: ${step.why}.`);
    out.push('');
  }
  out.push(`Next value (after step 3): MRTR_KEYS=${plan.next}`);
  out.push(
    s.dim(
      'Single instance: step 2 can be deployed directly (the ring changes at the restart). With several instances, skipping step 1 makes instances not yet updated refuse states sealed with the new key (ERR_KEY_UNKNOWN) for as long as the rollout takes.',
    ),
  );
  io.stdout.write(`${out.join('\n')}\n`);
  return EXIT_OK;
}
