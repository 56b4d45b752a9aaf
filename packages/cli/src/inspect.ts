import { createStateGuard, KeyRing, MrtrError, type RequestContext, type StateCodec, type StateGuard } from '@mrtr/core';
import { createPrincipalTagger } from '@mrtr/core/adapter';
import { isStateClaims, type StateClaims } from '@mrtr/core/codec';
import { canonicalJson } from '@mrtr/core/encoding';
import { CODECS, type CodecName, codecFactory, type Detected, detect } from './codecs.js';
import {
  colourEnabled,
  EXIT_BAD,
  EXIT_OK,
  intValue,
  type Io,
  type ParsedArgs,
  type Piece,
  parseCommand,
  render,
  str,
  style,
  toned,
  UsageError,
  writeJson,
  writeLines,
} from './io.js';
import { DEFAULT_SKEW_MS } from './keys.js';
import { duration, parseInstant, when } from './time.js';

export const INSPECT_HELP = `Usage: mrtr inspect <token|-> [options]

Tells what a request state (requestState) is and, with MRTR_KEYS, whether the guard would accept it.

Without MRTR_KEYS: the codec, format version and kid; for the HMAC codec (readable, not encrypted)
also the claims, marked NOT VERIFIED.
With MRTR_KEYS: opens the token and prints the claims (principal tag, audience, method/target,
arguments digest, flow id and round, issue/expiry/flow deadline relative to now) and, when the guard
would refuse it, the exact MrtrError code and why.

Options:
  -                    read the token from stdin
  --codec NAME         hmac, jwe or aead (default: detected from the token)
  --audience AUD       the server's audience (default: the token's own, so not checked)
  --principal P        check the principal binding against this authenticated principal
  --unauthenticated P  ... or against the guard's fixed unauthenticated principal P
  --method M           check the binding against this JSON-RPC method (default: the token's)
  --target T           ... this tool/prompt name or resource URI (default: the token's)
  --args JSON          ... these arguments (the guard binds SHA-256 of their canonical JSON; absent = {})
  --skew-ms MS         the guard's clockSkewMs (default ${DEFAULT_SKEW_MS})
  --max-rounds N       the guard's maxRounds (default 8)
  --now TIME           judge as of TIME (ISO 8601 or epoch ms) instead of this machine's clock
  --data               also print the application payload (data); it is left out by default
  --json               print the result as JSON
  -h, --help           this help

Exit codes: 0 readable (without keys) or accepted (with keys), 1 malformed, unopenable or refused,
2 usage error (no token, bad option, invalid MRTR_KEYS).
`;

interface Verdict {
  accepted: boolean;
  code: string | undefined;
  reason: string;
  /** Checks that could not be run for lack of input. */
  unchecked: string[];
}

interface BindingPart {
  token: string;
  request: string;
  given: boolean;
  match: boolean;
}

interface BindingReport {
  method: BindingPart;
  target: BindingPart;
  arguments: BindingPart;
  principal?: { namespace: 'p' | 'u'; name: string; match: boolean };
}

/** What an inspection was asked: the token, the request to check it against, and the guard's settings. */
interface Inspection {
  token: string;
  /** `--codec`: open as this codec instead of the detected one. */
  codec: CodecName | undefined;
  audience: string | undefined;
  principal: string | undefined;
  unauthenticated: string | undefined;
  method: string | undefined;
  target: string | undefined;
  /** `--args`, parsed; {@link argsGiven} tells whether it was given. */
  args: unknown;
  argsGiven: boolean;
  skewMs: number;
  maxRounds: number;
  now: number;
  json: boolean;
  withData: boolean;
}

export async function inspect(io: Io, args: string[], clock: () => number): Promise<number> {
  const parsed = parseCommand(io, args, INSPECT_HELP, {
    strings: ['codec', 'audience', 'principal', 'unauthenticated', 'method', 'target', 'args', 'skew-ms', 'max-rounds', 'now'],
    flags: ['data'],
  });
  if (parsed === undefined) return EXIT_OK;
  const ask = await readInspection(io, parsed, clock);
  const ring = keyRingOf(io.env);
  const detected = detect(ask.token);
  const out = textOutput(io, ask.token, detected);
  if (ring === undefined) return inspectWithoutKeys(io, ask, detected, out);
  return inspectWithKeys(io, ask, detected, ring, out);
}

