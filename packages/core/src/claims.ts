import { StateMalformedError } from './errors.js';
import type { JsonValue } from './protocol.js';
import { isObject } from './util/validate.js';

/** Claims format version carried (and authenticated) in every token. */
export const CLAIMS_VERSION = 1 as const;

/** Which request a state was minted for. */
export interface RequestBinding {
  /** JSON-RPC method: `tools/call`, `prompts/get` or `resources/read`. */
  m: string;
  /** Tool or prompt name, or resource URI. */
  t: string;
  /** base64url SHA-256 over the RFC 8785 canonical JSON of the arguments (`{}` when absent). */
  d: string;
}

/** Where a state sits in a multi-round flow. */
export interface FlowClaims {
  /** Random flow id fixed at round 1. */
  id: string;
  /** 1 for the first state of a flow, +1 for each re-mint. */
  round: number;
  /** Absolute deadline (ms since epoch) fixed at round 1. */
  deadline: number;
}

/** The protected claims every codec seals and opens, unchanged. Times are milliseconds since the epoch. */
export interface StateClaims<P extends JsonValue = JsonValue> {
  v: typeof CLAIMS_VERSION;
  iat: number;
  exp: number;
  /** ≥128-bit random id, base64url. The replay store consumes it. */
  jti: string;
  aud: string;
  /** Principal tag: a keyed hash of the principal, never the principal itself. */
  sub: string;
  req: RequestBinding;
  flow: FlowClaims;
  /** The application payload (JSON). */
  data: P;
  /**
   * The replay store's ledger epoch the minting guard knew (`ReplayStore.ledgerEpoch`, a store that declares `epoch`):
   * the state was minted on that ledger, so a store whose ledger began later refuses it (`ERR_LEDGER_LOST`).
   */
  le?: number;
}

const isTime = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isText = (v: unknown, max = 4096): v is string => typeof v === 'string' && v.length <= max;

/** True when `value` has the exact shape of `StateClaims` (types only; the guard checks the values). */
export function isStateClaims(value: unknown): value is StateClaims {
  if (!isObject(value)) return false;
  const { v, iat, exp, jti, aud, sub, req, flow } = value;
  if (v !== CLAIMS_VERSION || !isTime(iat) || !isTime(exp)) return false;
  if (!isText(jti, 128) || jti.length < 22 || !isText(aud) || !isText(sub, 128)) return false;
  if (!isObject(req) || !isText(req.m, 64) || !isText(req.t) || !isText(req.d, 128)) return false;
  if (!isObject(flow) || !isText(flow.id, 128) || !isTime(flow.deadline)) return false;
  if (typeof flow.round !== 'number' || !Number.isSafeInteger(flow.round) || flow.round < 1) return false;
  if (value.le !== undefined && !isTime(value.le)) return false;
  return 'data' in value;
}

/** Throws `StateMalformedError` unless `value` is shaped like `StateClaims`. */
export function assertStateClaims(value: unknown): asserts value is StateClaims {
  if (!isStateClaims(value)) throw new StateMalformedError();
}
