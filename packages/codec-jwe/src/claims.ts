import { isStateClaims, type StateClaims } from '@mrtr/core/codec';
import { StateMalformedError } from '@mrtr/core/errors';

/**
 * StateClaims ⇄ JWT Claims Set (RFC 7519).
 * - `iat`, `exp`: NumericDate, seconds since the epoch; fractional values carry the milliseconds
 *   (RFC 7519 §2 allows non-integer NumericDates). `ms / 1000` round-trips exactly with
 *   `Math.round(s * 1000)` for every time below 2^51 ms (the two roundings stay under 0.5 ms there:
 *   about the year 73,000); seal checks each time and refuses one it cannot carry exactly.
 * - `jti`, `aud` (a single string), `sub` (the principal tag): as registered claims.
 * - `mrtr`: a private claim with the rest, `{ v, req: { m, t, d }, flow: { id, round, deadline }, data }`, and `le`
 *   (the store's ledger epoch) when the state carries one.
 * Opening demands exactly these members at every level, so one claims object has one JWT form.
 */

const JWT_MEMBERS = ['iat', 'exp', 'jti', 'aud', 'sub', 'mrtr'] as const;
const MRTR_MEMBERS = ['v', 'req', 'flow', 'data'] as const;
const REQ_MEMBERS = ['m', 't', 'd'] as const;
const FLOW_MEMBERS = ['id', 'round', 'deadline'] as const;

function toNumericDate(ms: number): number {
  const seconds = ms / 1000;
  if (Math.round(seconds * 1000) !== ms) throw new StateMalformedError();
  return seconds;
}

function fromNumericDate(seconds: unknown): number {
  if (typeof seconds !== 'number' || !(seconds >= 0)) throw new StateMalformedError();
  const ms = Math.round(seconds * 1000);
  // Exactly the NumericDate seal writes for `ms`: no sub-millisecond digits, no second spelling.
  if (!Number.isSafeInteger(ms) || ms / 1000 !== seconds) throw new StateMalformedError();
  return ms;
}

/** The JWT Claims Set as JSON text. Throws `StateMalformedError` for claims it cannot carry exactly. */
export function encodeClaims(claims: StateClaims): string {
  if (!isStateClaims(claims) || claims.data === undefined) throw new StateMalformedError();
  const { req, flow } = claims;
  const jwt = {
    iat: toNumericDate(claims.iat),
    exp: toNumericDate(claims.exp),
    jti: claims.jti,
    aud: claims.aud,
    sub: claims.sub,
    mrtr: {
      v: claims.v,
      req: { m: req.m, t: req.t, d: req.d },
      flow: { id: flow.id, round: flow.round, deadline: flow.deadline },
      data: claims.data,
      ...(claims.le !== undefined && { le: claims.le }),
    },
  };
  let text: string | undefined;
  try {
    text = JSON.stringify(jwt);
  } catch {
    // Cycles, BigInt, a throwing toJSON. The cause is dropped: its message can quote payload keys.
    throw new StateMalformedError();
  }
  if (typeof text !== 'string') throw new StateMalformedError();
  return text;
}

type JsonObject = Record<string, unknown>;

function exactObject(value: unknown, members: readonly string[]): JsonObject {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new StateMalformedError();
  const object = value as JsonObject;
  // JSON.parse makes own data properties only (`__proto__` included), so a count plus hasOwn is exact.
  if (Object.keys(object).length !== members.length) throw new StateMalformedError();
  for (const member of members) if (!Object.hasOwn(object, member)) throw new StateMalformedError();
  return object;
}

/** Parses the decrypted JWT Claims Set back into StateClaims, exactly. */
export function decodeClaims(text: string): StateClaims {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new StateMalformedError();
  }
  const jwt = exactObject(parsed, JWT_MEMBERS);
  const mrtrObject = jwt['mrtr'] as JsonObject | null;
  const hasEpoch = mrtrObject !== null && typeof mrtrObject === 'object' && Object.hasOwn(mrtrObject, 'le');
  const mrtr = exactObject(mrtrObject, hasEpoch ? [...MRTR_MEMBERS, 'le'] : MRTR_MEMBERS);
  const req = exactObject(mrtr['req'], REQ_MEMBERS);
  const flow = exactObject(mrtr['flow'], FLOW_MEMBERS);
  const claims = {
    v: mrtr['v'],
    iat: fromNumericDate(jwt['iat']),
    exp: fromNumericDate(jwt['exp']),
    jti: jwt['jti'],
    aud: jwt['aud'],
    sub: jwt['sub'],
    req: { m: req['m'], t: req['t'], d: req['d'] },
    flow: { id: flow['id'], round: flow['round'], deadline: flow['deadline'] },
    data: mrtr['data'],
    ...(hasEpoch && { le: mrtr['le'] }),
  };
  if (!isStateClaims(claims)) throw new StateMalformedError();
  return claims;
}