/** The options and the token, checked: every usage error of the command, in the order they are reported. */
async function readInspection(io: Io, { values, positionals }: ParsedArgs, clock: () => number): Promise<Inspection> {
  if (positionals.length !== 1)
    throw new UsageError(positionals.length === 0 ? 'inspect needs a token (or "-" to read it from stdin)' : 'inspect takes one token');
  const codec = str(values.codec);
  if (codec !== undefined && !(CODECS as readonly unknown[]).includes(codec)) throw new UsageError('--codec must be hmac, jwe or aead');
  const skewMs = intValue('skew-ms', values['skew-ms'], DEFAULT_SKEW_MS, 0, 600_000);
  const maxRounds = intValue('max-rounds', values['max-rounds'], 8, 1, 1000);
  let now = clock();
  const nowText = str(values.now);
  if (typeof nowText === 'string') {
    const t = parseInstant(nowText);
    if (t === undefined) throw new UsageError('--now must be an ISO 8601 date-time or epoch milliseconds');
    now = t;
  }
  const principal = str(values.principal);
  const unauthenticated = str(values.unauthenticated);
  if (principal !== undefined && unauthenticated !== undefined) throw new UsageError('give --principal or --unauthenticated, not both');
  if (principal === '' || unauthenticated === '') throw new UsageError('--principal/--unauthenticated must not be empty');
  let requestArgs: unknown;
  if (typeof values.args === 'string') {
    try {
      requestArgs = JSON.parse(values.args);
    } catch {
      throw new UsageError('--args must be JSON, e.g. --args \'{"paths":["/tmp/a"]}\'');
    }
  }
  const token = positionals[0] === '-' ? (await io.readStdin()).trim() : positionals[0]!;
  if (token.length === 0) throw new UsageError('the token is empty');
  return {
    token,
    codec: codec as CodecName | undefined,
    audience: str(values.audience),
    principal,
    unauthenticated,
    method: str(values.method),
    target: str(values.target),
    args: requestArgs,
    argsGiven: values.args !== undefined,
    skewMs,
    maxRounds,
    now,
    json: values.json === true,
    withData: values.data === true,
  };
}

/** The ring of MRTR_KEYS, or `undefined` when it is not set (a usage error when it does not parse). */
function keyRingOf(env: NodeJS.ProcessEnv): KeyRing | undefined {
  const keysText = env.MRTR_KEYS;
  if (keysText === undefined || keysText === '') return undefined;
  try {
    return KeyRing.parse(keysText);
  } catch (error) {
    throw new UsageError(`MRTR_KEYS is invalid: ${error instanceof Error ? error.message : String(error)} (run "mrtr keys check")`);
  }
}

/** One row of the text output: a name, then pieces that {@link render} escapes and colours. */
type Row = (name: string, ...pieces: Piece[]) => void;

/** The output of an inspection: the token's head for JSON, and the rows of the text, written at the end. */
interface Output {
  head: { codec: CodecName | null; format: string | null; kid: string | null; length: number };
  row: Row;
  /** The first row: what the token is. */
  tokenRow(): void;
  /** Writes the rows to stdout. */
  write(): void;
}

function textOutput(io: Io, token: string, detected: Detected): Output {
  const s = style(colourEnabled(io.stdout, io.env));
  const lines: string[] = [];
  // Every row goes through render: claims, header fields, options and reasons quoting them are escaped there.
  const row: Row = (name, ...pieces) => {
    lines.push(render(s, toned('dim', name.padEnd(10)), ' ', ...pieces));
  };
  return {
    head: { codec: detected.codec ?? null, format: detected.format ?? null, kid: detected.kid ?? null, length: token.length },
    row,
    tokenRow: () =>
      row(
        'token',
        detected.codec === undefined
          ? `unrecognised, ${token.length} characters`
          : `${detected.codec} codec, format ${detected.format}, kid ${detected.kid === undefined ? '(none)' : `"${detected.kid}"`}, ${token.length} characters${detected.codec === 'hmac' ? '' : ', claims encrypted'}`,
      ),
    write: () => writeLines(io.stdout, lines),
  };
}

