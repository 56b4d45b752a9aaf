import { createHmac } from 'node:crypto';
import { createStateGuard, KeyRing, MrtrError, type RequestContext, type StateClaims } from '@mrtr/core';
import { canonicalJson, isStateClaims } from '@mrtr/core/authoring';
import { CODECS, type CodecName, codecFactory, detect } from './codecs.js';
import {
  COMMON_OPTIONS,
  colourEnabled,
  EXIT_BAD,
  EXIT_OK,
  intValue,
  type Io,
  type Piece,
  parse,
  render,
  str,
  style,
  toned,
  UsageError,
  writeJson,
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

const PRINCIPAL_PURPOSE = 'mrtr/principal-tag/v1';

interface Verdict {
  accepted: boolean;
  code: string | undefined;
  reason: string;
  /** Checks that could not be run for lack of input. */
  unchecked: string[];
}

interface BindingReport {
  method: { token: string; request: string; given: boolean; match: boolean };
  target: { token: string; request: string; given: boolean; match: boolean };
  arguments: { token: string; request: string; given: boolean; match: boolean };
  principal?: { namespace: 'p' | 'u'; name: string; match: boolean };
}

export async function inspect(io: Io, args: string[], clock: () => number): Promise<number> {
  const { values, positionals } = parse(
    args,
    {
      ...COMMON_OPTIONS,
      codec: { type: 'string' },
      audience: { type: 'string' },
      principal: { type: 'string' },
      unauthenticated: { type: 'string' },
      method: { type: 'string' },
      target: { type: 'string' },
      args: { type: 'string' },
      'skew-ms': { type: 'string' },
      'max-rounds': { type: 'string' },
      now: { type: 'string' },
      data: { type: 'boolean' },
    },
    true,
  );
  if (values.help) {
    io.stdout.write(INSPECT_HELP);
    return EXIT_OK;
  }
  const opt = {
    codec: str(values.codec),
    audience: str(values.audience),
    principal: str(values.principal),
    unauthenticated: str(values.unauthenticated),
    method: str(values.method),
    target: str(values.target),
    now: str(values.now),
  };
  if (positionals.length !== 1)
    throw new UsageError(positionals.length === 0 ? 'inspect needs a token (or "-" to read it from stdin)' : 'inspect takes one token');
  const codecOption = opt.codec;
  if (codecOption !== undefined && !(CODECS as readonly unknown[]).includes(codecOption))
    throw new UsageError('--codec must be hmac, jwe or aead');
  const skewMs = intValue('skew-ms', values['skew-ms'], DEFAULT_SKEW_MS, 0, 600_000);
  const maxRounds = intValue('max-rounds', values['max-rounds'], 8, 1, 1000);
  let now = clock();
  if (typeof opt.now === 'string') {
    const t = parseInstant(opt.now);
    if (t === undefined) throw new UsageError('--now must be an ISO 8601 date-time or epoch milliseconds');
    now = t;
  }
  if (opt.principal !== undefined && opt.unauthenticated !== undefined)
    throw new UsageError('give --principal or --unauthenticated, not both');
  if (opt.principal === '' || opt.unauthenticated === '') throw new UsageError('--principal/--unauthenticated must not be empty');
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
  const keysText = io.env.MRTR_KEYS;
  let ring: KeyRing | undefined;
  if (keysText !== undefined && keysText !== '') {
    try {
      ring = KeyRing.parse(keysText);
    } catch (error) {
      throw new UsageError(`MRTR_KEYS is invalid: ${error instanceof Error ? error.message : String(error)} (run "mrtr keys check")`);
    }
  }

  const s = style(colourEnabled(io.stdout, io.env));
  const detected = detect(token);
  const codec: CodecName | undefined = (codecOption as CodecName | undefined) ?? detected.codec;
  const head = {
    codec: detected.codec ?? null,
    format: detected.format ?? null,
    kid: detected.kid ?? null,
    length: token.length,
  };
  const lines: string[] = [];
  // Every row goes through render: claims, header fields, options and reasons quoting them are escaped there.
  const row: Row = (name, ...pieces) => {
    lines.push(render(s, toned('dim', name.padEnd(10)), ' ', ...pieces));
  };
  const tokenLine = (): void =>
    row(
      'token',
      detected.codec === undefined
        ? `unrecognised, ${token.length} characters`
        : `${detected.codec} codec, format ${detected.format}, kid ${detected.kid === undefined ? '(none)' : `"${detected.kid}"`}, ${token.length} characters${detected.codec === 'hmac' ? '' : ', claims encrypted'}`,
    );

  // ── Without keys: what the token says about itself ──
  if (ring === undefined) {
    const unverified = detected.unverifiedClaims;
    const claims = isStateClaims(unverified) ? unverified : undefined;
    const problem =
      detected.problem ?? (detected.codec === 'hmac' && claims === undefined ? 'the body is not shaped like mrtr claims' : undefined);
    if (values.json) {
      writeJson(io, {
        token: head,
        verified: false,
        problem: problem ?? null,
        claims: claims === undefined ? null : claimsJson(claims, now, values.data === true),
        note: 'MRTR_KEYS is not set: nothing was verified',
      });
      return problem === undefined ? EXIT_OK : EXIT_BAD;
    }
    tokenLine();
    if (problem !== undefined) row('problem', toned('fail', problem));
    if (claims !== undefined) {
      row('claims', toned('warn', 'NOT VERIFIED: MRTR_KEYS is not set, and anyone can edit an HMAC body; only the MAC proves it'));
      printClaims(row, claims, now, maxRounds, values.data === true);
    } else if (problem === undefined) {
      row('claims', 'encrypted: set MRTR_KEYS to open them');
    }
    io.stdout.write(`${lines.join('\n')}\n`);
    return problem === undefined ? EXIT_OK : EXIT_BAD;
  }

  // ── With keys: open with the codec, then ask the guard ──
  if (codec === undefined) {
    if (values.json)
      writeJson(io, {
        token: head,
        verified: false,
        problem: detected.problem ?? null,
        verdict: { accepted: false, code: 'ERR_STATE_MALFORMED', reason: `${detected.problem}; pass --codec if you know it` },
      });
    else {
      tokenLine();
      row('verdict', toned('fail', 'REFUSED'), ` ERR_STATE_MALFORMED: ${detected.problem}; pass --codec if you know it`);
      io.stdout.write(`${lines.join('\n')}\n`);
    }
    return EXIT_BAD;
  }
  const factory = await codecFactory(codec);
  const codecInstance = factory(ring);
  let opened: { claims: StateClaims; kid: string } | undefined;
  let openError: { code: string; reason: string } | undefined;
  try {
    if (token.length > codecInstance.maxTokenBytes) throw new MrtrError('ERR_STATE_TOO_LARGE');
    opened = await codecInstance.unseal(token);
  } catch (error) {
    const code = MrtrError.is(error) ? error.code : 'ERR_STATE_MALFORMED';
    openError = { code, reason: openReason(code, codec, detected, ring, token.length, codecInstance.maxTokenBytes) };
  }
  if (opened === undefined) {
    const verdict: Verdict = { accepted: false, code: openError!.code, reason: openError!.reason, unchecked: [] };
    if (values.json) writeJson(io, { token: head, codec, verified: false, claims: null, verdict });
    else {
      tokenLine();
      if (codecOption !== undefined && codecOption !== detected.codec) row('codec', `opened as ${codec} (--codec)`);
      row('verdict', toned('fail', 'REFUSED'), ` ${verdict.code}: ${verdict.reason}`);
      io.stdout.write(`${lines.join('\n')}\n`);
    }
    return EXIT_BAD;
  }

  const { claims, kid } = opened;
  const audience = opt.audience ?? claims.aud;
  const hasPrincipal = opt.principal !== undefined || opt.unauthenticated !== undefined;
  const hasRequest = hasPrincipal || opt.method !== undefined || opt.target !== undefined || values.args !== undefined;
  const guard = createStateGuard({
    keys: ring,
    codec: factory,
    audience: audience === '' ? ' ' : audience,
    clockSkewMs: skewMs,
    maxRounds,
    maxTokenBytes: codecInstance.maxTokenBytes,
    now: () => now,
    unauthenticated: opt.unauthenticated === undefined ? 'reject' : { principal: opt.unauthenticated },
  });
  const request: RequestContext = {
    method: opt.method ?? claims.req.m,
    target: opt.target ?? claims.req.t,
    ...(requestArgs === undefined ? {} : { arguments: requestArgs }),
    ...(opt.principal === undefined ? {} : { principal: opt.principal }),
  };
  let binding: BindingReport | undefined;
  if (hasRequest) {
    const b = await guard.bind(request);
    binding = {
      method: { token: claims.req.m, request: b.m, given: opt.method !== undefined, match: b.m === claims.req.m },
      target: { token: claims.req.t, request: b.t, given: opt.target !== undefined, match: b.t === claims.req.t },
      arguments: { token: claims.req.d, request: b.d, given: values.args !== undefined, match: b.d === claims.req.d },
    };
    if (hasPrincipal) {
      const namespace = opt.principal !== undefined ? 'p' : 'u';
      const name = (opt.principal ?? opt.unauthenticated) as string;
      binding.principal = { namespace, name, match: (await principalTag(ring, kid, audience, namespace, name)) === claims.sub };
    }
  }

  // The verdict is the guard's own: verify with the same audience, skew, round limit and clock.
  let verdict: Verdict;
  const unchecked: string[] = [];
  if (!hasPrincipal) unchecked.push('principal (give --principal or --unauthenticated)');
  if (values.args === undefined) unchecked.push('arguments (give --args)');
  if (opt.audience === undefined) unchecked.push('audience (give --audience)');
  const ran = checksRun(hasPrincipal, values.args !== undefined, opt.audience !== undefined);
  try {
    await guard.verify(token, request);
    verdict = {
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
    if (error.code === 'ERR_PRINCIPAL_REQUIRED' && !hasPrincipal) {
      // The guard stops at the principal (step 5) when none is given: steps 1-4 passed; judge the rest here.
      verdict = restOfChecks(claims, binding, now, skewMs, maxRounds, unchecked, ran);
    } else if (error.code === 'ERR_STATE_BINDING' && values.args === undefined && binding?.method.match && binding.target.match) {
      // Without --args the guard binds `{}`: only the arguments differ, which were not given; steps 1-5 passed.
      verdict = restOfChecks(claims, binding, now, skewMs, maxRounds, unchecked, ran);
    } else {
      verdict = {
        accepted: false,
        code: error.code,
        reason: refusalReason(error.code, claims, binding, audience, now, skewMs, maxRounds, ring, kid),
        unchecked,
      };
    }
  }

  if (values.json) {
    writeJson(io, {
      token: head,
      codec,
      verified: true,
      kid,
      claims: claimsJson(claims, now, values.data === true),
      ...(binding === undefined ? {} : { binding }),
      verdict,
      now: new Date(now).toISOString(),
    });
    return verdict.accepted ? EXIT_OK : EXIT_BAD;
  }
  tokenLine();
  if (codecOption !== undefined && codecOption !== detected.codec) row('codec', `opened as ${codec} (--codec)`);
  row(
    'opened',
    toned('ok', 'integrity verified'),
    ` with key "${kid}"${kid === ring.primaryKid ? ' (the primary)' : ' (an older key of the ring)'}`,
  );
  printClaims(row, claims, now, maxRounds, values.data === true);
  if (binding !== undefined) {
    const part = (
      name: string,
      p: { token: string; request: string; given: boolean; match: boolean },
      show: (v: string) => string,
    ): void => {
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
  if (verdict.accepted) {
    row('verdict', toned('ok', verdict.unchecked.length === 0 ? 'ACCEPTED' : 'NOT REFUSED'), ` ${verdict.reason}`);
    if (verdict.unchecked.length > 0) row('', toned('dim', `not checked: ${verdict.unchecked.join('; ')}`));
  } else {
    row('verdict', toned('fail', 'REFUSED'), ` ${verdict.code}: ${verdict.reason}`);
  }
  io.stdout.write(`${lines.join('\n')}\n`);
  return verdict.accepted ? EXIT_OK : EXIT_BAD;
}

/** `base64url(HMAC(subkey(kid, 'mrtr/principal-tag/v1'), canonicalJson([audience, ns, name]))[0..16])`, as in the guard. */
async function principalTag(ring: KeyRing, kid: string, audience: string, namespace: 'p' | 'u', name: string): Promise<string | undefined> {
  const key = await ring.subkey(kid, PRINCIPAL_PURPOSE);
  if (key === undefined) return undefined;
  return createHmac('sha256', key)
    .update(canonicalJson([audience, namespace, name]), 'utf8')
    .digest()
    .subarray(0, 16)
    .toString('base64url');
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

function openReason(
  code: string,
  codec: CodecName,
  detected: ReturnType<typeof detect>,
  ring: KeyRing,
  length: number,
  max: number,
): string {
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

/** One row of the text output: a name, then pieces that {@link render} escapes and colours. */
type Row = (name: string, ...pieces: Piece[]) => void;

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