/** Without keys: what the token says about itself (an HMAC body's claims, NOT verified). */
function inspectWithoutKeys(io: Io, ask: Inspection, detected: Detected, out: Output): number {
  const unverified = detected.unverifiedClaims;
  const claims = isStateClaims(unverified) ? unverified : undefined;
  const problem =
    detected.problem ?? (detected.codec === 'hmac' && claims === undefined ? 'the body is not shaped like mrtr claims' : undefined);
  const exit = problem === undefined ? EXIT_OK : EXIT_BAD;
  if (ask.json) {
    writeJson(io, {
      token: out.head,
      verified: false,
      problem: problem ?? null,
      claims: claims === undefined ? null : claimsJson(claims, ask.now, ask.withData),
      note: 'MRTR_KEYS is not set: nothing was verified',
    });
    return exit;
  }
  out.tokenRow();
  if (problem !== undefined) out.row('problem', toned('fail', problem));
  if (claims !== undefined) {
    out.row('claims', toned('warn', 'NOT VERIFIED: MRTR_KEYS is not set, and anyone can edit an HMAC body; only the MAC proves it'));
    printClaims(out.row, claims, ask.now, ask.maxRounds, ask.withData);
  } else if (problem === undefined) {
    out.row('claims', 'encrypted: set MRTR_KEYS to open them');
  }
  out.write();
  return exit;
}

/** With keys: open with the codec, then ask the guard. */
async function inspectWithKeys(io: Io, ask: Inspection, detected: Detected, ring: KeyRing, out: Output): Promise<number> {
  const codec = ask.codec ?? detected.codec;
  if (codec === undefined) {
    if (ask.json)
      writeJson(io, {
        token: out.head,
        verified: false,
        problem: detected.problem ?? null,
        verdict: { accepted: false, code: 'ERR_STATE_MALFORMED', reason: `${detected.problem}; pass --codec if you know it` },
      });
    else {
      out.tokenRow();
      out.row('verdict', toned('fail', 'REFUSED'), ` ERR_STATE_MALFORMED: ${detected.problem}; pass --codec if you know it`);
      out.write();
    }
    return EXIT_BAD;
  }
  const factory = await codecFactory(codec);
  const codecInstance = factory(ring);
  const opened = await openToken(codecInstance, ring, codec, ask.token, detected);
  if (!('claims' in opened)) {
    const verdict: Verdict = { accepted: false, code: opened.code, reason: opened.reason, unchecked: [] };
    if (ask.json) writeJson(io, { token: out.head, codec, verified: false, claims: null, verdict });
    else {
      out.tokenRow();
      if (ask.codec !== undefined && ask.codec !== detected.codec) out.row('codec', `opened as ${codec} (--codec)`);
      out.row('verdict', toned('fail', 'REFUSED'), ` ${verdict.code}: ${verdict.reason}`);
      out.write();
    }
    return EXIT_BAD;
  }
  const { claims, kid } = opened;
  const audience = ask.audience ?? claims.aud;
  const guard = createStateGuard({
    keys: ring,
    codec: factory,
    audience: audience === '' ? ' ' : audience,
    clockSkewMs: ask.skewMs,
    maxRounds: ask.maxRounds,
    maxTokenBytes: codecInstance.maxTokenBytes,
    now: () => ask.now,
    unauthenticated: ask.unauthenticated === undefined ? 'reject' : { principal: ask.unauthenticated },
  });
  const request: RequestContext = {
    method: ask.method ?? claims.req.m,
    target: ask.target ?? claims.req.t,
    ...(ask.args === undefined ? {} : { arguments: ask.args }),
    ...(ask.principal === undefined ? {} : { principal: ask.principal }),
  };
  const binding = await bindingReport(guard, request, ask, claims, ring, kid, audience);
  const verdict = await judge(guard, request, ask, claims, binding, audience, ring, kid);
  if (ask.json) {
    writeJson(io, {
      token: out.head,
      codec,
      verified: true,
      kid,
      claims: claimsJson(claims, ask.now, ask.withData),
      ...(binding === undefined ? {} : { binding }),
      verdict,
      now: new Date(ask.now).toISOString(),
    });
    return verdict.accepted ? EXIT_OK : EXIT_BAD;
  }
  out.tokenRow();
  if (ask.codec !== undefined && ask.codec !== detected.codec) out.row('codec', `opened as ${codec} (--codec)`);
  out.row(
    'opened',
    toned('ok', 'integrity verified'),
    ` with key "${kid}"${kid === ring.primaryKid ? ' (the primary)' : ' (an older key of the ring)'}`,
  );
  printClaims(out.row, claims, ask.now, ask.maxRounds, ask.withData);
  if (binding !== undefined) printBinding(out.row, binding);
  printVerdict(out.row, verdict);
  out.write();
  return verdict.accepted ? EXIT_OK : EXIT_BAD;
}

/** Unseals the token with the codec (its size cap first), or says why it does not open. */
async function openToken(
  codecInstance: StateCodec,
  ring: KeyRing,
  codec: CodecName,
  token: string,
  detected: Detected,
): Promise<{ claims: StateClaims; kid: string } | { code: string; reason: string }> {
  try {
    if (token.length > codecInstance.maxTokenBytes) throw new MrtrError('ERR_STATE_TOO_LARGE');
    return await codecInstance.unseal(token);
  } catch (error) {
    const code = MrtrError.is(error) ? error.code : 'ERR_STATE_MALFORMED';
    return { code, reason: openReason(code, codec, detected, ring, token.length, codecInstance.maxTokenBytes) };
  }
}

/** The token's binding against the request given (none when no part of one was given), principal included. */
async function bindingReport(
  guard: StateGuard,
  request: RequestContext,
  ask: Inspection,
  claims: StateClaims,
  ring: KeyRing,
  kid: string,
  audience: string,
): Promise<BindingReport | undefined> {
  const hasPrincipal = ask.principal !== undefined || ask.unauthenticated !== undefined;
  if (!hasPrincipal && ask.method === undefined && ask.target === undefined && !ask.argsGiven) return undefined;
  const b = await guard.bind(request);
  const binding: BindingReport = {
    method: { token: claims.req.m, request: b.m, given: ask.method !== undefined, match: b.m === claims.req.m },
    target: { token: claims.req.t, request: b.t, given: ask.target !== undefined, match: b.t === claims.req.t },
    arguments: { token: claims.req.d, request: b.d, given: ask.argsGiven, match: b.d === claims.req.d },
  };
  if (hasPrincipal) {
    const namespace = ask.principal !== undefined ? 'p' : 'u';
    const name = (ask.principal ?? ask.unauthenticated) as string;
    binding.principal = {
      namespace,
      name,
      match: ring.kids.includes(kid) && (await createPrincipalTagger(ring, audience)(kid, [namespace, name])) === claims.sub,
    };
  }
  return binding;
}

/** The verdict is the guard's own: verify with the same audience, skew, round limit and clock. */
async function judge(
  guard: StateGuard,
  request: RequestContext,
  ask: Inspection,
  claims: StateClaims,
  binding: BindingReport | undefined,
  audience: string,
  ring: KeyRing,
  kid: string,
): Promise<Verdict> {
  const hasPrincipal = ask.principal !== undefined || ask.unauthenticated !== undefined;
  const unchecked: string[] = [];
  if (!hasPrincipal) unchecked.push('principal (give --principal or --unauthenticated)');
  if (!ask.argsGiven) unchecked.push('arguments (give --args)');
  if (ask.audience === undefined) unchecked.push('audience (give --audience)');
  const ran = checksRun(hasPrincipal, ask.argsGiven, ask.audience !== undefined);
  const { now, skewMs, maxRounds } = ask;
  try {
    await guard.verify(ask.token, request);
    return {
      accepted: true,
      code: undefined,
      reason:
        unchecked.length === 0
          ? "every check of the guard passes (single use is the store's: not consumed here)"
          : `the checks run pass: ${ran} (single use is the store's: not consumed here)`,
      unchecked,
    };
  } catch (error) {
    if (!MrtrError.is(error)) throw error;
    // The guard stops at the principal (step 5) when none is given: steps 1-4 passed; judge the rest here.
    if (error.code === 'ERR_PRINCIPAL_REQUIRED' && !hasPrincipal)
      return restOfChecks(claims, binding, now, skewMs, maxRounds, unchecked, ran);
    // Without --args the guard binds `{}`: only the arguments differ, which were not given; steps 1-5 passed.
    if (error.code === 'ERR_STATE_BINDING' && !ask.argsGiven && binding?.method.match && binding.target.match)
      return restOfChecks(claims, binding, now, skewMs, maxRounds, unchecked, ran);
    return {
      accepted: false,
      code: error.code,
      reason: refusalReason(error.code, claims, binding, audience, now, skewMs, maxRounds, ring, kid),
      unchecked,
    };
  }
}

function printBinding(row: Row, binding: BindingReport): void {
  const part = (name: string, p: BindingPart, show: (v: string) => string): void => {
    if (!p.given) row(name, toned('dim', `${show(p.token)} (from the token, not checked)`));
    else if (p.match) row(name, toned('ok', 'matches'), ` ${show(p.request)}`);
    else row(name, toned('fail', 'differs'), `: token ${show(p.token)}, request ${show(p.request)}`);
  };
  part('method', binding.method, (v) => v);
  part('target', binding.target, (v) => v);
  part('args', binding.arguments, (v) => `sha256 ${v}`);
  if (binding.principal !== undefined) {
    const who = `${binding.principal.namespace === 'u' ? 'unauthenticated ' : ''}"${binding.principal.name}"`;
    if (binding.principal.match) row('principal', toned('ok', 'matches'), ` ${who}`);
    else row('principal', toned('fail', 'differs'), `: the tag is not ${who}'s for this audience`);
  }
}

function printVerdict(row: Row, verdict: Verdict): void {
  if (verdict.accepted) {
    row('verdict', toned('ok', verdict.unchecked.length === 0 ? 'ACCEPTED' : 'NOT REFUSED'), ` ${verdict.reason}`);
    if (verdict.unchecked.length > 0) row('', toned('dim', `not checked: ${verdict.unchecked.join('; ')}`));
  } else {
    row('verdict', toned('fail', 'REFUSED'), ` ${verdict.code}: ${verdict.reason}`);
  }
}

function restOfChecks(
  claims: StateClaims,
  binding: BindingReport | undefined,
  now: number,
  skewMs: number,
  maxRounds: number,
  unchecked: string[],
  ran: string,
): Verdict {
  if (binding !== undefined && !(binding.method.match && binding.target.match && (binding.arguments.match || !binding.arguments.given))) {
    return { accepted: false, code: 'ERR_STATE_BINDING', reason: bindingReason(binding), unchecked };
  }
  if (now > claims.flow.deadline + skewMs) {
    return {
      accepted: false,
      code: 'ERR_FLOW_EXPIRED',
      reason: `the flow's deadline passed ${duration(now - claims.flow.deadline)} ago (${new Date(claims.flow.deadline).toISOString()}, + ${duration(skewMs)} skew)`,
      unchecked,
    };
  }
  if (claims.flow.round > maxRounds) {
    return { accepted: false, code: 'ERR_FLOW_ROUNDS', reason: `round ${claims.flow.round} is past maxRounds ${maxRounds}`, unchecked };
  }
  return {
    accepted: true,
    code: undefined,
    reason: `the checks run pass: ${ran}`,
    unchecked,
  };
}

/** The checks an inspection runs, named once: each one given is listed here, each one not given only under "not checked". */
function checksRun(principal: boolean, args: boolean, audience: boolean): string {
  const binding = args ? 'binding (method, target, arguments)' : 'binding (method, target)';
  return [
    'integrity',
    'expiry',
    ...(audience ? ['audience'] : []),
    ...(principal ? ['principal'] : []),
    binding,
    'flow deadline and round',
  ].join(', ');
}

function bindingReason(binding: BindingReport | undefined): string {
  if (binding === undefined) return 'minted for another method, target or arguments';
  const parts: string[] = [];
  if (!binding.method.match) parts.push(`method "${binding.method.token}" in the token, "${binding.method.request}" in the request`);
  if (!binding.target.match) parts.push(`target "${binding.target.token}" in the token, "${binding.target.request}" in the request`);
  if (!binding.arguments.match && binding.arguments.given)
    parts.push('the arguments differ from the ones it was minted for (their SHA-256 digests differ)');
  return parts.length === 0 ? 'minted for another method, target or arguments' : `minted for another request: ${parts.join('; ')}`;
}

function refusalReason(
  code: string,
  claims: StateClaims,
  binding: BindingReport | undefined,
  audience: string,
  now: number,
  skewMs: number,
  maxRounds: number,
  ring: KeyRing,
  kid: string,
): string {
  switch (code) {
    case 'ERR_STATE_EXPIRED':
      if (claims.exp < claims.iat) return 'it expires before it was issued';
      if (claims.iat > now + skewMs)
        return `issued ${duration(claims.iat - now)} in the future (${new Date(claims.iat).toISOString()}): a clock is off by more than the ${duration(skewMs)} skew`;
      return `expired ${duration(now - claims.exp)} ago (exp ${new Date(claims.exp).toISOString()}; refused since exp + ${duration(skewMs)} skew)`;
    case 'ERR_STATE_AUDIENCE':
      return `minted for audience "${claims.aud}", the server's is "${audience}"`;
    case 'ERR_STATE_PRINCIPAL': {
      const who =
        binding?.principal === undefined
          ? 'this principal'
          : `${binding.principal.namespace === 'u' ? 'the unauthenticated principal ' : ''}"${binding.principal.name}"`;
      return `minted for another principal: the tag is not ${who}'s (an authenticated and an unauthenticated principal never match)`;
    }
    case 'ERR_STATE_BINDING':
      return bindingReason(binding);
    case 'ERR_FLOW_EXPIRED':
      return `the flow's deadline passed ${duration(now - claims.flow.deadline)} ago (${new Date(claims.flow.deadline).toISOString()}, + ${duration(skewMs)} skew)`;
    case 'ERR_FLOW_ROUNDS':
      return `round ${claims.flow.round} is past maxRounds ${maxRounds}`;
    case 'ERR_KEY_UNKNOWN':
      return `key "${kid}" is not in the ring (${ring.kids.join(', ')})`;
    default:
      return new MrtrError(code as never).message;
  }
}

function openReason(code: string, codec: CodecName, detected: Detected, ring: KeyRing, length: number, max: number): string {
  const kid = detected.kid;
  switch (code) {
    case 'ERR_KEY_UNKNOWN':
      // A kid that detect() would not show (too long, not a string, unprintable) is reported as malformed.
      if (kid === undefined && detected.problem !== undefined)
        return `the token names no key of MRTR_KEYS (${ring.kids.join(', ')}): ${detected.problem}`;
      return `the token names key "${kid ?? '?'}", which is not in MRTR_KEYS (${ring.kids.join(', ')}): it was sealed by another ring, or by a key already dropped`;
    case 'ERR_STATE_INTEGRITY':
      return `the ${codec === 'hmac' ? 'MAC' : 'authentication tag'} does not verify with key "${kid ?? '?'}": the token was modified, or "${kid ?? '?'}" in MRTR_KEYS is not the secret that sealed it`;
    case 'ERR_STATE_TOO_LARGE':
      return `the token is ${length} characters; the ${codec} codec's cap is ${max}`;
    default:
      return detected.problem !== undefined
        ? `not a well-formed ${codec} token: ${detected.problem}`
        : codec !== detected.codec
          ? `not a well-formed ${codec} token (it looks like ${detected.codec ?? 'no codec'})`
          : `not a well-formed ${codec} token (truncated or edited so that it no longer parses)`;
  }
}

function claimsJson(claims: StateClaims, now: number, withData: boolean) {
  const { data, ...rest } = claims;
  const dataJson = canonicalJson(data);
  return {
    ...rest,
    dataBytes: Buffer.byteLength(dataJson),
    ...(withData ? { data } : {}),
    relative: {
      issued: now - claims.iat,
      expiresIn: claims.exp - now,
      deadlineIn: claims.flow.deadline - now,
    },
  };
}

function printClaims(row: Row, claims: StateClaims, now: number, maxRounds: number, withData: boolean): void {
  row('version', `claims v${claims.v}`);
  row('principal', `tag ${claims.sub} `, toned('dim', '(a keyed hash; the principal itself is not in the token)'));
  row('audience', claims.aud);
  row('request', `${claims.req.m} ${claims.req.t}`);
  row('args', `sha256 ${claims.req.d} `, toned('dim', '(base64url SHA-256 of the canonical JSON arguments)'));
  row('flow', `id ${claims.flow.id}, round ${claims.flow.round} of at most ${maxRounds}`);
  row('state id', claims.jti);
  row('issued', when(claims.iat, now));
  row('expires', `${when(claims.exp, now)}, lifetime ${duration(claims.exp - claims.iat)}`);
  row('deadline', `${when(claims.flow.deadline, now)} `, toned('dim', '(flow deadline)'));
  const dataJson = canonicalJson(claims.data);
  if (withData) row('data', dataJson);
  else row('data', `${Buffer.byteLength(dataJson)} bytes of JSON `, toned('dim', '(--data shows it)'));
}
